"""``graph.top_k``: the ``k`` largest (``largest = 1``) or smallest elements along ``axis`` and
their i64 indices, in order (ONNX TopK with ``sorted = 1``; ptxc always sorts, which ONNX allows
for ``sorted = 0``). Equal values keep the lower index first, as ONNX requires. ``k`` (an ONNX
input) is a compile-time attribute; ``axis`` is non-negative. NaN inputs are not supported:
which elements a NaN displaces is unspecified (every comparison with it is false).

    %v, %i = "graph.top_k"(%x) {axis = 1, k = 3, largest = 1}
               : (tensor<2x10xf32>) -> (tensor<2x3xf32>, tensor<2x3xi64>)
"""

from __future__ import annotations

import numpy as np

from ...ir.spec import Attr, OpSpec, fail
from ...ir.types import I1, I64
from .common import ttype


def ranks(x: np.ndarray, axis: int, largest: bool) -> np.ndarray:
    """For each element, how many elements of its line along ``axis`` come before it: better
    values, or equal values at lower indices (the reference and the lowering share this
    definition)."""
    a = np.moveaxis(x, axis, -1)[..., None, :]   # m
    b = np.moveaxis(x, axis, -1)[..., :, None]   # i
    n = x.shape[axis]
    with np.errstate(invalid="ignore"):
        better = (a > b) if largest else (a < b)
    lower = np.arange(n)[None, :] < np.arange(n)[:, None]
    r = (better | ((a == b) & lower)).sum(-1)
    return np.moveaxis(r, -1, axis)


class TopK(OpSpec):
    """The ``k`` best elements along ``axis``, best first, and their indices."""

    name = "graph.top_k"
    operands = ("X",)
    results = ("values", "indices")
    attributes = {"axis": Attr("int", required=True), "k": Attr("int", required=True),
                  "largest": Attr("int", default=1)}
    traits = {"pure"}

    def infer_types(self, op):
        t = ttype(op)
        axis, k = op.attributes.get("axis", 0), op.attributes.get("k", 0)
        if not 0 <= axis < t.rank:
            fail(op, f"axis {axis} out of range for rank {t.rank}")
        if not 0 <= k <= t.shape[axis]:
            fail(op, f"k = {k} must be in [0, {t.shape[axis]}]")
        if t.element == I1:
            fail(op, f"needs a numeric tensor, got {t}")
        shape = t.shape[:axis] + (k,) + t.shape[axis + 1:]
        return [t.with_shape(shape), t.with_shape(shape).with_element(I64)]

    def reference(self, op, args, interp):
        x = args[0]
        axis, k = op.attr("axis"), op.attr("k")
        r = np.moveaxis(ranks(x, axis, bool(op.attr("largest"))), axis, -1)
        xs = np.moveaxis(x, axis, -1)
        shape = xs.shape[:-1] + (k,)
        vals, idx = np.zeros(shape, x.dtype), np.zeros(shape, np.int64)
        for j in range(k):
            hit = r == j
            pos = hit.argmax(-1)
            idx[..., j] = pos
            vals[..., j] = np.take_along_axis(xs, pos[..., None], -1)[..., 0]
        return [np.moveaxis(vals, -1, axis).copy(), np.moveaxis(idx, -1, axis).copy()]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (TopK,)
