"""Sampling at data-given coordinates: ``graph.grid_sample`` (ONNX GridSample) and
``graph.roi_align`` (ONNX RoiAlign). Unlike ``graph.resize``, where the source coordinates are
a function of shapes and attributes, here they come from a tensor (the grid, the boxes), so the
lowering computes them per output element at run time.

Semantics are onnx's reference implementation (the node tests are generated from it); the
helpers below are shared with the lowering where a value is decided at compile time.

``graph.grid_sample``: ``X`` is ``(N, C, D1..Dr)``, ``grid`` ``(N, O1..Or, r)`` with normalized
coordinates in ``[-1, 1]``, the last grid axis in reverse order (``x``, i.e. the last spatial
dim, first). ``Y`` is ``(N, C, O1..Or)``. ``mode`` is ``linear`` (2^r taps), ``nearest`` (one;
ties to even, as PyTorch) or ``cubic`` (4^r taps, Keys' kernel with ``a = -0.75``);
``padding_mode`` ``zeros``, ``border`` or ``reflection``; ``align_corners`` 0 or 1. A coordinate
outside the border (``[-0.5, d - 0.5]``, or ``[0, d - 1]`` with ``align_corners``) is first
clamped (``border``) or reflected (``reflection``); then each tap index is padded again (zeros:
the tap reads 0; border: clamped; reflection: reflected and truncated). One departure from
onnx's reference, to match onnxruntime and PyTorch (where exported models come from): ``cubic``
with ``border`` padding clamps only the taps, not the coordinate first (onnx's reference clamps
both and differs from onnxruntime by up to ~0.3 on unit-scale data; no node test has this
pair). Coordinates are computed
in f32 (f64 when ``X`` or ``grid`` is f64), sums too. A NaN coordinate reads 0 with zeros padding
and the edge element otherwise (onnx's reference fails on it).

    %y = "graph.grid_sample"(%x, %grid) {mode = "linear", padding_mode = "zeros",
                                         align_corners = 0}
           : (tensor<1x3x8x8xf32>, tensor<1x4x4x2xf32>) -> tensor<1x3x4x4xf32>

``graph.roi_align``: ``X`` ``(N, C, H, W)``, ``rois`` ``(R, 4)`` boxes ``(x1, y1, x2, y2)`` in the
input's coordinates times ``spatial_scale``, ``batch_indices`` ``(R,)`` integers; ``Y`` is
``(R, C, output_height, output_width)``. Each output bin averages (``avg``) or takes the max
(``max``: of the weighted taps, ``max(w_k * x_k)``, as onnx's reference and onnxruntime do) of
``gh x gw`` bilinear samples. ``sampling_ratio > 0`` fixes ``gh = gw = sampling_ratio``; 0 makes
them ``ceil(roi_height / output_height)`` and ``ceil(roi_width / output_width)``: a function of
the roi values (the interpreter computes them from the data; the compiler needs the rois at
compile time then, see docs/onnx_coverage.md). ``half_pixel`` shifts boxes by -0.5 pixel
(``coordinate_transformation_mode = "half_pixel"``); otherwise (``output_half_pixel``, opset 10)
a box is at least 1x1. A sample outside ``[-1, H] x [-1, W]`` contributes 0. Coordinates are
computed in the rois' float type (f32 for f16/bf16), the sum in f32 (f64 for f64 ``X``).

    %y = "graph.roi_align"(%x, %rois, %bi) {mode = "avg", output_height = 7, output_width = 7,
                                            sampling_ratio = 2, spatial_scale = 0.25,
                                            half_pixel = 1}
           : (tensor<1x256x50x50xf32>, tensor<8x4xf32>, tensor<8xi64>) -> tensor<8x256x7x7xf32>
"""

from __future__ import annotations

import itertools

import numpy as np

from ...errors import IndexOutOfRangeError
from ...ir.spec import Attr, OpSpec, fail
from .common import ttype

GRID_MODES = ("linear", "nearest", "cubic")
PADDING_MODES = ("zeros", "border", "reflection")
CUBIC_A = -0.75


# ---- grid_sample --------------------------------------------------------------------------------

def borders(d: int, align_corners: int) -> tuple[float, float]:
    """The range a coordinate along a dim of length ``d`` may take before padding applies."""
    return (0.0, d - 1.0) if align_corners else (-0.5, d - 0.5)


def reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``x`` reflected by the nearer border until inside ``[lo, hi]`` (in f64, as the reference)."""
    x = np.asarray(x, np.float64)
    rng = hi - lo
    if rng == 0:
        return np.where((x < lo) | (x > hi), lo, x)
    below, above = x < lo, x > hi
    dx = np.where(below, lo - x, x - hi)
    with np.errstate(invalid="ignore"):
        n = np.floor(dx / rng)
        r = dx - n * rng
        even = np.fmod(n, 2) == 0
    return np.where(below, np.where(even, lo + r, hi - r),
                    np.where(above, np.where(even, hi - r, lo + r), x))


def cubic_weight(t: np.ndarray) -> np.ndarray:
    """Keys' cubic convolution kernel at distance ``|t| <= 2`` (a = -0.75)."""
    a = CUBIC_A
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, far)


def denormalize(g: np.ndarray, d: int, align_corners: int) -> np.ndarray:
    if align_corners:
        return (g + 1) / 2 * (d - 1)
    return ((g + 1) * d - 1) / 2


def _pad_index(f: np.ndarray, d: int, padding: str, lo: float, hi: float):
    """An integer-valued float tap index made readable: (index array, in-range mask)."""
    if padding == "border":
        f = np.clip(f, 0, d - 1)
    elif padding == "reflection":
        f = np.trunc(reflect(f, lo, hi)).astype(f.dtype)
    with np.errstate(invalid="ignore"):
        ok = (f >= 0) & (f <= d - 1)
    return np.where(ok, f, 0).astype(np.int64), ok


def grid_sample(x: np.ndarray, grid: np.ndarray, mode: str, padding: str,
                align_corners: int) -> np.ndarray:
    ct = np.float64 if np.float64 in (x.dtype, grid.dtype) else np.float32
    n, ch, *dims = x.shape
    r = len(dims)
    out_sp = grid.shape[1:-1]
    coords = []
    with np.errstate(invalid="ignore", over="ignore"):
        for i, d in enumerate(dims):
            v = denormalize(grid[..., r - 1 - i].astype(ct), d, align_corners)
            if mode == "nearest":
                v = np.rint(v)
            lo, hi = borders(d, align_corners)
            outside = (v < lo) | (v > hi)
            if padding == "border" and mode != "cubic":
                v = np.where(outside, np.clip(v, 0, d - 1), v)
            elif padding == "reflection":
                v = np.where(outside, reflect(v, lo, hi), v).astype(ct)
            coords.append(v.astype(ct))
    acc = np.float64 if ct == np.float64 else np.float32
    xs = np.moveaxis(x, 1, -1).astype(acc)        # (N, D.., C)
    nidx = np.arange(n).reshape((n,) + (1,) * len(out_sp))
    if mode == "nearest":
        taps = [[(np.trunc(v), np.ones_like(v))] for v in coords]
    else:
        taps = []
        for v in coords:
            base = np.floor(v)
            f = v - base
            if mode == "linear":
                taps.append([(base, 1 - f), (base + 1, f)])
            else:
                taps.append([(base + k - 1, cubic_weight(f - (k - 1)).astype(ct))
                             for k in range(4)])
    y = np.zeros((n,) + tuple(out_sp) + (ch,), acc)
    for combo in itertools.product(*taps):
        ids, ok, w = [], np.ones(grid.shape[:-1], bool), np.ones(grid.shape[:-1], acc)
        for i, (f, wi) in enumerate(combo):
            lo, hi = borders(dims[i], align_corners)
            idx, good = _pad_index(f, dims[i], padding, lo, hi)
            ids.append(idx)
            ok &= good
            w = w * wi.astype(acc)
        v = xs[(nidx, *ids)]
        if padding == "zeros":
            v = np.where(ok[..., None], v, 0)
        with np.errstate(invalid="ignore", over="ignore"):
            y = y + (v if mode == "nearest" else w[..., None] * v)
    return np.moveaxis(y, -1, 1).astype(x.dtype)


