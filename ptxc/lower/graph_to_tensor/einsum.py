"""``graph.einsum`` -> ``tensor.matmul`` where the equation is a (batched) matrix product, else
one generic over every letter of the equation.

**Matrix products.** A two-operand einsum whose letters each play one matmul role lowers to
``tensor.matmul``, the op that carries contractions to the GPU schedules (its generic is marked
and its loop nests annotated as a contraction: tensor_to_loop/named.py, "Contractions"), so an
f16 einsum gets the mma/wgmma kernels a MatMul gets, through the same path. The roles
(:func:`matmul_plan`), for product operands ``X @ Y``:

* ``B`` (batch): in both operands and the output;
* ``M``: in ``X`` and the output only; ``N``: in ``Y`` and the output only;
* ``K`` (contracted): in both operands, not in the output.

The equation qualifies when it has at least one ``K``, no letter repeated in a subscript (a
diagonal), no letter summed out of one operand alone, and equal sizes of each ``K`` in both
operands (a ``B`` of size 1 in one operand broadcasts, as ``tensor.matmul``'s batch dims do).
Each operand is then read as ``(B.., M.., K..)`` (``(B.., K.., N..)`` for ``Y``) or its last two
groups swapped (``transpose_a``/``transpose_b``: read transposed, never copied), its groups
flattened by a ``tensor.reshape`` (an empty group is a dim of 1); an operand whose letters are in
neither order is copied once into the first (a transpose generic), and so is the result where
``(B.., M.., N..)`` is not the output's order. Of the ways to order each group and to pick
which operand is ``X``, the plan copies the fewest elements (no copy at all for the forms
attention and batched products are written in). An f16 einsum's ``tensor.matmul`` has an f16
out: the loop lowering accumulates it in f32 and rounds once, as the einsum's reference does.

    "graph.einsum"(%q, %k) {equation = "bhqd,bhkd->bhqk"}
        : (tensor<2x4x64x32xf16>, tensor<2x4x64x32xf16>) -> tensor<2x4x64x64xf16>
  becomes
    %c = "tensor.matmul"(%q, %k, %zero) {transpose_b = true}      (B = bh, M = q, N = k, K = d)
        : (tensor<2x4x64x32xf16>, tensor<2x4x64x32xf16>, tensor<2x4x64x64xf16>) -> ...

and ``"ij,jk->ik"`` is a plain ``tensor.matmul``; ``"bqhd,bkhd->bhqk"`` copies ``q`` and ``k``
into ``(b, h, q, d)`` and ``(b, h, k, d)`` first.

**Other einsums** (one operand, traces and diagonals, outer products, three or more operands,
a letter summed out of one operand): one generic over every letter of the equation (the
output's letters parallel, first; the others reductions), each operand read through the
projection map of its subscript (a repeated letter reads a diagonal; a size-1 dim broadcast
reads index 0), body ``out + a * b * ...`` into a fill of 0; f16 accumulates in f32 and rounds
once.

    "graph.einsum"(%a, %b, %c) {equation = "ij,jk,ik->i"}
  becomes
    "tensor.generic"(%a, %b, %c, %zero) ({ ^bb0(%x, %y, %z, %acc): yield(acc + x * y * z) })
      {bounds = [I, J, K], iterator_types = ["parallel", "reduction", "reduction"],
       indexing_maps = [(d0, d1), (d1, d2), (d0, d2), (d0)]}
"""

from __future__ import annotations

import itertools
import math

import attrs

from ...dialects.graph.einsum import parse
from ...dialects.tensor.generic import build_generic
from ...dialects.tensor.maps import projection_map, unit_row
from ...ir.types import TensorType
from .common import acc_type, cast, fill, lowers, map_elements, op_, reshape
from .shape import copy_generic


@attrs.frozen
class MatmulPlan:
    """How a two-operand einsum is ``tensor.matmul(X, Y)`` (module docstring): ``swap`` (the
    einsum's second operand is ``X``), the letters of each role in the product's order, and
    what is read transposed or copied."""
    swap: bool
    b: str
    m: str
    n: str
    k: str
    transpose_a: bool
    transpose_b: bool
    copy_x: bool       # X is copied into (B.., M.., K..)
    copy_y: bool       # Y is copied into (B.., K.., N..)
    copy_out: bool     # the product (B.., M.., N..) is copied into the output's order
    cost: int          # elements copied


def _ordered(letters: set, order: str) -> str:
    return "".join(ch for ch in order if ch in letters)


