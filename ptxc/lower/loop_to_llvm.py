"""Emit LLVM IR (llvmlite.ir) for a loop-dialect function: one LLVM function per kernel.

A kernel is a top-level loop nest of ``main``: a ``loop.parallel``, a ``loop.for`` or a
``loop.copy`` (a copy is a parallel nest over its shape). Kernel ``N`` becomes::

    define void @kernel_N(ptr noalias %b0, ..., ptr noalias %bK, i64 %begin, i64 %end)

over the *root* buffers it touches (function arguments, ``loop.alloc`` and ``loop.global``
results; a ``loop.view`` is its source's root seen with another static layout, so it costs no
argument and its indexing is constant-stride arithmetic from its type). ``begin``/``end`` are
iteration *numbers* of the outermost dimension, ``0 <= begin <= end <= trip_count``: iteration
``t`` has induction value ``lower + t * step``. A parallel kernel's outer range may be split
across threads; inner dimensions always run fully. A top-level ``loop.for`` is sequential: the
runtime calls it once over its whole range. The signature states the kernel's footprint
(:func:`_state_footprint`: ``dereferenceable`` buffer sizes, ``range`` of ``begin``/``end``),
which a plan loader checks the kernel table against.

Pointers are ``noalias``: distinct roots never overlap (the runtime allocates outputs, scratch
buffers and weights itself and refuses overlapping arguments), which lets LLVM vectorize without
runtime alias checks. Loads and stores are aligned to their element size. Scalars defined at the
top level by pure arith/math ops (constants, usually) are re-emitted in each kernel that uses
them. The emission declares what must be gone: every op outside the loop, arith and math
dialects (and any element type LLVM cannot hold) is reported at once in one CompileError.

**NVPTX** (``target="nvptx"``, after ``map-to-gpu``): every top-level kernel is a ``gpu.launch``
(a top-level ``loop.parallel``/``loop.for``/``loop.copy`` is a CompileError saying to run
map-to-gpu). Launch ``N`` becomes::

    define ptx_kernel void @kernel_N(ptr addrspace(1) noalias %b0, ..., ptr addrspace(1) noalias %bK)

over the same root buffers as on the CPU, in the same order, and no range arguments: the body
runs once per thread, the launch's ``grid``/``block`` (in :class:`KernelInfo`) say how many.
``gpu.block_id``/``gpu.thread_id`` read the ``ctaid``/``tid`` special registers (i32,
zero-extended to ``index``; ``index`` is i32 itself in a launch :func:`launch_index_bits` grants
32 bits); ``gpu.barrier`` is ``llvm.nvvm.barrier.cta.sync.aligned.all(0)``
(``bar.sync 0``; LLVM 22's name, ``barrier0`` is only auto-upgraded), ``gpu.warp_barrier``
``llvm.nvvm.bar.warp.sync(-1)``; a ``gpu.shared`` buffer is
an ``internal addrspace(3)`` array per kernel, aligned 16; ``loop.if`` is a conditional branch;
math calls libdevice's ``__nv_*`` functions (declared here, linked by :mod:`ptxc.ptx`). The
module carries ``!nvvm.annotations`` ``maxntid{x,y,z}`` = the block and the ``nvvm-reflect-ftz = 0``
module flag (libdevice keeps denormals, as numpy). ``.maxntid`` lets LLVM bound the thread ids
and tells ptxas how many threads a block has: without it ptxas may use up to 255 registers and a
block of more than 256 threads could fail to launch ("too many resources"); with it ptxas also
trades a few registers for occupancy (on ResNet-50's tiled convs: 56-64 registers and 8-16 bytes
of spills instead of 66-72 and none).

**Run-time checks** (``arith.check_index``: Gather's indices, every index read from a tensor).
Compiled code cannot raise, so a program with checks gets one more root buffer, the *error
flag*: a scratch slot named ``ptxc.error`` (:data:`ERROR_SLOT`), one ``int32``, live over every
kernel (so the planner gives it memory no other buffer shares: it is planned like any other
buffer, and each execution context has its own). A kernel holding a check takes it as one more
pointer argument; a failing check stores its number (1-based, into the table's ``checks``:
the descriptions, one number per distinct description) with a branch marked unlikely and goes
on with index 0, an in-bounds read::

    %neg = icmp slt i64 %i, 0 ; %w = select %neg, (add %i, 5), %i ; %ok = icmp ult i64 %w, 5
    br i1 %ok, %cont, %fail        ; fail: store i32 1, ptr %flag ; br %cont
    %idx = select i1 %ok, i64 %w, i64 0

The runtimes zero the flag before a run (cuda: once at setup, and after each failure), read it
after, and raise :class:`~ptxc.errors.IndexOutOfRangeError` naming the check; the interpreter
raises the same error from the op's reference.

The result is an :class:`LLVMProgram`: the module text (what ``explore --stage llvm`` shows,
before optimization), a :class:`KernelTable` (kernels in order, their buffers, ranges; the root
buffers with sizes and live ranges for a memory planner), and the weights of ``loop.global``.
"""

