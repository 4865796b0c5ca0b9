"""Pools: ``graph.max_pool``, ``graph.average_pool``, ``graph.global_average_pool``,
``graph.global_max_pool``.

* max pool -> ``tensor.pad`` (-inf, or the type's lowest integer) + ``tensor.fill`` (same) +
  ``tensor.pool {kind = "max"}``;
* average pool -> ``tensor.pad`` (0) + ``tensor.fill`` 0 + ``tensor.pool {kind = "sum"}`` + a
  divide generic by the window counts (a constant of the output's spatial shape, computed at
  compile time as the reference does, or one ``arith.constant`` when every window has the same
  count);
* global pools -> ``tensor.reduce`` over the spatial dims (+ the divide for the average).

The padded input is made as long as the windows read (``(o - 1) * s + (k - 1) * d + 1`` per
axis, plus fewer than a stride of unread trailing elements, which need no crop): ceil-mode
windows that run past the end padding read the pad value, which never wins a max and adds 0 to
a sum (the count excludes those positions). Channels-last pools (``layout = "NHWC"``) pad their
spatial dims 1..-1 and lower to channels-last ``tensor.pool`` ops. f16 sums are taken in f32 and
rounded once, as the reference: the named op reads f16 and sums into an f32 out (its loop nest
widens each load), so no separate widening kernel is needed.
"""

from __future__ import annotations

import numpy as np

from ...dialects.graph.nn import spatial_attrs
from ...dialects.graph.pool import pool_out_shape
from ...ir.types import TensorType
from .nn import spatial_pad
from .common import (acc_type, c, cast, constant, elementwise, fill, lowers, lowest, op_, pad,
                     reduce)


def _spatial(op, shape) -> tuple:
    """The spatial extents of ``shape`` under ``op``'s layout."""
    return tuple(shape[1:-1]) if op.attr("layout") == "NHWC" else tuple(shape[2:])


def _padded(b, op, x, value):
    n = x.type.rank - 2
    a = spatial_attrs(op, n)
    spatial = _spatial(op, x.type.shape)
    out = pool_out_shape(spatial, a, op.attr("ceil_mode"))
    need = [(o - 1) * s + (k - 1) * d + 1 for o, s, k, d in
            zip(out, a["strides"], a["kernel_shape"], a["dilations"])]
    low = list(a["pads"][:n])
    high = []
    for i in range(n):
        h = need[i] - spatial[i] - low[i]
        # fewer than a stride of unread elements at the end need no crop (tensor.pool's
        # output size rounds down); more (ceil mode dropping its last window) are cut
        high.append(0 if -a["strides"][i] < h < 0 else h)
    return a, out, spatial_pad(b, x, op, low + high, value)


def _pool_attrs(op, kind, a) -> dict:
    attrs = {"kind": kind, "kernel_shape": a["kernel_shape"], "strides": a["strides"],
             "dilations": a["dilations"]}
    if op.attr("layout") == "NHWC":
        attrs["layout"] = "NHWC"
    return attrs


@lowers("graph.max_pool")
def _max_pool(op, b):
    x = op.operands[0]
    el = x.type.element
    a, _, xp = _padded(b, op, x, lowest(el))
    init = fill(b, op.results[0].type, lowest(el))
    return [b.create("tensor.pool", [xp, init], _pool_attrs(op, "max", a)).result]


def _window_counts(op, x_shape, a, out) -> np.ndarray:
    """How many positions of each window the average divides by (float64, ``(1, 1, *out)``,
    ``(1, *out, 1)`` channels last)."""
    n = len(out)
    spatial = _spatial(op, x_shape)
    count = np.ones((), dtype=np.float64)
    for i in range(n):
        size, pb, pe = spatial[i], a["pads"][i], a["pads"][n + i]
        s, k, d = a["strides"][i], a["kernel_shape"][i], a["dilations"][i]
        pos = np.arange(out[i])[:, None] * s + np.arange(k)[None, :] * d
        if op.attr("count_include_pad"):
            inside = pos < size + pb + pe
        else:
            inside = (pos >= pb) & (pos < size + pb)
        count = np.multiply.outer(count, inside.sum(axis=1).astype(np.float64))
    if op.attr("layout") == "NHWC":
        return count.reshape((1,) + tuple(out) + (1,))
    return count.reshape((1, 1) + tuple(out))


def _divide(b, total, counts: np.ndarray, out: TensorType):
    """``total / counts`` rounded to ``out``'s element type."""
    ct = total.type.element
    flat = counts.reshape(-1)
    if flat.size and (flat == flat[0]).all():
        k = float(flat[0])
        return elementwise(b, [total], out, lambda bb, s: cast(
            bb, op_(bb, "arith.div", s[0], c(bb, k, ct)), out.element))
    cnt = constant(b, counts.astype(ct.np_dtype), ct)
    return elementwise(b, [total, cnt], out, lambda bb, s: cast(
        bb, op_(bb, "arith.div", s[0], s[1]), out.element))


@lowers("graph.average_pool")
def _average_pool(op, b):
    x = op.operands[0]  # f16 is read as it is and widened inside the sum (no cast kernel)
    a, out, xp = _padded(b, op, x, 0.0)
    res = op.results[0].type
    init = fill(b, res.with_element(acc_type(x.type.element)), 0.0)
    total = b.create("tensor.pool", [xp, init], _pool_attrs(op, "sum", a)).result
    return [_divide(b, total, _window_counts(op, op.operands[0].type.shape, a, out), res)]


@lowers("graph.global_average_pool")
def _global_average_pool(op, b):
    x = op.operands[0]
    axes = list(range(2, x.type.rank))
    total = reduce(b, x, axes, "sum", 0.0, acc_type(x.type.element))
    count = float(np.prod([x.type.shape[i] for i in axes]))
    res = op.results[0].type
    return [_divide(b, total, np.full((1,), count), res)]


@lowers("graph.global_max_pool")
def _global_max_pool(op, b):
    x = op.operands[0]
    return [reduce(b, x, list(range(2, x.type.rank)), "max", lowest(x.type.element))]
