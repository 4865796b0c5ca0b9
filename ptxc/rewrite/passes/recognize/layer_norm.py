"""LayerNorm written out, as PyTorch's exporter (before opset 17) and TensorFlow leave it:

    mean = reduce_mean(x, trailing axes)          keepdims = 1
    d    = x - mean
    var  = reduce_mean(d ** 2 | d * d, same axes)
    y    = d / sqrt(var + eps)                    or d * reciprocal(sqrt(var + eps))
    y    = y * gamma                              optional
    y    = y + beta                               optional

In three steps, each a pattern: the normalization (rooted at the division, or at the multiply by
the reciprocal) becomes ``graph.layer_normalization`` with a constant scale of ones and no bias;
a following multiply folds into its ``Scale`` while that is the constant of ones; a following add
folds into its ``B`` while it has none. Each step computes exactly what the ops it replaces did
(``y * 1 * gamma`` is ``y * gamma``), so a real LayerNormalization followed by a bias add is
folded the same way. ``gamma``/``beta`` must broadcast to the normalized shape (a constant with
extra leading ones, as ``[1, 1, C]``, is reshaped).
"""

from __future__ import annotations

import numpy as np

from ....ir.core import Value
from ...pattern import producer
from .common import NewConstant, Recognizer
from .match import Match, const_array, const_operand, defining, fmt, is_op, label, no


def _epsilon(x: float, like: Value) -> float:
    """``x`` as the shortest decimal that rounds to the same number of the constant's type
    (``1e-05``, not ``9.999999747378752e-06``)."""
    el = getattr(like.type, "element", None)
    if el is not None and el.is_float and el.name != "f64":
        return float(str(el.np_dtype.type(x)))
    return x


class RecognizeLayerNorm(Recognizer):
    """``(x - mean) / sqrt(var + eps)`` over trailing axes -> ``graph.layer_normalization``
    (scale of ones, no bias); see the module docstring."""

    roots = ("graph.div", "graph.mul")
    what = "LayerNorm"

    def recognize(self, m: Match):
        root = m.root
        if root.name == "graph.div":
            d, std = root.operands
        else:
            a, b = root.operands
            for d, r in ((a, b), (b, a)):
                rec = is_op(r, "graph.reciprocal")
                if rec is not None and is_op(d, "graph.sub") is not None:
                    break
            else:
                raise no()
            m.take(rec)
            std = rec.operands[0]
        sub = defining(d, "graph.sub")
        x, mean = sub.operands
        rm1 = defining(mean, "graph.reduce_mean")
        if rm1.operands[0] is not x:
            raise no()
        sqrt = defining(std, "graph.sqrt")
        add = defining(sqrt.operands[0], "graph.add")
        c = const_operand(add)
        if c is None:
            raise no()
        eps, eps_like, var = c
        rm2 = defining(var, "graph.reduce_mean")
        sq = producer(rm2.operands[0])
        if sq is None:
            raise no()
        if sq.name == "graph.pow" and sq.operands[0] is d:
            p = const_operand(sq, commutative=False)
            if p is None:
                raise no()
            m.want(p[0], 2.0, p[1], f"{label(sq)} raises to {fmt(p[0], p[1])}, not 2")
            d_uses = 2
        elif sq.name == "graph.mul" and sq.operands[0] is d and sq.operands[1] is d:
            d_uses = 3
        else:
            raise no()
        # the shape is LayerNorm's; now the details
        t = x.type
        if not t.element.is_float or t.rank == 0:
            raise no()
        axes1, axes2 = tuple(rm1.attr("axes")), tuple(rm2.attr("axes"))
        if axes1 != axes2:
            m.problem(f"{label(rm1)} averages over axes {list(axes1)} but {label(rm2)} over "
                      f"{list(axes2)}")
        elif not axes1 or axes1 != tuple(range(axes1[0], t.rank)):
            m.problem(f"{label(rm1)} averages over axes {list(axes1)}, not the trailing axes "
                      f"of a rank-{t.rank} tensor")
        for rm in (rm1, rm2):
            if rm.attr("keepdims") != 1:
                m.problem(f"{label(rm)} does not keep the reduced dimensions")
        if eps < 0:
            m.problem(f"{label(add)} adds {fmt(eps, eps_like)}, a negative epsilon")
        if root.results[0].type != t:
            m.problem(f"it broadcasts {t} to {root.results[0].type}")
        for op in (rm1, sq, rm2, add, sqrt, root):
            m.take(op)
        m.take(sub, d_uses)
        axis = axes1[0] if axes1 else 0
        ones = NewConstant(np.ones(t.shape[axis:], t.element.np_dtype),
                           (root.loc or root.results[0].name_hint or "layer_norm") + "_scale")
        return ("graph.layer_normalization", [x, ones, None],
                {"axis": axis, "epsilon": _epsilon(eps, eps_like)})


