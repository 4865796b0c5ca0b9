"""``graph.resize`` -> generics that read the input with ``tensor.extract``.

The coordinate mapping depends only on attributes and shapes, so it is computed at compile time,
with the graph reference's own functions, into small constant tables:

* nearest: one source index per output index of each resized axis (``i64``), and for
  ``tf_crop_and_resize`` a mask of the outputs that fall outside the input. One parallel generic
  reads ``x`` at the looked-up indices (``tensor.extract``) and selects the extrapolation value
  where any axis' mask is set.
* linear / cubic: per resized axis in increasing order (as the reference, which is separable),
  a reduction generic over the taps: ``y[.., o, ..] = sum_t coeff[o, t] * x[.., idx[o, t], ..]``
  in f64 (indices clamped to the edge and the weights of taps on one index merged,
  :func:`~ptxc.dialects.graph.resize.clamped_taps`; coefficients with antialias and
  ``exclude_outside`` applied), a tap of weight exactly zero skipped by a select (so an
  infinite input outside the kernel's support gives no ``0 * inf = NaN``), then the
  extrapolation select; a last generic rounds (integers: half to even, clamped) and converts
  to the input's type.

The sums over taps are the reference's (:func:`~ptxc.dialects.graph.resize.tap_sum`) term by
term and in the same order.
"""

from __future__ import annotations

import math

import numpy as np

from ...dialects.graph.resize import _cubic, _linear, clamped_taps, source_coords
from ...dialects.tensor.generic import build_generic
from ...dialects.tensor.maps import identity_map, unit_row
from ...ir.types import F64, I1, I64, INDEX
from .common import c, cast, constant, elementwise, empty, fill, lowers, op_


def _resized_axes(op, shape):
    """The axes the reference resizes (it skips an axis that keeps its size at scale 1)."""
    roi = op.attr("roi")
    r = len(shape)
    tf = op.attr("coordinate_transformation_mode") == "tf_crop_and_resize"
    out = []
    for axis in range(r):
        size, scale = op.attr("sizes")[axis], op.attr("scales")[axis]
        if size == shape[axis] and math.isclose(scale, 1.0) and (
                not tf or (math.isclose(roi[axis], 0.0) and math.isclose(roi[r + axis], 1.0))):
            continue
        out.append(axis)
    return out


def _coords(op, axis, size):
    roi = op.attr("roi")
    r = len(op.attr("sizes"))
    pair = None if roi is None else (roi[axis], roi[r + axis])
    x, extrapolated = source_coords(op.attr("coordinate_transformation_mode"),
                                    op.attr("sizes")[axis], size, op.attr("scales")[axis], pair)
    base = np.floor(x)
    frac = x - base
    integral = frac == 0
    base = np.where(integral, base - 1, base).astype(np.int64)
    frac = np.where(integral, 1.0, frac)
    if extrapolated is not None and not extrapolated.any():
        extrapolated = None
    return base, frac, integral, extrapolated


def _nearest_table(op, axis, size):
    base, frac, integral, mask = _coords(op, axis, size)
    nm = op.attr("nearest_mode")
    if nm == "round_prefer_floor":
        pick = frac > 0.5
    elif nm == "round_prefer_ceil":
        pick = frac >= 0.5
    elif nm == "floor":
        pick = integral
    else:
        pick = np.ones_like(integral)
    return np.clip(base + pick, 0, size - 1).astype(np.int64), mask