class GridSample(OpSpec):
    """``X`` sampled at the normalized coordinates of ``grid`` (module docstring)."""

    name = "graph.grid_sample"
    operands = ("X", "grid")
    results = ("Y",)
    attributes = {"mode": Attr("str", default="linear"),
                  "padding_mode": Attr("str", default="zeros"),
                  "align_corners": Attr("int", default=0)}
    traits = {"pure"}

    def infer_types(self, op):
        x, g = ttype(op, 0), ttype(op, 1)
        if x.rank < 3:
            fail(op, f"X must have rank >= 3 (N, C, spatial..), got {x}")
        r = x.rank - 2
        if g.rank != r + 2 or g.shape[0] != x.shape[0] or g.shape[-1] != r:
            fail(op, f"grid must be (N={x.shape[0]}, out spatial x{r}, {r}) for X {x}, got {g}")
        return [x.with_shape(x.shape[:2] + g.shape[1:-1])]

    def verify(self, op):
        x, g = ttype(op, 0), ttype(op, 1)
        if not x.element.is_float or not g.element.is_float:
            fail(op, f"X and grid must be float tensors, got {x} and {g}")
        if op.attr("mode") not in GRID_MODES:
            fail(op, f"mode must be one of {list(GRID_MODES)}, got {op.attr('mode')!r}")
        if op.attr("padding_mode") not in PADDING_MODES:
            fail(op, f"padding_mode must be one of {list(PADDING_MODES)}, got "
                     f"{op.attr('padding_mode')!r}")
        if op.attr("align_corners") not in (0, 1):
            fail(op, f"align_corners must be 0 or 1, got {op.attr('align_corners')}")

    def reference(self, op, args, interp):
        return [grid_sample(args[0], args[1], op.attr("mode"), op.attr("padding_mode"),
                            op.attr("align_corners"))]


# ---- roi_align ----------------------------------------------------------------------------------

def roi_geometry(rois: np.ndarray, ct, spatial_scale: float, half_pixel: int, oh: int, ow: int):
    """Per roi, in ``ct`` arithmetic as the reference: (start_h, start_w, bin_h, bin_w)."""
    rois = np.asarray(rois).astype(ct)
    ss, off = ct(spatial_scale), ct(0.5 if half_pixel else 0.0)
    sw, sh = rois[:, 0] * ss - off, rois[:, 1] * ss - off
    ew, eh = rois[:, 2] * ss - off, rois[:, 3] * ss - off
    rw, rh = ew - sw, eh - sh
    if not half_pixel:
        rw, rh = np.maximum(rw, ct(1)), np.maximum(rh, ct(1))
    return sh, sw, rh / ct(oh), rw / ct(ow), rh, rw


def adaptive_grid(rois: np.ndarray, ct, spatial_scale: float, half_pixel: int, oh: int,
                  ow: int) -> tuple[np.ndarray, np.ndarray]:
    """``sampling_ratio = 0``: samples per bin along h and w for every roi (int64, >= 0)."""
    *_, rh, rw = roi_geometry(rois, ct, spatial_scale, half_pixel, oh, ow)
    with np.errstate(invalid="ignore"):
        gh = np.nan_to_num(np.ceil(rh / ct(oh)), nan=0, posinf=0, neginf=0)
        gw = np.nan_to_num(np.ceil(rw / ct(ow)), nan=0, posinf=0, neginf=0)
    return np.maximum(gh, 0).astype(np.int64), np.maximum(gw, 0).astype(np.int64)


def _bilinear_taps(y, x, h: int, w: int):
    """The 4 taps of one sample per array element: [(row, col, weight)], and the inside mask."""
    with np.errstate(invalid="ignore"):
        inside = (y >= -1) & (y <= h) & (x >= -1) & (x <= w)
    y = np.where(inside, np.maximum(y, 0), 0)
    x = np.where(inside, np.maximum(x, 0), 0)
    out = []
    lows = []
    for v, d in ((y, h), (x, w)):
        low = np.floor(v)
        edge = low >= d - 1
        low = np.where(edge, d - 1, low)
        v = np.where(edge, low, v)
        high = np.where(edge, low, low + 1)
        frac = v - low
        lows.append(((low, 1 - frac), (high, frac)))
    for (ry, wy), (rx, wx) in itertools.product(*lows):
        out.append((ry.astype(np.int64), rx.astype(np.int64), wy * wx))
    return out, inside


