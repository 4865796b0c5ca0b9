"""``ptxc.compile``: a model in, an Engine out, through the stages of :mod:`ptxc.pipeline`.

    engine = ptxc.compile("model.onnx", target="cpu")
    engine = ptxc.compile("model.onnx", target="cuda", arch="sm_90")   # PTX, CUDA runtime
    engine = ptxc.compile("model.onnx", options=CompileOptions.make(target="cuda", ...))
    outputs = engine.run({"input": x})

The keywords of :func:`compile` are :class:`ptxc.pipeline.CompileOptions`' (one name and one
default each); they become one CompileOptions, and the stages run in
:func:`ptxc.pipeline.run_stages` (the stage tables and the order of passes are documented
there). Every stage up to ``loop`` is a module the interpreter runs (the gpu dialect included:
its reference semantics run a launch's threads in lockstep), so ``check_numerics=True``
compares each pass (lowerings and map-to-gpu included) with the one before on random inputs.
"""

from __future__ import annotations

import inspect
import time

from .errors import CompileError
from .frontend.load import as_module

# the stage loop and the names callers import from here (the options and tables live in
# ptxc.pipeline); compile() calls run_stages through this module, so a test can replace it
from .pipeline import (DEFAULT_LAYOUT, LAYOUTS, PRECISIONS, STAGES,  # noqa: F401
                       CompileOptions, check_stage, log, resolve_layout, resolve_target,
                       run_stages)



