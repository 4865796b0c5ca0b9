"""Converters of ONNX GridSample (opsets 16, 20, 22) and RoiAlign (opsets 10, 16, 22) onto
``graph.grid_sample`` and ``graph.roi_align`` (ptxc/dialects/graph/sample.py).

GridSample-16 names its modes ``bilinear``/``nearest``/``bicubic`` and is 4-D only; from 20 they
are ``linear``/``nearest``/``cubic`` and the input may have any number of spatial dims (ptxc
takes 1 to 3: cubic over r dims reads 4^r taps per output). The graph op always carries the
opset-20 names. RoiAlign-10 has no ``coordinate_transformation_mode`` (it behaves as
``output_half_pixel``); from 16 the default is ``half_pixel``. ``sampling_ratio = 0`` (adaptive)
is accepted here for any rois; the compiler needs the rois at compile time in that case (the
sample count per bin is a function of them) and says so naming the node; see
docs/onnx_coverage.md.
"""

from __future__ import annotations

from ...dialects.graph.sample import PADDING_MODES
from .context import ConvertContext, converter

_MODES_16 = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}
_MODES_20 = {"linear": "linear", "nearest": "nearest", "cubic": "cubic"}
MAX_GRID_RANK = 3


@converter("GridSample")
def grid_sample(ctx: ConvertContext):
    x, g = ctx.type(0), ctx.type(1)
    modes = _MODES_16 if ctx.opset < 20 else _MODES_20
    mode = ctx.attr("mode", "bilinear" if ctx.opset < 20 else "linear")
    if mode not in modes:
        raise ctx.error(f"mode must be one of {list(modes)} at opset {ctx.opset}, got {mode!r}")
    padding = ctx.attr("padding_mode", "zeros")
    if padding not in PADDING_MODES:
        raise ctx.error(f"padding_mode must be one of {list(PADDING_MODES)}, got {padding!r}")
    align = int(ctx.attr("align_corners", 0))
    if align not in (0, 1):
        raise ctx.error(f"align_corners must be 0 or 1, got {align}")
    r = x.rank - 2
    if ctx.opset < 20 and x.rank != 4:
        raise ctx.error(f"GridSample-{ctx.opset} takes a 4-D input, got {x}")
    if not 1 <= r <= MAX_GRID_RANK:
        raise ctx.error(f"ptxc samples 1 to {MAX_GRID_RANK} spatial dims; the input {x} has {r}")
    if g.rank != x.rank or g.shape[0] != x.shape[0] or g.shape[-1] != r:
        raise ctx.error(f"grid must be (N={x.shape[0]}, output spatial dims x{r}, {r}) for the "
                        f"input {x}, got {g}")
    return ctx.emit("graph.grid_sample", [ctx.input(0), ctx.input(1)],
                    {"mode": modes[mode], "padding_mode": padding, "align_corners": align})


@converter("RoiAlign")
def roi_align(ctx: ConvertContext):
    if ctx.opset < 16:
        ctm = "output_half_pixel"
        if ctx.has_attr("coordinate_transformation_mode"):
            raise ctx.error("coordinate_transformation_mode is an attribute of RoiAlign-16+")
    else:
        ctm = ctx.attr("coordinate_transformation_mode", "half_pixel")
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise ctx.error("coordinate_transformation_mode must be half_pixel or output_half_pixel,"
                        f" got {ctm!r}")
    mode = ctx.attr("mode", "avg")
    if mode not in ("avg", "max"):
        raise ctx.error(f"mode must be avg or max, got {mode!r}")
    ratio = int(ctx.attr("sampling_ratio", 0))
    if ratio < 0:
        raise ctx.error(f"sampling_ratio must be >= 0, got {ratio}")
    oh, ow = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    if oh < 1 or ow < 1:
        raise ctx.error(f"output_height and output_width must be >= 1, got {oh} and {ow}")
    x, rois, bi = ctx.type(0), ctx.type(1), ctx.type(2)
    if x.rank != 4:
        raise ctx.error(f"X must be (N, C, H, W), got {x}")
    if rois.rank != 2 or rois.shape[1] != 4:
        raise ctx.error(f"rois must be (num_rois, 4), got {rois}")
    if bi.rank != 1 or bi.shape[0] != rois.shape[0]:
        raise ctx.error(f"batch_indices must be ({rois.shape[0]},) to match rois, got {bi}")
    return ctx.emit("graph.roi_align", [ctx.input(0), ctx.input(1), ctx.input(2)], {
        "mode": mode, "output_height": oh, "output_width": ow, "sampling_ratio": ratio,
        "spatial_scale": float(ctx.attr("spatial_scale", 1.0)),
        "half_pixel": int(ctm == "half_pixel")})
