"""Converters of ONNX MatMul and Gemm."""

from __future__ import annotations

from .context import ConvertContext, converter


@converter("MatMul")
def matmul(ctx: ConvertContext):
    return ctx.emit("graph.matmul", [ctx.input(0), ctx.input(1)])


@converter("Gemm")
def gemm(ctx: ConvertContext):
    attrs = {"alpha": float(ctx.attr("alpha", 1.0)), "beta": float(ctx.attr("beta", 1.0)),
             "transA": int(ctx.attr("transA", 0)), "transB": int(ctx.attr("transB", 0))}
    for k in ("transA", "transB"):
        if attrs[k] not in (0, 1):
            raise ctx.error(f"{k} must be 0 or 1, got {attrs[k]}")
    for i, name in ((0, "A"), (1, "B")):
        if ctx.type(i).rank != 2:
            raise ctx.error(f"{name} must be 2-D, got {ctx.type(i)}")
    c = ctx.input(2)
    if c is not None and c.type.size == 0:
        c = None
    # opset < 7 had a `broadcast` attribute; the version converter removes it (C broadcasts)
    return ctx.emit("graph.gemm", [ctx.input(0), ctx.input(1), c], attrs)