def compile(model, target: str = "auto", precision: str = "fp32", *,
            input_shapes: dict | None = None, constant_inputs: dict | None = None,
            graph_passes=None, check_numerics: bool = False, threads=None,
            arch: str | None = None, cuda_graph: bool = True, layout: str = DEFAULT_LAYOUT,
            cache: bool | None = None, calibration=None, calibration_cache: str | None = None,
            precision_overrides: dict | None = None, max_memory: int | None = None,
            pass_options: dict | None = None, stage_passes: dict | None = None,
            tactics: dict | None = None, tuning: str = "off", timing_cache: str | None = None,
            tuning_budget_s: float | None = None, tuning_workers: str = "auto",
            options: CompileOptions | None = None):
    """Compile a model (path, ModelProto, Network or graph module) into an Engine.

    ``layout``: ``"auto"`` (the default, :func:`resolve_layout`'s policy: channels-last for
    conv-heavy graphs on cuda in fp16, tf32 or int8), ``"nchw"`` (ONNX's layout throughout) or
    ``"nhwc"`` (convolutional layers run channels-last inside, to-channels-last; inputs and
    outputs keep their ONNX layout).

    ``options``: a :class:`~ptxc.pipeline.CompileOptions`, in place of the keywords (which are
    its fields, :meth:`CompileOptions.make`'s names and defaults; giving both is an error).
    ``graph_passes``, ``stage_passes`` and ``pass_options`` change the passes
    (:mod:`ptxc.pipeline`): e.g. ``pass_options={"map-to-gpu": {"mma_epilogue": "fragment"}}``.

    ``target="auto"`` (the default): cuda where a GPU is present or ``arch`` is given, else
    cpu.
    ``target="cpu"``: JIT-compiled for this host (``threads``: the pool's size). ``target="cuda"``:
    PTX for ``arch`` (default ``Target.resolve()``: ``PTXC_CUDA_ARCH``, the GPU here, else
    sm_90; a preset describes another GPU) and the CUDA runtime (:mod:`ptxc.driver.cuda`),
    which touches no GPU until the first run, so a cuda engine compiles and saves, for any
    arch, on a machine without one; ``cuda_graph``:
    replay the launches of an inference from one CUDA graph (False: launch each kernel).
    ``cache``: look the compile up in (and store it into) the compile cache,
    :mod:`ptxc.plan.cache` (None: on unless ``PTXC_CACHE=0``; never with check_numerics).

    ``precision="int8"`` (docs/quantization.md; cpu and interpreter numerics, integer loops on
    cuda): ``calibration`` is a :class:`ptxc.calib.CalibrationTable`, or calibration data (a
    folder, an .npz data set file, an iterable of input dicts) calibrated with the entropy
    calibrator; ``calibration_cache`` a calibration cache file (read when it matches: no data
    runs; written after calibrating; without ``calibration``, a cache of this model made with
    any calibrator, e.g. by ``ptxc calibrate --method mse``). Layers named in
    ``precision_overrides`` (ONNX node name -> "fp32") stay fp32 (``ptxc.calib.sensitivity``
    proposes which). ``engine.layer_precisions`` lists (layer, precision, why). The compile
    cache is not used for int8.

    ``precision="fp16"`` or ``"tf32"``: TensorRT's rules (:mod:`ptxc.rewrite.passes.precision`,
    docs/lowering.md "Precision"); ``precision_overrides`` keeps the named nodes in fp32. Both
    targets accept every precision (the cpu target for numerics: it computes exactly what the
    GPU's kernels compute, f16 storage included).

    ``max_memory`` (bytes): the engine's memory budget (weights, scratch arena and bindings of
    one execution context; :mod:`ptxc.driver.memory_limit`): an engine that needs more is a
    CompileError naming the layer of its largest scratch buffer; concurrent runs take only as
    many contexts as fit.

    Auto-tuning (:mod:`ptxc.tune`, docs/tuning.md): ``tuning="fast"`` or ``"full"`` times each
    distinct kernel's candidate tactics on the target (cpu: this host; cuda: the GPU here, when
    it is the target) and keeps the fastest whose output matches the default's, measuring where
    ``tuning_workers`` says (``auto``: every GPU of this host where it has several, else here;
    ``here``; ``every-gpu``; ``ray`` or ``ray:ADDRESS``: Ray tasks);
    ``timing_cache`` (a file) supplies tactics measured before and receives the new ones
    (with ``tuning="off"`` it is only read); ``tuning_budget_s`` bounds the measuring time.
    Where nothing can be measured (a cuda compile without the GPU), kernels take the cache's
    tactic or the heuristic's, and the log says how many of each. ``tactics``: ``{kernel key:
    tactic}`` chosen by hand (they win over tuning). ``engine.tuning`` lists each distinct
    kernel's tactic, its time, the default's time and the candidates tried."""
    keywords = {k: v for k, v in locals().items() if k in _OPTION_NAMES}
    options = CompileOptions.from_call("compile", options, keywords, _COMPILE_DEFAULTS)
    precision, precision_overrides = options.precision, options.precision_overrides
    layer_precisions = None
    if precision == "int8":
        model, layer_precisions = _quantize_int8(model, options.calibration,
                                                 options.calibration_cache, precision_overrides,
                                                 **options.import_options())
        cache = False
    target = options.kind
    key = None
    tuner = _tuner(options)
    if tuner is not None and tuner.can_measure and options.tuning != "off" and \
            options.layout == "auto" and precision != "int8":
        from .tune.layout import choose_layout
        return choose_layout(model, options,
                             lambda m, o: compile(m, options=o, cache=cache))
    if tuner is not None:   # the tactics are known after tuning: stored, not looked up
        cache = False if cache is False else "store"
    if cache not in (False, "store") and not options.check_numerics:
        from .plan import cache as compile_cache
        if compile_cache.cache_dir() is not None:
            key = compile_cache.cache_key(model, target, options.cache_key())
            from .driver.load import load_plan
            engine = compile_cache.lookup(
                key, lambda path, k: load_plan(path, threads=options.threads, key=k))
            if engine is not None:
                if target == "cuda":
                    engine.cuda_graph = options.cuda_graph
                engine.max_memory = options.max_memory
                return engine
    from .gc_pause import fewer_collections
    with fewer_collections():  # the stages build large object graphs
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        log.info("importing %s", model if isinstance(model, (str, bytes)) and len(model) < 300
                 else type(model).__name__)
        module = as_module(model, **options.import_options())
        timings["import"] = time.perf_counter() - t0
        from .rewrite.provenance import annotate_kernels, collect
        prov: dict = {}  # loc -> the ONNX nodes an op there computes (fusions included)
        run_stages(module, "loop", options, timings=timings, tuner=tuner,
                   on_stage=lambda stage, m: stage != "loop" and collect(m, prov))
        annotate_kernels(module, prov)
        from .codegen import build
        from .driver.engine import Engine
        log.info("%s ...", "PTX code generation" if target == "cuda"
                 else "LLVM code generation and JIT compilation")
        artifact = build(module, options.target, timings=timings)
        engine = Engine.from_artifact(artifact, timings=timings, threads=options.threads,
                                      cuda_graph=options.cuda_graph)
        engine.precision = precision
        engine.layer_precisions = layer_precisions
        engine.precision_overrides = dict(precision_overrides)
        engine.max_memory = options.max_memory
        if tuner is not None:   # (a tactic given by hand wins over tuning's: say so)
            engine.tuning = [dict(r.to_json(), tactic=str(options.tactics[r.key]),
                                  source="hand") if r.key in options.tactics else r.to_json()
                             for r in tuner.report]
            _save_timing_cache(tuner, options.timing_cache)
            if cache == "store" and not options.check_numerics:
                key = _tuned_cache_key(model, options, tuner)
        log.info("compiled in %.2f s (%d kernels)", sum(engine.timings.values()),
                 len(engine.kernels.kernels) if engine.kernels is not None else 0)
        if key is not None:
            compile_cache.store(key, engine)
    return engine


