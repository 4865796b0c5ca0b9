"""``tensor.generic`` and the ops of its body: ``tensor.yield``, ``tensor.index``,
``tensor.extract``.

    %y = "tensor.generic"(%x, %b, %init) ({
    ^bb0(%xs: f32, %bs: f32, %acc: f32):
      %s = "arith.add"(%xs, %bs) : (f32, f32) -> f32
      "tensor.yield"(%s) : (f32) -> ()
    }) {bounds = [2, 3], indexing_maps = [[[1, 0, 0], [0, 1, 0]], [[0, 1, 0]],
                                          [[1, 0, 0], [0, 1, 0]]],
        iterator_types = ["parallel", "parallel"], operand_segments = [2, 1]}
       : (tensor<2x3xf32>, tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>

is ``x + b`` with ``b`` broadcast along rows. For every point of the iteration space (``bounds``)
the body receives one scalar per operand (``ins`` then ``outs``, read through
``indexing_maps``, see maps.py) and yields one scalar per out, written back through the out's
map. Out elements are read-modify-write, so loop dims of ``iterator_types = "reduction"``
accumulate. Rules the verifier enforces: out maps do not read reduction dims, and read every
parallel dim of extent > 1 (each point writes its own element); every map stays inside its
operand for the whole iteration space; the body is scalar (``tensor.extract`` may read a tensor
defined outside the op: Gather, Resize).

The reference runs the body vectorized. Without reduction dims the body runs once over arrays
holding every point (in loop layout, broadcasting). With reduction dims:

* a contraction ``yield(add(out, mul(a, b)))`` (a generalized matmul or convolution) is one
  ``np.einsum`` over the operands' strided views;
* when the body is an accumulation ``yield(combine(out, g))`` with ``combine`` one of
  add/mul/max/min/and/or and ``out`` used nowhere else, ``g`` is evaluated over blocks of
  reduction points at once (the body runs with ``out`` bound to the combine's identity, which
  makes it yield ``g`` exactly) and reduced with the matching ufunc: a generalized ResNet
  convolution runs in a fraction of a second;
* otherwise the body runs once per reduction point, in order, vectorized over the parallel dims.
"""

from __future__ import annotations

import numpy as np

from ...ir.builder import Builder
from ...ir.core import Block, OpResult, Region
from ...ir.spec import Attr, Operand, OpSpec, Result, fail, make_op
from ...ir.types import INDEX, ScalarType, TensorType
from .maps import Domain, gather, row_range, row_terms, scatter

ITERATOR_TYPES = ("parallel", "reduction")

#: elements of (parallel points x reduction points) the accumulation fast path evaluates at once
CHUNK_ELEMENTS = 1 << 21


def generic_parts(op):
    """(ins, outs) of a generic: its operand values (or, for the interpreter, arrays)."""
    seg = op.attributes.get("operand_segments", (len(op.operands), 0))
    n_in = seg[0]
    return list(op.operands[:n_in]), list(op.operands[n_in:])


def body(op) -> Block:
    return op.regions[0].blocks[0]


