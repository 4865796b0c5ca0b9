"""``graph.attention``: scaled dot-product attention as one op, so that a kernel can run it in
one launch (TensorRT's fused MHA). graph-opt's ``recognize-patterns`` makes it from the ONNX
Attention converter's composition and from exported ``MatMul -> [scale] -> [+ mask] -> Softmax
-> MatMul`` chains (ptxc/rewrite/passes/recognize/attention.py)::

    Y = softmax(scale * (Q @ Kt) + mask, last axis) @ V

``Kt`` is the second factor as the graph has it (K already transposed, ``(.., D, S_kv)``), so
no transpose needs absorbing; the batch dims broadcast as ``graph.matmul``'s. ``mask`` is
optional and broadcasts to the scores' shape (0 / -inf, or any additive bias). The scores, the
mask addition and the softmax are computed in f32 whatever the inputs' type (f64 for f64): an
f16 model keeps its softmax in f32, as fp16 attention kernels do. The probabilities are then
rounded to ``V``'s type and multiplied with ``V`` (sums in f32); ``Y`` has ``V``'s type.
``masked_rows_zero = 1`` gives 0 on the rows where the mask is -inf everywhere (the ONNX
Attention reference's rule; softmax alone gives NaN there).

    %y = "graph.attention"(%q, %kt, %v, %mask) {scale = 0.125, masked_rows_zero = 0}
           : (tensor<1x12x128x64xf32>, tensor<1x12x64x128xf32>, tensor<1x12x128x64xf32>,
              tensor<1x1x1x128xf32>) -> tensor<1x12x128x64xf32>

:func:`composition` builds the op's composition of graph ops (cast, matmul, mul, add, softmax,
where, matmul). lower-graph-to-tensor lowers the op through it (each step by its own lowering),
so every target runs it before a fused kernel exists; lower-precision takes the op apart into it
so that each step gets its own precision rule.
"""

from __future__ import annotations

import numpy as np

from ...ir.attributes import DenseElements
from ...ir.builder import Builder
from ...ir.core import Value
from ...ir.spec import Attr, Operand, OpSpec, fail
from ...ir.types import F32, F64
from .common import broadcast_shapes, ttype


def compute_type(*types):
    """f64 when any operand is f64, else f32: the scores and the softmax are never narrower."""
    return np.float64 if any(t.element == F64 for t in types) else np.float32


def attention(q, kt, v, mask, scale: float, masked_rows_zero: int):
    ct = np.float64 if np.float64 in (q.dtype, kt.dtype, v.dtype) else np.float32
    with np.errstate(all="ignore"):
        s = np.matmul(q.astype(ct), kt.astype(ct)) * ct(scale)
        if mask is not None:
            s = s + mask.astype(ct)
        e = np.exp(s - np.max(s, axis=-1, keepdims=True))
        p = e / np.sum(e, axis=-1, keepdims=True)
        if masked_rows_zero and mask is not None:
            dead = np.max(mask.astype(ct), axis=-1, keepdims=True) == -np.inf
            p = np.where(dead, ct(0), p)
        p = p.astype(v.dtype).astype(ct)
        return np.matmul(p, v.astype(ct)).astype(v.dtype)


def composition(op, b: Builder) -> Value:
    """Build ``graph.attention`` ``op``'s composition of graph ops at ``b`` and return the value
    that computes its result (``op`` itself is left as it is), the steps of :func:`attention`::

        s = matmul(f32(Q), f32(Kt)) * scale [+ f32(mask)]
        p = softmax(s, last axis)                     f32 for f16/f32 inputs
        p = where(max(mask) == -inf, 0, p)            masked_rows_zero only
        Y = cast(matmul(f32(cast(p, V.el)), f32(V)), V.el)

    A cast to the type a value has already is left out, so f32 operands take none. Example::

        %y = "graph.attention"(%q, %kt, %v) {scale = 0.125}       (f32 operands)
      builds
        %s = "graph.matmul"(%q, %kt)   %c = "graph.constant"() {value = dense<0.125>}
        %m = "graph.mul"(%s, %c)       %p = "graph.softmax"(%m) {axis = 3}
        %y = "graph.matmul"(%p, %v)
    """
    def step(name, operands, attributes=None):
        return b.create(name, list(operands), attributes).result

    def const(x, ct):
        return step("graph.constant", [], {"value": DenseElements(np.array(x, ct.np_dtype))})

    def as_(v, el):
        return v if v.type.element == el else step("graph.cast", [v], {"to": el})

    q, kt, v = op.operands[:3]
    mask = op.operands[3] if len(op.operands) > 3 else None
    ct = F64 if compute_type(*(x.type for x in op.operands[:3])) == np.float64 else F32
    s = step("graph.matmul", [as_(q, ct), as_(kt, ct)])
    if op.attr("scale") != 1.0:
        s = step("graph.mul", [s, const(op.attr("scale"), ct)])
    if mask is not None:
        s = step("graph.add", [s, as_(mask, ct)])
    p = step("graph.softmax", [s], {"axis": s.type.rank - 1})
    if op.attr("masked_rows_zero") and mask is not None:
        m = as_(mask, ct)
        mx = step("graph.reduce_max", [m], {"axes": [m.type.rank - 1], "keepdims": 1})
        dead = step("graph.equal", [mx, const(-np.inf, ct)])
        p = step("graph.where", [dead, const(0, ct), p])
    vel = v.type.element
    y = step("graph.matmul", [as_(as_(p, vel), ct), as_(v, ct)])
    return as_(y, vel)


class Attention(OpSpec):
    """``softmax(scale * Q @ Kt + mask) @ V`` with an f32 softmax (module docstring)."""

    name = "graph.attention"
    operands = ("Q", "Kt", "V", Operand("mask", optional=True))
    results = ("Y",)
    attributes = {"scale": Attr("float", default=1.0),
                  "masked_rows_zero": Attr("int", default=0)}
    traits = {"pure"}

    def infer_types(self, op):
        q, kt, v = ttype(op, 0), ttype(op, 1), ttype(op, 2)
        if min(q.rank, kt.rank, v.rank) < 2:
            fail(op, f"Q, Kt and V need rank >= 2, got {q}, {kt}, {v}")
        if q.shape[-1] != kt.shape[-2] or kt.shape[-1] != v.shape[-2]:
            fail(op, f"Q {q} @ Kt {kt} @ V {v}: inner dims do not agree")
        sb = broadcast_shapes(op, q.shape[:-2], kt.shape[:-2])
        scores = tuple(sb) + (q.shape[-2], kt.shape[-1])
        if len(op.operands) > 3:
            m = ttype(op, 3)
            if broadcast_shapes(op, m.shape, scores) != scores:
                fail(op, f"the mask {m} does not broadcast to the scores' shape {list(scores)}")
        yb = broadcast_shapes(op, sb, v.shape[:-2])
        return [v.with_shape(tuple(yb) + (q.shape[-2], v.shape[-1]))]

    def verify(self, op):
        for i, v in enumerate(op.operands):
            if not ttype(op, i).element.is_float:
                fail(op, f"operand #{i} must be a float tensor, is {v.type}")
        if op.attr("masked_rows_zero") not in (0, 1):
            fail(op, "masked_rows_zero must be 0 or 1")

    def reference(self, op, args, interp):
        mask = args[3] if len(args) > 3 else None
        return [attention(args[0], args[1], args[2], mask, op.attr("scale"),
                          op.attr("masked_rows_zero"))]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (Attention,)
