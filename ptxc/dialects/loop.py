"""The loop dialect: buffers, loop nests, loads and stores; scalar math is arith/math.

This is the last stage before LLVM IR (docs/lowering.md). A function works on memory: its
arguments are buffers (inputs, and outputs it writes), ``loop.alloc`` makes scratch buffers,
``loop.global`` names a constant buffer (a weight), ``loop.view`` aliases part of a buffer with
another static layout. Work is done by loop nests::

    ^bb0(%x: buffer<4x8xf32>, %y: buffer<4xf32>):
      "loop.parallel"() ({
      ^bb0(%i: index):
        %z = "arith.constant"() {type = f32, value = 0.0} : () -> f32
        "loop.store"(%z, %y, %i) : (f32, buffer<4xf32>, index) -> ()
        "loop.for"() ({
        ^bb0(%k: index):
          %a = "loop.load"(%y, %i) : (buffer<4xf32>, index) -> f32
          %b = "loop.load"(%x, %i, %k) : (buffer<4x8xf32>, index, index) -> f32
          %s = "arith.add"(%a, %b) : (f32, f32) -> f32
          "loop.store"(%s, %y, %i) : (f32, buffer<4xf32>, index) -> ()
          "loop.yield"() : () -> ()
        }) {lower = 0, step = 1, upper = 8} : () -> ()
        "loop.yield"() : () -> ()
      }) {lower = [0], step = [1], upper = [4]} : () -> ()

Decisions beyond docs/lowering.md:

* ``loop.for`` may carry values (MLIR's ``scf.for`` iter_args): operands are the initial values,
  the block gets ``(%iv, %carried...)``, ``loop.yield`` gives the next values and the op's results
  are the last ones. Reductions can then accumulate in registers, not through memory.
* ``loop.view``'s ``offset`` and ``strides`` are absolute, in elements from the base pointer of the
  memory under ``source`` (as ``memref.reinterpret_cast``), and its result type carries exactly
  that layout; :func:`~ptxc.dialects.loop_memory.subview_type` and
  :func:`~ptxc.dialects.loop_memory.reshape_type` compose slices and reshapes of a buffer that
  already has a layout.
* ``loop.alloc`` and ``loop.global`` appear only at the top level of a function (a buffer per
  iteration would need a per-iteration allocation); views may appear anywhere.
* A ``loop.parallel`` built from a ``tensor.matmul`` or ``tensor.conv`` carries
  ``contraction = [source, kind, roles, loops]``: what the tensor op knew (which dims are
  batch, M and N, which loops are K, the element kind), for the schedules that take
  contractions; the verifier checks it against the nest (loop_contraction.py).
* Output bindings: the function attribute ``loop.outputs`` lists the names (from ``arg_names``)
  of the arguments that are outputs, in result order; :func:`run_main` allocates them and returns
  them by name.

Reference semantics are vectorized. A ``loop.parallel`` runs its body once with its induction
variables as broadcast index grids of all iteration points (new axes are prepended, so values of
an enclosing parallel broadcast against them by numpy's right-aligned rules); ``loop.load`` is a
fancy-index gather and ``loop.store`` a scatter, exact because parallel iterations are
independent. ``loop.for`` runs sequentially, each step vectorized over the enclosing parallel
points. Buffers are numpy arrays; a view is a strided numpy view of the same memory, so writes
through it land in the source. A fresh ``loop.alloc`` is filled with NaN (floats) or zeros, so
that reading memory nobody wrote shows up in numerics checks.

``loop.if(%cond)`` runs its body where ``%cond`` (an i1, usually one per vectorized point) holds.
The interpreter keeps the live lanes as ``interp.loop_mask`` (None: all live; otherwise a
boolean array broadcastable against the index grids); nested ifs AND their conditions. Under a
mask, ``loop.load`` sends the indices of dead lanes to 0 before its bounds check (a guard such as
``lin < points`` exists precisely so that dead lanes may hold out-of-range indices), and
``loop.store`` scatters only the live lanes. ``loop.if`` has no results and loop bounds are
static, so no carried value ever needs merging by mask: a dead lane's values never escape the
``loop.if`` except through stores, which drop them. A body with no live lane is skipped.

The same loads and stores serve the gpu dialect's per-block memory (ptxc/dialects/gpu.py): while
a ``gpu.launch`` runs, ``interp.gpu_shared`` maps each ``gpu.shared`` buffer (the array the
interpreter holds for its value, of the declared shape) to its storage with one copy per block
in front, and ``interp.gpu_block`` is the broadcast grid of linear block ids; a load or store of
such a buffer prepends the block id to its indices (:func:`per_block`).

Buffers as numpy memory (layouts, allocation, per-block storage, index checks) are
:mod:`ptxc.dialects.loop_memory`: the gpu dialects and the drivers use them too.
"""