class Generic(OpSpec):
    """A structured op: a scalar body over an iteration space; see the module docstring."""

    name = "tensor.generic"
    operands = (Operand("ins", variadic=True), Operand("outs", variadic=True))
    results = (Result("results", variadic=True),)
    attributes = {
        "bounds": Attr("ints", required=True, doc="the extent of each loop dim"),
        "indexing_maps": Attr("any", required=True, doc="one map per operand, ins then outs"),
        "iterator_types": Attr("strs", required=True, doc="parallel or reduction per loop dim"),
        "ordered": Attr("bool", default=False,
                        doc="the reductions combine in iteration order, which a schedule keeps "
                            "(no reassociated float sums): a windowed pool's sum"),
    }
    regions = 1

    def infer_types(self, op):
        if "operand_segments" not in op.attributes:
            return None
        return [v.type for v in generic_parts(op)[1]]

    def verify(self, op):
        ins, outs = generic_parts(op)
        if not outs:
            fail(op, "needs at least one out")
        for i, v in enumerate(op.operands):
            if not isinstance(v.type, TensorType):
                fail(op, f"operand #{i} must be a tensor, is {v.type}")
        bounds, iters = op.attr("bounds"), op.attr("iterator_types")
        n = len(bounds)
        if any(b < 0 for b in bounds):
            fail(op, f"bounds {list(bounds)} must be non-negative")
        if len(iters) != n or any(t not in ITERATOR_TYPES for t in iters):
            fail(op, f"iterator_types must give parallel or reduction for each of {n} loop dims")
        maps = op.attr("indexing_maps")
        if not isinstance(maps, tuple) or len(maps) != len(op.operands):
            fail(op, f"indexing_maps must hold one map per operand ({len(op.operands)})")
        reduction = {i for i, t in enumerate(iters) if t == "reduction"}
        for k, (v, m) in enumerate(zip(op.operands, maps)):
            _check_map(op, k, m, v.type, bounds)
            if k >= len(ins):
                used = {i for row in m for i, _ in row_terms(row)}
                if used & reduction:
                    fail(op, f"the map of out #{k - len(ins)} reads reduction dims "
                             f"{sorted(used & reduction)}")
                missing = [i for i in range(n) if i not in reduction and i not in used
                           and bounds[i] > 1]
                if missing:
                    fail(op, f"the map of out #{k - len(ins)} does not read parallel dims "
                             f"{missing}")
        blocks = op.regions[0].blocks
        if len(blocks) != 1:
            fail(op, "body must be one block")
        want = [v.type.element for v in op.operands]
        if [a.type for a in blocks[0].args] != want:
            fail(op, "body arguments must be the operands' element types "
                     f"({', '.join(map(str, want))})")
        last = blocks[0].last_op
        if last is None or last.name != "tensor.yield" or \
                [v.type for v in last.operands] != [v.type.element for v in outs]:
            fail(op, "body must end with tensor.yield of one scalar per out ("
                     + ", ".join(str(v.type.element) for v in outs) + ")")
        for inner in blocks[0].ops:
            if any(not isinstance(r.type, ScalarType) for r in inner.results):
                fail(op, f"body op {inner.name} produces a non-scalar; bodies are scalar")

    def reference(self, op, args, interp):
        return run_generic(op, args, interp)


def _check_map(op, k, m, t: TensorType, bounds) -> None:
    n = len(bounds)
    if not isinstance(m, tuple) or len(m) != t.rank:
        fail(op, f"the map of operand #{k} must have {t.rank} rows (one per dim of {t})")
    for row in m:
        if not isinstance(row, tuple) or len(row) != n + 1 or \
                any(not isinstance(c, int) or isinstance(c, bool) for c in row):
            fail(op, f"the map of operand #{k} has a row {row!r}; rows are {n + 1} ints")
    if all(b > 0 for b in bounds):
        for j, (row, d) in enumerate(zip(m, t.shape)):
            lo, hi = row_range(row, bounds)
            if lo < 0 or hi >= d:
                fail(op, f"the map of operand #{k} reaches [{lo}, {hi}] along dim {j} of {t}")


class Yield(OpSpec):
    """Ends a generic body: one scalar per out."""

    name = "tensor.yield"
    operands = (Operand("values", variadic=True),)
    results = ()
    traits = {"terminator"}

    def reference(self, op, args, interp):
        return []


class Index(OpSpec):
    """Inside a generic body: the current value of loop dim ``dim`` (an ``index``)."""

    name = "tensor.index"
    operands = ()
    attributes = {"dim": Attr("int", required=True)}
    traits = {"pure"}

    def infer_types(self, op):
        return [INDEX]

    def verify(self, op):
        parent = op.parent_op
        if parent is None or parent.name != "tensor.generic":
            fail(op, "must be inside a tensor.generic body")
        if not 0 <= op.attr("dim") < len(parent.attr("bounds")):
            fail(op, f"dim {op.attr('dim')} is not a loop dim of its generic")

    def reference(self, op, args, interp):
        stack = getattr(interp, "tensor_domains", None)
        if not stack:
            fail(op, "evaluated outside a tensor.generic")
        return [stack[-1].grid(op.attr("dim"))]


class Extract(OpSpec):
    """``tensor[indices...]``: a data-dependent read (one ``index`` per dim). Inside a generic
    body it reads a tensor defined outside the op. An index outside the tensor is an error."""

    name = "tensor.extract"
    operands = ("tensor", Operand("indices", variadic=True))
    traits = {"pure"}

    def infer_types(self, op):
        t = op.operands[0].type
        if not isinstance(t, TensorType):
            fail(op, f"operand #0 must be a tensor, is {t}")
        return [t.element]

    def verify(self, op):
        t = op.operands[0].type
        if len(op.operands) - 1 != t.rank:
            fail(op, f"needs {t.rank} indices for {t}, has {len(op.operands) - 1}")
        for i, v in enumerate(op.operands[1:], 1):
            if v.type != INDEX:
                fail(op, f"operand #{i} must be an index, is {v.type}")

    def reference(self, op, args, interp):
        t, idx = args[0], [np.asarray(i, dtype=np.int64) for i in args[1:]]
        for k, (i, d) in enumerate(zip(idx, t.shape)):
            if i.size and (i.min() < 0 or i.max() >= d):
                fail(op, f"index {int(i.min() if i.min() < 0 else i.max())} out of range "
                         f"[0, {d}) along dim {k}")
        return [t[tuple(idx)]]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (Generic, Yield, Index, Extract)


