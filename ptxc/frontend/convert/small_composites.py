"""Small ONNX ops composed from graph ops at import:

    EyeLike(x)            = a constant: ones on diagonal k of x's (static) shape
    LpNormalization(x)    = x / norm_p(x along axis), 0 where the norm is 0 (p = 1 or 2)
    OneHot(i, depth, v)   = where(wrap(i) == arange(depth) (inserted at axis), v[1], v[0])

OneHot's ``depth`` decides the output's shape, so it must be known at compile time (a constant,
or a graph input bound with ``constant_inputs=``); negative indices count from the end and
out-of-range ones match nothing (all ``off_value``), as ONNX's reference.
"""

from __future__ import annotations

import numpy as np

from .context import ConvertContext, converter, scalar_type_of


@converter("EyeLike")
def eye_like(ctx: ConvertContext):
    t = ctx.type(0)
    if t.rank != 2:
        raise ctx.error(f"input must be 2-D, got {t}")
    el = t.element
    if ctx.has_attr("dtype"):
        el = scalar_type_of(int(ctx.attr("dtype")), f"node {ctx.node_name!r}")
    eye = np.eye(t.shape[0], t.shape[1], int(ctx.attr("k", 0)))
    return [ctx.constant(eye.astype(el.np_dtype))]


@converter("LpNormalization")
def lp_normalization(ctx: ConvertContext):
    x = ctx.input(0)
    t = x.type
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        raise ctx.error(f"p must be 1 or 2, got {p}")
    axis = int(ctx.attr("axis", -1))
    if not -t.rank <= axis < t.rank:
        raise ctx.error(f"axis {axis} out of range for rank {t.rank}")
    axis %= t.rank
    a = ctx.emit1("graph.abs", [x]) if p == 1 else ctx.emit1("graph.mul", [x, x])
    norm = ctx.emit1("graph.reduce_sum", [a], {"axes": (axis,), "keepdims": 1})
    if p == 2:
        norm = ctx.emit1("graph.sqrt", [norm])
    zero = ctx.constant(np.array(0, t.element.np_dtype))
    is_zero = ctx.emit1("graph.equal", [norm, zero])
    y = ctx.emit1("graph.div", [x, norm])
    return [ctx.emit1("graph.where", [is_zero, zero, y])]


@converter("OneHot")
def one_hot(ctx: ConvertContext):
    idx, values = ctx.input(0), ctx.input(2)
    depth_arr = np.asarray(ctx.const(1, "depth"))
    if depth_arr.size != 1:
        raise ctx.error(f"depth must be a scalar, got shape {list(depth_arr.shape)}")
    depth = int(depth_arr.reshape(-1)[0])
    if depth < 1:
        raise ctx.error(f"depth must be >= 1, got {depth}")
    if values.type.shape != (2,):
        raise ctx.error(f"values must be [off_value, on_value], got {values.type}")
    r = idx.type.rank
    axis = int(ctx.attr("axis", -1))
    if not -(r + 1) <= axis <= r:
        raise ctx.error(f"axis {axis} out of range for an output of rank {r + 1}")
    axis %= r + 1
    el = idx.type.element.np_dtype
    d = ctx.constant(np.array(depth, el))
    neg = ctx.emit1("graph.less", [idx, ctx.constant(np.array(0, el))])
    wrapped = ctx.emit1("graph.where", [neg, ctx.emit1("graph.add", [idx, d]), idx])
    wrapped = ctx.emit1("graph.unsqueeze", [wrapped], {"axes": [axis]})
    shape = [1] * (r + 1)
    shape[axis] = depth
    targets = ctx.constant(np.arange(depth).astype(el).reshape(shape))
    hit = ctx.emit1("graph.equal", [wrapped, targets])
    off = ctx.emit1("graph.gather", [values, ctx.constant(np.array(0, np.int64))], {"axis": 0})
    on = ctx.emit1("graph.gather", [values, ctx.constant(np.array(1, np.int64))], {"axis": 0})
    return [ctx.emit1("graph.where", [hit, on, off])]
