"""Saving an Engine as a plan file: the header and blobs of :mod:`ptxc.plan.format` made of
the engine's runtime program and the Artifact it was built from.

    engine.save("model.plan")          # save_plan(engine, path, key=None)
    data = plan_to_bytes(engine)       # the same bytes, in memory

**Header** (the fields are listed once, in :mod:`ptxc.plan.format`'s docstring): the versions,
the target kind and CUDA arch, ``built_for`` (the :class:`~ptxc.target.Target` the code was
generated for: :meth:`~ptxc.target.Target.to_dict` of the engine's Artifact), the host (cpu:
triple, data layout, CPU name and features), the options the runtime needs, the bindings, the
kernel table and the memory plan.

**Blobs by target.** cpu: ``llvm``/``module`` (the LLVM IR text loop-to-llvm emitted, UTF-8
bytes), ``object``/``module`` (the host object code) and the weights. cuda: ``ptx``/``module``
(the PTX text, UTF-8 bytes, exactly as compiled) and the weights; the NVPTX LLVM IR is not
stored (the PTX is the program; ``explore`` shows the IR).

Saving is deterministic: one engine, one byte string (a loaded plan saves to its own bytes).
This module reads the engine's attributes only; it imports nothing of the runtime.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from ..codegen.host import host_cpu_features
from ..errors import PlanError
from ..target import Target
from .format import FORMAT_NAME, FORMAT_VERSION, encode_plan

__all__ = ["plan_to_bytes", "save_plan"]


def _versions() -> dict:
    import llvmlite
    import llvmlite.binding as llvm
    from .. import __version__
    return {"ptxc_version": __version__, "llvmlite_version": llvmlite.__version__,
            "llvm_version": ".".join(map(str, llvm.llvm_version_info))}


def _binding(name: str, t) -> dict:
    return {"name": name, "shape": list(t.shape), "dtype": t.element.np_dtype.name}


def _memory_plan(engine, cpu):
    """The engine's memory plan (an ``engine.memory_plan``, else the planned arena of its CPU
    runtime, planned now if it has not run yet), or None when it has none."""
    plan = getattr(engine, "memory_plan", None)
    alloc = getattr(cpu, "allocator", None)
    if plan is None and type(alloc).__name__ == "ArenaAllocator":
        plan = alloc.plan
        if plan is None:
            from ..codegen.memory_plan import buffers_from_slots, plan_memory
            slots = [s for s in cpu.table.slots if s.kind == "alloc"]
            plan = plan_memory(buffers_from_slots(slots), alloc.alignment, refine=alloc.refine)
    return plan


def _overrides_option(engine) -> dict:
    """``{"precision_overrides": {...}}`` when the engine has any (absent otherwise)."""
    ov = dict(getattr(engine, "precision_overrides", None) or {})
    return {"precision_overrides": ov} if ov else {}


def _tuning(engine) -> dict:
    """``{"tuning": [...]}``: a tuned engine's record per distinct kernel (absent otherwise)."""
    rows = getattr(engine, "tuning", None)
    return {"tuning": [dict(r) for r in rows]} if rows else {}


def _built_for(engine) -> dict:
    """The Target the engine's code was generated for, as plan data (its Artifact's; an engine
    made without one: this host for cpu, the arch's preset GPU for cuda)."""
    artifact = getattr(engine, "artifact", None)
    if artifact is not None:
        return artifact.target.to_dict()
    if engine.target == "cuda":
        return Target.preset(engine.program.arch).to_dict()
    return Target.host().to_dict()


def _cuda_plan_to_bytes(engine) -> bytes:
    cuda = engine.program
    header = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **_versions(),
              "target": "cuda", "arch": cuda.arch, "built_for": _built_for(engine), "host": None,
              "options": {"precision": getattr(engine, "precision", "fp32"),
                          **_overrides_option(engine),
                          "cuda_graph": bool(cuda.cuda_graph)},
              "bindings": {"inputs": [_binding(n, t) for n, t in engine.inputs.items()],
                           "outputs": [_binding(n, t) for n, t in
                                       engine.output_bindings.items()]},
              "kernel_table": engine.kernels.to_json(),
              "memory_plan": cuda.plan.to_json(), **_tuning(engine)}
    blobs = [("module", "ptx", np.frombuffer(cuda.ptx.encode("utf-8"), np.uint8))]
    globals_ = cuda.ptx_program.globals
    blobs += [(s.name, "weight", globals_[s.name]) for s in engine.kernels.slots
              if s.kind == "global"]
    return encode_plan(header, blobs)


def plan_to_bytes(engine) -> bytes:
    """The plan file of ``engine`` as bytes (deterministic: one engine, one byte string)."""
    import llvmlite.binding as llvm
    if engine.target == "cuda":
        return _cuda_plan_to_bytes(engine)
    if engine.target != "cpu":
        raise PlanError(f"plan: cannot save an engine for target {engine.target!r}; the targets "
                        "are cpu and cuda")
    cpu = engine.program
    prog = cpu.program
    plan = _memory_plan(engine, cpu)
    header = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **_versions(),
              "target": "cpu", "arch": None, "built_for": _built_for(engine),
              "host": {"triple": prog.triple, "data_layout": prog.data_layout,
                       "cpu_name": llvm.get_host_cpu_name(),
                       "cpu_features": host_cpu_features()},
              "options": {"precision": getattr(engine, "precision", "fp32"),
                          **_overrides_option(engine),
                          "min_parallel_work": int(cpu.min_parallel_work),
                          "allocator": "arena" if plan is not None else "per-run"},
              "bindings": {"inputs": [_binding(n, t) for n, t in engine.inputs.items()],
                           "outputs": [_binding(n, t) for n, t in
                                       engine.output_bindings.items()]},
              "kernel_table": engine.kernels.to_json(), **_tuning(engine)}
    if plan is not None:
        header["memory_plan"] = plan.to_json()
    text = np.frombuffer(prog.text.encode("utf-8"), np.uint8)
    blobs = [("module", "llvm", text)]
    if getattr(cpu, "object_code", None):
        blobs.append(("module", "object", np.frombuffer(cpu.object_code, np.uint8)))
    blobs += [(s.name, "weight", prog.globals[s.name]) for s in engine.kernels.slots
              if s.kind == "global"]
    return encode_plan(header, blobs)


def save_plan(engine, path, key=None) -> None:
    """Write ``engine`` to ``path`` (atomically: a crash leaves the old file or none); with
    ``key`` (or ``PTXC_PLAN_KEY``) the plan is signed (:mod:`ptxc.plan.trust`)."""
    from .trust import sign
    data = sign(plan_to_bytes(engine), key)
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".ptxc-plan-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