# ---- building -----------------------------------------------------------------------------------

def build_generic(ins, outs, bounds, maps, iterators, body_fn, loc=None, b: Builder | None = None,
                  result_names=None, ordered: bool = False):
    """Make (and insert at ``b`` when given) a ``tensor.generic``. ``body_fn(builder, args)``
    builds the body at ``builder`` from its block arguments (ins then outs) and returns the
    values to yield; ``ordered``: its reductions keep their iteration order."""
    block = Block([v.type.element for v in list(ins) + list(outs)])
    bb = Builder.at_end(block)
    ys = body_fn(bb, list(block.args))
    bb.create("tensor.yield", list(ys), result_types=[])
    op = make_op("tensor.generic", [list(ins), list(outs)],
                 {"bounds": tuple(bounds), "indexing_maps": tuple(maps),
                  "iterator_types": tuple(iterators), **({"ordered": True} if ordered else {})},
                 result_types=[v.type for v in outs], regions=[Region([block])], loc=loc,
                 result_names=result_names)
    if b is not None:
        b.insert(op)
    return op


# ---- reference ------------------------------------------------------------------------------------

_COMBINE = {"arith.add": np.add, "arith.mul": np.multiply, "arith.max": np.maximum,
            "arith.min": np.minimum, "arith.or": np.logical_or, "arith.and": np.logical_and}


def _identity(ufunc, dtype: np.dtype):
    """The identity element of a combine, as a 0-d array of ``dtype``."""
    if ufunc in (np.add, np.logical_or):
        v = 0
    elif ufunc in (np.multiply, np.logical_and):
        v = 1
    elif dtype.kind == "f":
        v = -np.inf if ufunc is np.maximum else np.inf
    elif dtype == np.bool_:
        v = ufunc is np.minimum
    else:
        info = np.iinfo(dtype)
        v = info.min if ufunc is np.maximum else info.max
    return np.asarray(v).astype(dtype)


def accumulation(op):
    """``(ufunc)`` when the body is ``yield(combine(out, g))`` with ``out`` used only there (see
    the module docstring); else None."""
    ins, outs = generic_parts(op)
    if len(outs) != 1:
        return None
    block = body(op)
    out_arg = block.args[len(ins)]
    (y,) = block.last_op.operands
    if not isinstance(y, OpResult) or y.op.name not in _COMBINE or y.op.block is not block:
        return None
    if len(out_arg.uses) != 1 or out_arg.uses[0].op is not y.op:
        return None
    if (y.op.name in ("arith.or", "arith.and")) != (out_arg.type.name == "i1"):
        return None
    return _COMBINE[y.op.name]


def product_form(op):
    """``(i, j)`` when the body is ``yield(add(out, mul(a_i, a_j)))`` with ``a_i``, ``a_j`` ins
    arguments (possibly cast to the out's type): a contraction (matmul, convolution), which the
    reference evaluates with one ``np.einsum``."""
    ins, _ = generic_parts(op)
    block = body(op)
    (y,) = block.last_op.operands
    out_arg = block.args[len(ins)]
    other = [v for v in y.op.operands if v is not out_arg]
    if len(other) != 1 or out_arg.type.name == "i1":
        return None
    m = other[0]
    if not isinstance(m, OpResult) or m.op.name != "arith.mul" or m.op.block is not block:
        return None
    found = []
    for v in m.op.operands:
        if isinstance(v, OpResult) and v.op.name == "arith.cast" and v.type == out_arg.type:
            v = v.op.operands[0]
        if v not in block.args[:len(ins)]:
            return None
        found.append(block.args.index(v))
    return tuple(found)


def _run_contraction(in_arrays, in_maps, bounds, red, acc, prod):
    """``acc + sum over the reduction dims of a * b`` by one ``np.einsum`` over strided views
    (each operand's dims that it does not read dropped; a reduction dim neither reads
    multiplies the sum by its extent)."""
    n = len(bounds)
    full = Domain.full(bounds)
    dtype = acc.dtype
    views = [gather(in_arrays[k], in_maps[k], full).astype(dtype, copy=False) for k in prod]
    labels = [[i for i in range(n) if v.shape[i] > 1] for v in views]
    used = set(labels[0]) | set(labels[1])
    out = [i for i in range(n) if i not in red and i in used]
    letter = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    spec = ",".join("".join(letter[i] for i in ls) for ls in labels) + "->" + \
        "".join(letter[i] for i in out)
    ops = [v.reshape([v.shape[i] for i in ls]) for v, ls in zip(views, labels)]
    with np.errstate(all="ignore"):
        r = np.einsum(spec, *ops, optimize=True)
        for i in red:
            if i not in used and bounds[i] > 1:
                r = r * dtype.type(bounds[i])
        r = np.asarray(r).reshape([bounds[i] if i in out else 1 for i in range(n)])
        return (acc + r).astype(dtype, copy=False)