def matmul_plan(ins, out: str, shapes) -> MatmulPlan | None:
    """The plan of the einsum ``ins -> out`` over operands of ``shapes`` as a matrix product,
    or None where it is not one (module docstring)."""
    if len(ins) != 2 or any(len(set(s)) != len(s) for s in ins):
        return None
    sa, sb = ins
    size = [dict(zip(s, sh)) for s, sh in zip(ins, shapes)]
    ks = (set(sa) & set(sb)) - set(out)
    if not ks or (set(sa) ^ set(sb)) - set(out) or any(size[0][c] != size[1][c] for c in ks):
        return None
    numel = [math.prod(sh) for sh in shapes]
    out_numel = math.prod(max(size[0].get(c, 1), size[1].get(c, 1)) for c in out)
    best = None
    for swap in (False, True):
        (sx, sy), (nx, ny) = (ins, numel) if not swap else (ins[::-1], numel[::-1])
        bs, ms, ns = set(sx) & set(sy) & set(out), set(sx) - set(sy), set(sy) - set(sx)
        for b, m, n, k in itertools.product(
                dict.fromkeys(_ordered(bs, o) for o in (out, sx, sy)),
                dict.fromkeys(_ordered(ms, o) for o in (out, sx)),
                dict.fromkeys(_ordered(ns, o) for o in (out, sy)),
                dict.fromkeys(_ordered(ks, o) for o in (sx, sy))):
            ta, tb = sx == b + k + m != b + m + k, sy == b + n + k != b + k + n
            cx, cy = sx not in (b + m + k, b + k + m), sy not in (b + k + n, b + n + k)
            co = out != b + m + n
            cost = cx * nx + cy * ny + co * out_numel
            if best is None or cost < best.cost:
                best = MatmulPlan(swap, b, m, n, k, ta, tb, cx, cy, co, cost)
    return best


def _transpose(b, v, sub: str, to: str):
    """``v`` (letters ``sub``) copied into the letter order ``to``."""
    t = v.type
    shape = tuple(t.shape[sub.index(ch)] for ch in to)
    return copy_generic(b, v, t.with_shape(shape), projection_map(len(to), [to.index(ch)
                                                                           for ch in sub]))


def _operand(b, v, sub: str, groups, copy: bool, transposed: bool):
    """Operand ``v`` (letters ``sub``) as ``(batch.., rows, cols)`` for ``groups = (batch,
    rows, cols)`` (copied into that order first where ``copy``; ``transposed``: it holds
    ``(batch.., cols.., rows..)``, which the matmul reads transposed)."""
    bt, r, c = groups
    if copy:
        v, sub = _transpose(b, v, sub, bt + r + c), bt + r + c
    dim = dict(zip(sub, v.type.shape))
    first, second = (c, r) if transposed else (r, c)
    flat = tuple(dim[ch] for ch in bt) + (math.prod(dim[ch] for ch in first),
                                          math.prod(dim[ch] for ch in second))
    return reshape(b, v, flat)


def _as_matmul(b, xs, ins, out_sub: str, out: TensorType, p: MatmulPlan):
    (x, sx), (y, sy) = (zip(xs, ins) if not p.swap else zip(xs[::-1], ins[::-1]))
    size = {}
    for v, s in ((x, sx), (y, sy)):
        for ch, d in zip(s, v.type.shape):
            size[ch] = max(size.get(ch, 1), d)
    xv = _operand(b, x, sx, (p.b, p.m, p.k), p.copy_x, p.transpose_a)
    yv = _operand(b, y, sy, (p.b, p.k, p.n), p.copy_y, p.transpose_b)
    flat = tuple(size[ch] for ch in p.b) + (math.prod(size[ch] for ch in p.m),
                                            math.prod(size[ch] for ch in p.n))
    attrs_ = {"transpose_a": p.transpose_a, "transpose_b": p.transpose_b}
    prod = b.create("tensor.matmul", [xv, yv, fill(b, out.with_shape(flat), 0)],
                    {k: v for k, v in attrs_.items() if v} or None).result
    bmn = p.b + p.m + p.n
    prod = reshape(b, prod, tuple(size[ch] for ch in bmn))
    return _transpose(b, prod, bmn, out_sub) if p.copy_out else prod


def _as_generic(b, xs, ins, osub: str, out: TensorType):
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
    return y


@lowers("graph.einsum")
def _einsum(op, b):
    xs = list(op.operands)
    out = op.results[0].type
    ins, osub = parse(op, op.attr("equation"), [x.type.rank for x in xs])
    plan = matmul_plan(ins, osub, [x.type.shape for x in xs])
    if plan is not None:
        return [_as_matmul(b, xs, ins, osub, out, plan)]
    return [_as_generic(b, xs, ins, osub, out)]
