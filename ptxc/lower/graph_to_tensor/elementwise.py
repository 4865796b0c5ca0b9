"""Elementwise graph ops -> one parallel ``tensor.generic`` each.

Every op with a scalar form (ptxc/dialects/graph/scalar_forms.py: activations, arithmetic, math,
comparisons, where, cast, identity, dropout, and ``graph.elementwise`` whose body is inlined)
becomes a generic over the result's shape whose body is that form; operands broadcast through
maps with constant rows. ``graph.batch_normalization`` (inference) is elementwise too, with
per-channel operands.

``graph.pow`` outside its form's case (an integer operand, or two float types) is computed in
f64 as its reference does; an integer base with an integer exponent is then truncated toward zero
and inf/NaN give 0, which matches the reference exactly while the result fits in 53 bits (the
reference computes non-negative integer powers in wrapping int64; they differ only for results
beyond 2**53).
"""

from __future__ import annotations

from ...dialects.graph.scalar_forms import scalar_form, scalar_form_ops
from ...ir.types import F64
from .common import Unsupported, acc_type, c, cast, channel_map, elementwise, lowers, op_


def lower_form(op, b):
    """The generic whose body is ``op``'s scalar form."""
    form = scalar_form(op)
    if form is None:
        raise Unsupported("has no scalar form for these operand types")
    out = op.results[0].type
    return [elementwise(b, op.operands, out, lambda bb, s: form(op, bb, s))]


def register_form_lowerings(table: dict) -> None:
    """Lower every op with a scalar form that has no lowering of its own by its form (called
    once every family has registered, so a form added later never clashes with one)."""
    for name in scalar_form_ops():
        table.setdefault(name, lower_form)


@lowers("graph.pow")
def _pow(op, b):
    if scalar_form(op) is not None:
        return lower_form(op, b)
    out = op.results[0].type
    e_el = op.operands[1].type.element

    def body(bb, s):
        p = op_(bb, "arith.pow", cast(bb, s[0], F64), cast(bb, s[1], F64))
        if out.element.is_float:
            return cast(bb, p, out.element)
        if out.element.is_signed and not e_el.is_float:
            # as onnxruntime: trunc(pow) where it fits the type, else the type's minimum
            lo = -2.0 ** (out.element.bitwidth - 1)
            fits = op_(bb, "arith.and", op_(bb, "arith.cmp", p, c(bb, lo, F64), predicate="ge"),
                       op_(bb, "arith.cmp", p, c(bb, -lo, F64), predicate="lt"))
            return cast(bb, op_(bb, "arith.select", fits, p, c(bb, lo, F64)), out.element)
        if e_el.is_float or not e_el.is_signed:
            return cast(bb, p, out.element)
        # integer ** integer: finite results truncate toward zero, inf and NaN give 0
        finite = op_(bb, "arith.and", op_(bb, "arith.cmp", p, p, predicate="eq"),
                     op_(bb, "arith.cmp", op_(bb, "math.abs", p), c(bb, float("inf"), F64),
                         predicate="ne"))
        q = op_(bb, "arith.select", finite, p, c(bb, 0.0, F64))
        return cast(bb, q, out.element)

    return [elementwise(b, op.operands, out, body)]


@lowers("graph.batch_normalization")
def _batch_norm(op, b):
    """``x * s + (B - mean * s)`` with ``s = (1 / sqrt(var + eps)) * scale`` per channel, in f32
    for f16, step for step as the reference (onnxruntime's order of float operations)."""
    x, scale, bias, mean, var = op.operands
    out = op.results[0].type
    ct = acc_type(out.element)

    def body(bb, s):
        xs, sc, bi, mu, va = (cast(bb, v, ct) for v in s)
        inv = op_(bb, "arith.div", c(bb, 1.0, ct), op_(bb, "math.sqrt", op_(
            bb, "arith.add", va, c(bb, op.attr("epsilon"), ct))))
        mul = op_(bb, "arith.mul", inv, sc)
        shift = op_(bb, "arith.sub", bi, op_(bb, "arith.mul", mu, mul))
        y = op_(bb, "arith.add", op_(bb, "arith.mul", xs, mul), shift)
        return cast(bb, y, out.element)

    cm = channel_map(x.type.rank)
    return [elementwise(b, [x, scale, bias, mean, var], out, body, maps=[None] + [cm] * 4)]
