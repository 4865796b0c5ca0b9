"""Converters of Trilu (14: ``k`` a compile-time input), CumSum (11, 14: ``axis`` a
compile-time input), CumProd (26) and Hardmax (1, 11: the input coerced to 2-D at ``axis``;
13: along ``axis``). Hardmax is composed from graph ops: ``arg_max`` (keepdims), compared with
an ``arange`` along the axis, cast to the input's type (1 at the first maximum, 0 elsewhere)."""

from __future__ import annotations

import numpy as np

from .context import ConvertContext, converter


@converter("Trilu")
def trilu(ctx: ConvertContext):
    k = ctx.const(1, "input k")
    k = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    upper = ctx.attr("upper", 1)
    if upper not in (0, 1):
        raise ctx.error(f"attribute upper must be 0 or 1, got {upper!r}")
    if ctx.type(0).rank < 2:
        raise ctx.error(f"needs an input of rank >= 2, got {ctx.type(0)}")
    return ctx.emit("graph.trilu", [ctx.input(0)], {"upper": int(upper), "k": k})


@converter("CumSum", "CumProd")
def cumulative(ctx: ConvertContext):
    rank = ctx.type(0).rank
    axis = ctx.const(1, "input axis")
    if axis is None or np.asarray(axis).size != 1:
        raise ctx.error("input axis must be a scalar")
    axis = int(np.asarray(axis).reshape(-1)[0])
    if not -rank <= axis < max(rank, 1) or rank == 0:
        raise ctx.error(f"axis {axis} out of range for rank {rank}")
    attrs = {"axis": axis % rank}
    for name in ("exclusive", "reverse"):
        v = ctx.attr(name, 0)
        if v not in (0, 1):
            raise ctx.error(f"attribute {name} must be 0 or 1, got {v!r}")
        attrs[name] = int(v)
    name = "graph.cum_sum" if ctx.node.op_type == "CumSum" else "graph.cum_prod"
    return ctx.emit(name, [ctx.input(0)], attrs)


@converter("Hardmax")
def hardmax(ctx: ConvertContext):
    t = ctx.type(0)
    axis = ctx.attr("axis", -1 if ctx.opset >= 13 else 1)
    if not -t.rank <= axis < t.rank:
        raise ctx.error(f"axis {axis} out of range for rank {t.rank}")
    axis %= t.rank
    x = ctx.input(0)
    if ctx.opset < 13:  # coerced to 2-D: [prod(shape[:axis]), prod(shape[axis:])]
        rows = int(np.prod(t.shape[:axis], dtype=np.int64))
        x = ctx.emit1("graph.reshape", [x], {"shape": [rows, t.size // max(rows, 1)]})
        axis = 1
    xt = x.type
    if xt.shape[axis] == 0:
        return ctx.emit("graph.identity", [ctx.input(0)])
    am = ctx.emit1("graph.arg_max", [x], {"axis": axis, "keepdims": 1, "select_last_index": 0})
    shape = [1] * xt.rank
    shape[axis] = xt.shape[axis]
    iota = ctx.constant(np.arange(xt.shape[axis], dtype=np.int64).reshape(shape))
    hit = ctx.emit1("graph.equal", [iota, am])
    y = ctx.emit1("graph.cast", [hit], {"to": t.element})
    if ctx.opset < 13:
        y = ctx.emit1("graph.reshape", [y], {"shape": list(t.shape)})
    return [y]


@converter("TopK")
def top_k(ctx: ConvertContext):
    """TopK 1 (``k`` an attribute), 10, 11 (``largest``, ``sorted``), 24: ``k`` a compile-time
    input from opset 10. Results are always sorted (allowed for ``sorted = 0``)."""
    t = ctx.type(0)
    axis = ctx.attr("axis", -1)
    if not -t.rank <= axis < t.rank:
        raise ctx.error(f"axis {axis} out of range for rank {t.rank}")
    axis %= t.rank
    if ctx.opset >= 10:
        k = ctx.const(1, "input K")
        if k is None or np.asarray(k).size != 1:
            raise ctx.error("input K must be a one-element tensor")
        k = int(np.asarray(k).reshape(-1)[0])
    else:
        k = int(ctx.attr("k", -1))
    if not 0 <= k <= t.shape[axis]:
        raise ctx.error(f"K = {k} must be in [0, {t.shape[axis]}] (the axis length)")
    largest = ctx.attr("largest", 1)
    if largest not in (0, 1):
        raise ctx.error(f"attribute largest must be 0 or 1, got {largest!r}")
    return ctx.emit("graph.top_k", [ctx.input(0)], {"axis": axis, "k": k, "largest": largest})
