"""Converters of ONNX convolution, pooling, softmax and padding ops.

Spatial attributes come out explicit: ``kernel_shape``, ``strides``, ``dilations`` always present,
``auto_pad`` resolved into ``pads``; ConvTranspose's ``output_shape`` resolved into ``pads`` and
``output_padding``. Softmax/LogSoftmax before opset 13 (softmax over the input flattened to 2-D at
``axis``) become reshape, per-axis softmax, reshape.
"""

from __future__ import annotations

import numpy as np

from .context import ConvertContext, converter

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def ints_attr(ctx: ConvertContext, name: str, n: int, default, positive: bool = True) -> tuple:
    """A per-axis int attribute of length ``n`` (``default`` when absent)."""
    v = ctx.attr(name)
    if v is None:
        return tuple(int(d) for d in default)
    v = tuple(int(d) for d in v)
    if len(v) != n:
        raise ctx.error(f"{name} must have {n} values for {n} spatial axes, got {list(v)}")
    if positive and any(d < 1 for d in v):
        raise ctx.error(f"{name} must be positive, got {list(v)}")
    return v


def auto_pad(ctx: ConvertContext) -> str:
    mode = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    if mode not in AUTO_PADS:
        raise ctx.error(f"auto_pad must be one of {list(AUTO_PADS)}, got {mode!r}")
    return mode


def resolve_pads(ctx: ConvertContext, spatial, kernel, strides, dilations) -> tuple:
    """Explicit pads (begins then ends) from ``pads`` and ``auto_pad`` (Conv and the pools)."""
    n = len(spatial)
    mode = auto_pad(ctx)
    if mode == "VALID":
        return (0,) * (2 * n)
    if mode == "NOTSET":
        pads = ctx.attr("pads")
        if pads is None:
            return (0,) * (2 * n)
        pads = tuple(int(p) for p in pads)
        if len(pads) != 2 * n or any(p < 0 for p in pads):
            raise ctx.error(f"pads must hold {2 * n} non-negative ints, got {list(pads)}")
        return pads
    begins, ends = [], []
    for i in range(n):
        out = -(-spatial[i] // strides[i])
        total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - spatial[i])
        small, big = total // 2, total - total // 2
        begins.append(small if mode == "SAME_UPPER" else big)
        ends.append(big if mode == "SAME_UPPER" else small)
    return tuple(begins + ends)


def _spatial_input(ctx: ConvertContext, what: str = "X"):
    t = ctx.type(0)
    if t.rank < 3:
        raise ctx.error(f"{what} must have rank >= 3 (N, C, spatial...), got {t}")
    return t, t.rank - 2


# ---- convolutions ----------------------------------------------------------------------------

@converter("Conv")
def conv(ctx: ConvertContext):
    xt, n = _spatial_input(ctx)
    wt = ctx.type(1)
    if wt.rank != xt.rank:
        raise ctx.error(f"W must have rank {xt.rank} like X, got {wt}")
    kernel = ints_attr(ctx, "kernel_shape", n, wt.shape[2:])
    if kernel != tuple(wt.shape[2:]):
        raise ctx.error(f"kernel_shape {list(kernel)} does not match W {wt}")
    strides = ints_attr(ctx, "strides", n, (1,) * n)
    dilations = ints_attr(ctx, "dilations", n, (1,) * n)
    pads = resolve_pads(ctx, xt.shape[2:], kernel, strides, dilations)
    group = int(ctx.attr("group", 1))
    if group < 1 or xt.shape[1] % group or wt.shape[0] % group:
        raise ctx.error(f"group {group} must divide the input channels {xt.shape[1]} and the "
                        f"output channels {wt.shape[0]}")
    return ctx.emit("graph.conv", [ctx.input(0), ctx.input(1), ctx.input(2)], {
        "kernel_shape": kernel, "strides": strides, "pads": pads, "dilations": dilations,
        "group": group})


