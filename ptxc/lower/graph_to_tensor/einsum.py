"""``graph.einsum`` -> one generic over every letter of the equation (the output's letters
parallel, first; the others reductions), each operand read through the projection map of its
subscript (a repeated letter reads a diagonal; a size-1 dim broadcast reads index 0), body
``out + a * b * ...`` into a fill of 0; f16 accumulates in f32 and rounds once.

    "graph.einsum"(%a, %b) {equation = "ij,jk->ik"}
  becomes
    "tensor.generic"(%a, %b, %zero) ({ ^bb0(%x, %y, %acc): yield(acc + x * y) })
      {bounds = [I, K, J], iterator_types = ["parallel", "parallel", "reduction"],
       indexing_maps = [(d0, d2), (d2, d1), (d0, d1)]}
"""

from __future__ import annotations

from ...dialects.graph.einsum import parse
from ...dialects.tensor.generic import build_generic
from ...dialects.tensor.maps import unit_row
from .common import acc_type, cast, fill, lowers, map_elements, op_


@lowers("graph.einsum")
def _einsum(op, b):
    xs = list(op.operands)
    out = op.results[0].type
    ins, osub = parse(op, op.attr("equation"), [x.type.rank for x in xs])
    letters = list(osub) + sorted({ch for s in ins for ch in s} - set(osub))
    size = {}
    for s, x in zip(ins, xs):
        for ch, d in zip(s, x.type.shape):
            size[ch] = max(size.get(ch, 1), d)
    n = len(letters)
    pos = {ch: i for i, ch in enumerate(letters)}
    maps = [tuple(unit_row(n, pos[ch] if d != 1 or size[ch] == 1 else None)
                  for ch, d in zip(s, x.type.shape)) for s, x in zip(ins, xs)]
    out_map = tuple(unit_row(n, pos[ch]) for ch in osub)
    ct = acc_type(out.element)

    def body(bb, args):
        *vals, acc = args
        p = cast(bb, vals[0], ct)
        for v in vals[1:]:
            p = op_(bb, "arith.mul", p, cast(bb, v, ct))
        return [op_(bb, "arith.add", acc, p)]

    y = build_generic(xs, [fill(b, out.with_element(ct), 0)], tuple(size[ch] for ch in letters),
                      maps + [out_map], ["parallel"] * len(osub) +
                      ["reduction"] * (n - len(osub)), body, b=b).result
    if ct != out.element:
        y = map_elements(b, y, out.element, lambda bb, s: cast(bb, s, out.element))
    return [y]
