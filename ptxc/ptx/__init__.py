"""PTX for an NVPTX LLVM program: LLVM IR for NVPTX (the kernels and their kernel table) →
libdevice linked → NVPTX O3 → PTX text.

    prog = ptx_of_llvm(llvm_program)            # a PtxProgram: .ptx, .arch, .table, .globals
    report = assemble(prog.ptx, prog.arch)      # ptxas -v: registers/spills per kernel

The LLVM program is what :func:`~ptxc.lower.loop_to_llvm.lower_loop_to_llvm` emits with
``target="nvptx"``; this stage takes it and imports nothing of the lowerings (from a mapped loop
module, :func:`ptxc.codegen.lower_to_ptx` does both steps).

* :func:`ptx_of_llvm` cuts one module
  per distinct kernel (:mod:`.split`) and, for each (:mod:`.jobs`: in a pool of processes for
  large programs), links libdevice when the kernel calls it (:mod:`.libdevice`), makes
  everything but the kernel internal, runs LLVM's O3 pipeline built for the NVPTX target
  machine (which adds NVVMReflect, so libdevice's ``__nvvm_reflect`` branches fold away), drops
  what is unused and prints PTX; the PTX texts are joined into one (one header, one entry per
  launch). ``timings`` gains the seconds of each step.
* :func:`default_arch`, :func:`~.target.target_machine`: the arch (``PTXC_CUDA_ARCH``, the
  current GPU, else ``sm_90``) and its target machine; :func:`kernels_arch`: sm_90 becomes
  sm_90a for a program with a wgmma kernel (``PtxProgram.arch`` says which was built).
* :func:`ptxas_path`, :func:`assemble`: the PTX assembler, to check PTX and read resources on a
  machine without a GPU.
"""

from __future__ import annotations

import time

import attrs
import numpy as np

from ..errors import CompileError
from ..target import Target
from .jobs import compile_modules
from .libdevice import find_libdevice, link_libdevice
from .split import join_ptx, kernel_modules
from .split import key as module_key
from .ptxas import KernelResources, PtxasReport, assemble, parse_report, ptxas_path
from .target import (NVPTX_TRIPLE, arch_number, check_arch, default_arch, nvptx_data_layout,
                     ptx_features, target_machine)

__all__ = ["PtxProgram", "ptx_of_llvm", "footprint_lines", "optimize_nvptx", "default_arch", "ptxas_path",
           "assemble", "PtxasReport", "KernelResources", "parse_report", "find_libdevice",
           "target_machine", "kernels_arch", "NVPTX_TRIPLE", "nvptx_data_layout", "ptx_features", "check_arch"]


@attrs.define
class PtxProgram:
    """PTX text for one arch, the LLVM IR it came from (before libdevice and optimization: what
    ``explore --stage llvm`` shows), the kernel table (grid/block/shared bytes per kernel, the
    root buffers) and the weights of ``loop.global`` ops."""

    ptx: str
    arch: str
    llvm_text: str
    table: object  # the kernel table (ptxc.lower.kernel_table.KernelTable)
    globals: dict  # global name -> read-only numpy array
    #: each kernel's module key (:func:`.split.key`), in table order: equal keys, the same code
    keys: tuple = ()

    @property
    def kernel_names(self) -> list[str]:
        return [k.name for k in self.table.kernels]


def optimize_nvptx(text: str, arch: str, opt_level: int = 3, kernels=(), timings=None):
    """Parse NVPTX LLVM IR, link libdevice, internalize all but ``kernels`` and optimize;
    returns the llvmlite module. ``timings`` (a dict) gains the seconds of each step."""
    import llvmlite.binding as llvm
    tm = target_machine(arch)
    clock = _Clock(timings)
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as e:
        raise CompileError(f"ptx: invalid LLVM IR: {e}") from None
    clock("parse")
    link_libdevice(mod)
    clock("libdevice")
    keep = set(kernels)
    for f in mod.functions:
        if not f.is_declaration and f.name not in keep:
            f.linkage = "internal"
    for g in mod.global_variables:
        if not g.is_declaration:
            g.linkage = "internal"
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = False  # NVPTX: one thread is scalar; vectors only cost registers
    pto.slp_vectorization = opt_level >= 2  # pairs of loads/stores become ld.v2/v4
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    # whatever O3 left unreferenced (all of libdevice at O0/O1) goes before printing
    cleanup = llvm.create_new_module_pass_manager()
    cleanup.add_global_dead_code_eliminate_pass()
    cleanup.add_strip_dead_prototype_pass()
    cleanup.run(mod, pb)
    try:
        mod.verify()
    except RuntimeError as e:
        raise CompileError(f"ptx: optimization produced invalid LLVM IR: {e}") from None
    clock("optimize")
    return mod