def _taps(op, axis, size):
    base, frac, _, mask = _coords(op, axis, size)
    scale = op.attr("scales")[axis]
    kernel, radius = (_linear, 1) if op.attr("mode") == "linear" else (_cubic, 2)
    a = op.attr("cubic_coeff_a")
    if op.attr("antialias"):
        s = min(scale, 1.0)
        start = int(math.floor(-radius / s)) + 1
        offsets = np.arange(start, 2 - start)
        coeffs = kernel(s * (offsets[None, :] - frac[:, None]), a)
        coeffs = coeffs / coeffs.sum(axis=1, keepdims=True)
    else:
        offsets = np.arange(1 - radius, radius + 1)
        coeffs = kernel(offsets[None, :] - frac[:, None], a)
    idx = base[:, None] + offsets[None, :]
    if op.attr("exclude_outside"):
        coeffs = np.where((idx < 0) | (idx >= size), 0.0, coeffs)
        total = coeffs.sum(axis=1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    src, coeffs = clamped_taps(idx, coeffs, size)
    return src.astype(np.int64), coeffs, mask


def _nearest(op, b, x, axes):
    out = op.results[0].type
    r = out.rank
    tables, masks = [], []
    for axis in axes:
        tbl, mask = _nearest_table(op, axis, x.type.shape[axis])
        tables.append((axis, constant(b, tbl, I64)))
        if mask is not None:
            masks.append((axis, constant(b, mask, I1)))
    ins = [t for _, t in tables] + [m for _, m in masks]
    maps = [(unit_row(r, axis),) for axis, _ in tables + masks] + [identity_map(r)]
    ev = op.attr("extrapolation_value")

    def body(bb, args):
        by_axis = {axis: args[k] for k, (axis, _) in enumerate(tables)}
        idx = [cast(bb, by_axis[d], INDEX) if d in by_axis
               else bb.create("tensor.index", [], {"dim": d}).result for d in range(r)]
        v = bb.create("tensor.extract", [x] + idx).result
        if masks:
            flags = args[len(tables):len(tables) + len(masks)]
            cond = flags[0]
            for f in flags[1:]:
                cond = op_(bb, "arith.or", cond, f)
            v = op_(bb, "arith.select", cond, c(bb, np.asarray(ev).astype(
                out.element.np_dtype).item(), out.element), v)
        return [v]

    return build_generic(ins, [empty(b, out)], out.shape, maps, ["parallel"] * r, body,
                         b=b).result


def _interpolate(op, b, x, axes):
    out = op.results[0].type
    r = out.rank
    cur = x
    ev = op.attr("extrapolation_value")
    for axis in axes:
        size = cur.type.shape[axis]
        idx, coeffs, mask = _taps(op, axis, size)
        shape = list(cur.type.shape)
        shape[axis] = op.attr("sizes")[axis]
        res = cur.type.with_shape(shape).with_element(F64)
        taps = idx.shape[1]
        tap_map = (unit_row(r + 1, axis), unit_row(r + 1, r))
        src = cur

        def body(bb, args, src=src, axis=axis):
            ids = [cast(bb, args[0], INDEX) if d == axis
                   else bb.create("tensor.index", [], {"dim": d}).result for d in range(r)]
            v = cast(bb, bb.create("tensor.extract", [src] + ids).result, F64)
            # a tap of weight exactly zero adds nothing (not 0 * inf = NaN), as the reference
            zero = op_(bb, "arith.cmp", args[1], c(bb, 0.0, F64), predicate="eq")
            return [op_(bb, "arith.select", zero, args[2],
                        op_(bb, "arith.add", args[2], op_(bb, "arith.mul", args[1], v)))]

        out_map = tuple(unit_row(r + 1, d) for d in range(r))
        cur = build_generic([constant(b, idx, I64), constant(b, coeffs, F64)],
                            [fill(b, res, 0.0)], tuple(shape) + (taps,),
                            [tap_map, tap_map, out_map], ["parallel"] * r + ["reduction"],
                            body, b=b).result
        if mask is not None:
            mshape = [1] * r
            mshape[axis] = mask.size
            m = constant(b, mask.reshape(mshape), I1)
            evc = float(np.float64(ev))
            cur = elementwise(b, [cur, m], res, lambda bb, s: op_(
                bb, "arith.select", s[1], c(bb, evc, F64), s[0]))
    el = out.element
    if el == F64:
        return cur

    def final(bb, s):
        y = s[0]
        if el.is_float:
            return cast(bb, y, el)
        info = np.iinfo(el.np_dtype)
        y = op_(bb, "math.roundeven", y)
        y = op_(bb, "arith.min", op_(bb, "arith.max", y, c(bb, float(info.min), F64)),
                c(bb, float(info.max), F64))
        return cast(bb, y, el)

    return elementwise(b, [cur], out, final)


@lowers("graph.resize")
def _resize(op, b):
    x = op.operands[0]
    axes = _resized_axes(op, x.type.shape)
    if not axes:
        r = x.type.rank
        return [build_generic([x], [empty(b, x.type)], x.type.shape, [identity_map(r)] * 2,
                              ["parallel"] * r, lambda bb, args: [args[0]], b=b).result]
    if op.attr("mode") == "nearest":
        return [_nearest(op, b, x, axes)]
    return [_interpolate(op, b, x, axes)]