def roi_align(x, rois, batch_indices, mode: str, oh: int, ow: int, sampling_ratio: int,
              spatial_scale: float, half_pixel: int, check: str = "RoiAlign") -> np.ndarray:
    n, ch, h, w = x.shape
    ct = np.float64 if rois.dtype == np.float64 else np.float32
    acc = np.float64 if x.dtype == np.float64 else np.float32
    sh, sw, bh, bw, _, _ = roi_geometry(rois, ct, spatial_scale, half_pixel, oh, ow)
    if sampling_ratio > 0:
        gh = gw = np.full(len(rois), sampling_ratio, np.int64)
    else:
        gh, gw = adaptive_grid(rois, ct, spatial_scale, half_pixel, oh, ow)
    y = np.zeros((len(rois), ch, oh, ow), acc)
    ph = np.arange(oh, dtype=ct)[:, None, None, None]
    pw = np.arange(ow, dtype=ct)[None, :, None, None]
    for k in range(len(rois)):
        b = int(batch_indices[k])
        if not -n <= b < n:
            raise IndexOutOfRangeError(f"{check} axis 0 (size {n}): index {b} out of range "
                                       f"[{-n}, {n})")
        b = b % n
        if gh[k] * gw[k] == 0:
            continue
        iy = np.arange(gh[k], dtype=ct)[None, None, :, None]
        ix = np.arange(gw[k], dtype=ct)[None, None, None, :]
        with np.errstate(invalid="ignore", over="ignore"):
            yy = sh[k] + ph * bh[k] + (iy + ct(0.5)) * bh[k] / ct(gh[k])
            xx = sw[k] + pw * bw[k] + (ix + ct(0.5)) * bw[k] / ct(gw[k])
        yy, xx = np.broadcast_arrays(yy, xx)
        taps, inside = _bilinear_taps(yy, xx, h, w)
        img = x[b].astype(acc)                                   # (C, H, W)
        vals = [np.where(inside, wt.astype(acc), 0) * img[:, ry, rx] for ry, rx, wt in taps]
        if mode == "avg":
            s = vals[0] + vals[1] + vals[2] + vals[3]           # (C, oh, ow, gh, gw)
            y[k] = s.sum(axis=(-2, -1)) / acc(gh[k] * gw[k])
        else:
            y[k] = np.maximum(np.maximum(vals[0], vals[1]),
                              np.maximum(vals[2], vals[3])).max(axis=(-2, -1))
    return y.astype(x.dtype)


class RoiAlign(OpSpec):
    """Bilinear pooling of ``X`` over boxes (module docstring)."""

    name = "graph.roi_align"
    operands = ("X", "rois", "batch_indices")
    results = ("Y",)
    attributes = {"mode": Attr("str", default="avg"),
                  "output_height": Attr("int", default=1),
                  "output_width": Attr("int", default=1),
                  "sampling_ratio": Attr("int", default=0),
                  "spatial_scale": Attr("float", default=1.0),
                  "half_pixel": Attr("int", default=1)}
    traits = {"pure"}

    def infer_types(self, op):
        x, rois, bi = ttype(op, 0), ttype(op, 1), ttype(op, 2)
        if x.rank != 4:
            fail(op, f"X must be (N, C, H, W), got {x}")
        if rois.rank != 2 or rois.shape[1] != 4:
            fail(op, f"rois must be (num_rois, 4), got {rois}")
        if bi.rank != 1 or bi.shape[0] != rois.shape[0]:
            fail(op, f"batch_indices must be ({rois.shape[0]},), got {bi}")
        oh, ow = op.attr("output_height"), op.attr("output_width")
        if oh < 1 or ow < 1:
            fail(op, f"output_height and output_width must be >= 1, got {oh}, {ow}")
        return [x.with_shape((rois.shape[0], x.shape[1], oh, ow))]

    def verify(self, op):
        x, rois, bi = ttype(op, 0), ttype(op, 1), ttype(op, 2)
        if not x.element.is_float or not rois.element.is_float:
            fail(op, f"X and rois must be float tensors, got {x} and {rois}")
        if bi.element.is_float or bi.element.name == "i1":
            fail(op, f"batch_indices must be integers, got {bi}")
        if op.attr("mode") not in ("avg", "max"):
            fail(op, f"mode must be avg or max, got {op.attr('mode')!r}")
        if op.attr("sampling_ratio") < 0:
            fail(op, f"sampling_ratio must be >= 0, got {op.attr('sampling_ratio')}")
        if op.attr("half_pixel") not in (0, 1):
            fail(op, f"half_pixel must be 0 or 1, got {op.attr('half_pixel')}")

    def reference(self, op, args, interp):
        return [roi_align(args[0], args[1], np.asarray(args[2]), op.attr("mode"),
                          op.attr("output_height"), op.attr("output_width"),
                          op.attr("sampling_ratio"), op.attr("spatial_scale"),
                          op.attr("half_pixel"),
                          "RoiAlign" + (f" {op.loc!r}" if op.loc else ""))]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (GridSample, RoiAlign)
