"""``graph.resize``: ONNX Resize (opset 11+ semantics; the importer maps opset 10 onto it).

Everything that decides the result is an attribute, resolved by the importer: ``sizes`` (the full
output shape), ``scales`` (one per axis, the factors the coordinate transformation divides by:
ONNX's ``scales`` input, or ``sizes / input shape`` when sizes were given; ``axes`` and
``keep_aspect_ratio_policy`` are already applied), ``roi`` (only for ``tf_crop_and_resize``: all
starts then all ends, one pair per axis).

The reference is separable, as ONNX defines it: axis by axis (in increasing order), every output
index is mapped to a source coordinate ``x``; ``nearest`` takes one input index, ``linear`` and
``cubic`` a weighted sum of the neighbours of ``x``: edge-clamped taps, taps on one input merged
into one weight (:func:`clamped_taps`: the weight matrix's entry), summed tap by tap
(:func:`tap_sum`), where a weight of exactly zero contributes nothing: an infinite input
outside the kernel's support never becomes ``0 * inf = NaN`` (issue 40: a dense weight matrix
product gave NaN rows). ``antialias`` widens the linear/cubic kernel by ``1 / scale`` when
downsampling.

Infinities: inside the support, ``w * inf`` follows IEEE (``+inf`` and ``-inf`` both in one
window give NaN). onnxruntime sometimes gives NaN where ptxc does not: its tap window may hold a
zero-weight tap on an infinity (an integral source coordinate takes the taps ``x-1 .. x+2``;
ptxc, as ONNX's reference, ``x-2 .. x+1``), and without antialias it multiplies edge-clamped taps
one by one (``-w * inf + w' * inf``); wherever onnxruntime's result is not NaN, ptxc's equals it
(tests/test_reference_semantics.py).

Where the ONNX text and its reference implementation differ, ptxc follows the reference (the node
tests are generated from it): ``align_corners`` and ``tf_crop_and_resize`` divide by the unrounded
output length ``scale * length_original - 1`` (onnxruntime: the integer length; they agree
whenever ``scale * length`` is integral), and ``pytorch_half_pixel`` maps an output of length 1 to
coordinate -0.5.

    %y = "graph.resize"(%x) {mode = "linear", coordinate_transformation_mode = "half_pixel",
                             scales = [1.0, 1.0, 2.0, 2.0], sizes = [1, 3, 8, 8], ...}
"""

from __future__ import annotations

import math

import numpy as np

from ...ir.spec import Attr, OpSpec, fail
from .common import ttype

MODES = ("nearest", "linear", "cubic")
COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
               "asymmetric", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


