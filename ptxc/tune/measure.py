"""Building, running and timing one candidate of one kernel.

    art = build_candidate(kernel_text, key, schedule_pass_text, target_dict, tactic_json)
    bench = Bench.for_artifact(art)                 # the kernel, loaded on the target
    outputs = bench.outputs(inputs)                 # one run on copies of ``inputs``
    seconds = bench.times(inputs, runs=20)          # device (cuda) or wall (cpu) times
    compare_outputs(default_outputs, outputs)       # None, or why they differ

A candidate is the isolated kernel (:mod:`ptxc.tactic.kernels`) run through the target's
schedule pass with one tactic, then code generation (:func:`ptxc.codegen.build`): the same
path a compile takes, so a tactic measured here is the code a compile with it gets.
:func:`build_candidate` takes and returns plain data (IR text, JSON) so that it runs in a
process pool, in another process of the host, or as a Ray task.

Inputs are synthetic (:func:`synthetic_inputs`): floats uniform in [-1, 1], int8/uint8
uniform over their range, wider integers zero (they may be indices: zero is in range for every
axis), booleans random. Every argument gets data, outputs too: a kernel that reads what it
writes (an accumulation) then starts from the same values for every candidate.

Timing: **cuda**, the device time of the kernel's launches between two CUDA events, the L2
flushed before each run (a memset of twice the L2 on the same stream, as TensorRT's builder
does: a layer in a model mostly finds its weights out of cache); **cpu**, the wall time of one
call (warm caches: on the host a kernel's inputs are mostly its producer's fresh outputs).
After ``warmup`` runs, ``runs`` runs; the tuner takes the median.

Comparison (:func:`compare_outputs`): integers bit-exact; floats within the candidate's dtype's
tolerance relative to the largest magnitude of the default's output (f32: 1e-4, f16: 1e-2,
bf16: 2e-2), NaN where the default has NaN and nowhere else. A candidate that differs never
wins; the tuner reports it, naming the tactic.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

#: tolerance relative to max |default output| per float dtype
FLOAT_TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2}


def build_candidate(kernel_text: str, key: str, pass_text: str, target: dict,
                    tactic: dict):
    """The :class:`~ptxc.codegen.artifact.Artifact` of one candidate: the isolated kernel
    module (``kernel_text``, IR text), the schedule pass (``pass_text``, pipeline text) given
    ``target`` (:meth:`Target.to_dict`) and the tactic (``Tactic.to_json``) for ``key``, then
    code generation. Plain data in, so it can run in another process."""
    import importlib

    import attrs

    importlib.import_module("ptxc")  # installs the op and pass tables in a fresh process
    from ..codegen import build
    from ..ir.parser import parse_ir
    from ..rewrite.pipeline import parse_pipeline
    from ..target import Target
    from ..tactic.tactic import Tactic
    module = parse_ir(kernel_text)
    tgt = Target.from_dict(target)
    (p,) = parse_pipeline(pass_text)
    p = attrs.evolve(p, target=tgt, tactics={key: Tactic.from_json(tactic)})
    p.run(module)
    return build(module, tgt)


def spill_reason(artifact) -> str | None:
    """Why a cuda candidate cannot be valid before it runs: ptxas reports register spills in
    one of its kernels (``"spills 96 bytes (kernel_0)"``); None where none spills, on cpu, or
    where ptxas is absent (not known: the candidate is timed)."""
    if artifact.kind != "cuda" or not artifact.ptx:
        return None
    from .spills import ptxas_report
    rep = ptxas_report(artifact.ptx, artifact.arch)
    spilled = {k: r["spill_bytes"] for k, r in (rep or {}).items() if r["spill_bytes"]}
    if not spilled:
        return None
    return "spills " + ", ".join(f"{b} bytes ({k})" for k, b in sorted(spilled.items()))


def synthetic_inputs(artifact, seed: int = 0) -> dict:
    """Host arrays for every argument of the kernel's function (module docstring)."""
    rng = np.random.default_rng(seed)
    out = {}
    for s in artifact.table.slots:
        if s.kind != "arg":
            continue
        dt = np.dtype(s.dtype) if s.dtype != "bfloat16" else None
        shape = tuple(s.shape)
        if dt is None or dt.kind == "f":
            a = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
            out[s.name] = a.astype(_np_dtype(s.dtype))
        elif dt.kind in "iu" and dt.itemsize == 1:
            info = np.iinfo(dt)
            out[s.name] = rng.integers(info.min, int(info.max) + 1, shape).astype(dt)
        elif dt.kind == "b":
            out[s.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            out[s.name] = np.zeros(shape, dt)
    return out


def _np_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return np.dtype(name)


def compare_outputs(expected: dict, got: dict) -> str | None:
    """None where ``got`` matches ``expected`` (module docstring), else why not."""
    for name, e in expected.items():
        g = got.get(name)
        if g is None or g.shape != e.shape:
            return f"output {name}: shape {None if g is None else g.shape} != {e.shape}"
        kind = np.dtype(e.dtype).kind if str(e.dtype) != "bfloat16" else "f"
        if kind != "f":
            if not np.array_equal(e, g):
                bad = int(np.count_nonzero(e != g))
                return f"output {name}: {bad} of {e.size} values differ (integers: exact)"
            continue
        e64, g64 = e.astype(np.float64), g.astype(np.float64)
        nan_e, nan_g = np.isnan(e64), np.isnan(g64)
        if not np.array_equal(nan_e, nan_g):
            return f"output {name}: NaN at {int(np.count_nonzero(nan_e != nan_g))} other places"
        ok = ~nan_e
        if not ok.any():
            continue
        inf_e = np.isinf(e64) & ok
        if not np.array_equal(e64[inf_e], g64[inf_e]):
            return f"output {name}: infinities differ"
        fin = ok & ~inf_e
        scale = float(np.max(np.abs(e64[fin]))) if fin.any() else 0.0
        tol = FLOAT_TOLERANCE.get(str(e.dtype), 1e-4) * max(scale, 1e-30)
        err = float(np.max(np.abs(e64[fin] - g64[fin]))) if fin.any() else 0.0
        if err > tol:
            return (f"output {name}: differs by {err:.3g} (tolerance {tol:.3g}, "
                    f"{e.dtype})")
    return None


class Bench:
    """One built candidate, loaded on its target (see the module docstring)."""

    def __init__(self, artifact, threads: int | None = None):
        from ..driver.engine import Engine
        self.artifact = artifact
        self.engine = Engine.from_artifact(artifact, threads=threads)
        self.program = self.engine.program
        self.outputs_names = tuple(artifact.table.outputs)

    @classmethod
    def for_artifact(cls, artifact, threads: int | None = None) -> "Bench":
        return CudaBench(artifact) if artifact.kind == "cuda" else cls(artifact, threads)

    def outputs(self, inputs: dict) -> dict:
        """One run on copies of ``inputs``: every written argument, as host arrays."""
        bufs = {n: a.copy() for n, a in inputs.items()}
        self.program.run(bufs)
        return {n: bufs[n] for n in self.outputs_names}

    def times(self, inputs: dict, runs: int = 20, warmup: int = 3) -> list[float]:
        """Seconds of each of ``runs`` runs after ``warmup`` (cpu: wall time of one call)."""
        bufs = {n: a.copy() for n, a in inputs.items()}
        for _ in range(warmup):
            self.program.run(bufs)
        out = []
        for _ in range(runs):
            t0 = time.perf_counter()
            self.program.run(bufs)
            out.append(time.perf_counter() - t0)
        return out

    def close(self) -> None:
        self.engine = self.program = None


class CudaBench(Bench):
    """A candidate on the GPU: device arrays bound once, the launches timed between CUDA
    events, the L2 flushed before each timed run."""

    def __init__(self, artifact):
        super().__init__(artifact)
        self._flush = None

    def _device(self, inputs: dict):
        from numba import cuda
        ins = {n: cuda.to_device(a) for n, a in inputs.items() if n not in self.outputs_names}
        outs = {n: cuda.to_device(a) for n, a in inputs.items() if n in self.outputs_names}
        return ins, outs

    def outputs(self, inputs: dict) -> dict:
        ins, outs = self._device(inputs)
        self.program.run_device(ins, out=outs)
        return {n: outs[n].copy_to_host() for n in self.outputs_names}

    def _flush_l2(self, stream_handle: int) -> None:
        """A memset of twice the L2 on ``stream_handle`` (allocated on first use)."""
        from cuda.bindings import driver as cu
        if self._flush is None:
            from numba import cuda
            n = 2 * max(self.artifact.target.l2_bytes, 8 << 20)
            self._flush = (cuda.device_array(n, np.uint8), n)
        buf, n = self._flush
        cu.cuMemsetD8Async(buf.device_ctypes_pointer.value, 0, n, stream_handle)

    def times(self, inputs: dict, runs: int = 20, warmup: int = 3) -> list[float]:
        ins, outs = self._device(inputs)
        for _ in range(warmup):
            self.program.run_device(ins, out=outs)
        ms = self.program.launch_times(runs, before_each=self._flush_l2)
        return [t * 1e-3 for t in ms]


def median(times: list[float]) -> float:
    return statistics.median(times) if times else float("inf")
