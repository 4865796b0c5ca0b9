"""Reductions: ``graph.reduce_{sum,mean,max,min}`` and ``graph.arg_max``.

* sum / max / min -> ``tensor.fill`` (0, the lowest, the highest value) + ``tensor.reduce``
  (keepdims shape) + a ``tensor.reshape`` when ``keepdims = 0``. f16 sums accumulate in f32 and
  round once, as the reference.
* mean -> the sum, then a divide generic by the element count (floats: ``sum / n`` in the
  accumulation type, which is numpy's mean; integers: summed in f64, divided and truncated
  toward zero, as the reference).
* reduce_prod -> as sum, kind ``prod`` into a fill of 1.
* arg_max / arg_min -> one reduction generic with two outs, the running maximum and its index: a later
  element replaces the maximum when it is greater (``select_last_index``: greater or equal), or
  is a NaN where the running value is not (so the first NaN wins, the last with
  ``select_last_index``; numpy's argmax treats NaN as the maximum, argmin as the minimum; arg_min compares with
  less / less-or-equal from the highest value).
"""

from __future__ import annotations

from ...dialects.tensor.generic import build_generic
from ...dialects.tensor.maps import identity_map, unit_row
from ...ir.types import F64, I64
from .common import (acc_type, c, cast, elementwise, fill, highest, keepdims_shape, lowers, lowest,
                     map_elements, op_, reduce, reshape)


def _finish(op, b, y):
    return reshape(b, y, op.results[0].type.shape)


@lowers("graph.reduce_sum", "graph.reduce_prod")
def _reduce_sum(op, b):
    x = op.operands[0]
    el = x.type.element
    kind, init = ("sum", 0) if op.name == "graph.reduce_sum" else ("prod", 1)
    y = reduce(b, x, op.attr("axes"), kind, init, acc_type(el))
    if acc_type(el) != el:
        y = map_elements(b, y, el, lambda bb, s: cast(bb, s, el))
    return [_finish(op, b, y)]


@lowers("graph.reduce_max", "graph.reduce_min")
def _reduce_max_min(op, b):
    x = op.operands[0]
    el = x.type.element
    kind = "max" if op.name == "graph.reduce_max" else "min"
    init = lowest(el) if kind == "max" else highest(el)
    return [_finish(op, b, reduce(b, x, op.attr("axes"), kind, init))]


@lowers("graph.reduce_mean")
def _reduce_mean(op, b):
    x = op.operands[0]
    el = x.type.element
    axes = op.attr("axes")
    n = 1.0
    for a in axes:
        n *= x.type.shape[a]
    ct = acc_type(el) if el.is_float else F64
    if ct != el:
        x = map_elements(b, x, ct, lambda bb, s: cast(bb, s, ct))
    total = reduce(b, x, axes, "sum", 0.0 if ct.is_float else 0)
    kt = total.type.with_element(el)
    y = elementwise(b, [total], kt, lambda bb, s: cast(
        bb, op_(bb, "arith.div", s[0], c(bb, n, ct)), el))
    return [_finish(op, b, y)]


@lowers("graph.arg_max", "graph.arg_min")
def _arg_max(op, b):
    x = op.operands[0]
    el = x.type.element
    axis = op.attr("axis")
    r = x.type.rank
    kshape = keepdims_shape(x.type.shape, {axis})
    kt = x.type.with_shape(kshape)
    last = bool(op.attr("select_last_index"))
    is_min = op.name == "graph.arg_min"

    def body(bb, args):
        v, best, best_i = args
        i = cast(bb, bb.create("tensor.index", [], {"dim": axis}).result, I64)
        pred = ("le" if last else "lt") if is_min else ("ge" if last else "gt")
        take = op_(bb, "arith.cmp", v, best, predicate=pred)
        if el.is_float:
            v_nan = op_(bb, "arith.cmp", v, v, predicate="ne")
            if last:
                extra = v_nan
            else:
                best_ok = op_(bb, "arith.cmp", best, best, predicate="eq")
                extra = op_(bb, "arith.and", v_nan, best_ok)
            take = op_(bb, "arith.or", take, extra)
        return [op_(bb, "arith.select", take, v, best), op_(bb, "arith.select", take, i, best_i)]

    out_map = tuple(unit_row(r, None if d == axis else d) for d in range(r))
    start = highest(el) if is_min else lowest(el)
    g = build_generic([x], [fill(b, kt, start), fill(b, kt.with_element(I64), 0)],
                      x.type.shape, [identity_map(r), out_map, out_map],
                      ["reduction" if d == axis else "parallel" for d in range(r)], body, b=b)
    return [_finish(op, b, g.results[1])]

