"""Softmax written out:

    e = exp(x)                        x may be z - reduce_max(z, [a])
    y = e / reduce_sum(e, [a])        keepdims = 1; or e * reciprocal(reduce_sum(...))

becomes ``graph.softmax(axis = a)`` of ``z`` (when ``x = z - reduce_max(z)`` over the same axis
and nothing else reads ``x`` or the max), else of ``x``. Without the max subtraction the two
differ only where ``exp(x)`` overflows, where the written-out form gives inf/NaN and softmax the
right answer (as TensorRT, ptxc takes that liberty).
"""

from __future__ import annotations

from .common import Recognizer
from .match import Match, defining, is_op, label, no


class RecognizeSoftmax(Recognizer):
    """``exp(x) / reduce_sum(exp(x), [a])`` -> ``graph.softmax(x, axis = a)``; see the module
    docstring."""

    roots = ("graph.div", "graph.mul")
    what = "softmax"

    def recognize(self, m: Match):
        root = m.root
        a, b = root.operands
        if root.name == "graph.div":
            e, s = a, b
        else:
            for e, r in ((a, b), (b, a)):
                rec = is_op(r, "graph.reciprocal")
                if rec is not None and is_op(e, "graph.exp") is not None:
                    break
            else:
                raise no()
            m.take(rec)
            s = rec.operands[0]
        exp = defining(e, "graph.exp")
        rsum = defining(s, "graph.reduce_sum")
        if rsum.operands[0] is not e:
            raise no()
        x = exp.operands[0]
        t = x.type
        if not t.element.is_float or t.rank == 0:
            raise no()
        axes = tuple(rsum.attr("axes"))
        if len(axes) != 1:
            m.problem(f"{label(rsum)} sums over axes {list(axes)}; softmax takes one axis")
        if rsum.attr("keepdims") != 1:
            m.problem(f"{label(rsum)} does not keep the reduced dimension")
        if root.results[0].type != t:
            m.problem(f"it broadcasts {t} to {root.results[0].type}")
        m.take(rsum)
        m.take(exp, 2)
        axis = axes[0] if axes else 0
        # x = z - reduce_max(z, [axis]): absorbed when nothing else reads them
        sub = is_op(x, "graph.sub")
        if sub is not None and len(x.uses) == 1:
            z, mx = sub.operands
            rmax = is_op(mx, "graph.reduce_max")
            if rmax is not None and rmax.operands[0] is z and len(mx.uses) == 1 and \
                    tuple(rmax.attr("axes")) == (axis,) and rmax.attr("keepdims") == 1:
                m.take(sub)
                m.take(rmax)
                x = z
        return "graph.softmax", [x], {"axis": axis}
