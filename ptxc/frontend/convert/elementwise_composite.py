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


@converter("Sign")
def sign(ctx: ConvertContext):
    """``x > 0 ? 1 : (x < 0 ? -1 : x)``: 0 stays 0 and NaN stays NaN, as numpy's sign."""
    x = ctx.input(0)
    neg = ctx.emit1("graph.where", [ctx.emit1("graph.less", [x, _c(ctx, 0, x)]),
                                    _c(ctx, -1, x), x]) if x.type.element.is_signed or \
        x.type.element.is_float else x
    return [ctx.emit1("graph.where", [ctx.emit1("graph.greater", [x, _c(ctx, 0, x)]),
                                      _c(ctx, 1, x), neg])]


@converter("Round")
def round_(ctx: ConvertContext):
    """Round half to even (numpy's round): ``f = floor(x)``, ``d = x - f``; ``f + 1`` when
    ``d > 0.5``, ``f`` when ``d < 0.5``, and on a tie whichever of the two is even."""
    x = ctx.input(0)
    em = ctx.emit1
    f = em("graph.floor", [x])
    d = em("graph.sub", [x, f])
    half = _c(ctx, 0.5, x)
    up = em("graph.add", [f, _c(ctx, 1.0, x)])
    even = em("graph.equal", [em("graph.mul", [em("graph.floor", [em("graph.mul", [f, half])]),
                                                _c(ctx, 2.0, x)]), f])
    tie = em("graph.where", [even, f, up])
    low = em("graph.where", [em("graph.less", [d, half]), f, tie])
    y = em("graph.where", [em("graph.greater", [d, half]), up, low])
    # inf and NaN: floor keeps them, d is NaN, every comparison is false: the tie branch
    return [em("graph.where", [em("graph.equal", [f, x]), x, y])]
