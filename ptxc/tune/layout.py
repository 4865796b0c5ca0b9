"""The layout of a tuned build, chosen by measured time.

    engine = choose_layout(model, options, compile_fn)   # options.layout == "auto", tuning on

Without tuning, ``layout="auto"`` is a rule (:func:`ptxc.pipeline.resolve_layout`: channels-last
on cuda for conv-heavy graphs in a tensor-core precision). With tuning, where the target can be
measured here, the choice is made as TensorRT makes its reformat choices: the model is built in
both layouts (``nchw``, and ``nhwc`` with its transposes at the edges of each channels-last
region), each tuned, and the whole engines are timed on the same inputs; the faster one is the
build. Its engine records both times (``engine.layout_times``) and the choice
(``engine.layout``).

What is timed is an inference's compute (:mod:`ptxc.driver.timing`: cuda, the device time of the launch
sequence; cpu, the kernels' wall time), so the transposes a layout implies are in it. Left out:
int8 builds (their calibration would run twice; they keep the rule), and a model whose two
builds are the same (no convolution: ``nhwc`` changes nothing), which is built once.
"""

from __future__ import annotations

import logging
import statistics

import attrs

log = logging.getLogger("ptxc.tune")

#: inferences timed per layout (after one warm-up)
RUNS = 10


def engine_compute_seconds(engine, runs: int = RUNS, seed: int = 0) -> float:
    """Median compute seconds of one inference of ``engine`` on seeded random inputs."""
    import numpy as np

    from ..driver.timing import runner
    rng = np.random.default_rng(seed)
    feeds = {n: (rng.standard_normal(t.shape) if t.element.is_float else
                 np.zeros(t.shape)).astype(t.element.np_dtype) for n, t in engine.inputs.items()}
    fn, compute = runner(engine, feeds)
    fn()
    return statistics.median(compute(runs))


def _code(engine) -> str:
    return getattr(engine.program, "ptx", None) or engine.llvm_text or ""


def choose_layout(model, options, compile_fn):
    """The faster of the model's ``nchw`` and ``nhwc`` builds (module docstring);
    ``compile_fn(model, options)`` compiles one (tuning included)."""
    builds = {}
    for layout in ("nchw", "nhwc"):
        builds[layout] = compile_fn(model, attrs.evolve(options, layout=layout))
    if _code(builds["nchw"]) == _code(builds["nhwc"]):
        engine = builds["nchw"]
        engine.layout, engine.layout_times = "nchw", None
        return engine
    times = {layout: engine_compute_seconds(e) for layout, e in builds.items()}
    best = min(times, key=lambda k: (times[k], k != "nchw"))
    log.info("layout: nchw %.4f ms, nhwc %.4f ms: %s", times["nchw"] * 1e3,
             times["nhwc"] * 1e3, best)
    engine = builds[best]
    engine.layout, engine.layout_times = best, times
    return engine
