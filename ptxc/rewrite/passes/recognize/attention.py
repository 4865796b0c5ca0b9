"""Scaled dot-product attention written out, as exporters and ptxc's own Attention converter
leave it:

    s = matmul(Q [* c1], Kt [* c2]) [* c | / c]     any number of scalar-constant factors
    x = s [+ mask]                                  either operand order
    x = cast(x, f32)                                optional (softmax_precision)
    p = softmax(x, last axis)
    p = where(equal(reduce_max(mask, [last]), -inf), 0, p)   optional (masked_rows_zero)
    p = cast(p, V.el)                               optional
    Y = matmul(p, V)

becomes ``graph.attention(Q, Kt, V[, mask]) {scale = c1 * c2 * c (or / c)}``. The scale's
factors may sit on Q, on Kt or on the scores (the ONNX Attention converter puts sqrt(scale) on
each factor, BERT exports divide the scores by sqrt(d)); the fused op applies their product to
the scores, equal up to rounding. The fused op computes the softmax in f32, which the
composition may not have done (an f16 export): it is the more exact of the two.

Not matched (the composition stays as it is): a softcap (tanh) between the matmul and the
softmax, a softmax over another axis, a cast to something else than f32 before the softmax.
Each intermediate must have no reader outside the pattern (a qk_matmul_output read elsewhere,
the scores reused): ``--explain`` says which.

Before (a BERT self-attention core):
    %s = "graph.matmul"(%q, %kt)                         loc("qk")
    %d = "graph.div"(%s, %c8)                            loc("scale")       %c8 = 8.0
    %a = "graph.add"(%d, %mask)                          loc("add_mask")
    %p = "graph.softmax"(%a) {axis = 3}                  loc("softmax")
    %y = "graph.matmul"(%p, %v)                          loc("pv")
After:
    %y = "graph.attention"(%q, %kt, %v, %mask) {masked_rows_zero = 0, scale = 0.125,
           ptxc.fused = ["qk", "scale", "add_mask", "softmax"]}     loc("pv")
"""

from __future__ import annotations

import numpy as np

from ....ir.types import F32
from .common import Recognizer
from .match import Match, const_array, defining, is_op, label, no, scalar_const


def _peel_scale(m: Match, value):
    """``value`` with its scalar-constant multiplications / divisions absorbed: (core value,
    product of the factors)."""
    scale = 1.0
    while True:
        op = is_op(value, "graph.mul", "graph.div")
        if op is None:
            return value, scale
        a, b = op.operands
        cb = scalar_const(b)
        if op.name == "graph.div":
            if cb is None or cb == 0:
                return value, scale
            scale /= cb
            nxt = a
        elif cb is not None:
            scale *= cb
            nxt = a
        elif scalar_const(a) is not None:
            scale *= scalar_const(a)
            nxt = b
        else:
            return value, scale
        if op.results[0].type.shape != nxt.type.shape:
            return value, scale  # the constant broadcasts the value: not a plain scale
        m.take(op)
        value = nxt


class RecognizeAttention(Recognizer):
    """``softmax(scale * Q @ Kt + mask) @ V`` -> ``graph.attention``; see the module docstring."""

    roots = ("graph.matmul",)
    what = "attention"

    def recognize(self, m: Match):
        root = m.root
        p, v = root.operands
        cast_p = is_op(p, "graph.cast")
        if cast_p is not None:
            m.take(cast_p)
            p = cast_p.operands[0]
        masked_rows_zero, row_mask, dead = 0, None, None
        where = is_op(p, "graph.where")
        if where is not None:
            cond, zero, inner = where.operands
            if scalar_const(zero) != 0:
                raise no()
            dead = const_array(cond)   # folded when the mask is a constant (causal, windows)
            if dead is None:
                eq = defining(cond, "graph.equal")
                mx = defining(eq.operands[0], "graph.reduce_max")
                if scalar_const(eq.operands[1]) != -np.inf:
                    raise no()
                m.take(eq)
                m.take(mx)
                row_mask = mx.operands[0]
                if tuple(mx.attr("axes")) != (row_mask.type.rank - 1,) or \
                        mx.attr("keepdims") != 1:
                    m.problem(f"{label(mx)} is not a max over the mask's last axis")
            m.take(where)
            masked_rows_zero = 1
            p = inner
        sm = defining(p, "graph.softmax")
        x = sm.operands[0]
        if sm.attr("axis") != x.type.rank - 1:
            m.problem(f"{label(sm)} is over axis {sm.attr('axis')}, not the last")
        m.take(sm)
        cast_x = is_op(x, "graph.cast")
        if cast_x is not None:
            if cast_x.attr("to") != F32:
                raise no()
            m.take(cast_x)
            x = cast_x.operands[0]
        mask = None
        add = is_op(x, "graph.add")
        if add is not None:
            for s_side, other in (add.operands, reversed(add.operands)):
                core, _ = _peel_scale(m.fork(), s_side)
                if is_op(core, "graph.matmul") is not None:
                    x, mask = s_side, other
                    break
            else:
                raise no()
            if add.results[0].type != x.type:
                m.problem(f"{label(add)}: the mask broadcasts the scores to "
                          f"{add.results[0].type}")
            m.take(add)
        if row_mask is not None and row_mask is not mask:
            raise no()
        if dead is not None:
            # a folded row test: it must be the mask's own (-inf everywhere on those rows)
            mc = const_array(mask) if mask is not None else None
            if mc is None:
                raise no()
            with np.errstate(invalid="ignore"):
                want = np.max(mc, axis=-1, keepdims=True) == -np.inf
            if want.shape != dead.shape or not np.array_equal(want, dead.astype(bool)):
                raise no()
        s, scale = _peel_scale(m, x)
        qk = defining(s, "graph.matmul")
        m.take(qk)
        q, s1 = _peel_scale(m, qk.operands[0])
        kt, s2 = _peel_scale(m, qk.operands[1])
        if v.type.element != root.results[0].type.element:
            raise no()
        if not (q.type.element.is_float and kt.type.element.is_float):
            raise no()
        operands = [q, kt, v] + ([mask] if mask is not None else [])
        return "graph.attention", operands, {"scale": float(scale * s1 * s2),
                                             "masked_rows_zero": masked_rows_zero}
