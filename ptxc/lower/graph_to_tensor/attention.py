"""``graph.attention`` -> its composition, lowered step by step with the graph ops' own
lowerings (no fused kernel yet: the op exists so that one can replace this expansion).

The composition is the graph dialect's (:func:`ptxc.dialects.graph.attention.composition`:
casts, matmul, mul, add, softmax, where, matmul). Its graph ops are built before the op, then
each is lowered by its registered lowering, in program order, and erased, so the tensor IR is
exactly the composition's.

    %y = "graph.attention"(%q, %kt, %v) {scale = 0.5} : (tensor<2x4x8xf32>, ...) -> ...
  becomes
    %s = "tensor.matmul"(%q, %kt, %zero) ...   %m = "tensor.generic"(%s) ({ mul 0.5 }) ...
    (softmax's max / exp / sum / div generics)   %y = "tensor.matmul"(%p, %v, %zero2) ...
"""

from __future__ import annotations

from ...dialects.graph.attention import composition
from ...ir.builder import Builder
from .common import LOWERINGS, lowers


@lowers("graph.attention")
def _attention(op, b):
    first = op.prev_op
    y = composition(op, b)
    steps = []
    cur = first.next_op if first is not None else op.block.first_op
    while cur is not op:
        steps.append(cur)
        cur = cur.next_op
    for step in steps:
        values = LOWERINGS[step.name](step, Builder.before_op(step))
        for r, v in zip(step.results, values, strict=True):
            if r is y:
                y = v
            r.replace_all_uses_with(v)
        step.erase()
    return [y]
