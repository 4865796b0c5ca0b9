"""Small elementwise ONNX ops composed from graph ops, as their ONNX function bodies are (they
fuse into one kernel with their neighbours like any elementwise chain):

    IsNaN(x) = not(x == x)            IsInf(x) = x == +inf (detect_positive) or x == -inf
    Softsign(x) = x / (1 + |x|)       ThresholdedRelu(x) = x > alpha ? x : 0
    Shrink(x) = x < -lambd ? x + bias : (x > lambd ? x - bias : 0)
    Celu(x) = alpha * elu(x / alpha)  Mish(x) = x * tanh(softplus(x))
"""

from __future__ import annotations

import numpy as np

from .context import ConvertContext, converter


def _c(ctx, v, x):
    return ctx.constant(np.array(v, x.type.element.np_dtype))


@converter("IsNaN")
def is_nan(ctx: ConvertContext):
    x = ctx.input(0)
    return [ctx.emit1("graph.not", [ctx.emit1("graph.equal", [x, x])])]


@converter("IsInf")
def is_inf(ctx: ConvertContext):
    x = ctx.input(0)
    pos, neg = int(ctx.attr("detect_positive", 1)), int(ctx.attr("detect_negative", 1))
    parts = []
    if pos:
        parts.append(ctx.emit1("graph.equal", [x, _c(ctx, np.inf, x)]))
    if neg:
        parts.append(ctx.emit1("graph.equal", [x, _c(ctx, -np.inf, x)]))
    if not parts:
        return [ctx.constant(np.zeros(x.type.shape, bool))]
    return [parts[0] if len(parts) == 1 else ctx.emit1("graph.or", parts)]


@converter("Softsign")
def softsign(ctx: ConvertContext):
    x = ctx.input(0)
    den = ctx.emit1("graph.add", [_c(ctx, 1.0, x), ctx.emit1("graph.abs", [x])])
    return [ctx.emit1("graph.div", [x, den])]


@converter("ThresholdedRelu")
def thresholded_relu(ctx: ConvertContext):
    x = ctx.input(0)
    keep = ctx.emit1("graph.greater", [x, _c(ctx, float(ctx.attr("alpha", 1.0)), x)])
    return [ctx.emit1("graph.where", [keep, x, _c(ctx, 0, x)])]


@converter("Shrink")
def shrink(ctx: ConvertContext):
    x = ctx.input(0)
    lambd, bias = float(ctx.attr("lambd", 0.5)), float(ctx.attr("bias", 0.0))
    lo = ctx.emit1("graph.less", [x, _c(ctx, -lambd, x)])
    hi = ctx.emit1("graph.greater", [x, _c(ctx, lambd, x)])
    if x.type.element.is_float:
        up, down = (ctx.emit1(n, [x, _c(ctx, bias, x)]) for n in ("graph.add", "graph.sub"))
    else:  # integer x: bias is a float attribute, rounded to x's type as onnx's reference
        up, down = (ctx.emit1(n, [x, _c(ctx, int(bias), x)]) for n in ("graph.add", "graph.sub"))
    inner = ctx.emit1("graph.where", [hi, down, _c(ctx, 0, x)])
    return [ctx.emit1("graph.where", [lo, up, inner])]


@converter("Celu")
def celu(ctx: ConvertContext):
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha", 1.0))
    if alpha == 0:
        raise ctx.error("alpha must not be 0")
    e = ctx.emit1("graph.elu", [ctx.emit1("graph.div", [x, _c(ctx, alpha, x)])], {"alpha": 1.0})
    return [ctx.emit1("graph.mul", [e, _c(ctx, alpha, x)])]


@converter("Mish")
def mish(ctx: ConvertContext):
    x = ctx.input(0)
    t = ctx.emit1("graph.tanh", [ctx.emit1("graph.softplus", [x])])
    return [ctx.emit1("graph.mul", [x, t])]
