"""Converters of elementwise ONNX ops."""

from __future__ import annotations

from .context import ConvertContext, converter


@converter("Relu")
def relu(ctx: ConvertContext):
    return ctx.emit("graph.relu", [ctx.input(0)])


@converter("Add")
def add(ctx: ConvertContext):
    return ctx.emit("graph.add", [ctx.input(0), ctx.input(1)])
