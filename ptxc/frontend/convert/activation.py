"""Converters of ONNX activation ops (Relu is in elementwise.py). Attribute defaults are written
out explicitly on the graph op."""

from __future__ import annotations

import numpy as np

from .context import ConvertContext, converter

#: ONNX op -> (graph op, {attribute: default})
_SIMPLE = {
    "LeakyRelu": ("graph.leaky_relu", {"alpha": 0.01}),
    "Sigmoid": ("graph.sigmoid", {}),
    "Tanh": ("graph.tanh", {}),
    "Elu": ("graph.elu", {"alpha": 1.0}),
    "Selu": ("graph.selu", {"alpha": 1.67326319217681884765625,
                            "gamma": 1.05070102214813232421875}),
    "HardSigmoid": ("graph.hard_sigmoid", {"alpha": 0.2, "beta": 0.5}),
    "HardSwish": ("graph.hard_swish", {}),
    "Softplus": ("graph.softplus", {}),
}


@converter(*_SIMPLE)
def simple(ctx: ConvertContext):
    name, defaults = _SIMPLE[ctx.node.op_type]
    attrs = {}
    for k, d in defaults.items():
        v = ctx.attr(k, d)
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise ctx.error(f"attribute {k} must be a float, got {v!r}")
        attrs[k] = float(v)
    return ctx.emit(name, [ctx.input(0)], attrs)


@converter("PRelu")
def prelu(ctx: ConvertContext):
    """Opset 7+: slope broadcasts unidirectionally to X. Opset 6 models (PyTorch's old exports,
    upgraded to 7 on import) give a per-channel slope of shape [C] for X of shape [N, C, ...]:
    a 1-D slope of size C that does not broadcast is reshaped to [C, 1, ..., 1]."""
    x, slope = ctx.type(0), ctx.type(1)
    s = ctx.input(1)
    if not _broadcasts_to(slope.shape, x.shape) and slope.rank == 1 and x.rank >= 2 \
            and slope.shape[0] == x.shape[1]:
        s = ctx.emit1("graph.reshape", [s], {"shape": (x.shape[1],) + (1,) * (x.rank - 2)})
    elif not _broadcasts_to(slope.shape, x.shape):
        raise ctx.error(f"slope of shape {list(slope.shape)} does not broadcast to X of shape "
                        f"{list(x.shape)}")
    return ctx.emit("graph.prelu", [ctx.input(0), s])


def _broadcasts_to(shape, target) -> bool:
    try:
        return np.broadcast_shapes(tuple(shape), tuple(target)) == tuple(target)
    except ValueError:
        return False


@converter("Clip")
def clip(ctx: ConvertContext):
    """Opset 11+: ``min``/``max`` are optional inputs (runtime values allowed). Before: float
    attributes, made into constants of the input's type."""
    x = ctx.input(0)
    dtype = ctx.type(0).element.np_dtype
    if ctx.opset >= 11:
        lo, hi = ctx.input(1), ctx.input(2)
        for k, v in (("min", lo), ("max", hi)):
            if v is not None and v.type.size != 1:
                raise ctx.error(f"{k} must be a scalar, got {v.type}")
    else:
        lo = hi = None
        if ctx.has_attr("min"):
            lo = ctx.constant(np.asarray(ctx.attr("min"), dtype=dtype))
        if ctx.has_attr("max"):
            hi = ctx.constant(np.asarray(ctx.attr("max"), dtype=dtype))
    return ctx.emit("graph.clip", [x, lo, hi])


@converter("Gelu")
def gelu(ctx: ConvertContext):
    approximate = ctx.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise ctx.error(f"attribute approximate must be 'none' or 'tanh', got {approximate!r}")
    return ctx.emit("graph.gelu", [ctx.input(0)], {"approximate": approximate})