@converter("ConvTranspose")
def conv_transpose(ctx: ConvertContext):
    xt, n = _spatial_input(ctx)
    wt = ctx.type(1)
    if wt.rank != xt.rank:
        raise ctx.error(f"W must have rank {xt.rank} like X, got {wt}")
    kernel = ints_attr(ctx, "kernel_shape", n, wt.shape[2:])
    if kernel != tuple(wt.shape[2:]):
        raise ctx.error(f"kernel_shape {list(kernel)} does not match W {wt}")
    strides = ints_attr(ctx, "strides", n, (1,) * n)
    dilations = ints_attr(ctx, "dilations", n, (1,) * n)
    opad = list(ints_attr(ctx, "output_padding", n, (0,) * n, positive=False))
    if any(p < 0 for p in opad):
        raise ctx.error(f"output_padding must be non-negative, got {opad}")
    group = int(ctx.attr("group", 1))
    if group < 1 or xt.shape[1] % group:
        raise ctx.error(f"group {group} must divide the input channels {xt.shape[1]}")
    mode = auto_pad(ctx)
    ins = xt.shape[2:]
    out_shape = ctx.attr("output_shape")
    if out_shape is not None:
        out_shape = [int(d) for d in out_shape]
        if len(out_shape) == n + 2:
            out_shape = out_shape[2:]
        if len(out_shape) != n:
            raise ctx.error(f"output_shape must have {n} values, got {out_shape}")
    elif mode in ("SAME_UPPER", "SAME_LOWER"):
        out_shape = [i * s for i, s in zip(ins, strides)]
    if out_shape is not None:
        begins, ends = [], []
        for i in range(n):
            full = strides[i] * (ins[i] - 1) + opad[i] + (kernel[i] - 1) * dilations[i] + 1
            total = full - out_shape[i]
            if total < 0:  # a longer output than the full result: extra positions at the end
                opad[i] -= total
                total = 0
            small, big = total // 2, total - total // 2
            begins.append(small if mode == "SAME_UPPER" else big)
            ends.append(big if mode == "SAME_UPPER" else small)
        pads = tuple(begins + ends)
    elif mode == "VALID":
        pads = (0,) * (2 * n)
    else:
        pads = tuple(int(p) for p in (ctx.attr("pads") or (0,) * (2 * n)))
        if len(pads) != 2 * n or any(p < 0 for p in pads):
            raise ctx.error(f"pads must hold {2 * n} non-negative ints, got {list(pads)}")
    return ctx.emit("graph.conv_transpose", [ctx.input(0), ctx.input(1), ctx.input(2)], {
        "kernel_shape": kernel, "strides": strides, "pads": pads, "dilations": dilations,
        "output_padding": tuple(opad), "group": group})


# ---- pools -------------------------------------------------------------------------------------

def _pool_attrs(ctx: ConvertContext) -> dict:
    xt, n = _spatial_input(ctx)
    kernel = ctx.attr("kernel_shape")
    if kernel is None:
        raise ctx.error("kernel_shape is required")
    kernel = ints_attr(ctx, "kernel_shape", n, kernel)
    strides = ints_attr(ctx, "strides", n, (1,) * n)
    dilations = ints_attr(ctx, "dilations", n, (1,) * n)
    pads = resolve_pads(ctx, xt.shape[2:], kernel, strides, dilations)
    ceil_mode = int(ctx.attr("ceil_mode", 0))
    if ceil_mode not in (0, 1):
        raise ctx.error(f"ceil_mode must be 0 or 1, got {ceil_mode}")
    if auto_pad(ctx) != "NOTSET":
        ceil_mode = 0  # auto_pad fixes the output size: ceil(in / stride) or the VALID count
    return {"kernel_shape": kernel, "strides": strides, "pads": pads, "dilations": dilations,
            "ceil_mode": ceil_mode}


@converter("MaxPool")
def max_pool(ctx: ConvertContext):
    attrs = _pool_attrs(ctx)
    if int(ctx.attr("storage_order", 0)) not in (0, 1):
        raise ctx.error(f"storage_order must be 0 or 1, got {ctx.attr('storage_order')}")
    # only Y: the Indices output (and with it storage_order) is not computed
    return ctx.emit("graph.max_pool", [ctx.input(0)], attrs)


