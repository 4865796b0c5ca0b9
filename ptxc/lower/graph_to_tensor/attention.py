"""``graph.attention`` -> its composition, lowered step by step with the graph ops' own
lowerings (no fused kernel yet: the op exists so that one can replace this expansion):

    s = matmul(f32(Q), f32(Kt)) * scale [+ f32(mask)]
    p = softmax(s, last axis)                     f32 for f16/f32 inputs
    p = where(max(mask) == -inf, 0, p)            masked_rows_zero only
    Y = cast(matmul(f32(cast(p, V.el)), f32(V)), V.el)

Each step is built as the graph op, lowered at once by the registered lowering and erased, so
the tensor IR is exactly the composition's.

    %y = "graph.attention"(%q, %kt, %v) {scale = 0.5} : (tensor<2x4x8xf32>, ...) -> ...
  becomes
    %s = "tensor.matmul"(%q, %kt, %zero) ...   %m = "tensor.generic"(%s) ({ mul 0.5 }) ...
    (softmax's max / exp / sum / div generics)   %y = "tensor.matmul"(%p, %v, %zero2) ...
"""

from __future__ import annotations

import numpy as np

from ...dialects.graph.attention import compute_type
from ...ir.attributes import DenseElements
from ...ir.builder import Builder
from ...ir.core import Value
from ...ir.types import F32, F64
from .common import LOWERINGS, constant, lowers


def _step(b: Builder, name: str, operands, attributes=None):
    """Build graph op ``name`` at ``b``, lower it with its own lowering, return its value."""
    op = b.create(name, list(operands), attributes)
    values = LOWERINGS[name](op, Builder.before_op(op))
    for r, v in zip(op.results, values):
        r.replace_all_uses_with(v)
    op.erase()
    return values[0]


def _as(b, v, el):
    return v if v.type.element == el else _step(b, "graph.cast", [v], {"to": el})


def _graph_step(b: Builder, name: str, operands, attributes=None):
    """Build graph op ``name`` at ``b`` and keep it (the graph-level expansion)."""
    return b.create(name, list(operands), attributes).result


def _graph_constant(b: Builder, array: np.ndarray) -> Value:
    return b.create("graph.constant", [], {"value": DenseElements(array)}).result


def expand_in_graph(op) -> None:
    """Replace ``graph.attention`` ``op`` by its composition of graph ops (each carrying the
    op's loc and fused node names), for the passes that treat each step by its own rule: the
    precision pass gives the two matmuls f16 (or tf32) factors with f32 accumulators and keeps
    the softmax f32, which the fused op, computed in f32 as a whole, would forgo. Example::

        %y = "graph.attention"(%q, %kt, %v) {scale = 0.125} loc("pv")
      becomes
        %s = "graph.matmul"(%q, %kt) loc("pv")   %m = "graph.mul"(%s, %c) loc("pv")
        %p = "graph.softmax"(%m) {axis = 3} loc("pv")   %y = "graph.matmul"(%p, %v) loc("pv")
    """
    from ...rewrite.passes.fuse_epilogues import FUSED_ATTR
    before = {id(o) for o in op.block.ops}
    (y,) = _compose(op, Builder.before_op(op), _graph_step, _graph_constant)
    nodes = tuple(op.attributes.get(FUSED_ATTR, ()))
    for new in op.block.ops:
        if id(new) not in before:
            new.loc = op.loc
            if nodes:
                new.attributes[FUSED_ATTR] = nodes
    op.results[0].replace_all_uses_with(y)
    op.erase()


@lowers("graph.attention")
def _attention(op, b):
    return _compose(op, b, _step, constant)


def _compose(op, b, step, constant):
    """The composition of ``op`` at ``b``: ``step`` builds (and lowers, or keeps) each graph
    op, ``constant`` makes a constant of the stage's dialect."""
    _step = step
    q, kt, v = op.operands[:3]
    mask = op.operands[3] if len(op.operands) > 3 else None
    ct = F64 if compute_type(*(x.type for x in op.operands[:3])) == np.float64 else F32
    s = _step(b, "graph.matmul", [_as(b, q, ct), _as(b, kt, ct)])
    if op.attr("scale") != 1.0:
        s = _step(b, "graph.mul", [s, constant(b, np.array(op.attr("scale"), ct.np_dtype))])
    if mask is not None:
        s = _step(b, "graph.add", [s, _as(b, mask, ct)])
    p = _step(b, "graph.softmax", [s], {"axis": s.type.rank - 1})
    if op.attr("masked_rows_zero") and mask is not None:
        m = _as(b, mask, ct)
        mx = _step(b, "graph.reduce_max", [m], {"axes": [m.type.rank - 1], "keepdims": 1})
        dead = _step(b, "graph.equal", [mx, constant(b, np.array(-np.inf, ct.np_dtype))])
        p = _step(b, "graph.where", [dead, constant(b, np.array(0, ct.np_dtype)), p])
    vel = v.type.element
    p = _as(b, _as(b, p, vel), ct)
    y = _step(b, "graph.matmul", [p, _as(b, v, ct)])
    return [_as(b, y, vel)]