class Resize(OpSpec):
    """Resizes ``X`` to ``sizes`` by nearest, (multi)linear or cubic interpolation; see the module
    docstring for the attributes."""

    name = "graph.resize"
    operands = ("X",)
    results = ("Y",)
    attributes = {
        "sizes": Attr("ints", required=True, doc="the output shape"),
        "scales": Attr("floats", required=True, doc="per-axis factor of the coordinate mapping"),
        "mode": Attr("str", default="nearest"),
        "coordinate_transformation_mode": Attr("str", default="half_pixel"),
        "nearest_mode": Attr("str", default="round_prefer_floor"),
        "cubic_coeff_a": Attr("float", default=-0.75),
        "exclude_outside": Attr("int", default=0),
        "extrapolation_value": Attr("float", default=0.0),
        "antialias": Attr("int", default=0),
        "roi": Attr("floats", doc="tf_crop_and_resize only: starts then ends"),
    }
    traits = {"pure"}

    def infer_types(self, op):
        x = ttype(op)
        sizes = tuple(op.attr("sizes") or ())
        scales = tuple(op.attr("scales") or ())
        if len(sizes) != x.rank or any(s < 0 for s in sizes):
            fail(op, f"sizes must hold {x.rank} non-negative ints, got {list(sizes)}")
        if len(scales) != x.rank or any(not s > 0 for s in scales):
            fail(op, f"scales must hold {x.rank} positive floats, got {list(scales)}")
        return [x.with_shape(sizes)]

    def verify(self, op):
        checks = (("mode", MODES), ("coordinate_transformation_mode", COORD_MODES),
                  ("nearest_mode", NEAREST_MODES))
        for name, allowed in checks:
            if op.attr(name) not in allowed:
                fail(op, f"{name} must be one of {list(allowed)}, got {op.attr(name)!r}")
        x = ttype(op)
        if op.attr("coordinate_transformation_mode") == "tf_crop_and_resize":
            roi = op.attr("roi")
            if roi is None or len(roi) != 2 * x.rank:
                fail(op, f"tf_crop_and_resize needs roi with {2 * x.rank} floats, got {roi}")
        if op.attr("antialias") and op.attr("mode") == "nearest":
            fail(op, "antialias applies to modes linear and cubic, not nearest")
        if op.attr("mode") != "nearest" and not x.element.is_float and \
                x.element.name not in ("i8", "ui8", "i32", "i64"):
            fail(op, f"mode {op.attr('mode')!r} needs a float or integer tensor, got {x}")

    def reference(self, op, args, interp):
        x = args[0]
        roi = op.attr("roi")
        r = x.ndim
        y = x
        for axis in range(r):
            out, scale = op.attr("sizes")[axis], op.attr("scales")[axis]
            pair = None if roi is None else (roi[axis], roi[r + axis])
            if out == y.shape[axis] and math.isclose(scale, 1.0) and (
                    op.attr("coordinate_transformation_mode") != "tf_crop_and_resize"
                    or (math.isclose(pair[0], 0.0) and math.isclose(pair[1], 1.0))):
                continue
            y = _resize_axis(op, y, axis, out, scale, pair)
        if y.dtype != x.dtype:
            if x.dtype.kind in "iu":
                info = np.iinfo(x.dtype)
                y = np.clip(np.round(y), info.min, info.max)
            y = y.astype(x.dtype)
        return [y.copy() if y is x else y]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (Resize,)