def _tuner(options):
    """The Tuner of a compile that tunes or reads a timing cache, else None."""
    if options.tuning == "off" and options.timing_cache is None:
        return None
    from .tune.cache import TimingCache
    from .tune.tuner import Tuner
    import os
    cache = TimingCache()
    if options.timing_cache is not None and os.path.exists(options.timing_cache):
        cache = TimingCache.load(options.timing_cache)
    from .tune.executors import executor_for
    executor = None if options.tuning_workers == "auto" else \
        executor_for(options.tuning_workers, options.kind)
    return Tuner(options.target, options.tuning, cache, budget_s=options.tuning_budget_s,
                 executor=executor)


def _save_timing_cache(tuner, path) -> None:
    """Write what the tuner measured into ``path``, merged with the file as it is now (another
    build may have added entries meanwhile)."""
    if path is None or not any(r.source == "tuned" for r in tuner.report):
        return
    import os
    from .tune.cache import TimingCache
    merged = tuner.cache
    if os.path.exists(path):
        merged = TimingCache.load(path).merge(tuner.cache)
    merged.save(path)
    log.info("timing cache %s: %d entries", path, len(merged))


def _tuned_cache_key(model, options, tuner):
    """The compile cache's key of a tuned build: its options with the tactics tuning chose."""
    import attrs
    from .plan import cache as compile_cache
    from .tactic.tactic import DEFAULT
    if compile_cache.cache_dir() is None:
        return None
    chosen = {r.key: r.tactic for r in tuner.report if r.tactic != DEFAULT}
    tuned = attrs.evolve(options, tactics={**chosen, **options.tactics})
    return compile_cache.cache_key(model, options.kind, tuned.cache_key())


def _quantize_int8(model, calibration, calibration_cache, overrides, input_shapes,
                   constant_inputs):
    """(graph module with int8 Q/DQ pairs, per-layer report) for precision int8."""
    from .calib import CalibrationTable, calibrate, quantize_int8
    overrides = dict(overrides or {})     # checked by CompileOptions
    module = as_module(model, input_shapes, constant_inputs)
    if isinstance(calibration, CalibrationTable):
        table = calibration
    elif calibration is None and calibration_cache is None:
        raise CompileError("precision='int8' needs calibration= (a CalibrationTable, a folder "
                           "or an iterable of input dicts) or calibration_cache=")
    else:
        # without data, a cache is used whatever calibrator made it (``ptxc calibrate
        # --method mse`` writes one); with data, entropy, as before
        table = calibrate(module, calibration, None if calibration is None else "entropy",
                          cache=calibration_cache)
    report: list = []
    q = quantize_int8(module, table, exclude={k for k, v in overrides.items() if v != "int8"},
                      report=report)
    return q, report


#: compile's keywords that are CompileOptions.make's, with compile's defaults
_OPTION_NAMES = frozenset(inspect.signature(CompileOptions.make).parameters) - {"cls"}
_COMPILE_DEFAULTS = {k: p.default for k, p in inspect.signature(compile).parameters.items()
                     if k in _OPTION_NAMES}
