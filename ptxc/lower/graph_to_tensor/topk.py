"""``graph.top_k`` -> two generics, no sort:

1. ranks: over the input's dims plus a reduction dim ``m`` along the axis,
   ``rank[.., i, ..] += (x[m] better than x[i]) or (x[m] == x[i] and m < i)`` (i64, from 0): the
   position element ``i`` takes in the sorted order (ties keep the lower index first);
2. selection: over the result's dims (``j < k`` along the axis) plus a reduction dim ``i`` along
   the input's axis, ``(value, index) = rank[i] == j ? (x[i], i) : (value, index)``.

Quadratic in the axis length (meant for detector heads and samplers over short axes); every
target maps both generics.

    %v, %i = "graph.top_k"(%x) {axis = 0, k = 2, largest = 1} : (tensor<5xf32>) -> ...
  becomes
    %r = "tensor.generic"(%x, %x, %zeros) ({ ... count better ... }) {bounds = [5, 5], ...}
    %v, %i = "tensor.generic"(%x, %r, %fv, %fi) ({ ... select rank == j ... })
               {bounds = [2, 5], iterator_types = ["parallel", "reduction"]}
"""

from __future__ import annotations

from ...dialects.tensor.generic import build_generic
from ...dialects.tensor.maps import unit_row
from ...ir.types import I64
from .common import c, cast, fill, lowers, op_


def _index(bb, d):
    return cast(bb, bb.create("tensor.index", [], {"dim": d}).result, I64)


@lowers("graph.top_k")
def _top_k(op, b):
    x = op.operands[0]
    xt = x.type
    r, axis = xt.rank, op.attr("axis")
    n = r + 1  # the extra loop dim is last
    same = tuple(unit_row(n, d) for d in range(r))
    along = tuple(unit_row(n, r if d == axis else d) for d in range(r))
    better = "gt" if op.attr("largest") else "lt"

    def rank_body(bb, args):
        xi, xm, acc = args
        b1 = op_(bb, "arith.cmp", xm, xi, predicate=better)
        tie = op_(bb, "arith.and", op_(bb, "arith.cmp", xm, xi, predicate="eq"),
                  op_(bb, "arith.cmp", _index(bb, r), _index(bb, axis), predicate="lt"))
        one = op_(bb, "arith.select", op_(bb, "arith.or", b1, tie), c(bb, 1, I64), c(bb, 0, I64))
        return [op_(bb, "arith.add", acc, one)]

    rt = xt.with_element(I64)
    bounds = tuple(xt.shape) + (xt.shape[axis],)
    rank = build_generic([x, x], [fill(b, rt, 0)], bounds, [same, along, same], ["parallel"] * r +
                         ["reduction"], rank_body, b=b).result

    vt, it = op.results[0].type, op.results[1].type

    def select_body(bb, args):
        xv, rv, val, idx = args
        hit = op_(bb, "arith.cmp", rv, _index(bb, axis), predicate="eq")
        return [op_(bb, "arith.select", hit, xv, val),
                op_(bb, "arith.select", hit, _index(bb, r), idx)]

    bounds = tuple(vt.shape) + (xt.shape[axis],)
    g = build_generic([x, rank], [fill(b, vt, 0), fill(b, it, 0)], bounds,
                      [along, along, same, same], ["parallel"] * r + ["reduction"],
                      select_body, b=b)
    return list(g.results)
