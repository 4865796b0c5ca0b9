"""Converters of ONNX reductions. The graph ops always carry explicit, non-negative, sorted
``axes`` and an explicit ``keepdims``: an absent or empty ``axes`` becomes every axis, or, with
``noop_with_empty_axes = 1``, a ``graph.identity``. ``axes`` is an attribute before opset 13
(ReduceSum) or 18 (the others) and a compile-time input from then on."""

from __future__ import annotations

import numpy as np

from .context import ConvertContext, converter

_REDUCE = {"ReduceSum": ("graph.reduce_sum", 13), "ReduceMean": ("graph.reduce_mean", 18),
           "ReduceMax": ("graph.reduce_max", 18), "ReduceMin": ("graph.reduce_min", 18)}


def _flag(ctx: ConvertContext, name: str, default: int) -> int:
    v = ctx.attr(name, default)
    if v not in (0, 1):
        raise ctx.error(f"attribute {name} must be 0 or 1, got {v!r}")
    return int(v)


def _axes(ctx: ConvertContext, axes, rank: int) -> tuple[int, ...]:
    out = []
    for a in axes:
        a = int(a)
        if not -rank <= a < rank:
            raise ctx.error(f"axis {a} out of range for rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise ctx.error(f"axes {list(axes)} repeat an axis")
    return tuple(sorted(out))


@converter(*_REDUCE)
def reduce(ctx: ConvertContext):
    name, axes_input_opset = _REDUCE[ctx.node.op_type]
    rank = ctx.type(0).rank
    keepdims = _flag(ctx, "keepdims", 1)
    noop = _flag(ctx, "noop_with_empty_axes", 0)
    if ctx.opset >= axes_input_opset:
        if ctx.has_attr("axes"):
            raise ctx.error(f"axes is an input from opset {axes_input_opset}, not an attribute")
        axes = ctx.const(1, "axes")
        axes = () if axes is None else tuple(np.asarray(axes).reshape(-1).tolist())
    else:
        axes = tuple(ctx.attr("axes", ()))
    if not axes:
        if noop:
            return ctx.emit("graph.identity", [ctx.input(0)])
        axes = tuple(range(rank))
    return ctx.emit(name, [ctx.input(0)], {"axes": _axes(ctx, axes, rank), "keepdims": keepdims})


@converter("ArgMax")
def arg_max(ctx: ConvertContext):
    t = ctx.type(0)
    axis = ctx.attr("axis", 0)
    if not -t.rank <= axis < t.rank:
        raise ctx.error(f"axis {axis} out of range for rank {t.rank}")
    axis %= t.rank
    if t.shape[axis] == 0:
        raise ctx.error(f"axis {axis} has size 0: there is no maximum")
    return ctx.emit("graph.arg_max", [ctx.input(0)], {
        "axis": axis, "keepdims": _flag(ctx, "keepdims", 1),
        "select_last_index": _flag(ctx, "select_last_index", 0)})
