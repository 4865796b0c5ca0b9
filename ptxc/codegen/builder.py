"""The build step: a loop-level module and a Target in, an :class:`~.artifact.Artifact` out.

    artifact = build(loop_module, Target.host())              # cpu: LLVM IR -> host object
    artifact = build(mapped_module, Target.resolve("sm_89"))  # cuda: LLVM IR -> PTX for sm_89
    engine = Engine.from_artifact(artifact)                   # the runtime takes it from here

What runs, in order, each timed into ``timings`` (the keys an Engine's ``timings`` show):

* cpu: ``llvm`` — :func:`~ptxc.lower.loop_to_llvm.lower_loop_to_llvm` emits the kernels and the
  kernel table; ``memory_plan`` — the scratch slots are planned into one arena
  (:mod:`.memory_plan`), and an arena the host cannot hold is refused here, naming the layer
  (:func:`check_host_memory`); ``jit`` — the IR is optimized and compiled to the host's
  object code (:func:`.host.compile_object`; loading it is the runtime's and adds to ``jit``).
* cuda: ``ptx`` — :func:`lower_to_ptx` for the target's arch (the kernels emitted as NVPTX
  LLVM IR, then :func:`ptxc.ptx.ptx_of_llvm`) (a program with a wgmma
  kernel is built for sm_90a, and the Artifact's target says so); ``memory_plan`` as on cpu
  (the device arena: the host's memory is no limit for it).

Nothing here touches a GPU or allocates what the program will run on: the Artifact is data, and
a build for another GPU (``Target.resolve("sm_80")`` on a machine without one) is the same build.
"""

from __future__ import annotations

import time

from ..errors import CompileError
from ..ir.core import Operation
from ..lower.loop_to_llvm import lower_loop_to_llvm
from ..target import Target, check_arch
from .artifact import Artifact, function_keys
from .host import compile_object
from .memory_plan import MemoryPlan, buffers_from_slots, host_memory_bytes, plan_memory

__all__ = ["build", "lower_to_ptx", "plan_scratch", "check_host_memory"]


def build(loop_module: Operation, target: Target, *, timings: dict | None = None) -> Artifact:
    """The Artifact of ``loop_module`` (cuda: mapped, every kernel a ``gpu.launch``) for
    ``target``; ``timings`` (a dict) gains the seconds of each step (module docstring)."""
    if not isinstance(target, Target):
        raise CompileError(f"build: the target is a ptxc.target.Target, not "
                           f"{type(target).__name__} (Target.host() or Target.resolve(arch))")
    timings = {} if timings is None else timings
    if target.kind == "cuda":
        return _build_cuda(loop_module, target, timings)
    return _build_cpu(loop_module, target, timings)


def _build_cpu(loop_module: Operation, target: Target, timings: dict) -> Artifact:
    import llvmlite.binding as llvm
    if target.arch != llvm.get_host_cpu_name():
        raise CompileError(f"build: a cpu build is for this host ({llvm.get_host_cpu_name()}); "
                           f"the target asks for {target.arch!r} (use Target.host())")
    t0 = time.perf_counter()
    program = lower_loop_to_llvm(loop_module)
    timings["llvm"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = plan_scratch(program.table)
    check_host_memory(plan, program.table)
    timings["memory_plan"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    object_code, _ = compile_object(program)
    timings["jit"] = time.perf_counter() - t0
    return Artifact(target, program.table, program.text, program.globals, plan,
                    kernel_keys=function_keys(program.text, program.table),
                    object_code=object_code, triple=program.triple,
                    data_layout=program.data_layout)


def _build_cuda(loop_module: Operation, target: Target, timings: dict) -> Artifact:
    t0 = time.perf_counter()
    prog = lower_to_ptx(loop_module, arch=target.arch)
    timings["ptx"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = plan_scratch(prog.table)
    timings["memory_plan"] = time.perf_counter() - t0
    built = target if prog.arch == target.arch else target.with_arch(prog.arch)
    return Artifact(built, prog.table, prog.llvm_text, prog.globals, plan,
                    kernel_keys=prog.keys, ptx=prog.ptx)


def lower_to_ptx(loop_module: Operation, func: str = "main", arch: str | None = None,
                 opt_level: int = 3, timings: dict | None = None, jobs: int | None = None):
    """The :class:`~ptxc.ptx.PtxProgram` of ``func`` of a mapped loop module (every kernel a
    ``gpu.launch``): the kernels emitted as NVPTX LLVM IR
    (:func:`~ptxc.lower.loop_to_llvm.lower_loop_to_llvm`), then PTX for ``arch`` (default
    ``PTXC_CUDA_ARCH``, the GPU here, else sm_90) by :func:`ptxc.ptx.ptx_of_llvm`. A top-level
    nest that is not mapped is a CompileError (run ``map-to-gpu``). ``timings`` gains the
    seconds of each step (``emit``, then the ptx stage's)."""
    from ..gc_pause import fewer_collections
    from ..ptx import ptx_of_llvm
    from ..ptx.target import default_arch
    arch = check_arch(arch or default_arch())
    t0 = time.perf_counter()
    with fewer_collections():
        prog = lower_loop_to_llvm(loop_module, func, target="nvptx", verify=False)
    if timings is not None:
        timings["emit"] = timings.get("emit", 0.0) + time.perf_counter() - t0
    return ptx_of_llvm(prog, arch, opt_level, timings, jobs)


def plan_scratch(table) -> MemoryPlan:
    """The static memory plan of a kernel table's scratch slots (``alloc``), validated."""
    plan = plan_memory(buffers_from_slots([s for s in table.slots if s.kind == "alloc"]))
    plan.validate()
    return plan


def check_host_memory(plan, table, limit: int | None = None) -> None:
    """Refuse, before anything is allocated, an arena the host cannot hold: a CompileError
    naming the largest scratch buffer and the layer (ONNX node) that first writes it, instead
    of a bare MemoryError at the first run (e.g. an LRN with size=2**31)."""
    limit = host_memory_bytes() if limit is None else limit
    if plan.arena_bytes <= limit:
        return
    slots = {s.name: s for s in table.slots if s.kind == "alloc"}
    big = max(plan.buffers, key=lambda b: b.size)
    s = slots.get(big.name)
    layer = table.kernels[s.first].loc if s is not None and 0 <= s.first < len(
        table.kernels) else None
    raise CompileError(f"the scratch memory plan needs {plan.arena_bytes:,} bytes, more than "
                       f"this host's {limit:,}: the largest buffer {big.name!r} "
                       f"({big.size:,} bytes) is written by layer {layer!r}")