def _run_body(op, interp, arrays, dom: Domain, dtypes) -> list:
    stack = getattr(interp, "tensor_domains", None)
    if stack is None:
        stack = interp.tensor_domains = []
    stack.append(dom)
    try:
        ys = interp.run_block(body(op), arrays)
    finally:
        stack.pop()
    return [np.asarray(y).astype(dt, copy=False) for y, dt in zip(ys, dtypes)]


def run_generic(op, args, interp) -> list:
    ins, outs = generic_parts(op)
    n_in = len(ins)
    in_arrays, out_arrays = list(args[:n_in]), list(args[n_in:])
    bounds = list(op.attr("bounds"))
    maps = op.attr("indexing_maps")
    iters = op.attr("iterator_types")
    n = len(bounds)
    red = [i for i in range(n) if iters[i] == "reduction"]
    results = [np.array(a, copy=True) for a in out_arrays]
    if any(b == 0 for b in bounds):
        return results
    dtypes = [a.dtype for a in out_arrays]
    par = Domain([0] * n, [1 if i in red else bounds[i] for i in range(n)])
    acc = [gather(a, m, par) for a, m in zip(out_arrays, maps[n_in:])]
    if not red:
        full = Domain.full(bounds)
        g = [gather(a, m, full) for a, m in zip(in_arrays, maps[:n_in])]
        acc = _run_body(op, interp, g + acc, full, dtypes)
    else:
        ufunc = accumulation(op)
        prod = product_form(op) if ufunc is np.add else None
        if prod is not None:
            acc = [_run_contraction(in_arrays, maps[:n_in], bounds, red, acc[0], prod)]
        elif ufunc is not None:
            acc = [_run_accumulation(op, interp, in_arrays, maps[:n_in], bounds, red, par,
                                     acc[0], ufunc)]
        else:
            for point in np.ndindex(*[bounds[i] for i in red]):
                lo = list(par.lo)
                for i, p in zip(red, point):
                    lo[i] = p
                dom = Domain(lo, par.length)
                g = [gather(a, m, dom) for a, m in zip(in_arrays, maps[:n_in])]
                acc = _run_body(op, interp, g + acc, dom, dtypes)
    for res, m, v in zip(results, maps[n_in:], acc):
        scatter(res, m, par, v)
    return results


def _run_accumulation(op, interp, in_arrays, in_maps, bounds, red, par, acc, ufunc):
    # reduction dims split into: inner (a suffix evaluated whole), one blocked dim evaluated
    # in blocks, outer (one point at a time), so that a block holds <= CHUNK_ELEMENTS points
    size = int(np.prod(par.length))
    inner: list[int] = []
    for i in reversed(red):
        if size * bounds[i] > CHUNK_ELEMENTS:
            break
        inner.insert(0, i)
        size *= bounds[i]
    rest = [i for i in red if i not in inner]
    blocked = rest[-1] if rest else None
    outer = rest[:-1]
    step = max(1, CHUNK_ELEMENTS // size)
    dtype = acc.dtype
    ident = _identity(ufunc, dtype)
    axes = tuple(sorted(inner + ([blocked] if blocked is not None else [])))
    starts = range(0, bounds[blocked], step) if blocked is not None else [0]
    for point in np.ndindex(*[bounds[i] for i in outer]):
        for start in starts:
            lo, length = list(par.lo), list(par.length)
            for i, p in zip(outer, point):
                lo[i] = p
            for i in inner:
                length[i] = bounds[i]
            if blocked is not None:
                lo[blocked] = start
                length[blocked] = min(step, bounds[blocked] - start)
            dom = Domain(lo, length)
            g = [gather(a, m, dom) for a, m in zip(in_arrays, in_maps)]
            (part,) = _run_body(op, interp, g + [ident], dom, [dtype])
            part = np.broadcast_to(part, dom.shape)
            if dtype == np.bool_:
                part = ufunc.reduce(part, axis=axes, keepdims=True)
            else:
                part = ufunc.reduce(part, axis=axes, keepdims=True, dtype=dtype)
            with np.errstate(all="ignore"):
                acc = ufunc(acc, part).astype(dtype, copy=False)
    return acc