from __future__ import annotations

import numpy as np

from ..errors import BindingError, CompileError
from ..ir.builder import Builder
from ..ir.core import Block, Operation, Region
from ..ir.spec import Attr, Operand, OpSpec, Result, fail
from ..ir.types import I1, INDEX, BufferType, ScalarType
from . import loop_contraction as contraction
from .loop_memory import _check_bounds, _masked_indices, allocate, per_block, restride

#: function attribute: the names of the arguments that are output bindings, in result order
OUTPUTS_ATTR = "loop.outputs"
#: the model's names of the outputs, where a binding name had to differ (an output named as an
#: input gets a ``_out`` binding); absent when they are the same
RESULT_NAMES_ATTR = "loop.result_names"
#: what a top-level kernel (loop.parallel, loop.for, loop.copy) may carry from auto-tuning: the
#: tactic its schedule pass applied (its text) and the kernel's key (ptxc.tune, cpu-schedule)
TUNING_ATTRS = {
    "tactic": Attr("str", doc="the tactic the schedule pass applied to this kernel "
                              "(ptxc.tactic.tactic.Tactic's text)"),
    "tuning_key": Attr("str", doc="the kernel's key (ptxc.tactic.kernels.kernel_key), computed "
                                  "before the tactic was applied"),
}


# ---- ops -----------------------------------------------------------------------------------

def _buffer(op: Operation, i: int) -> BufferType:
    t = op.operands[i].type
    if not isinstance(t, BufferType):
        fail(op, f"operand #{i} must be a buffer, is {t}")
    return t


def _top_level_only(op: Operation) -> None:
    parent = op.parent_op
    if parent is not None and parent.name != "func.func":
        fail(op, f"must be at the top level of a function, not inside {parent.name}")


class Alloc(OpSpec):
    """A new buffer of the result type (its contents are undefined until written)."""

    name = "loop.alloc"
    operands = ()
    results = ("buffer",)

    def verify(self, op):
        if not isinstance(op.results[0].type, BufferType):
            fail(op, "result must be a buffer")
        _top_level_only(op)

    def reference(self, op, args, interp):
        return [allocate(op.results[0].type)]


class Global(OpSpec):
    """A constant buffer: ``name`` is its weight binding, ``value`` its contents. Read-only."""

    name = "loop.global"
    operands = ()
    results = ("buffer",)
    attributes = {"name": Attr("str", required=True), "value": Attr("dense", required=True)}
    traits = {"pure"}

    def infer_types(self, op):
        v = op.attributes.get("value")
        if v is None:
            return None
        return [BufferType(v.type.shape, v.type.element)]

    def verify(self, op):
        _top_level_only(op)

    def reference(self, op, args, interp):
        return [op.attributes["value"].array]  # read-only: a store into it fails