@converter("AveragePool")
def average_pool(ctx: ConvertContext):
    attrs = _pool_attrs(ctx)
    cip = int(ctx.attr("count_include_pad", 0))
    if cip not in (0, 1):
        raise ctx.error(f"count_include_pad must be 0 or 1, got {cip}")
    attrs["count_include_pad"] = cip
    return ctx.emit("graph.average_pool", [ctx.input(0)], attrs)


@converter("GlobalAveragePool")
def global_average_pool(ctx: ConvertContext):
    return ctx.emit("graph.global_average_pool", [ctx.input(0)])


@converter("GlobalMaxPool")
def global_max_pool(ctx: ConvertContext):
    return ctx.emit("graph.global_max_pool", [ctx.input(0)])


# ---- softmax -----------------------------------------------------------------------------------

def _softmax(ctx: ConvertContext, op_name: str):
    t = ctx.type(0)
    if t.rank == 0:
        raise ctx.error("input must have rank >= 1")
    default = -1 if ctx.opset >= 13 else 1
    axis = int(ctx.attr("axis", default))
    if not -t.rank <= axis < t.rank:
        raise ctx.error(f"axis {axis} out of range for rank {t.rank}")
    axis %= t.rank
    x = ctx.input(0)
    if ctx.opset >= 13 or int(np.prod(t.shape[axis + 1:], dtype=np.int64)) == 1:
        return ctx.emit(op_name, [x], {"axis": axis})
    # before opset 13: softmax of the input flattened to 2-D at axis
    rows = int(np.prod(t.shape[:axis], dtype=np.int64))
    flat = ctx.emit1("graph.reshape", [x], {"shape": (rows, t.size // max(rows, 1))})
    y = ctx.emit1(op_name, [flat], {"axis": 1})
    return ctx.emit("graph.reshape", [y], {"shape": tuple(t.shape)})


@converter("Softmax")
def softmax(ctx: ConvertContext):
    return _softmax(ctx, "graph.softmax")


@converter("LogSoftmax")
def log_softmax(ctx: ConvertContext):
    return _softmax(ctx, "graph.log_softmax")


# ---- pad ---------------------------------------------------------------------------------------

@converter("Pad")
def pad(ctx: ConvertContext):
    t = ctx.type(0)
    r = t.rank
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.error(f"mode must be constant, reflect, edge or wrap, got {mode!r}")
    value = None
    if ctx.opset < 11:
        pads = ctx.attr("pads")
        if pads is None:
            raise ctx.error("pads is required")
        pads = [int(p) for p in pads]
        v = float(ctx.attr("value", 0.0))
        if mode == "constant" and v != 0.0:
            value = ctx.constant(np.array(v).astype(t.element.np_dtype))
        axes = list(range(r))
    else:
        pads = [int(p) for p in np.asarray(ctx.const(1, "pads")).reshape(-1)]
        if mode == "constant":
            value = ctx.input(2)
            if value is not None and value.type.size == 0:
                value = None
            elif value is not None and value.type.size != 1:
                raise ctx.error(f"constant_value must be a scalar, got {value.type}")
        axes_v = ctx.const(3, "axes") if ctx.opset >= 18 else None
        if axes_v is None:
            axes = list(range(r))
        else:
            axes = [int(a) for a in np.asarray(axes_v).reshape(-1)]
            if any(not -r <= a < r for a in axes):
                raise ctx.error(f"axes {axes} out of range for rank {r}")
            axes = [a % r for a in axes]
            if len(set(axes)) != len(axes):
                raise ctx.error(f"axes {axes} has duplicates")
    k = len(axes)
    if len(pads) != 2 * k:
        raise ctx.error(f"pads must hold {2 * k} values for {k} axes, got {pads}")
    full = [0] * (2 * r)
    for i, a in enumerate(axes):
        full[a], full[r + a] = pads[i], pads[k + i]
    for i, d in enumerate(t.shape):
        if d + full[i] + full[r + i] < 0:
            raise ctx.error(f"pads {pads} crop axis {i} (size {d}) below zero")
    return ctx.emit("graph.pad", [ctx.input(0), value], {"pads": tuple(full), "mode": mode})
