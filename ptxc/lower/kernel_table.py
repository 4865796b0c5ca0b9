"""What lowering to LLVM hands a runtime besides the module text: the :class:`KernelTable` (the
kernels in execution order, each a :class:`KernelInfo` with its pointer arguments, trip count
and, on the GPU, its launch shape; the root buffers as :class:`BufferSlot` with their live
ranges) and the :class:`LLVMProgram` that carries both. Plans serialize the table as JSON
(:meth:`KernelTable.to_json` / :meth:`KernelTable.from_json`); the runtimes, the memory
planner and ``ptxc inspect`` read it. Built by :func:`ptxc.lower.loop_to_llvm.lower_loop_to_llvm`.

Example: a program with one kernel over input ``x`` into output ``y``::

    KernelTable(slots=(BufferSlot("arg", "x", "float32", (4,), (1,), 0, 4, 0, 0),
                       BufferSlot("arg", "y", "float32", (4,), (1,), 0, 4, 0, 0)),
                kernels=(KernelInfo("kernel_0", buffers=(0, 1), trip_count=4, parallel=True,
                                    work=4),),
                inputs=("x",), outputs=("y",))
"""

from __future__ import annotations

import attrs
import numpy as np

from ..ir.types import BufferType

#: the name of the error-flag slot (see "Run-time checks" in ptxc.lower.loop_to_llvm)
ERROR_SLOT = "ptxc.error"


@attrs.frozen
class BufferSlot:
    """A root buffer: ``kind`` is ``arg`` (a binding of ``main``), ``alloc`` (scratch memory the
    runtime provides) or ``global`` (a weight); ``span`` elements of ``dtype`` from the base
    pointer hold it, laid out by ``strides``/``offset`` (elements). ``first``/``last``: the first
    and last kernel using it (-1: none), the live range a memory planner needs; it is closed:
    two slots whose ranges share a kernel are both used by it and must not overlap in memory
    (kernel pointers are ``noalias``)."""

    kind: str
    name: str
    dtype: str
    shape: tuple
    strides: tuple
    offset: int
    span: int
    first: int = -1
    last: int = -1

    @property
    def type(self) -> BufferType:
        from ..ir.types import scalar_from_numpy
        return BufferType(self.shape, scalar_from_numpy(self.dtype), self.strides, self.offset)

    @property
    def nbytes(self) -> int:
        return self.span * np.dtype(self.dtype).itemsize


@attrs.frozen
class KernelInfo:
    """One kernel: its LLVM function name, its pointer arguments (indices into the table's slots,
    in order), the trip count of its outer range, whether that range may be split across
    threads, and a rough count of its innermost iterations (``work``, for the split heuristic).

    A GPU kernel (from a ``gpu.launch``) has ``trip_count = 1``, ``parallel = False`` and its
    launch shape: ``grid``/``block`` (3 ints each), ``shared_bytes`` (its ``gpu.shared`` buffers,
    each rounded up to 16 bytes) and the ``schedule`` that built it; CPU kernels leave them
    ``None``/0. ``dynamic_shared``: bytes of dynamic shared memory to launch with (0: the
    buffers are static ``__shared__`` arrays; a launch over
    :data:`~ptxc.lower.loop_to_llvm.STATIC_SHARED_LIMIT` places
    them in the dynamic shared memory instead, which the runtime must allow per kernel).
    ``nodes``: every ONNX node the kernel computes, its own loc first, then what the fusions
    absorbed into it (:mod:`ptxc.rewrite.provenance`). ``pdl``: the kernel begins with
    ``griddepcontrol.wait`` (its launch's ``pdl``), so the runtime launches it with programmatic
    stream serialization (CUDA's programmatic dependent launch). ``threads`` (cpu): the chunks
    the runtime splits a parallel kernel's outer range into, whatever its work (1: one call on
    the calling thread); 0, the default, leaves it to the runtime's pool and its
    ``min_parallel_work`` rule (the kernel's ``cpu.threads``, :mod:`ptxc.lower.cpu_schedule`;
    a plan written before the field loads as 0). ``tactic``: the tactic a tuned build gave
    the kernel (:mod:`ptxc.tactic`; None: the default heuristic's)."""

    name: str
    buffers: tuple
    trip_count: int
    parallel: bool
    work: int
    loc: str | None = None
    grid: tuple | None = None
    block: tuple | None = None
    shared_bytes: int = 0
    schedule: str | None = None
    dynamic_shared: int = 0
    tile: str | None = None
    nodes: tuple = ()
    pdl: bool = False
    threads: int = 0
    tactic: str | None = None


@attrs.frozen
class KernelTable:
    """The kernels of a program in execution order, and its root buffers."""

    slots: tuple
    kernels: tuple
    inputs: tuple
    outputs: tuple
    checks: tuple = ()  # descriptions of the run-time checks; the error flag holds 1 + index
    #: the model's names of the outputs, in order, where they differ from the binding names
    #: (``loop.result_names``); empty when they are the same
    public: tuple = ()

    @property
    def error_slot(self) -> int | None:
        """The index of the error-flag slot (None: the program has no run-time check)."""
        return next((i for i, s in enumerate(self.slots)
                     if s.kind == "alloc" and s.name == ERROR_SLOT), None)

    def check_failed(self, flag: int) -> str:
        """The description of the check a flag value names."""
        flag = int(flag)
        return (self.checks[flag - 1] if 1 <= flag <= len(self.checks)
                else f"run-time check #{flag} (unknown)")

    def to_json(self) -> dict:
        return {"slots": [attrs.asdict(s) for s in self.slots],
                "kernels": [attrs.asdict(k) for k in self.kernels],
                "inputs": list(self.inputs), "outputs": list(self.outputs),
                "checks": list(self.checks), **({"public": list(self.public)}
                                                  if self.public else {})}

    @classmethod
    def from_json(cls, d: dict) -> "KernelTable":
        slots = tuple(BufferSlot(**{**s, "shape": tuple(s["shape"]),
                                    "strides": tuple(s["strides"])}) for s in d["slots"])
        def tup(v):
            return None if v is None else tuple(v)
        kernels = tuple(KernelInfo(**{**k, "buffers": tuple(k["buffers"]),
                                      "grid": tup(k.get("grid")), "block": tup(k.get("block")),
                                      "nodes": tuple(k.get("nodes", ()))})
                        for k in d["kernels"])
        public = tuple(d.get("public", ()))
        if public and (len(public) != len(d["outputs"]) or len(set(public)) != len(public)
                       or not all(isinstance(n, str) for n in public)):
            raise ValueError(f"public output names {public!r} do not name the outputs")
        return cls(slots, kernels, tuple(d["inputs"]), tuple(d["outputs"]),
                   tuple(d.get("checks", ())), public)


@attrs.define
class LLVMProgram:
    """LLVM module text plus what a runtime needs to call it."""

    text: str
    table: KernelTable
    globals: dict  # global name -> read-only numpy array
    triple: str
    data_layout: str
    #: the llvmlite.ir module the text was printed from (per-kernel modules are cut from it)
    module: object = None
    #: kernel name -> the earlier kernel whose code it is (nvptx: launches with the same
    #: :func:`~ptxc.lower.kernel_key.launch_key`; in ``module`` a twin is only declared, in
    #: ``text`` it is the earlier kernel's text renamed)
    twins: dict = attrs.Factory(dict)