class View(OpSpec):
    """An alias of ``source``'s memory with layout ``shape``/``strides``/``offset`` (elements,
    counted from the base pointer under ``source``)."""

    name = "loop.view"
    operands = ("source",)
    results = ("view",)
    attributes = {"offset": Attr("int", default=0), "shape": Attr("ints", required=True),
                  "strides": Attr("ints", required=True)}
    traits = {"pure"}

    def infer_types(self, op):
        src = _buffer(op, 0)
        shape, strides = op.attributes.get("shape"), op.attributes.get("strides")
        if shape is None or strides is None or len(shape) != len(strides):
            fail(op, "needs shape and strides of one length")
        try:
            return [BufferType(shape, src.element, strides, op.attr("offset"))]
        except ValueError as e:
            fail(op, str(e))

    def verify(self, op):
        src, new = _buffer(op, 0), op.results[0].type
        if new.size and (src.size == 0 or new.min_element < src.min_element
                         or new.max_element > src.max_element):
            fail(op, f"view {new} reaches outside its source {src}")

    def reference(self, op, args, interp):
        src, new = op.operands[0].type, op.results[0].type
        storage = per_block(interp, args[0])
        if storage is None:
            return [restride(args[0], src, new)]
        # a view of gpu.shared memory: the same view of every block's copy, registered in turn
        isz = storage.dtype.itemsize
        blocks = (storage.shape[0],)
        step = (storage.strides[0] // isz,)
        whole = restride(storage, BufferType(blocks + src.shape, src.element,
                                             step + src.strides, src.offset),
                         BufferType(blocks + new.shape, new.element, step + new.strides,
                                    new.offset))
        view = whole[0]
        interp.gpu_shared[id(view)] = (view, whole)
        return [view]


def _check_body(op: Operation, arg_types: list, yields: list) -> Block:
    blocks = op.regions[0].blocks
    if len(blocks) != 1:
        fail(op, f"body must be one block, has {len(blocks)}")
    block = blocks[0]
    if [a.type for a in block.args] != arg_types:
        fail(op, "body arguments must be " + (", ".join(map(str, arg_types)) or "none")
             + ", are " + (", ".join(str(a.type) for a in block.args) or "none"))
    last = block.last_op
    if last is None or last.name != "loop.yield":
        fail(op, "body must end with loop.yield")
    if [v.type for v in last.operands] != yields:
        fail(op, "loop.yield must give " + (", ".join(map(str, yields)) or "nothing"))
    return block


class For(OpSpec):
    """A sequential loop ``for iv in range(lower, upper, step)``; may carry values: the operands
    are their initial values, the body gets ``(iv, carried...)`` and yields the next ones, the
    results are the last ones."""

    name = "loop.for"
    operands = (Operand("inits", variadic=True),)
    results = (Result("results", variadic=True),)
    attributes = {"lower": Attr("int", required=True), "upper": Attr("int", required=True),
                  "step": Attr("int", default=1),
                  "ordered": Attr("bool", default=False,
                                  doc="the carried values combine in iteration order: a schedule "
                                      "may not reassociate them (tensor.generic's ordered)"),
                  "unroll": Attr("bool", default=False,
                                 doc="lower the body once per iteration, straight-line (no "
                                     "branch), so that the loads of every iteration can be in "
                                     "flight together; the semantics are unchanged (the "
                                     "pointwise GPU schedule sets it on a thread's short inner "
                                     "loops)"),
                  "rolled": Attr("bool", default=False,
                                 doc="keep the loop rolled in the generated code (LLVM's "
                                     "llvm.loop.unroll.disable, PTX's nounroll pragma: ptxas "
                                     "unrolls no further); the semantics are unchanged (the mma "
                                     "schedule sets it on its K loop where ptxas would unroll it "
                                     "into spills)"),
                  **TUNING_ATTRS}
    regions = 1

    def infer_types(self, op):
        return [v.type for v in op.operands]

    def verify(self, op):
        if op.attr("step") <= 0:
            fail(op, f"step must be positive, is {op.attr('step')}")
        types = [v.type for v in op.operands]
        if not all(isinstance(t, ScalarType) for t in types):
            fail(op, "carried values must be scalars")
        _check_body(op, [INDEX] + types, types)

    def reference(self, op, args, interp):
        block = op.regions[0].blocks[0]
        carried = list(args)
        for i in range(op.attributes["lower"], op.attributes["upper"], op.attr("step")):
            carried = interp.run_block(block, [np.int64(i), *carried])
        return carried


class Parallel(OpSpec):
    """A loop nest whose iterations are independent: one ``index`` block argument per dimension,
    ``lower``/``upper``/``step`` one entry per dimension (no dimensions: the body runs once)."""

    name = "loop.parallel"
    operands = ()
    results = ()
    attributes = {"lower": Attr("ints", required=True), "upper": Attr("ints", required=True),
                  "step": Attr("ints"),
                  contraction.ATTR: Attr("strs", doc="the nest is a tensor.matmul's or "
                                         "tensor.conv's: source, kind, the role of each dim, "
                                         "the reduction loops (loop_contraction.py)"),
                  **TUNING_ATTRS}
    regions = 1

    def infer_types(self, op):
        return []

    def verify(self, op):
        lo, hi = op.attributes["lower"], op.attributes["upper"]
        step = op.attr("step") or (1,) * len(lo)
        if not (len(lo) == len(hi) == len(step)):
            fail(op, "lower, upper and step must have one entry per dimension")
        if any(s <= 0 for s in step):
            fail(op, f"steps must be positive, are {list(step)}")
        _check_body(op, [INDEX] * len(lo), [])
        if contraction.ATTR in op.attributes:
            problem = contraction.check(op)
            if problem is not None:
                fail(op, problem)

    def reference(self, op, args, interp):
        lo, hi = op.attributes["lower"], op.attributes["upper"]
        step = op.attr("step") or (1,) * len(lo)
        ranges = [np.arange(a, b, s, dtype=np.int64) for a, b, s in zip(lo, hi, step)]
        if any(r.size == 0 for r in ranges):
            return []
        outer = getattr(interp, "loop_vector_rank", 0)
        k = len(ranges)
        grids = []
        for d, r in enumerate(ranges):
            shape = [1] * (k + outer)
            shape[d] = r.size
            grids.append(r.reshape(shape))
        interp.loop_vector_rank = outer + k
        try:
            interp.run_block(op.regions[0].blocks[0], grids)
        finally:
            interp.loop_vector_rank = outer
        return []


class Yield(OpSpec):
    """Ends a loop body; in a ``loop.for`` with carried values, gives their next values."""

    name = "loop.yield"
    operands = (Operand("values", variadic=True),)
    results = ()
    traits = {"terminator"}

    def infer_types(self, op):
        return []

    def reference(self, op, args, interp):
        return []


class If(OpSpec):
    """Run the body where ``cond`` holds (a bounds guard, "thread 0 only"). No results: a value
    computed under the condition leaves the body only through a store. The reference runs the
    body once under ``interp.loop_mask`` AND ``cond`` (see the module docstring)."""

    name = "loop.if"
    operands = ("cond",)
    results = ()
    regions = 1

    def infer_types(self, op):
        return []

    def verify(self, op):
        if op.operands[0].type != I1:
            fail(op, f"condition must be i1, is {op.operands[0].type}")
        _check_body(op, [], [])

    def reference(self, op, args, interp):
        cond = np.asarray(args[0], dtype=bool)
        old = getattr(interp, "loop_mask", None)
        mask = cond if old is None else np.logical_and(old, cond)
        if not mask.any():
            return []
        interp.loop_mask = None if mask.all() else mask
        try:
            interp.run_block(op.regions[0].blocks[0], [])
        finally:
            interp.loop_mask = old
        return []


def _indices(op: Operation, first: int, t: BufferType) -> None:
    idx = op.operands[first:]
    if len(idx) != t.rank:
        fail(op, f"{t} needs {t.rank} indices, has {len(idx)}")
    for i, v in enumerate(idx):
        if v.type != INDEX:
            fail(op, f"index #{i} must be index, is {v.type}")


class Load(OpSpec):
    """One element of ``buffer`` at ``indices``. An integer load may carry ``bound``: a fact
    its maker proved, ``|value| <= bound`` (the mma schedule's accumulator sums,
    contraction.accumulator_bound), which lowering may use (llvm_scalar: a small int converts
    to f32 without ``cvt``); the interpreter checks it on every value it loads."""

    name = "loop.load"
    operands = ("buffer", Operand("indices", variadic=True))
    results = ("value",)
    attributes = {"bound": Attr("int", doc="|value| <= bound, proved by the op's maker")}

    def infer_types(self, op):
        return [_buffer(op, 0).element]

    def verify(self, op):
        _indices(op, 1, _buffer(op, 0))
        bound = op.attributes.get("bound")
        if bound is not None and (bound < 0 or _buffer(op, 0).element.is_float):
            fail(op, f"bound must be >= 0 and on an integer load, is {bound!r}")

    def reference(self, op, args, interp):
        buf, *idx = args
        t = op.operands[0].type
        idx = _masked_indices(interp, t, idx)
        _check_bounds(op, t, idx)
        storage = per_block(interp, buf)
        if storage is not None:
            out = storage[(interp.gpu_block, *(np.asarray(i) for i in idx))]
        elif all(np.ndim(i) == 0 for i in idx):
            out = buf[tuple(int(i) for i in idx)]
        else:
            out = buf[tuple(np.asarray(i) for i in idx)]
        bound = op.attributes.get("bound")
        if bound is not None and np.size(out) and \
                np.max(np.abs(np.asarray(out, dtype=np.int64))) > bound:
            raise CompileError(f"{op.where}: loaded {np.max(np.abs(np.asarray(out, np.int64)))}"
                               f", over the load's bound {bound}")
        return [out]


class Store(OpSpec):
    """Write ``value`` into ``buffer`` at ``indices``."""

    name = "loop.store"
    operands = ("value", "buffer", Operand("indices", variadic=True))
    results = ()

    def infer_types(self, op):
        return []

    def verify(self, op):
        t = _buffer(op, 1)
        if op.operands[0].type != t.element:
            fail(op, f"stores a {op.operands[0].type} into {t}")
        _indices(op, 2, t)

    def reference(self, op, args, interp):
        value, buf, *idx = args
        t = op.operands[1].type
        if not buf.flags.writeable:
            raise CompileError(f"{op.where}: stores into a read-only buffer (a loop.global)")
        value = np.asarray(value, dtype=buf.dtype)
        idx = [np.asarray(i) for i in idx]
        storage = per_block(interp, buf)
        if storage is not None:  # the block id selects the copy: one more leading index
            buf, idx = storage, [np.asarray(interp.gpu_block), *idx]
        mask = getattr(interp, "loop_mask", None)
        if mask is not None:  # scatter the live lanes only
            *idx, value, live = np.broadcast_arrays(*idx, value, np.asarray(mask, bool))
            idx, value = [i[live] for i in idx], value[live]
            if value.size == 0:
                return []
        _check_bounds(op, t, idx[1:] if storage is not None else idx)
        if not idx:  # rank 0: parallel iterations would race; the last one wins
            buf[()] = value.reshape(-1)[-1] if value.size else buf[()]
            return []
        *idx, value = np.broadcast_arrays(*idx, value)
        buf[tuple(idx)] = value
        return []


class Copy(OpSpec):
    """Copy every element of ``source`` into ``dest`` (same shape and element type; the two must
    not overlap unless they are the same memory)."""

    name = "loop.copy"
    operands = ("source", "dest")
    results = ()
    attributes = TUNING_ATTRS

    def infer_types(self, op):
        return []

    def verify(self, op):
        s, d = _buffer(op, 0), _buffer(op, 1)
        if s.shape != d.shape or s.element != d.element:
            fail(op, f"copies {s} into {d}: shapes and element types must match")

    def reference(self, op, args, interp):
        src, dst = args
        if per_block(interp, src) is not None or per_block(interp, dst) is not None:
            raise CompileError(f"{op.where}: copies gpu.shared memory; inside a gpu.launch "
                               "write the copy as loads and stores of each thread's elements")
        if not dst.flags.writeable:
            raise CompileError(f"{op.where}: copies into a read-only buffer (a loop.global)")
        dst[...] = src
        return []


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (Alloc, Global, View, For, Parallel, Yield, If, Load, Store, Copy)


# ---- building loops ------------------------------------------------------------------------

def parallel_loop(b: Builder, lower, upper, step=None, loc: str | None = None):
    """Insert a ``loop.parallel`` at ``b``; returns ``(op, body_builder, ivs)``. The body already
    ends with ``loop.yield``; ``body_builder`` inserts before it."""
    lower, upper = tuple(lower), tuple(upper)
    block = Block([INDEX] * len(lower))
    attrs = {"lower": lower, "upper": upper}
    if step is not None and any(s != 1 for s in step):
        attrs["step"] = tuple(step)
    op = b.create("loop.parallel", [], attrs, regions=[Region([block])], loc=loc)
    y = Builder.at_end(block).create("loop.yield", [])
    return op, Builder.before_op(y), list(block.args)


def for_loop(b: Builder, lower: int, upper: int, step: int = 1, inits=(),
             loc: str | None = None):
    """Insert a ``loop.for`` at ``b``; returns ``(op, body_builder, iv, carried)``. Without
    carried values the body already ends with ``loop.yield`` and ``body_builder`` inserts before
    it; with them, the caller ends the body with ``loop.yield`` of the next values."""
    inits = list(inits)
    block = Block([INDEX] + [v.type for v in inits])
    attrs = {"lower": int(lower), "upper": int(upper)}
    if step != 1:
        attrs["step"] = int(step)
    op = b.create("loop.for", [inits], attrs, regions=[Region([block])], loc=loc)
    if inits:
        return op, Builder.at_end(block), block.args[0], list(block.args[1:])
    y = Builder.at_end(block).create("loop.yield", [])
    return op, Builder.before_op(y), block.args[0], []


def if_op(b: Builder, cond, loc: str | None = None):
    """Insert a ``loop.if`` on ``cond`` (an i1) at ``b``; returns ``(op, body_builder)``. The
    body already ends with ``loop.yield``; ``body_builder`` inserts before it."""
    block = Block([])
    op = b.create("loop.if", [cond], {}, regions=[Region([block])], loc=loc)
    y = Builder.at_end(block).create("loop.yield", [])
    return op, Builder.before_op(y)


# ---- running a loop-level function ------------------------------------------------------------

def output_names(func: Operation) -> list[str]:
    """The names of ``func``'s output arguments (``loop.outputs``), in result order."""
    return list(func.attributes.get(OUTPUTS_ATTR, ()))


def bind_argument(name: str, t: BufferType, x) -> np.ndarray:
    """An interpreter buffer for an input argument: a fresh copy of ``x`` (of the argument's
    shape and dtype) laid out as ``t``."""
    x = np.asarray(x)
    if not isinstance(t, BufferType):
        raise BindingError(f"argument {name!r} has type {t}; loop functions take buffers")
    if x.dtype != t.element.np_dtype or x.shape != t.shape:
        raise BindingError(f"argument {name!r} is {x.dtype}{list(x.shape)}, expected {t}")
    buf = allocate(t, fill=False)
    buf[...] = x
    return buf


def run_main(module: Operation, inputs: dict, func: str = "main") -> dict:
    """Interpret a loop-level function: bind ``inputs`` (name -> array) to its input arguments,
    allocate its output arguments (``loop.outputs``), run it and return the outputs by name."""
    from ..dialects.func import arg_names, func_body, get_func
    from ..ir.interpreter import Interpreter
    try:
        f = get_func(module, func)
    except KeyError:
        raise BindingError(f"module has no function {func!r}") from None
    names, args = arg_names(f), func_body(f).args
    outs = output_names(f)
    unknown = sorted(set(outs) - set(names))
    if unknown:
        raise BindingError(f"{OUTPUTS_ATTR} names {unknown}, which are not arguments")
    wanted = [n for n in names if n not in outs]
    extra, missing = sorted(set(inputs) - set(wanted)), [n for n in wanted if n not in inputs]
    if extra or missing:
        raise BindingError(f"inputs {wanted} expected; missing {missing}, unknown {extra}")
    bound = {}
    for n, a in zip(names, args):
        bound[n] = allocate(a.type) if n in outs else bind_argument(n, a.type, inputs[n])
    Interpreter().run_func(f, [bound[n] for n in names])
    return {n: np.array(bound[n]) for n in outs}
