"""Ops whose output *shape* depends on input *values*: NonZero, NonMaxSuppression, Unique,
Compress (its condition).

ptxc compiles static shapes (docs/onnx_coverage.md, "Data-dependent output shapes"). These ops
are evaluated at import time, with numpy, when their inputs are known then (constants, folded
values, or graph inputs bound with ``constant_inputs=``, which is what the ONNX backend does
for a test's inputs): the result becomes a ``graph.constant`` and every backend (interpreter,
cpu, cuda) runs the rest of the model. When an input is only known at run time, the import
fails with a ``ShapeInputError`` (a ModelError) that names the node, the op and the graph inputs
to bind, and says why: the number of output rows is data-dependent. An upper-bound buffer plus a
count (TensorRT's approach) is the way to compile them; it is not built.
"""

from __future__ import annotations

import numpy as np

from .context import ConvertContext, converter


def _why(ctx: ConvertContext, i: int, name: str):
    return ctx.const(i, f"input {name} (a {ctx.node.op_type} output's shape depends on its "
                        "values; ptxc compiles static shapes)")


@converter("NonZero")
def non_zero(ctx: ConvertContext):
    x = np.asarray(_why(ctx, 0, "X"))
    x = np.atleast_1d(x)  # a scalar: as a one-element vector
    return [ctx.constant(np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1))]


@converter("Compress")
def compress(ctx: ConvertContext):
    """Compress 9, 11: the condition must be known at import; the data need not be. It becomes
    a ``graph.gather`` of the kept positions (along ``axis``, or of the flattened input)."""
    cond = np.asarray(_why(ctx, 1, "condition")).astype(bool).reshape(-1)
    x = ctx.input(0)
    t = x.type
    if ctx.has_attr("axis"):
        axis = int(ctx.attr("axis"))
        if not -t.rank <= axis < t.rank:
            raise ctx.error(f"axis {axis} out of range for rank {t.rank}")
        axis %= t.rank
    else:
        x = ctx.emit1("graph.reshape", [x], {"shape": [t.size]})
        axis = 0
    n = x.type.shape[axis]
    if cond.size > n:
        raise ctx.error(f"condition has {cond.size} entries, the axis only {n}")
    keep = np.nonzero(cond)[0].astype(np.int64)
    return [ctx.emit1("graph.gather", [x, ctx.constant(keep)], {"axis": axis})]


def _corners(box, center: bool):
    """(y_min, x_min, y_max, x_max) of one box in either encoding."""
    if center:
        xc, yc, w, h = box
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    y1, x1, y2, x2 = box
    return min(y1, y2), min(x1, x2), max(y1, y2), max(x1, x2)


def _overlaps(a, b, center: bool, thr: float) -> bool:
    ay0, ax0, ay1, ax1 = _corners(a, center)
    by0, bx0, by1, bx1 = _corners(b, center)
    iw, ih = min(ax1, bx1) - max(ax0, bx0), min(ay1, by1) - max(ay0, by0)
    if iw <= 0 or ih <= 0:
        return False
    inter = iw * ih
    area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    if area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return inter / union > thr


@converter("NonMaxSuppression")
def non_max_suppression(ctx: ConvertContext):
    """Greedy per (batch, class): candidates above score_threshold by descending score (the
    lower box index first on ties), each kept unless its IoU with a kept box exceeds
    iou_threshold, up to max_output_boxes_per_class; rows ``[batch, class, box]``."""
    boxes = np.asarray(_why(ctx, 0, "boxes"), np.float64)
    scores = np.asarray(_why(ctx, 1, "scores"), np.float64)
    opt = [None if ctx.input(i) is None else np.asarray(_why(ctx, i, n)).reshape(-1)
           for i, n in ((2, "max_output_boxes_per_class"), (3, "iou_threshold"),
                        (4, "score_threshold"))]
    max_out = 0 if opt[0] is None or not opt[0].size else int(opt[0][0])
    iou = 0.0 if opt[1] is None or not opt[1].size else float(opt[1][0])
    thr = None if opt[2] is None or not opt[2].size else float(opt[2][0])
    center = bool(ctx.attr("center_point_box", 0))
    rows = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            cand = [i for i in range(s.size) if thr is None or s[i] > thr]
            cand.sort(key=lambda i: (-s[i], i))
            kept = []
            for i in cand:
                if len(kept) >= max_out:
                    break
                if not any(_overlaps(boxes[b, i], boxes[b, j], center, iou) for j in kept):
                    kept.append(i)
                    rows.append((b, c, i))
    return [ctx.constant(np.array(rows, np.int64).reshape(-1, 3))]


@converter("Unique")
def unique(ctx: ConvertContext):
    """numpy's unique (``sorted = 1``), or in order of first occurrence (``sorted = 0``), over
    the flattened input or along ``axis``: Y, indices (first occurrences), inverse_indices,
    counts."""
    x = np.asarray(_why(ctx, 0, "X"))
    axis = ctx.attr("axis")
    if axis is not None:
        if not -x.ndim <= axis < x.ndim:
            raise ctx.error(f"axis {axis} out of range for rank {x.ndim}")
        axis %= x.ndim
    y, idx, inv, cnt = np.unique(x if axis is not None else x.reshape(-1), return_index=True,
                                 return_inverse=True, return_counts=True, axis=axis)
    inv = inv.reshape(-1)
    if not ctx.attr("sorted", 1):
        order = np.argsort(idx, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y = np.take(y, order, axis=axis or 0)
        idx, cnt, inv = idx[order], cnt[order], rank[inv]
    return [ctx.constant(y), ctx.constant(idx.astype(np.int64)),
            ctx.constant(inv.astype(np.int64)), ctx.constant(cnt.astype(np.int64))]