from __future__ import annotations

import functools

import attrs
import numpy as np
from llvmlite import ir

from ..dialects.func import arg_names, func_body, get_func
from ..dialects.loop import output_names
from ..errors import CompileError
from ..ir.core import BlockArgument, Operation, Value
from ..ir.types import INDEX, BufferType
from ..rewrite.provenance import nodes_of
from . import llvm_tensorcore, llvm_wgmma
from .cpu_schedule import THREADS_ATTR, cpu_hints
from .kernel_key import launch_key
from .llvm_kernel import (DYNAMIC_SHARED, STATIC_SHARED_LIMIT, _ERROR, _GpuKernel,  # noqa: F401
                          _Kernel, _root)
from .kernel_table import ERROR_SLOT, BufferSlot, KernelInfo, KernelTable, LLVMProgram  # noqa: F401
from .llvm_fold import FoldingBuilder
from .llvm_scalar import ScalarEmitter
from .llvm_types import I64, align_of, index_bits, memory_type, storable

_ARITH = {"constant", "add", "sub", "mul", "div", "max", "min", "pow", "and", "or", "neg",
          "not", "cmp", "select", "cast", "round_tf32", "xor", "shl", "shr", "rem", "bit_and",
          "bit_or", "bit_xor", "check_index"}
_MATH = {"exp", "log", "tanh", "erf", "sqrt", "abs", "floor", "ceil", "roundeven", "fma", "sin",
         "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"}
_KERNELS = {"loop.parallel", "loop.for", "loop.copy"}
_TOP = _KERNELS | {"loop.alloc", "loop.global", "loop.view", "func.return"}
_INNER = {"loop.parallel", "loop.for", "loop.copy", "loop.view", "loop.load", "loop.store",
          "loop.yield"}
# NVPTX: the only top-level kernel is a gpu.launch; these may appear inside one
_GPU_TOP = {"gpu.launch", "loop.alloc", "loop.global", "loop.view", "func.return"}
_GPU_INNER = _INNER | {"loop.if", "gpu.block_id", "gpu.thread_id", "gpu.barrier", "gpu.grid_wait",
                       "gpu.warp_barrier", "gpu.shared"} | llvm_tensorcore.OPS | llvm_wgmma.OPS
_TARGETS = ("cpu", "nvptx")


def _scalar_op(name: str) -> bool:
    d, _, n = name.partition(".")
    return (d == "arith" and n in _ARITH) or (d == "math" and n in _MATH)


