"""HardSwish written out (MobileNetV3 as exported before ONNX had HardSwish):

    x * hard_sigmoid(x) with alpha = 1/6, beta = 0.5     -> graph.hard_swish
    x * relu6(x + 3) / 6                                  -> graph.hard_swish

``relu6(t)`` is ``clip(t, 0, 6)``, ``min(max(t, 0), 6)``, ``max(min(t, 6), 0)`` or
``min(relu(t), 6)``; the three factors ``x``, ``relu6(x + 3)`` and ``1/6`` (a multiply by
0.16666667 or a division by 6) may come in any order and association.
"""

from __future__ import annotations

from ....ir.spec import lookup
from .common import Recognizer
from .match import (Match, close, const_operand, defining, fmt, gated_product, is_op, label, no,
                    scalar_const)


def _bound(m: Match, op, v, want: float, what: str) -> None:
    c = scalar_const(v)
    if c is None:
        raise no()
    m.want(c, want, v, f"{label(op)} {what} {fmt(c, v)}, not {fmt(want, v)}")


def _min_max(op):
    """(constant operand, other operand) of a two-operand graph.min / graph.max."""
    if len(op.operands) != 2:
        raise no()
    a, b = op.operands
    if scalar_const(b) is not None:
        return b, a
    if scalar_const(a) is not None:
        return a, b
    raise no()


def relu6_gate(m: Match, gate):
    """``relu6(x + 3)`` in any of the module docstring's forms: returns x."""
    op = defining(gate, "graph.clip", "graph.min", "graph.max")
    if op.name == "graph.clip":
        g = lookup("graph.clip").groups(op)
        if g["min"] is None or g["max"] is None:
            raise no()
        _bound(m, op, g["min"], 0.0, "clips below at")
        _bound(m, op, g["max"], 6.0, "clips above at")
        t = g["input"]
    elif op.name == "graph.min":
        hi, inner = _min_max(op)
        _bound(m, op, hi, 6.0, "clips above at")
        low = defining(inner, "graph.max", "graph.relu")
        if low.name == "graph.max":
            lo, t = _min_max(low)
            _bound(m, low, lo, 0.0, "clips below at")
        else:
            t = low.operands[0]
        m.take(low)
    else:
        lo, inner = _min_max(op)
        _bound(m, op, lo, 0.0, "clips below at")
        high = defining(inner, "graph.min")
        hi, t = _min_max(high)
        _bound(m, high, hi, 6.0, "clips above at")
        m.take(high)
    m.take(op)
    add = defining(t, "graph.add")
    c = const_operand(add)
    if c is None:
        raise no()
    three, like, x = c
    m.want(three, 3.0, like, f"{label(add)} adds {fmt(three, like)}, not 3")
    m.take(add)
    return x


class RecognizeHardSwish(Recognizer):
    """``x * hard_sigmoid(x)`` (alpha 1/6, beta 1/2) or ``x * relu6(x + 3) / 6`` ->
    ``graph.hard_swish``; see the module docstring for the forms."""

    roots = ("graph.mul", "graph.div")
    what = "HardSwish"

    def recognize(self, m: Match):
        root = m.root
        x = None
        if root.name == "graph.mul":
            a, b = root.operands
            for xx, h in ((a, b), (b, a)):
                hs = is_op(h, "graph.hard_sigmoid")
                if hs is not None and hs.operands[0] is xx:
                    alpha, beta = hs.attr("alpha"), hs.attr("beta")
                    if not (close(alpha, 1 / 6) and close(beta, 0.5)):
                        m.problem(f"{label(hs)} has alpha {fmt(alpha)}, beta {fmt(beta)}; "
                                  f"hard-swish needs 1/6 and 0.5")
                    m.take(hs)
                    x = xx
                    break
        if x is None:
            x, _ = gated_product(m, [("relu6", relu6_gate)], 1 / 6)
        if not x.type.element.is_float:
            raise no()
        if root.results[0].type != x.type:
            m.problem(f"its constants broadcast {x.type} to {root.results[0].type}")
        return "graph.hard_swish", [x], {}
