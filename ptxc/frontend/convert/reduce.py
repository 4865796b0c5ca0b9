"""Converters of ONNX reductions. The graph ops always carry explicit, non-negative, sorted
``axes`` and an explicit ``keepdims``: an absent or empty ``axes`` becomes every axis, or, with
``noop_with_empty_axes = 1``, a ``graph.identity``. ``axes`` is an attribute before opset 13
(ReduceSum) or 18 (the others) and a compile-time input from then on."""

from __future__ import annotations

import numpy as np

from .context import ConvertContext, converter

_REDUCE = {"ReduceSum": ("graph.reduce_sum", 13), "ReduceMean": ("graph.reduce_mean", 18),
           "ReduceMax": ("graph.reduce_max", 18), "ReduceMin": ("graph.reduce_min", 18),
           "ReduceProd": ("graph.reduce_prod", 18)}


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


def reduce_axes(ctx: ConvertContext, axes_input_opset: int):
    """(axes, keepdims) of a reduction node: axes None means "reduce nothing" (empty axes with
    ``noop_with_empty_axes = 1``)."""
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
            return None, keepdims
        axes = tuple(range(rank))
    return _axes(ctx, axes, rank), keepdims


@converter(*_REDUCE)
def reduce(ctx: ConvertContext):
    name, axes_input_opset = _REDUCE[ctx.node.op_type]
    axes, keepdims = reduce_axes(ctx, axes_input_opset)
    if axes is None:
        return ctx.emit("graph.identity", [ctx.input(0)])
    return ctx.emit(name, [ctx.input(0)], {"axes": axes, "keepdims": keepdims})


def _sum(ctx, x, axes, keepdims):
    return x if axes is None else ctx.emit1("graph.reduce_sum", [x],
                                            {"axes": axes, "keepdims": keepdims})


@converter("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")
def reduce_composite(ctx: ConvertContext):
    """Composed from graph ops, as ONNX defines them: L1 ``sum |x|``, L2 ``sqrt(sum x*x)``,
    SumSquare ``sum x*x``, LogSum ``log(sum x)``, LogSumExp ``m + log(sum exp(x - m))`` with
    ``m`` the (finite) maximum, so large inputs do not overflow. With no axes and
    ``noop_with_empty_axes`` the elementwise parts apply without the sum."""
    op = ctx.node.op_type
    axes, keepdims = reduce_axes(ctx, 18)
    x = ctx.input(0)
    if op == "ReduceL1":
        return [_sum(ctx, ctx.emit1("graph.abs", [x]), axes, keepdims)]
    if op in ("ReduceL2", "ReduceSumSquare"):
        s = _sum(ctx, ctx.emit1("graph.mul", [x, x]), axes, keepdims)
        return [ctx.emit1("graph.sqrt", [s]) if op == "ReduceL2" else s]
    if op == "ReduceLogSum":
        return [ctx.emit1("graph.log", [_sum(ctx, x, axes, keepdims)])]
    if axes is None:
        return ctx.emit("graph.identity", [x])
    m = ctx.emit1("graph.reduce_max", [x], {"axes": axes, "keepdims": 1})
    el = x.type.element
    inf = ctx.constant(np.array(np.inf, el.np_dtype))
    zero = ctx.constant(np.array(0, el.np_dtype))
    finite = ctx.emit1("graph.less", [ctx.emit1("graph.abs", [m]), inf])
    m = ctx.emit1("graph.where", [finite, m, zero])
    e = ctx.emit1("graph.exp", [ctx.emit1("graph.sub", [x, m])])
    y = ctx.emit1("graph.log", [_sum(ctx, e, axes, keepdims)])
    if not keepdims:
        m = ctx.emit1("graph.reshape", [m], {"shape": list(y.type.shape)})
    return [ctx.emit1("graph.add", [y, m])]


@converter("ArgMax", "ArgMin")
def arg_max(ctx: ConvertContext):
    t = ctx.type(0)
    axis = ctx.attr("axis", 0)
    if not -t.rank <= axis < t.rank:
        raise ctx.error(f"axis {axis} out of range for rank {t.rank}")
    axis %= t.rank
    if t.shape[axis] == 0:
        raise ctx.error(f"axis {axis} has size 0: there is no extremum")
    name = "graph.arg_max" if ctx.node.op_type == "ArgMax" else "graph.arg_min"
    return ctx.emit(name, [ctx.input(0)], {
        "axis": axis, "keepdims": _flag(ctx, "keepdims", 1),
        "select_last_index": _flag(ctx, "select_last_index", 0)})
