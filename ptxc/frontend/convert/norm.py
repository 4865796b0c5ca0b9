"""Converters of ONNX normalization ops: BatchNormalization (inference form), InstanceNormalization,
LayerNormalization, LRN."""

from __future__ import annotations

import numpy as np

from ...ir.types import F32
from .context import ConvertContext, converter


@converter("BatchNormalization")
def batch_normalization(ctx: ConvertContext):
    xt = ctx.type(0)
    if xt.rank < 2:
        raise ctx.error(f"X must have rank >= 2 (N, C, ...), got {xt}")
    if ctx.opset >= 14 and int(ctx.attr("training_mode", 0)) != 0:
        raise ctx.error("training_mode=1 (statistics of the batch, running-statistics outputs) "
                        "is not supported; ptxc compiles the inference form")
    if ctx.opset < 7 and int(ctx.attr("is_test", 1)) == 0:
        raise ctx.error("is_test=0 (training) is not supported")
    channels = xt.shape[1]
    for i, name in enumerate(("scale", "B", "mean", "var"), start=1):
        t = ctx.type(i)
        if t.shape != (channels,):
            spatial = " (spatial=0 with per-position statistics is not supported)" if \
                ctx.opset < 9 and int(ctx.attr("spatial", 1)) == 0 else ""
            raise ctx.error(f"{name} must have shape [{channels}], got {t}{spatial}")
    eps = float(ctx.attr("epsilon", 1e-5))
    if not eps >= 0:  # onnxruntime refuses it too; var + eps could go negative (NaN outputs)
        raise ctx.error(f"epsilon must be >= 0, got {eps}")
    return ctx.emit("graph.batch_normalization", [ctx.input(i) for i in range(5)],
                    {"epsilon": eps})


@converter("InstanceNormalization")
def instance_normalization(ctx: ConvertContext):
    return ctx.emit("graph.instance_normalization", [ctx.input(0), ctx.input(1), ctx.input(2)],
                    {"epsilon": float(ctx.attr("epsilon", 1e-5))})


@converter("LayerNormalization")
def layer_normalization(ctx: ConvertContext):
    t = ctx.type(0)
    axis = int(ctx.attr("axis", -1))
    if not -t.rank <= axis < t.rank:
        raise ctx.error(f"axis {axis} out of range for rank {t.rank}")
    stash = int(ctx.attr("stash_type", 1))
    if stash not in (1, 11):  # float or double statistics; ptxc uses >= float32 always
        raise ctx.error(f"stash_type {stash} is not supported")
    axis %= t.rank
    eps = float(ctx.attr("epsilon", 1e-5))
    y = ctx.emit("graph.layer_normalization", [ctx.input(0), ctx.input(1), ctx.input(2)],
                 {"axis": axis, "epsilon": eps})
    if not any(ctx.node.output[1:]):
        return y
    # Mean and InvStdDev (float32, reduced axes kept) are rarely used outside training: they are
    # spelled with reductions, so they cost nothing (dead-op elimination) when unused
    x = ctx.input(0)
    if t.element != F32:
        x = ctx.emit1("graph.cast", [x], {"to": F32})
    axes = tuple(range(axis, t.rank))
    mean = ctx.emit1("graph.reduce_mean", [x], {"axes": axes, "keepdims": 1})
    d = ctx.emit1("graph.sub", [x, mean])
    var = ctx.emit1("graph.reduce_mean", [ctx.emit1("graph.mul", [d, d])],
                    {"axes": axes, "keepdims": 1})
    std = ctx.emit1("graph.sqrt", [ctx.emit1("graph.add", [var, ctx.constant(
        np.array(eps, np.float32))])])
    return y + [mean, ctx.emit1("graph.reciprocal", [std])]


@converter("LRN")
def lrn(ctx: ConvertContext):
    size = ctx.attr("size")
    if size is None or int(size) < 1:
        raise ctx.error(f"size must be a positive int, got {size}")
    return ctx.emit("graph.lrn", [ctx.input(0)], {
        "size": int(size), "alpha": float(ctx.attr("alpha", 1e-4)),
        "beta": float(ctx.attr("beta", 0.75)), "bias": float(ctx.attr("bias", 1.0))})
