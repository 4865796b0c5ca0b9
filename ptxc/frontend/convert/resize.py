"""Converter of ONNX Resize (opsets 10, 11, 13, 18, 19): scales/sizes (and roi for
``tf_crop_and_resize``) must be known at compile time; ``axes`` and ``keep_aspect_ratio_policy``
are applied here, so ``graph.resize`` always carries full-rank ``sizes`` and ``scales``.

Opset 10 has the semantics onnxruntime gives it: ``asymmetric`` coordinates, and for ``nearest``
the source index truncated when upsampling, rounded up when downsampling.
"""

from __future__ import annotations

import math

import numpy as np

from ...dialects.graph.resize import COORD_MODES, MODES, NEAREST_MODES
from .context import ConvertContext, converter


def _vector(ctx: ConvertContext, i: int, what: str):
    """The contents of optional input ``i`` as a 1-D array, None when absent or empty."""
    if ctx.input(i) is None or ctx.input(i).type.size == 0:
        return None
    return np.asarray(ctx.const(i, what)).reshape(-1)


def _choice(ctx: ConvertContext, name: str, default: str, allowed) -> str:
    v = ctx.attr(name, default)
    if v not in allowed:
        raise ctx.error(f"{name} must be one of {list(allowed)}, got {v!r}")
    return v


@converter("Resize")
def resize(ctx: ConvertContext):
    t = ctx.type(0)
    r = t.rank
    if ctx.opset < 11:
        return _resize10(ctx, t)
    mode = _choice(ctx, "mode", "nearest", MODES)
    ctm = _choice(ctx, "coordinate_transformation_mode", "half_pixel", COORD_MODES)
    nearest_mode = _choice(ctx, "nearest_mode", "round_prefer_floor", NEAREST_MODES)
    policy = _choice(ctx, "keep_aspect_ratio_policy", "stretch",
                     ("stretch", "not_larger", "not_smaller"))
    antialias = int(ctx.attr("antialias", 0))
    exclude_outside = int(ctx.attr("exclude_outside", 0))
    if antialias not in (0, 1) or exclude_outside not in (0, 1):
        raise ctx.error("antialias and exclude_outside must be 0 or 1")
    if antialias and mode == "nearest":
        raise ctx.error("antialias is defined for modes linear and cubic, not nearest")
    axes = ctx.attr("axes")
    if axes is None:
        axes = list(range(r))
    else:
        axes = [int(a) for a in axes]
        if any(not -r <= a < r for a in axes):
            raise ctx.error(f"axes {axes} out of range for rank {r}")
        axes = [a % r for a in axes]
        if len(set(axes)) != len(axes):
            raise ctx.error(f"axes {axes} has duplicates")
    k = len(axes)

    sizes_in = _vector(ctx, 3, "sizes") if ctx.num_inputs > 3 else None
    scales_in = None if sizes_in is not None else _vector(ctx, 2, "scales")
    if (sizes_in is None) == (scales_in is None):
        raise ctx.error("exactly one of scales and sizes must be given")
    scales = [1.0] * r
    sizes = list(t.shape)
    if scales_in is not None:
        if scales_in.size != k:
            raise ctx.error(f"scales must hold {k} values, got {scales_in.size}")
        for a, s in zip(axes, scales_in):
            if not s > 0:
                raise ctx.error(f"scales must be positive, got {scales_in.tolist()}")
            scales[a] = float(s)
            sizes[a] = int(math.floor(float(s) * t.shape[a]))
    else:
        if sizes_in.size != k:
            raise ctx.error(f"sizes must hold {k} values, got {sizes_in.size}")
        for a, s in zip(axes, sizes_in):
            if s < 0 or (t.shape[a] == 0 and s != 0):
                raise ctx.error(f"sizes {sizes_in.tolist()} invalid for input {t}")
            sizes[a] = int(s)
            scales[a] = int(s) / t.shape[a] if t.shape[a] else 1.0
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            s = pick(scales[a] for a in axes)
            for a in axes:
                scales[a] = s
                sizes[a] = int(s * t.shape[a] + 0.5)
    if any(d == 0 for d in sizes) and t.size:
        raise ctx.error(f"the output shape {sizes} is empty")
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm, "nearest_mode": nearest_mode,
             "cubic_coeff_a": float(ctx.attr("cubic_coeff_a", -0.75)),
             "exclude_outside": exclude_outside,
             "extrapolation_value": float(ctx.attr("extrapolation_value", 0.0)),
             "antialias": antialias, "scales": tuple(scales), "sizes": tuple(sizes)}
    if ctm == "tf_crop_and_resize":
        roi_in = _vector(ctx, 1, "roi")
        if roi_in is None:
            raise ctx.error("coordinate_transformation_mode tf_crop_and_resize needs roi")
        if roi_in.size != 2 * k:
            raise ctx.error(f"roi must hold {2 * k} values, got {roi_in.size}")
        roi = [0.0] * r + [1.0] * r
        for i, a in enumerate(axes):
            roi[a], roi[r + a] = float(roi_in[i]), float(roi_in[k + i])
        attrs["roi"] = tuple(roi)
    return ctx.emit("graph.resize", [ctx.input(0)], attrs)


def _resize10(ctx: ConvertContext, t):
    mode = _choice(ctx, "mode", "nearest", ("nearest", "linear"))
    scales_in = np.asarray(ctx.const(1, "scales")).reshape(-1)
    if scales_in.size != t.rank or not (scales_in > 0).all():
        raise ctx.error(f"scales must hold {t.rank} positive values, got {scales_in.tolist()}")
    scales = [float(s) for s in scales_in]
    sizes = [int(math.floor(s * d)) for s, d in zip(scales, t.shape)]
    nearest_mode = "floor"
    if mode == "nearest" and any(s < 1 for s in scales):
        if any(s > 1 for s in scales):
            raise ctx.error("opset-10 Resize (nearest) that upsamples some axes and downsamples "
                            "others is not supported")
        nearest_mode = "ceil"
    return ctx.emit("graph.resize", [ctx.input(0)], {
        "mode": mode, "coordinate_transformation_mode": "asymmetric",
        "nearest_mode": nearest_mode, "scales": tuple(scales), "sizes": tuple(sizes)})