class _Clock:
    """Adds the seconds since the last call to ``timings[stage]`` (nothing when None)."""

    def __init__(self, timings):
        self.timings = timings
        self.t = time.perf_counter()

    def __call__(self, stage: str) -> None:
        now = time.perf_counter()
        if self.timings is not None:
            self.timings[stage] = self.timings.get(stage, 0.0) + now - self.t
        self.t = now


def ptx_of_llvm(prog, arch: str | None = None, opt_level: int = 3,
                timings: dict | None = None, jobs: int | None = None) -> PtxProgram:
    """PTX of an NVPTX LLVM program (``lower_loop_to_llvm(..., target="nvptx")``: its
    ``module``, ``text``, kernel ``table``, ``twins`` and ``globals``); see the module
    docstring. Missing libdevice is a CompileError saying where it was looked for."""
    from ..gc_pause import fewer_collections
    arch = check_arch(arch or default_arch())
    if not 0 <= opt_level <= 3:
        raise CompileError(f"ptx: opt_level must be 0..3, is {opt_level}")
    with fewer_collections():
        return _ptx_of_llvm(prog, arch, opt_level, timings, jobs)


def _ptx_of_llvm(prog, arch, opt_level, timings, jobs) -> PtxProgram:
    clock = _Clock(timings)
    kernels = prog.table.kernels
    arch = kernels_arch(kernels, arch)
    if not kernels:  # nothing to split: the (empty) module as it is
        mod = optimize_nvptx(prog.text, arch, opt_level, [], timings)
        ptx = target_machine(arch).emit_assembly(mod)
    else:
        texts = kernel_modules(prog.module, kernels, prog.twins)
        keys = [module_key(t) for t in texts]
        unique = {k: t for k, t in zip(keys, texts)}  # first text of each key, in order
        clock("split")
        results = compile_modules(list(unique.values()), arch, opt_level, jobs)
        clock("compile")
        if timings is not None:
            timings["modules"] = len(unique)
            timings["slowest"] = max(sum(t.values()) for _, t in results)
            for _, t in results:  # seconds summed over modules (CPU seconds when parallel)
                for step, sec in t.items():
                    timings[step] = timings.get(step, 0.0) + sec
        ptx_of = {k: r[0] for k, r in zip(unique, results)}
        ptx = join_ptx([(k.name, ptx_of[key]) for k, key in zip(kernels, keys)])
    clock.t = time.perf_counter()
    if "__nvvm_reflect" in ptx:
        raise CompileError("ptx: __nvvm_reflect survived optimization (NVVMReflect did not run)")
    ptx += footprint_lines(prog.table)
    clock("join")
    return PtxProgram(ptx, arch, prog.text, prog.table,
                      {k: np.asarray(v) for k, v in prog.globals.items()},
                      tuple(keys) if kernels else ())


#: the schedules whose kernels need an arch-specific target: the target feature
#: (ptxc.target.FEATURES) they need
ARCH_SPECIFIC = {"wgmma": "wgmma"}


def kernels_arch(kernels, arch: str) -> str:
    """The arch to build ``kernels`` (kernel table entries) for when ``arch`` is asked: a
    wgmma kernel (Hopper's warpgroup MMA) needs the arch-specific ``sm_90a``, so sm_90 becomes
    sm_90a for the whole program (sm_90a PTX loads on sm_90 devices only, which is where wgmma
    runs; the other kernels lose nothing); an arch whose target has no wgmma
    (``Target.preset(arch).has("wgmma")``: sm_90 only) is a CompileError, as map-to-gpu only
    writes wgmma kernels for such a target."""
    for k in kernels:
        need = ARCH_SPECIFIC.get(k.schedule)
        if need is None:
            continue
        if not Target.preset(arch).has(need):
            raise CompileError(f"ptx: kernel {k.name} ({k.schedule}) needs {need}, which {arch} "
                               f"does not have (sm_90 only; map with map-to-gpu{{arch={arch}}} "
                               "or {wgmma=off})")
        return f"sm_{arch_number(arch)[0]}a"
    return arch


def footprint_lines(table) -> str:
    """PTX comment lines stating each kernel's footprint: its launch (grid, block, shared
    bytes) and the bytes of each buffer it was compiled to index. PTX has no parameter sizes
    (LLVM's ``dereferenceable`` does not survive NVPTX), so the PTX says them here; a plan
    loader checks the kernel table against them, as the cpu IR's signature attributes, so a
    launch grown or a binding shrunk in the header alone is refused. Example::

        // ptxc footprint kernel_0 grid 4 1 1 block 256 1 1 shared 0 bytes 4096 1024 4096
    """
    out = []
    for k in table.kernels:
        nbytes = [table.slots[i].span * np.dtype(table.slots[i].dtype).itemsize
                  for i in k.buffers]
        out.append(f"// ptxc footprint {k.name} grid {' '.join(map(str, k.grid))} block "
                   f"{' '.join(map(str, k.block))} shared {k.shared_bytes} bytes "
                   + " ".join(map(str, nbytes)))
    return "\n" + "\n".join(out) + "\n" if out else ""
