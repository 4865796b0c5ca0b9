"""GELU written out, as PyTorch's and TensorFlow's exporters (and ONNX before opset 20) leave it.

    erf form:   x * 0.5 * (1 + erf(x / sqrt(2)))                      -> graph.gelu
    tanh form:  0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))  -> graph.gelu (tanh)

The three factors ``x``, ``0.5`` and the gate ``1 + erf(...)`` may come in any order and
association (``(x * 0.5) * g``, ``(x * g) * 0.5``, ``x * (g * 0.5)``, a division by 2 instead of
the 0.5); ``x / sqrt(2)`` may be ``x * (1 / sqrt(2))``; the 1 may be on either side of its add;
``x^3`` is ``pow(x, 3)`` or ``x * x * x``.
"""

from __future__ import annotations

import math

from .common import Recognizer
from .match import Match, const_operand, defining, fmt, gated_product, is_op, label, no

SQRT2 = math.sqrt(2.0)
TANH_SCALE = math.sqrt(2.0 / math.pi)   # 0.7978845608028654
TANH_CUBIC = 0.044715


def one_plus(m: Match, gate, inner_kind: str):
    """``1 + inner(...)`` (the 1 on either side): returns the ``inner_kind`` op."""
    add = defining(gate, "graph.add")
    c = const_operand(add)
    if c is None:
        raise no()
    one, like, rest = c
    inner = defining(rest, inner_kind)
    m.want(one, 1.0, like, f"{label(add)} adds {fmt(one, like)}, not 1")
    m.take(add)
    return m.take(inner)


def erf_gate(m: Match, gate):
    """``1 + erf(x / sqrt 2)`` or ``1 + erf(x * (1 / sqrt 2))``: returns x."""
    erf = one_plus(m, gate, "graph.erf")
    scale = defining(erf.operands[0], "graph.div", "graph.mul")
    if scale.name == "graph.div":
        c = const_operand(scale, commutative=False)
        if c is None:
            raise no()
        k, like, x = c
        m.want(k, SQRT2, like, f"{label(scale)} divides by {fmt(k, like)}, not sqrt(2)")
    else:
        c = const_operand(scale)
        if c is None:
            raise no()
        k, like, x = c
        m.want(k, 1 / SQRT2, like, f"{label(scale)} multiplies by {fmt(k, like)}, not 1/sqrt(2)")
    m.take(scale)
    return x


def _cube(m: Match, v, x) -> bool:
    """Whether ``v`` is ``x ** 3`` (``pow(x, 3)``, ``x * (x * x)`` or ``(x * x) * x``)."""
    p = is_op(v, "graph.pow")
    if p is not None and p.operands[0] is x:
        c = const_operand(p, commutative=False)
        if c is None:
            return False
        m.want(c[0], 3.0, c[1], f"{label(p)} raises to {fmt(c[0], c[1])}, not 3")
        m.take(p)
        return True
    outer = is_op(v, "graph.mul")
    if outer is None:
        return False
    a, b = outer.operands
    for xx, sq in ((a, b), (b, a)):
        inner = is_op(sq, "graph.mul")
        if xx is x and inner is not None and inner.operands[0] is x and inner.operands[1] is x:
            m.take(outer)
            m.take(inner)
            return True
    return False


def tanh_gate(m: Match, gate):
    """``1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))``: returns x."""
    tanh = one_plus(m, gate, "graph.tanh")
    scale = defining(tanh.operands[0], "graph.mul")
    c = const_operand(scale)
    if c is None:
        raise no()
    k, k_like, inner = c
    poly = defining(inner, "graph.add")
    a, b = poly.operands
    for x, term in ((a, b), (b, a)):
        mul = is_op(term, "graph.mul")
        if mul is None:
            continue
        t = const_operand(mul)
        if t is None or not _cube(m, t[2], x):
            continue
        m.want(t[0], TANH_CUBIC, t[1], f"{label(mul)} multiplies by {fmt(t[0], t[1])}, "
                                         f"not {TANH_CUBIC}")
        m.want(k, TANH_SCALE, k_like,
               f"{label(scale)} multiplies by {fmt(k, k_like)}, not sqrt(2/pi)")
        for op in (mul, poly, scale):
            m.take(op)
        return x
    raise no()


class RecognizeGelu(Recognizer):
    """``x * 0.5 * (1 + erf(x / sqrt 2))`` (or the tanh form) -> ``graph.gelu``; see the module
    docstring for the forms."""

    roots = ("graph.mul", "graph.div")
    what = "GELU"

    def recognize(self, m: Match):
        x, kind = gated_product(m, [("none", erf_gate), ("tanh", tanh_gate)], 0.5)
        if not x.type.element.is_float:
            raise no()
        if m.root.results[0].type != x.type:
            m.problem(f"its constants broadcast {x.type} to {m.root.results[0].type}")
        return "graph.gelu", [x], {"approximate": kind}
