"""Normalizations: ``graph.batch_normalization`` (inference form), ``graph.instance_normalization``,
``graph.layer_normalization``, ``graph.lrn``.

Statistics of float16 inputs are computed in float32 (LayerNormalization's ``stash_type = 1``).
"""

from __future__ import annotations

import numpy as np

from ...ir.spec import Attr, Operand, OpSpec, fail
from .common import ttype
from .layout import channels_last
from .nn import compute_dtype


def _float_input(op):
    if not ttype(op).element.is_float:
        fail(op, f"needs a float tensor, got {ttype(op)}")


def _per_channel(op, names, first: int = 1):
    """Operands ``first..`` are 1-D of the channel count of X (axis 1) and float."""
    x = ttype(op)
    for i, name in enumerate(names, start=first):
        if i >= len(op.operands):
            break
        t = ttype(op, i)
        if t.shape != (x.shape[1],) or not t.element.is_float:
            fail(op, f"{name} must be a float tensor of shape [{x.shape[1]}], got {t}")


def bn_scale_shift(scale, bias, mean, var, epsilon: float, ct=np.float32):
    """``(s, t)`` with batch norm ``= x * s + t``, computed in ``ct`` as onnxruntime's CPU
    kernel computes them, rounding for rounding: ``inv = 1 / sqrt(var + eps)``,
    ``s = inv * scale``, ``t = B - mean * s``; then ``y = x * s + t`` (a multiply, then an add:
    no fused multiply-add). A QDQ model's float batch norm between a DQ and a Q then quantizes
    to the same integers as onnxruntime's run of it (one ulp apart, ``(x - mean) * s + B``
    rounds to the other integer now and then, and ResNet-50 has 53 of them)."""
    ct = np.dtype(ct).type
    scale, bias, mean, var = (np.asarray(a).astype(ct, copy=False) for a in
                              (scale, bias, mean, var))
    inv = ct(1) / np.sqrt(var + ct(epsilon))
    s = inv * scale
    return s, bias - mean * s


class BatchNormalization(OpSpec):
    """Inference batch normalization along axis 1:
    ``Y = (X - mean) / sqrt(var + epsilon) * scale + B`` with per-channel ``scale``, ``B``,
    ``mean``, ``var`` (``(C,)``), computed as ``X * s + t`` (:func:`bn_scale_shift`). Training
    mode is not an op of ptxc."""

    name = "graph.batch_normalization"
    operands = ("X", "scale", "B", "input_mean", "input_var")
    results = ("Y",)
    attributes = {"epsilon": Attr("float", default=1e-5)}
    traits = {"pure"}

    def infer_types(self, op):
        x = ttype(op)
        if x.rank < 2:
            fail(op, f"X must have rank >= 2 (N, C, ...), got {x}")
        return [x]

    def verify(self, op):
        _float_input(op)
        _per_channel(op, ("scale", "B", "input_mean", "input_var"))

    def reference(self, op, args, interp):
        x = args[0]
        ct = compute_dtype(x.dtype)
        shape = (x.shape[1],) + (1,) * (x.ndim - 2)
        s, t = bn_scale_shift(*(a.reshape(shape) for a in args[1:]), op.attr("epsilon"), ct)
        y = x.astype(ct, copy=False) * s + t
        return [y.astype(x.dtype, copy=False)]


class InstanceNormalization(OpSpec):
    """``Y = (X - mean) / sqrt(var + epsilon) * scale + B``, mean and (biased) variance over the
    spatial axes of each (n, c); ``scale`` and ``B`` are ``(C,)``."""

    name = "graph.instance_normalization"
    operands = ("input", "scale", "B")
    results = ("output",)
    attributes = {"epsilon": Attr("float", default=1e-5)}
    traits = {"pure"}

    def infer_types(self, op):
        x = ttype(op)
        if x.rank < 3:
            fail(op, f"input must have rank >= 3 (N, C, spatial...), got {x}")
        return [x]

    def verify(self, op):
        _float_input(op)
        _per_channel(op, ("scale", "B"))

    def reference(self, op, args, interp):
        x = args[0]
        ct = compute_dtype(x.dtype)
        xc = x.astype(ct, copy=False)
        axes = tuple(range(2, x.ndim))
        shape = (x.shape[1],) + (1,) * (x.ndim - 2)
        mean = xc.mean(axis=axes, keepdims=True)
        var = np.square(xc - mean).mean(axis=axes, keepdims=True)
        y = (xc - mean) / np.sqrt(var + ct.type(op.attr("epsilon")))
        y = y * args[1].astype(ct).reshape(shape) + args[2].astype(ct).reshape(shape)
        return [y.astype(x.dtype, copy=False)]