def source_coords(ctm: str, out: int, size: int, scale: float, roi_pair):
    """Source coordinate of every output index along one axis (float64), and for
    ``tf_crop_and_resize`` the mask of outputs that fall outside the input."""
    y = np.arange(out, dtype=np.float64)
    width = scale * size  # ONNX uses the unrounded output length here
    extrapolated = None
    if ctm == "align_corners":
        x = np.zeros(out) if width == 1 else y * (size - 1) / (width - 1)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_crop_and_resize":
        start, end = roi_pair
        if width == 1:
            x = np.full(out, (end - start) * (size - 1) / 2)
        else:
            x = y * (end - start) * (size - 1) / (width - 1)
        x = x + start * (size - 1)
        extrapolated = (x < 0) | (x > size - 1)
    elif ctm == "pytorch_half_pixel":
        x = np.full(out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    else:  # half_pixel_symmetric
        offset = size / 2 * (1 - out / width)
        x = offset + (y + 0.5) / scale - 0.5
    return x, extrapolated


def _cubic(t, a):
    t = np.abs(t)
    t2, t3 = t * t, t * t * t
    return np.where(t <= 1, (a + 2) * t3 - (a + 3) * t2 + 1,
                    np.where(t < 2, a * t3 - 5 * a * t2 + 8 * a * t - 4 * a, 0.0))


def _linear(t, a=None):
    return np.clip(1 - np.abs(t), 0, 1)


def _resize_axis(op, data, axis, out, scale, roi_pair):
    size = data.shape[axis]
    mode = op.attr("mode")
    x, extrapolated = source_coords(op.attr("coordinate_transformation_mode"), out, size,
                                    scale, roi_pair)
    base = np.floor(x)
    frac = x - base
    # as ONNX: an integral coordinate is the right neighbour of the pair (base - 1, base)
    integral = frac == 0
    base = np.where(integral, base - 1, base).astype(np.int64)
    frac = np.where(integral, 1.0, frac)
    if mode == "nearest":
        nm = op.attr("nearest_mode")
        if nm == "round_prefer_floor":
            pick = frac > 0.5
        elif nm == "round_prefer_ceil":
            pick = frac >= 0.5
        elif nm == "floor":
            pick = integral
        else:
            pick = np.ones_like(integral)
        idx = np.clip(base + pick, 0, size - 1)
        result = np.take(data, idx, axis=axis)
        if extrapolated is not None and extrapolated.any():
            result = _extrapolate(op, result, axis, extrapolated)
        return result
    kernel, radius = (_linear, 1) if mode == "linear" else (_cubic, 2)
    if op.attr("antialias"):
        s = min(scale, 1.0)
        start = int(math.floor(-radius / s)) + 1
        offsets = np.arange(start, 2 - start)
        coeffs = kernel(s * (offsets[None, :] - frac[:, None]), op.attr("cubic_coeff_a"))
        coeffs = coeffs / coeffs.sum(axis=1, keepdims=True)
    else:
        offsets = np.arange(1 - radius, radius + 1)
        coeffs = kernel(offsets[None, :] - frac[:, None], op.attr("cubic_coeff_a"))
    idx = base[:, None] + offsets[None, :]
    if op.attr("exclude_outside"):
        coeffs = np.where((idx < 0) | (idx >= size), 0.0, coeffs)
        total = coeffs.sum(axis=1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    src, coeffs = clamped_taps(idx, coeffs, size)
    result = np.moveaxis(tap_sum(np.moveaxis(data, axis, -1), src, coeffs), -1, axis)
    if extrapolated is not None and extrapolated.any():
        result = _extrapolate(op, result, axis, extrapolated)
    return result


def clamped_taps(idx: np.ndarray, coeffs: np.ndarray, size: int):
    """The taps ``(src, coeffs)`` of one axis with their indices clamped to the edge, and the
    weights of the taps that land on one input index merged into the first of them (the
    others get weight 0): each input's weight is the sum of its taps', as a weight matrix
    would hold it. So an edge input reached by taps of opposite signs has one weight, and an
    infinity there gives an infinity, not ``inf - inf`` (onnxruntime's antialias path does
    the same). Rows of ``idx`` are increasing, so equal clamped indices are adjacent."""
    src = np.clip(idx, 0, size - 1)
    taps = src.shape[1]
    new = np.ones(src.shape, bool)
    new[:, 1:] = src[:, 1:] != src[:, :-1]
    first = np.maximum.accumulate(np.where(new, np.arange(taps), 0), axis=1)
    merged = np.zeros(coeffs.shape, np.float64)
    rows = np.broadcast_to(np.arange(src.shape[0])[:, None], src.shape)
    np.add.at(merged, (rows, first), coeffs)
    return src, merged


def tap_sum(moved: np.ndarray, src: np.ndarray, coeffs: np.ndarray) -> np.ndarray:
    """``y[..., o] = sum_t coeffs[o, t] * moved[..., src[o, t]]`` in f64, tap by tap in order,
    where a tap whose weight is exactly zero adds nothing: its input is not part of the
    interpolation, so an infinite value there must not make ``0 * inf = NaN`` (a dense
    (out, in) weight matrix would multiply every input, and one -inf would turn whole rows into
    NaN). The compiled engine sums the same taps in the same order
    (:mod:`ptxc.lower.graph_to_tensor.resize`)."""
    moved = moved.astype(np.float64, copy=False)
    acc = np.zeros(moved.shape[:-1] + (src.shape[0],))
    with np.errstate(invalid="ignore"):  # +inf and -inf in one window: NaN, as IEEE says
        for t in range(src.shape[1]):
            w = coeffs[:, t]
            term = np.zeros_like(acc)
            np.multiply(moved[..., src[:, t]], w, out=term, where=w != 0)
            acc += term
    return acc


def _extrapolate(op, result, axis, mask):
    shape = [1] * result.ndim
    shape[axis] = mask.size
    value = np.asarray(op.attr("extrapolation_value")).astype(result.dtype)
    return np.where(mask.reshape(shape), value, result)
