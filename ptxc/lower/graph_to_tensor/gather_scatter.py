"""Indexed reads and writes: ``graph.gather_elements``, ``graph.gather_nd``,
``graph.scatter_elements``, ``graph.scatter_nd``. Each is one generic over the result whose body
reads indices and data with ``tensor.extract`` (each index checked and a negative one wrapped
by ``arith.check_index``, as ``graph.gather``'s lowering does: a bad index is an
IndexOutOfRangeError at run time).

* gather_elements: over the indices' shape; ``data`` read at the loop indices with the axis
  replaced by the (wrapped) index read through the identity map.
* gather_nd: over the result ``idx.shape[:-1] + data.shape[b + q:]``; the body extracts the
  ``q`` components of the index tuple, then the data element.
* scatter_nd / scatter_elements: over the data's shape plus reduction dims over the update
  positions (scatter_nd: every index tuple; scatter_elements: the indices along ``axis``, the
  other coordinates being the point's own), into ``data`` as init:
  ``out = match ? combine(out, upd) : out``, ``match`` saying that this update lands on this
  point. Updates apply in order, so a later duplicate wins with ``reduction = "none"``. The cost
  is points x updates: meant for the small index sets of exported models (window shifts, KV
  cache writes, detector post-processing), not bulk scatters.

    %g = "graph.gather_elements"(%d, %i) {axis = 0} : (tensor<3x2xf32>, tensor<2x2xi64>) -> ...
  becomes
    %g = "tensor.generic"(%i, %e) ({
    ^bb0(%iv: i64, %o: f32):
      %w = (wrap %iv by 3)  %j = "tensor.index"() {dim = 1}
      %v = "tensor.extract"(%d, %w, %j)
      "tensor.yield"(%v)
    }) {bounds = [2, 2], iterator_types = ["parallel", "parallel"], ...}
"""

from __future__ import annotations

from ...dialects.tensor.generic import build_generic
from ...dialects.tensor.maps import identity_map, unit_row
from ...ir.types import I1, I64, INDEX
from .common import c, cast, empty, lowers, op_
from .shape import index_check_name


def _dim(bb, d: int):
    return bb.create("tensor.index", [], {"dim": d}).result


def _wrap(bb, i, n: int, kind: str, op, axis: int):
    """``i`` (an integer scalar) as an i64, ``+ n`` where negative, checked at run time
    (``arith.check_index``: an index outside ``[-n, n)`` is an IndexOutOfRangeError naming the
    op, from the interpreter and from compiled code, never an out-of-bounds read)."""
    return op_(bb, "arith.check_index", cast(bb, i, I64), size=n,
               check=index_check_name(kind, op, axis, n))


def _extract(bb, t, ids):
    return bb.create("tensor.extract", [t] + list(ids)).result


@lowers("graph.gather_elements")
def _gather_elements(op, b):
    data, idx = op.operands
    out = op.results[0].type
    n, axis = out.rank, op.attr("axis")
    size = data.type.shape[axis]

    def body(bb, args):
        ids = [_dim(bb, d) for d in range(n)]
        ids[axis] = cast(bb, _wrap(bb, args[0], size, "GatherElements", op, axis), INDEX)
        return [_extract(bb, data, ids)]

    return [build_generic([idx], [empty(b, out)], out.shape, [identity_map(n), identity_map(n)],
                          ["parallel"] * n, body, b=b).result]


@lowers("graph.gather_nd")
def _gather_nd(op, b):
    data, idx = op.operands
    out = op.results[0].type
    n, bd = out.rank, op.attr("batch_dims")
    q = idx.type.shape[-1]
    m = idx.type.rank - 1  # loop dims 0..m-1 run over the index tuples

    def body(bb, args):
        lead = [_dim(bb, d) for d in range(m)]
        comps = [cast(bb, _wrap(bb, _extract(bb, idx, lead + [c(bb, t, INDEX)]),
                                data.type.shape[bd + t], "GatherND", op, bd + t), INDEX)
                 for t in range(q)]
        rest = [_dim(bb, d) for d in range(m, n)]
        return [_extract(bb, data, lead[:bd] + comps + rest)]

    return [build_generic([], [empty(b, out)], out.shape, [identity_map(n)],
                          ["parallel"] * n, body, b=b).result]


_COMBINE = {"add": "arith.add", "mul": "arith.mul", "max": "arith.max", "min": "arith.min"}


def _combine(bb, reduction: str, old, new):
    if reduction == "none":
        return new
    name = _COMBINE[reduction]
    if old.type == I1:
        name = {"arith.add": "arith.or", "arith.max": "arith.or", "arith.mul": "arith.and",
                "arith.min": "arith.and"}[name]
    return op_(bb, name, old, new)


def _all(bb, conds):
    out = conds[0]
    for x in conds[1:]:
        out = op_(bb, "arith.and", out, x)
    return out


def _eq(bb, a, b):
    return op_(bb, "arith.cmp", cast(bb, a, I64), cast(bb, b, I64), predicate="eq")


@lowers("graph.scatter_nd")
def _scatter_nd(op, b):
    data, idx, upd = op.operands
    out = op.results[0].type
    r = out.rank
    q = idx.type.shape[-1]
    pshape = idx.type.shape[:-1]
    p = len(pshape)
    n = r + p  # loop dims: the data's, then the update positions
    upd_map = tuple(unit_row(n, r + j) for j in range(p)) + tuple(
        unit_row(n, d) for d in range(q, r))
    out_map = tuple(unit_row(n, d) for d in range(r))
    red = op.attr("reduction")

    def body(bb, args):
        u, acc = args
        pos = [_dim(bb, r + j) for j in range(p)]
        match = _all(bb, [_eq(bb, _wrap(bb, _extract(bb, idx, pos + [c(bb, t, INDEX)]),
                                         out.shape[t], "ScatterND", op, t), _dim(bb, t))
                          for t in range(q)])
        return [op_(bb, "arith.select", match, _combine(bb, red, acc, u), acc)]

    return [build_generic([upd], [data], tuple(out.shape) + tuple(pshape), [upd_map, out_map],
                          ["parallel"] * r + ["reduction"] * p, body, b=b).result]


@lowers("graph.scatter_elements")
def _scatter_elements(op, b):
    data, idx, upd = op.operands
    out = op.results[0].type
    r, axis = out.rank, op.attr("axis")
    ishape = idx.type.shape
    n = r + 1  # loop dims: the data's, then j along the indices' axis
    out_map = tuple(unit_row(n, d) for d in range(r))
    red = op.attr("reduction")

    def body(bb, args):
        (acc,) = args
        ids, conds = [], []
        for d in range(r):
            if d == axis:
                ids.append(_dim(bb, r))
                continue
            t = _dim(bb, d)
            if ishape[d] < out.shape[d]:  # points past the indices' extent get no update
                conds.append(op_(bb, "arith.cmp", cast(bb, t, I64), c(bb, ishape[d], I64),
                                 predicate="lt"))
                t = cast(bb, op_(bb, "arith.min", cast(bb, t, I64), c(bb, ishape[d] - 1, I64)),
                         INDEX)
            ids.append(t)
        i = _wrap(bb, _extract(bb, idx, ids), out.shape[axis], "ScatterElements", op, axis)
        conds.append(_eq(bb, i, _dim(bb, axis)))
        u = _extract(bb, upd, ids)
        return [op_(bb, "arith.select", _all(bb, conds), _combine(bb, red, acc, u), acc)]

    return [build_generic([], [data], tuple(out.shape) + (ishape[axis],), [out_map],
                          ["parallel"] * r + ["reduction"], body, b=b).result]