def new_host_target_machine():
    """A new target machine for this host (its cpu name and features). A fresh one per JIT
    engine: llvmlite's MCJIT takes ownership of the machine it is given and frees it with the
    engine."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                        features=llvm.get_host_cpu_features().flatten(),
                                        opt=3, codemodel="jitdefault")


@functools.lru_cache(maxsize=None)
def _host_layout() -> str:
    return str(new_host_target_machine().target_data)


def host_target() -> tuple[str, str]:
    """(triple, data layout) of the host."""
    import llvmlite.binding as llvm
    return llvm.get_process_triple(), _host_layout()


def _trip(lo: int, hi: int, step: int) -> int:
    return max(0, -(-(hi - lo) // step))


def _op_work(op: Operation) -> int:
    """Innermost iterations of ``op`` (a rough cost for the threading heuristic)."""
    if op.name == "loop.copy":
        return op.operands[0].type.size
    if op.name == "loop.for":
        n = _trip(op.attributes["lower"], op.attributes["upper"], op.attr("step"))
    elif op.name == "loop.parallel":
        lo, hi = op.attributes["lower"], op.attributes["upper"]
        n = 1
        for a, b, s in zip(lo, hi, op.attr("step") or (1,) * len(lo)):
            n *= _trip(a, b, s)
    elif op.name == "gpu.launch":
        n = int(np.prod(op.attributes["grid"])) * int(np.prod(op.attributes["block"]))
    elif op.name == "loop.if":
        n = 1
    else:
        return 1
    return n * max(1, sum(_op_work(o) for o in op.regions[0].blocks[0].ops))


# ---- legality --------------------------------------------------------------------------------

def _check_legal(f: Operation, target: str = "cpu") -> None:
    bad = []
    gpu = target == "nvptx"
    top_ok, inner_ok = (_GPU_TOP, _GPU_INNER) if gpu else (_TOP, _INNER)

    def note(op, why):
        bad.append(f"  {op.where}: {why}")

    def types_ok(op):
        for v in list(op.operands) + list(op.results):
            t = v.type
            el = t.element if isinstance(t, BufferType) else t
            if not storable(el):
                return f"element type {el} has no LLVM lowering"
        return None

    body = func_body(f)
    for a in body.args:
        if not isinstance(a.type, BufferType) or not storable(a.type.element):
            bad.append(f"  argument {a.type}: loop functions take buffers of supported types")
    for op in body.ops:
        if op.name == "func.return" and op.operands:
            note(op, "a loop function returns nothing (outputs are arguments)")
        elif gpu and op.name in _KERNELS:
            note(op, "a top-level loop nest is not mapped to the GPU: the nvptx target takes "
                 "gpu.launch kernels only (run the map-to-gpu pass first)")
            continue
        elif op.name not in top_ok and not _scalar_op(op.name):
            note(op, "cannot be lowered at the top level of a function"
                 + (" for nvptx" if gpu and op.name.startswith("gpu.") else ""))
        elif op.name == "loop.for" and any(r.uses for r in op.results):
            note(op, "results of a top-level loop.for cannot be used by another kernel")
        elif why := types_ok(op):
            note(op, why)
        for inner in list(op.walk())[1:]:
            if inner.name not in inner_ok and not _scalar_op(inner.name):
                note(inner, "cannot be lowered inside a "
                     + ("gpu.launch" if op.name == "gpu.launch" else "loop nest"))
            elif inner.name == "gpu.shared" and inner.parent_op is not op:
                note(inner, "gpu.shared must be directly in the body of its gpu.launch")
            elif why := types_ok(inner):
                note(inner, why)
    if bad:
        raise CompileError(f"loop-to-llvm ({target}): {len(bad)} op(s) cannot be lowered:\n"
                           + "\n".join(bad))


# ---- kernels -------------------------------------------------------------------------------

def _top_scalars(kernel: Operation) -> list[Operation]:
    """Top-level scalar ops the kernel reads (transitively), in program order."""
    need: dict[int, Operation] = {}
    inside = {id(o) for o in kernel.walk()}

    def visit(v: Value):
        if isinstance(v, BlockArgument) or id(v.op) in inside or id(v.op) in need:
            return
        if isinstance(v.type, BufferType):
            return
        if not _scalar_op(v.op.name):
            raise CompileError(f"{kernel.where}: reads {v.type} from {v.op.where}, which is not "
                               "a scalar computable inside the kernel")
        for w in v.op.operands:
            visit(w)
        need[id(v.op)] = v.op

    for op in kernel.walk():
        for v in op.operands:
            visit(v)
    order = {id(o): i for i, o in enumerate(kernel.block.ops)}
    return sorted(need.values(), key=lambda o: order[id(o)])


def lower_loop_to_llvm(module: Operation, func: str = "main", triple: str | None = None,
                       data_layout: str | None = None, target: str = "cpu",
                       verify: bool = True) -> LLVMProgram:
    """Emit ``func`` of a loop-dialect ``module`` as LLVM IR; see the module docstring.
    ``target`` is ``"cpu"`` (triple and layout default to the host's) or ``"nvptx"`` (default
    ``nvptx64-nvidia-cuda`` and the NVPTX layout; kernels from ``gpu.launch`` ops).
    ``verify``: parse and verify the text (False: the caller parses and verifies what it
    compiles, as :func:`ptxc.codegen.lower_to_ptx` does kernel by kernel)."""
    if target not in _TARGETS:
        raise CompileError(f"loop-to-llvm: unknown target {target!r} (known: {list(_TARGETS)})")
    try:
        f = get_func(module, func)
    except KeyError:
        raise CompileError(f"loop-to-llvm: module has no function {func!r}") from None
    _check_legal(f, target)
    if target == "nvptx" and triple is None:
        from ..ptx.target import NVPTX_TRIPLE, nvptx_data_layout
        triple, data_layout = NVPTX_TRIPLE, data_layout or nvptx_data_layout()
    elif triple is None:
        triple, host_layout = host_target()
        data_layout = data_layout or host_layout
    m = _Module(name=f"ptxc.{func}")
    m.triple = triple
    if data_layout:
        m.data_layout = data_layout

    body = func_body(f)
    names = arg_names(f)
    slots: list[dict] = []
    slot_of: dict[Value, int] = {}
    global_slot: dict[str, tuple[int, object]] = {}
    globals_: dict[str, np.ndarray] = {}

    def add_slot(v: Value, kind: str, name: str) -> None:
        t = v.type
        slot_of[v] = len(slots)
        slots.append({"kind": kind, "name": name, "dtype": t.element.np_dtype.name,
                      "shape": t.shape, "strides": t.strides, "offset": t.offset,
                      "span": t.span, "first": -1, "last": -1})

    for n, a in zip(names, body.args):
        add_slot(a, "arg", n)
    checks = [o for o in f.walk() if o.name == "arith.check_index"]
    # one number per description: checks that say the same (a body cloned for each point of a
    # short innermost run, lower-tensor-to-loop's nest.py) report the same error
    number = {m: k + 1 for k, m in enumerate(dict.fromkeys(o.attributes["check"] for o in checks))}
    messages = list(number)
    check_ids = {id(o): number[o.attributes["check"]] for o in checks}
    if checks:  # the error flag (see "Run-time checks")
        slot_of[_ERROR] = len(slots)
        slots.append({"kind": "alloc", "name": ERROR_SLOT, "dtype": "int32", "shape": (1,),
                      "strides": (1,), "offset": 0, "span": 1, "first": -1, "last": -1})
    kernels: list[KernelInfo] = []
    min_blocks: dict[str, int] = {}  # kernel name -> its launch's min_blocks (nvptx minctasm)
    seen: dict = {}  # nvptx: launch key -> (name, KernelInfo) of its first kernel
    twins: dict[str, str] = {}
    n_alloc = 0
    for op in body.ops:
        if op.name == "loop.alloc":
            add_slot(op.results[0], "alloc", op.results[0].name_hint or f"alloc{n_alloc}")
            n_alloc += 1
        elif op.name == "loop.global":
            name, value = op.attributes["name"], op.attributes["value"]
            if name in global_slot:
                if global_slot[name][1] != value:
                    raise CompileError(f"{op.where}: two loop.global named {name!r} with "
                                       "different values")
                slot_of[op.results[0]] = global_slot[name][0]
                continue
            add_slot(op.results[0], "global", name)
            global_slot[name] = (slot_of[op.results[0]], value)
            globals_[name] = value.array
        elif op.name in _KERNELS or op.name == "gpu.launch":
            if "min_blocks" in op.attributes:
                min_blocks[f"kernel_{len(kernels)}"] = int(op.attributes["min_blocks"])
            kernels.append(_emit_kernel(m, op, len(kernels), slot_of, slots, check_ids,
                                        seen, twins))
    if checks:  # live over every kernel: no other buffer shares its memory
        slots[slot_of[_ERROR]].update(first=0, last=max(len(kernels) - 1, 0))
    if target == "nvptx":
        _nvptx_metadata(m, kernels, min_blocks)
        kernels = _static_shared_padded(m, kernels)
    table = KernelTable(tuple(BufferSlot(**s) for s in slots), tuple(kernels),
                        tuple(n for n in names if n not in output_names(f)),
                        tuple(output_names(f)), tuple(messages),
                        tuple(f.attributes.get("loop.result_names", ())))
    text = _with_twins(m, twins)
    if verify:
        _verify_text(text)
    return LLVMProgram(text, table, globals_, triple, data_layout or "", m, twins)


def _static_shared_padded(m: ir.Module, kernels: list) -> list:
    """The kernels' static shared bytes as ptxas counts them: where the module's dynamic shared
    array is aligned past 16 bytes (1024 for wgmma's swizzled tiles), ptxas pads every kernel's
    static shared memory to that alignment (inception_v1 fp16: a 20992-byte mma kernel takes
    21504 next to a wgmma kernel)."""
    base = m.globals.get(DYNAMIC_SHARED)
    align = getattr(base, "align", None) or 16
    if align <= 16:
        return kernels
    return [attrs.evolve(k, shared_bytes=-(-k.shared_bytes // align) * align)
            if k.shared_bytes and not k.dynamic_shared else k for k in kernels]


#: a 32-bit index serves a launch whose buffers all hold fewer elements than this: every
#: element offset and every index value the kernel computes from in-bounds coordinates then
#: stays far inside i32 (a 2x margin for the one-tile-past-the-end offsets a guarded copy may
#: form before its predicate drops it)
INDEX32_MAX_SPAN = 1 << 30


def launch_index_bits(op: Operation, roots: list, tops: list = ()) -> int:
    """The width of ``index`` in launch ``op`` over root buffers ``roots``: 32 where the
    launch asks (``index_bits = 32``, the mma schedules') and every buffer it touches, global
    or shared, spans fewer than :data:`INDEX32_MAX_SPAN` elements, and no index comes from a
    wider integer (or a ui32), a float or memory (a value read from a tensor could be
    anything), in the launch or the top-level scalars ``tops`` it reads; else 64."""
    if op.attributes.get("index_bits", 64) != 32:
        return 64
    spans = [r.type.span for r in roots if r is not _ERROR]
    for o in [*tops, *op.walk()]:
        if o.name == "gpu.shared":
            spans.append(o.results[0].type.span)
        elif o.name == "loop.load" and o.results[0].type == INDEX:
            return 64
        elif o.name == "arith.cast" and o.results[0].type == INDEX:
            src = o.operands[0].type
            if src != INDEX and (src.is_float or src.bitwidth > 32 or
                                 (src.bitwidth == 32 and not src.is_signed)):
                return 64   # (a ui32 over 2**31 is no i32)
    return 32 if all(n < INDEX32_MAX_SPAN for n in spans) else 64


def _emit_kernel(m: ir.Module, op: Operation, index: int, slot_of: dict,
                 slots: list, check_ids: dict, seen: dict, twins: dict) -> KernelInfo:
    roots: list[Value] = []
    for inner in op.walk():
        for v in inner.operands:
            if isinstance(v.type, BufferType):
                r = _root(v)
                if r not in roots and r in slot_of:  # gpu.shared buffers are no arguments
                    roots.append(r)
    tops = _top_scalars(op)
    if any(id(o) in check_ids for o in list(op.walk()) + tops):
        roots.append(_ERROR)
    for r in roots:
        s = slots[slot_of[r]]
        s["first"] = index if s["first"] < 0 else s["first"]
        s["last"] = index
    if op.name == "gpu.launch":
        from ..dialects.gpu import shared_bytes
        name = f"kernel_{index}"
        bits = launch_index_bits(op, roots, tops)
        # (the width depends on the roots' spans, which the key does not hold: views of
        # differently sized buffers may key alike)
        key = (bits, launch_key(op, roots, tops, check_ids, _root))
        first = seen.get(key)
        if first is not None:  # the same code as an earlier kernel: declared here only
            twins[name] = first.name
            fn = ir.Function(m, m.get_global(first.name).function_type, name)
            fn.calling_convention = "ptx_kernel"
            shared, dynamic_shared = first.shared_bytes, first.dynamic_shared
        else:
            dynamic = shared_bytes(op) > STATIC_SHARED_LIMIT
            # the ids' ranges (llvm_kernel): a one-thread-per-point kernel's index math in 32
            # bits. Not in tensor-core kernels: their index math is per tile and hoisted, and
            # the narrowed form made ptxas spill SqueezeNet's split-K 32x64 tile (124 -> 255
            # registers, 48 bytes of spills)
            ranges = None if op.attributes.get("schedule") in ("mma", "wgmma") else {
                "gpu.block_id": tuple(op.attributes["grid"]),
                "gpu.thread_id": tuple(op.attributes["block"])}
            with index_bits(bits):
                k = _GpuKernel(m, name, roots, tops, dynamic=dynamic, check_ids=check_ids,
                               id_ranges=ranges, pdl=bool(op.attributes.get("pdl", False)),
                               waits=any(o.name == "gpu.grid_wait" for o in op.walk()))
                k.block(op.regions[0].blocks[0], [])
                k.finish()
            shared, dynamic_shared = k.shared_bytes, k.shared_bytes if dynamic else 0
        info = KernelInfo(name, tuple(slot_of[r] for r in roots), 1, False, _op_work(op),
                          op.loc, grid=tuple(op.attributes["grid"]),
                          block=tuple(op.attributes["block"]), shared_bytes=shared,
                          schedule=op.attributes.get("schedule"),
                          dynamic_shared=dynamic_shared,
                          tile=op.attributes.get("tile"), nodes=nodes_of(op),
                          pdl=bool(op.attributes.get("pdl", False)),
                          tactic=op.attributes.get("tactic"))
        seen.setdefault(key, info)
        return info
    k = _Kernel(m, f"kernel_{index}", roots, tops, check_ids, hints=cpu_hints(op))
    if op.name == "loop.parallel":
        lo, hi = op.attributes["lower"], op.attributes["upper"]
        st = op.attr("step") or (1,) * len(lo)
        trip = _trip(lo[0], hi[0], st[0]) if lo else 1
        k.parallel(op, split=True)
        parallel = True
    elif op.name == "loop.for":
        trip = _trip(op.attributes["lower"], op.attributes["upper"], op.attr("step"))
        k.for_(op, split=True)
        parallel = False
    else:  # loop.copy
        shape = op.operands[0].type.shape
        trip = shape[0] if shape else 1
        k.copy(op, split=True)
        parallel = True
    k.finish()
    _state_footprint(k, [slots[slot_of[r]] for r in roots], trip)
    return KernelInfo(k.fn.name, tuple(slot_of[r] for r in roots), trip, parallel,
                      _op_work(op), op.loc, nodes=nodes_of(op),
                      threads=int(op.attributes.get(THREADS_ATTR, 0)),
                      tactic=op.attributes.get("tactic"))


class _Module(ir.Module):
    """An ``ir.Module`` that prints each twin kernel (declared only) as its first kernel's
    definition and ``gpu.shared`` globals, renamed: the text the emission of the twin would
    have printed (value names are numbered per function)."""

    twins: dict = {}

    def _get_body_lines(self):
        if not self.twins:
            return super()._get_body_lines()
        own: dict = {}
        for g in self.global_values:
            if isinstance(g, ir.GlobalVariable):
                own.setdefault(g.name.split(".")[0], []).append(str(g))
        lines = []
        for v in self.globals.values():
            first = self.twins.get(v.name)
            if first is None:
                lines.append(str(v))
                continue
            body = "\n".join([str(self.get_global(first))] + own.get(first, []))
            lines.append(body.replace(f'"{first}"', f'"{v.name}"')
                         .replace(f'"{first}.', f'"{v.name}.'))
        return lines


def _with_twins(m: "_Module", twins: dict) -> str:
    m.twins = twins
    return str(m)


def _state_footprint(k: "_Kernel", slots: list, trip: int) -> None:
    """Put the kernel's footprint in its signature, as LLVM parameter attributes: each buffer
    ``dereferenceable(<span x itemsize>)`` (the bytes its accesses stay inside), ``begin`` and
    ``end`` ``range(i64 0, trip + 1)``. They are the code's own statement of the sizes it was
    compiled for: a plan loader re-reads them from the IR and refuses a kernel table whose slots
    or trip counts disagree (a binding shrunk, a trip count grown, in the header alone), and
    LLVM may use them (loads from a dereferenceable buffer can be hoisted). Before/after::

        define void @kernel_0(ptr noalias %b0, ptr noalias %b1, i64 %begin, i64 %end)
        define void @kernel_0(ptr noalias dereferenceable(80) %b0,
                              ptr noalias dereferenceable(48) %b1,
                              i64 range(i64 0, 4) %begin, i64 range(i64 0, 4) %end)
    """
    for s, a in zip(slots, k.fn.args):
        n = s["span"] * np.dtype(s["dtype"]).itemsize
        if n:
            a.attributes.dereferenceable = n
    rng = f"range(i64 0, {trip + 1})"
    for a in (k.begin, k.end):  # llvmlite's ir does not know ``range``: it prints it as given
        set.add(a.attributes, rng)


def _nvptx_metadata(m: ir.Module, kernels: list, min_blocks: dict) -> None:
    """``maxntid{x,y,z}`` of every kernel (its block) in ``!nvvm.annotations``, and the
    ``nvvm-reflect-ftz = 0`` module flag libdevice's ``__nvvm_reflect`` reads.

    An mma kernel also gets ``minctasm = 1`` (``.minnctapersm 1``): given ``.maxntid`` alone,
    ptxas caps a small block's registers to fit many blocks per SM and spills to do it
    (SqueezeNet's 64-thread 32x64x32 tile: 96 registers and a 4-byte spill; with the hint, 120
    registers and none). A tensor-core tile wants its accumulators in registers more than a
    tenth block per SM. A launch's ``min_blocks`` attribute (map-to-gpu's ``mma-min-blocks``)
    asks for more: ``minctasm = n`` makes ptxas fit n blocks per SM in registers."""
    i32 = ir.IntType(32)
    for k in kernels:
        fn = m.get_global(k.name)
        for axis, n in zip("xyz", k.block):
            m.add_named_metadata("nvvm.annotations",
                                 [fn, ir.MetaDataString(m, f"maxntid{axis}"), ir.Constant(i32, n)])
        if k.schedule in ("mma", "wgmma"):
            m.add_named_metadata("nvvm.annotations",
                                 [fn, ir.MetaDataString(m, "minctasm"),
                                  ir.Constant(i32, min_blocks.get(k.name, 1))])
    m.add_named_metadata("llvm.module.flags", [ir.Constant(i32, 4),  # 4: Override
                                               ir.MetaDataString(m, "nvvm-reflect-ftz"),
                                               ir.Constant(i32, 0)])


def _verify_text(text: str) -> None:
    import llvmlite.binding as llvm
    try:
        llvm.parse_assembly(text).verify()
    except RuntimeError as e:
        raise CompileError(f"loop-to-llvm emitted invalid LLVM IR: {e}") from None
