"""Position-dependent ops: ``graph.trilu``, ``graph.cum_sum``, ``graph.cum_prod``.

* trilu -> one parallel generic whose body compares the last two loop indices
  (``j - i >= k`` keeps the upper triangle, ``j - i <= k`` the lower) and selects the element
  or 0.
* cum_sum / cum_prod -> one generic over the result's dims plus a reduction dim ``k`` along the
  axis: ``out[.., i, ..] = combine(out, (k <= i) ? x[.., k, ..] : identity)`` (``k < i``
  exclusive; ``k >= i`` / ``k > i`` reversed), into a fill of the identity (0 or 1). Quadratic
  in the axis length, but one structured op that every target maps (the sequence lengths of
  position ids and masks are short).

    %s = "graph.cum_sum"(%x) {axis = 0} : (tensor<4xf32>) -> tensor<4xf32>
  becomes
    %z = "tensor.fill"(%e) {value = 0.0}
    %s = "tensor.generic"(%x, %z) ({
    ^bb0(%xk: f32, %acc: f32):
      %i = "tensor.index"() {dim = 0}   %k = "tensor.index"() {dim = 1}
      %in = "arith.cmp"(%k, %i) {predicate = "le"}
      %v = "arith.select"(%in, %xk, %zero)   %y = "arith.add"(%acc, %v)
      "tensor.yield"(%y)
    }) {bounds = [4, 4], iterator_types = ["parallel", "reduction"], ...}
"""

from __future__ import annotations

from ...dialects.tensor.generic import build_generic
from ...dialects.tensor.maps import identity_map, unit_row
from ...ir.types import I64
from .common import c, cast, elementwise, fill, lowers, op_


def index(bb, dim: int):
    """Loop dim ``dim``'s value as an i64 scalar."""
    return cast(bb, bb.create("tensor.index", [], {"dim": dim}).result, I64)


@lowers("graph.trilu")
def _trilu(op, b):
    x = op.operands[0]
    out = op.results[0].type
    r = out.rank
    k, upper = op.attr("k"), op.attr("upper")

    def body(bb, s):
        d = op_(bb, "arith.sub", index(bb, r - 1), index(bb, r - 2))
        keep = op_(bb, "arith.cmp", d, c(bb, k, I64), predicate="ge" if upper else "le")
        return op_(bb, "arith.select", keep, s[0], c(bb, 0, out.element))

    return [elementwise(b, [x], out, body)]


@lowers("graph.cum_sum", "graph.cum_prod")
def _cumulative(op, b):
    x = op.operands[0]
    out = op.results[0].type
    r, axis = out.rank, op.attr("axis")
    prod = op.name == "graph.cum_prod"
    ident = 1 if prod else 0
    pred = {(0, 0): "le", (1, 0): "lt", (0, 1): "ge", (1, 1): "gt"}[
        (op.attr("exclusive"), op.attr("reverse"))]
    n = r + 1  # loop dims: the result's, then k
    x_map = tuple(unit_row(n, r if d == axis else d) for d in range(r))
    out_map = identity_map(r)
    out_map = tuple(row[:-1] + (0, row[-1]) for row in out_map)

    def body(bb, args):
        xk, acc = args
        take = op_(bb, "arith.cmp", index(bb, r), index(bb, axis), predicate=pred)
        v = op_(bb, "arith.select", take, xk, c(bb, ident, out.element))
        return [op_(bb, "arith.mul" if prod else "arith.add", acc, v)]

    bounds = tuple(out.shape) + (out.shape[axis],)
    return [build_generic([x], [fill(b, out, ident)], bounds, [x_map, out_map],
                          ["parallel"] * r + ["reduction"], body, b=b).result]
