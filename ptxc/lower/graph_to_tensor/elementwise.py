"""Elementwise graph ops -> one parallel ``tensor.generic`` each.

Every op with a scalar form (ptxc/dialects/graph/scalar_forms.py: activations, arithmetic, math,
comparisons, where, cast, identity, dropout, and ``graph.elementwise`` whose body is inlined)
becomes a generic over the result's shape whose body is that form; operands broadcast through
maps with constant rows. ``graph.batch_normalization`` (inference) is elementwise too, with
per-channel operands.

``graph.pow`` outside its form's case (one float type): an integer base with an integer
exponent is an exact wrapping integer power (:func:`_int_pow`, ``arith.pow`` on unsigned
integers: both targets square and multiply); other mixed types compute in f64 as the reference
does, a signed integer result taking the type's minimum where the power is not finite or does
not fit.
"""

from __future__ import annotations

import numpy as np

from ...dialects.graph.scalar_forms import scalar_form, scalar_form_ops
from ...ir.types import F64, UI32, UI64
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
    if not out.element.is_float and not e_el.is_float:
        return [elementwise(b, op.operands, out,
                            lambda bb, s: _int_pow(bb, s[0], s[1], out.element))]

    def body(bb, s):
        p = op_(bb, "arith.pow", cast(bb, s[0], F64), cast(bb, s[1], F64))
        if out.element.is_float or not out.element.is_signed:
            return cast(bb, p, out.element)
        # a signed base with a float exponent: trunc(pow) where it fits the type, else (NaN,
        # inf or out of range) the type's minimum, as onnxruntime on x86 and the reference
        lo = -2.0 ** (out.element.bitwidth - 1)
        fits = op_(bb, "arith.and", op_(bb, "arith.cmp", p, c(bb, lo, F64), predicate="ge"),
                   op_(bb, "arith.cmp", p, c(bb, -lo, F64), predicate="lt"))
        return cast(bb, op_(bb, "arith.select", fits, p, c(bb, lo, F64)), out.element)

    return [elementwise(b, op.operands, out, body)]


def _int_pow(bb, x, e, el):
    """``x ** e`` for integers, as :func:`~ptxc.dialects.graph.elementwise.int_pow`: an
    ``arith.pow`` in the unsigned type as wide as the wider operand (square-and-multiply with
    wrapping multiplies on both targets, :mod:`ptxc.lower.llvm_scalar`), truncated to the
    base's type; a negative exponent selects the truncated real power instead.

    Before: ``%y = graph.pow(%x, %e) : (tensor<4xi64>, tensor<4xi32>) -> tensor<4xi64>``
    After (the generic's body)::

        %n = arith.cmp %e, 0 {lt};  %e0 = arith.select %n, 0, %e
        %p = arith.pow (arith.cast %x to ui64), (arith.cast %e0 to ui64)
        %y = arith.select %n, <1, +-1, min or 0 by %x>, (arith.cast %p to i64)
    """
    xt, et = x.type, e.type
    ut = UI64 if max(xt.bitwidth, et.bitwidth) > 32 else UI32
    neg, e0 = None, e
    if et.is_signed:
        neg = op_(bb, "arith.cmp", e, c(bb, 0, et), predicate="lt")
        e0 = op_(bb, "arith.select", neg, c(bb, 0, et), e)
    p = cast(bb, op_(bb, "arith.pow", cast(bb, x, ut), cast(bb, e0, ut)), el)
    if neg is None:
        return p

    def eq(v, k):
        return op_(bb, "arith.cmp", v, c(bb, k, xt), predicate="eq")
    zero = c(bb, int(np.iinfo(el.np_dtype).min) if el.is_signed else 0, el)
    real = op_(bb, "arith.select", eq(x, 0), zero, c(bb, 0, el))
    if el.is_signed:
        odd = op_(bb, "arith.cmp", op_(bb, "arith.bit_and", e, c(bb, 1, et)), c(bb, 0, et),
                  predicate="ne")  # e, not e0: the parity of the negative exponent
        real = op_(bb, "arith.select", eq(x, -1),
                   op_(bb, "arith.select", odd, c(bb, -1, el), c(bb, 1, el)), real)
    real = op_(bb, "arith.select", eq(x, 1), c(bb, 1, el), real)
    return op_(bb, "arith.select", neg, real, p)


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
