"""Converters of GatherElements (11, 13), GatherND (11, 12: batch_dims, 13), ScatterND (11, 13,
16: reduction add/mul, 18: max/min), ScatterElements (11, 13, 16, 18: as ScatterND) and the
deprecated Scatter (9-10, ScatterElements without reduction). Axes are made non-negative."""

from __future__ import annotations

from .context import ConvertContext, converter


def _axis(ctx: ConvertContext, rank: int) -> int:
    axis = ctx.attr("axis", 0)
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def _reduction(ctx: ConvertContext) -> str:
    red = ctx.attr("reduction", "none")
    if red not in ("none", "add", "mul", "max", "min"):
        raise ctx.error(f"reduction {red!r} is not one of none, add, mul, max, min")
    return red


@converter("GatherElements")
def gather_elements(ctx: ConvertContext):
    return ctx.emit("graph.gather_elements", [ctx.input(0), ctx.input(1)],
                    {"axis": _axis(ctx, ctx.type(0).rank)})


@converter("GatherND")
def gather_nd(ctx: ConvertContext):
    return ctx.emit("graph.gather_nd", [ctx.input(0), ctx.input(1)],
                    {"batch_dims": int(ctx.attr("batch_dims", 0))})


@converter("ScatterND")
def scatter_nd(ctx: ConvertContext):
    return ctx.emit("graph.scatter_nd", [ctx.input(0), ctx.input(1), ctx.input(2)],
                    {"reduction": _reduction(ctx)})


@converter("ScatterElements", "Scatter")
def scatter_elements(ctx: ConvertContext):
    return ctx.emit("graph.scatter_elements", [ctx.input(0), ctx.input(1), ctx.input(2)],
                    {"axis": _axis(ctx, ctx.type(0).rank), "reduction": _reduction(ctx)})