def _to_norm_shape(v: Value, norm: tuple[int, ...]):
    """``v`` (or, for a constant, a reshaped copy as a :class:`NewConstant`) broadcasting to the
    normalized shape ``norm``; None if it does not."""
    shape = tuple(v.type.shape)

    def fits(s):
        try:
            return np.broadcast_shapes(s, norm) == norm
        except ValueError:
            return False

    if fits(shape):
        return v
    a = const_array(v)
    if a is None:
        return None
    s = shape
    while len(s) > len(norm) and s[0] == 1:
        s = s[1:]
    if not fits(s):
        return None
    p = producer(v)
    return NewConstant(a.reshape(s), v.name_hint, p.loc)


class _FoldIntoLayerNorm(Recognizer):
    """Shared by the scale and bias folds: ``ln op other`` where ``ln`` is a
    ``graph.layer_normalization`` that can take ``other``."""

    operand: int = 1   # 1: Scale, 2: B

    def can_take(self, ln) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def recognize(self, m: Match):
        root = m.root
        a, b = root.operands
        for lv, other in ((a, b), (b, a)):
            ln = is_op(lv, "graph.layer_normalization")
            if ln is None or other is lv or not self.can_take(ln):
                continue
            t = ln.results[0].type
            if root.results[0].type != t:
                continue
            axis = ln.attr("axis")
            new = _to_norm_shape(other, tuple(t.shape[axis:]))
            if new is None:
                continue
            m.take(ln)
            operands = list(ln.operands) + [None] * (3 - len(ln.operands))
            operands[self.operand] = new
            attrs = {k: v for k, v in ln.attributes.items() if k != "operand_segments"}
            return "graph.layer_normalization", operands, attrs
        raise no()

    def reason(self, m: Match, why: str) -> str:
        return f"{label(m.root)} not folded into the LayerNorm: {why}"

    def provenance(self, m: Match):
        """The LayerNorm keeps its loc; the folded op joins its ``ptxc.fused`` list."""
        (ln,) = [op for op, _ in m.ops.values() if op is not m.root]
        fused = tuple(ln.attributes.get("ptxc.fused", ()))
        return ln.loc, fused + ((m.root.loc,) if m.root.loc else ())


def _ones(v: Value) -> bool:
    a = const_array(v)
    return a is not None and bool(np.all(a == 1))


class FoldLayerNormScale(_FoldIntoLayerNorm):
    """``layer_normalization(x, ones) * gamma`` -> ``layer_normalization(x, gamma)``."""

    roots = ("graph.mul",)
    operand = 1

    def can_take(self, ln) -> bool:
        return len(ln.operands) == 2 and _ones(ln.operands[1])


class FoldLayerNormBias(_FoldIntoLayerNorm):
    """``layer_normalization(x, scale) + beta`` -> ``layer_normalization(x, scale, beta)``."""

    roots = ("graph.add",)
    operand = 2

    def can_take(self, ln) -> bool:
        return len(ln.operands) == 2
