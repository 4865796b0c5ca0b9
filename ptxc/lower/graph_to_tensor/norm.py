"""Normalizations and softmax: ``graph.instance_normalization``, ``graph.layer_normalization``,
``graph.lrn``, ``graph.softmax``, ``graph.log_softmax``.

Statistics follow the references step by step, in f32 for f16 inputs:

* instance/layer norm: ``mean = sum(x) / n`` (``tensor.reduce`` + a divide generic),
  ``var = sum((x - mean)^2) / n`` (a reduction generic: the body accumulates the square),
  then one generic ``(x - mean) / sqrt(var + eps) * scale + B``;
* LRN: the squares summed over the channel window by a reduction generic over a zero-padded
  input (loop dims ``(n, c, spatial..., j)``, channel row ``c + j``), then one generic
  ``x / (bias + alpha / size * sum) ** beta``;
* softmax (docs/lowering.md): reduce max, an ``exp(x - max)`` generic, reduce sum, a divide
  generic ``exp(x - max) / sum`` (recomputing the exp leaves the exp tensor one use, its sum,
  into which it fuses); log-softmax: the last generic is ``(x - max) - log(sum)``.
"""

from __future__ import annotations

import numpy as np

from ...dialects.tensor.generic import build_generic
from ...dialects.tensor.maps import identity_map, unit_row
from .common import (acc_type, c, cast, channel_map, elementwise, fill, keepdims_shape, lowers,
                     op_, pad, reduce, widen)


def moments(b, xw, axes):
    """(mean, variance) of ``xw`` over ``axes`` (keepdims shapes), as the references compute
    them: ``sum / n`` and ``sum((x - mean)^2) / n``."""
    ct = xw.type.element
    n = float(np.prod([xw.type.shape[i] for i in axes]))
    kt = xw.type.with_shape(keepdims_shape(xw.type.shape, set(axes)))
    total = reduce(b, xw, axes, "sum", 0.0)
    mean = elementwise(b, [total], kt, lambda bb, s: op_(bb, "arith.div", s[0], c(bb, n, ct)))
    r = xw.type.rank

    def body(bb, args):
        d = op_(bb, "arith.sub", args[0], args[1])
        return [op_(bb, "arith.add", args[2], op_(bb, "arith.mul", d, d))]

    # the keepdims operands read index 0 along every reduced axis, also where that axis has
    # size 1 (broadcast_map would give it the identity, and an out map must not read a
    # reduction dim)
    kept = tuple(unit_row(r, None) if i in axes else unit_row(r, i) for i in range(r))
    sq = build_generic([xw, mean], [fill(b, kt, 0.0)], xw.type.shape,
                       [identity_map(r), kept, kept],
                       ["reduction" if i in axes else "parallel" for i in range(r)], body,
                       b=b).result
    var = elementwise(b, [sq], kt, lambda bb, s: op_(bb, "arith.div", s[0], c(bb, n, ct)))
    return mean, var


def _normalize(b, op, x, axes, scale, bias, param_map=None):
    out = op.results[0].type
    xw = widen(b, x)
    ct = xw.type.element
    mean, var = moments(b, xw, axes)
    eps = op.attr("epsilon")
    operands = [xw, mean, var, scale] + ([bias] if bias is not None else [])

    def body(bb, s):
        d = op_(bb, "arith.sub", s[0], s[1])
        y = op_(bb, "arith.div", d, op_(bb, "math.sqrt", op_(bb, "arith.add", s[2],
                                                            c(bb, eps, ct))))
        y = op_(bb, "arith.mul", y, cast(bb, s[3], ct))
        if bias is not None:
            y = op_(bb, "arith.add", y, cast(bb, s[4], ct))
        return cast(bb, y, out.element)

    maps = [None] * 3 + [param_map] * (len(operands) - 3)
    return elementwise(b, operands, out, body, maps=maps)


@lowers("graph.instance_normalization")
def _instance_norm(op, b):
    x, scale, bias = op.operands
    return [_normalize(b, op, x, list(range(2, x.type.rank)), scale, bias,
                       channel_map(x.type.rank))]


@lowers("graph.layer_normalization")
def _layer_norm(op, b):
    x, scale = op.operands[0], op.operands[1]
    bias = op.operands[2] if len(op.operands) == 3 else None
    return [_normalize(b, op, x, list(range(op.attr("axis"), x.type.rank)), scale, bias)]


@lowers("graph.lrn")
def _lrn(op, b):
    x = op.operands[0]
    out = op.results[0].type
    xw = widen(b, x)
    ct = xw.type.element
    size = op.attr("size")
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    r = x.type.rank
    ax = r - 1 if op.attr("layout") == "NHWC" else 1  # the channel axis
    low, high = [0] * r, [0] * r
    low[ax], high[ax] = lo, hi
    xp = pad(b, xw, low, high, 0.0)
    n = r + 1  # loops (the result's dims..., j)
    m_in = []
    for i in range(r):
        row = [0] * (n + 1)
        row[i] = 1
        if i == ax:
            row[r] = 1
        m_in.append(tuple(row))
    m_out = tuple(tuple(row[:r] + (0, 0)) for row in identity_map(r))

    def body(bb, args):
        return [op_(bb, "arith.add", args[1], op_(bb, "arith.mul", args[0], args[0]))]

    ssum = build_generic([xp], [fill(b, xw.type, 0.0)], x.type.shape + (size,),
                         [tuple(m_in), m_out], ["parallel"] * r + ["reduction"], body,
                         b=b).result
    np_ct = ct.np_dtype.type
    coef = float(np_ct(op.attr("alpha")) / np_ct(size))
    bias, beta = op.attr("bias"), op.attr("beta")

    def final(bb, s):
        den = op_(bb, "arith.add", c(bb, bias, ct), op_(bb, "arith.mul", c(bb, coef, ct), s[1]))
        y = op_(bb, "arith.div", s[0], op_(bb, "arith.pow", den, c(bb, beta, ct)))
        return cast(bb, y, out.element)

    return [elementwise(b, [xw, ssum], out, final)]


def _softmax_parts(b, op):
    x = op.operands[0]
    axis = op.attr("axis")
    xw = widen(b, x)
    ct = acc_type(x.type.element)
    m = reduce(b, xw, [axis], "max", -np.inf)
    e = elementwise(b, [xw, m], xw.type, lambda bb, s: op_(
        bb, "math.exp", op_(bb, "arith.sub", s[0], s[1])))
    total = reduce(b, e, [axis], "sum", 0.0)
    return xw, ct, m, e, total


@lowers("graph.softmax")
def _softmax(op, b):
    """The divide recomputes ``exp(x - max)`` (bit-identical) instead of reading the exp
    tensor, so that tensor has one use and fuses into its sum."""
    out = op.results[0].type
    xw, _, m, _, total = _softmax_parts(b, op)
    return [elementwise(b, [xw, m, total], out, lambda bb, s: cast(
        bb, op_(bb, "arith.div", op_(bb, "math.exp", op_(bb, "arith.sub", s[0], s[1])), s[2]),
        out.element))]


@lowers("graph.log_softmax")
def _log_softmax(op, b):
    out = op.results[0].type
    xw, _, m, _, total = _softmax_parts(b, op)
    return [elementwise(b, [xw, m, total], out, lambda bb, s: cast(
        bb, op_(bb, "arith.sub", op_(bb, "arith.sub", s[0], s[1]),
                op_(bb, "math.log", s[2])), out.element))]