class LayerNormalization(OpSpec):
    """Normalizes over the axes ``axis..rank-1``:
    ``Y = (X - mean) / sqrt(var + epsilon) * Scale + B``; ``Scale`` and the optional ``B``
    broadcast to the normalized shape (unidirectionally). Only ONNX's first output."""

    name = "graph.layer_normalization"
    operands = ("X", "Scale", Operand("B", optional=True))
    results = ("Y",)
    attributes = {"axis": Attr("int", required=True, doc="non-negative"),
                  "epsilon": Attr("float", default=1e-5)}
    traits = {"pure"}

    def infer_types(self, op):
        x = ttype(op)
        axis = op.attr("axis")
        if not 0 <= axis < max(x.rank, 1):
            fail(op, f"axis must be in [0, {x.rank}), got {axis}")
        norm = x.shape[axis:]
        for i in range(1, len(op.operands)):
            t = ttype(op, i)
            try:
                ok = np.broadcast_shapes(t.shape, norm) == tuple(norm)
            except ValueError:
                ok = False
            if not ok:
                fail(op, f"operand #{i} {t} does not broadcast to the normalized shape "
                         f"{list(norm)}")
        return [x]

    def verify(self, op):
        _float_input(op)

    def reference(self, op, args, interp):
        x = args[0]
        ct = compute_dtype(x.dtype)
        xc = x.astype(ct, copy=False)
        axes = tuple(range(op.attr("axis"), x.ndim))
        mean = xc.mean(axis=axes, keepdims=True)
        d = xc - mean
        var = np.square(d).mean(axis=axes, keepdims=True)
        y = d / np.sqrt(var + ct.type(op.attr("epsilon")))
        y = y * args[1].astype(ct, copy=False)
        if len(args) == 3:
            y = y + args[2].astype(ct, copy=False)
        return [y.astype(x.dtype, copy=False)]


class LRN(OpSpec):
    """Local response normalization across channels (axis 1; the last axis with
    ``layout = "NHWC"``, graph/layout.py):
    ``Y = X / (bias + alpha / size * sum(X[c'] ** 2)) ** beta`` for ``c'`` in
    ``[c - floor((size - 1) / 2), c + ceil((size - 1) / 2)]``."""

    name = "graph.lrn"
    operands = ("X",)
    results = ("Y",)
    attributes = {"size": Attr("int", required=True), "alpha": Attr("float", default=1e-4),
                  "beta": Attr("float", default=0.75), "bias": Attr("float", default=1.0),
                  "layout": Attr("str", default="NCHW", doc="NCHW or NHWC")}
    traits = {"pure"}

    def infer_types(self, op):
        x = ttype(op)
        if x.rank < 2:
            fail(op, f"X must have rank >= 2 (N, C, ...), got {x}")
        if op.attr("size") is None or op.attr("size") < 1:
            fail(op, f"size must be a positive int, got {op.attr('size')}")
        channels_last(op)  # checks the attribute
        return [x]

    def verify(self, op):
        _float_input(op)

    def reference(self, op, args, interp):
        from numpy.lib.stride_tricks import sliding_window_view
        x = args[0]
        ct = compute_dtype(x.dtype)
        size = op.attr("size")
        lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
        ax = x.ndim - 1 if channels_last(op) else 1
        sq = np.square(x.astype(ct, copy=False))
        width = [(0, 0)] * x.ndim
        width[ax] = (lo, hi)
        sqp = np.pad(sq, width)
        ssum = sliding_window_view(sqp, size, axis=ax).sum(axis=-1)
        alpha, beta, bias = (ct.type(op.attr(k)) for k in ("alpha", "beta", "bias"))
        y = x.astype(ct, copy=False) / np.power(bias + alpha / ct.type(size) * ssum, beta)
        return [y.astype(x.dtype, copy=False)]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (BatchNormalization, InstanceNormalization, LayerNormalization, LRN)
