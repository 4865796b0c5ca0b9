"""Converters of the shape and data-movement ONNX ops: Concat, Split, Slice, Gather, Reshape,
Flatten, Transpose, Squeeze, Unsqueeze, Tile, Expand, Shape, ConstantOfShape, Constant.

Every input that decides a shape (Split's ``split``, Slice's ``starts``/``ends``/``axes``/
``steps``, Reshape's ``shape``, Squeeze/Unsqueeze's ``axes``, Tile's ``repeats``, Expand's
``shape``, ConstantOfShape's input) is read with ``ctx.const`` and resolved here into the
normalized attributes the graph ops document (ptxc/dialects/graph/shape.py), so every opset
gives the same graph op. ``ctx.emit`` folds small ops whose operands are known, which is how
``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` chains (as PyTorch exports them) become
compile-time shapes.
"""

from __future__ import annotations

import numpy as np

from .context import ConvertContext, converter


def _int_list(ctx: ConvertContext, value, what: str) -> list[int]:
    arr = np.asarray(value)
    if arr.ndim > 1 or not (arr.dtype.kind in "iu" or arr.size == 0):
        raise ctx.error(f"{what} must be a list of ints, got {arr.dtype}{list(arr.shape)}")
    return [int(v) for v in arr.reshape(-1).tolist()]


def _axis(ctx: ConvertContext, axis, rank: int, name: str = "axis", upper: int | None = None):
    """``axis`` in ``[-rank, upper)`` (default ``upper = rank``) made non-negative."""
    upper = rank if upper is None else upper
    if not isinstance(axis, (int, np.integer)) or not -rank <= axis < upper:
        raise ctx.error(f"{name} {axis!r} is out of range for rank {rank}")
    return int(axis) + rank if axis < 0 else int(axis)


def _axes(ctx: ConvertContext, axes, rank: int) -> list[int]:
    """Axes made non-negative, checked unique, sorted."""
    out = [_axis(ctx, a, rank, "axes entry") for a in axes]
    if len(set(out)) != len(out):
        raise ctx.error(f"axes {list(axes)} repeat an axis")
    return sorted(out)


def _ints_input_or_attr(ctx: ConvertContext, index: int, name: str, since: int):
    """An int list given as input ``index`` from opset ``since`` on, else as attribute."""
    if ctx.opset >= since:
        v = ctx.const(index, f"input {name!r}")
        return None if v is None else _int_list(ctx, v, name)
    v = ctx.attr(name)
    return None if v is None else [int(a) for a in v]


@converter("Concat")
def concat(ctx: ConvertContext):
    xs = ctx.inputs()
    if not xs or any(x is None for x in xs):
        raise ctx.error("needs at least one input and no empty input names")
    if not ctx.has_attr("axis"):
        raise ctx.error("attribute axis is required")
    axis = _axis(ctx, ctx.attr("axis"), xs[0].type.rank)
    return ctx.emit("graph.concat", xs, {"axis": axis})


@converter("Split")
def split(ctx: ConvertContext):
    t = ctx.type(0)
    axis = _axis(ctx, ctx.attr("axis", 0), t.rank)
    dim, n = t.shape[axis], len(ctx.node.output)
    sizes = _ints_input_or_attr(ctx, 1, "split", 13)
    num_outputs = ctx.attr("num_outputs") if ctx.opset >= 18 else None
    if sizes is not None and num_outputs is not None:
        raise ctx.error("give either the split input or num_outputs, not both")
    if sizes is None:
        if num_outputs is not None:
            if num_outputs != n:
                raise ctx.error(f"num_outputs {num_outputs} but the node has {n} outputs")
            chunk = -(-dim // n)
            sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
            if sizes[-1] < 0:
                raise ctx.error(f"cannot split dim {dim} into {n} chunks of {chunk}")
        else:
            if dim % n:
                raise ctx.error(f"dim {dim} of axis {axis} does not split into {n} equal parts")
            sizes = [dim // n] * n
    if len(sizes) != n or any(s < 0 for s in sizes) or sum(sizes) != dim:
        raise ctx.error(f"split {sizes} must be {n} non-negative sizes summing to {dim}")
    return ctx.emit("graph.split", [ctx.input(0)], {"axis": axis, "split": sizes})


def normalize_slice(ctx: ConvertContext, shape, starts, ends, axes, steps):
    """Per-axis (starts, ends, steps) for every axis, clamped as ONNX Slice specifies."""
    rank = len(shape)
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.error(f"starts, ends, axes and steps differ in length: {len(starts)}, "
                        f"{len(ends)}, {len(axes)}, {len(steps)}")
    S, E, ST = [0] * rank, list(shape), [1] * rank
    seen = set()
    for a, s, e, st in zip(axes, starts, ends, steps):
        a = _axis(ctx, a, rank, "axes entry")
        if a in seen:
            raise ctx.error(f"axes {list(axes)} repeat axis {a}")
        seen.add(a)
        if st == 0:
            raise ctx.error("steps must not be 0")
        d = shape[a]
        s, e = s + d if s < 0 else s, e + d if e < 0 else e
        if d == 0:
            s = e = 0
        elif st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
        S[a], E[a], ST[a] = s, e, st
    return S, E, ST


@converter("Slice")
def slice_(ctx: ConvertContext):
    t = ctx.type(0)
    if ctx.opset < 10:
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        if starts is None or ends is None:
            raise ctx.error("attributes starts and ends are required")
        axes, steps = ctx.attr("axes"), None
    else:
        starts = _int_list(ctx, ctx.const(1, "input 'starts'"), "starts")
        ends = _int_list(ctx, ctx.const(2, "input 'ends'"), "ends")
        axes, steps = ctx.const(3, "input 'axes'"), ctx.const(4, "input 'steps'")
        axes = None if axes is None else _int_list(ctx, axes, "axes")
        steps = None if steps is None else _int_list(ctx, steps, "steps")
    S, E, ST = normalize_slice(ctx, t.shape, list(starts), list(ends),
                               None if axes is None else list(axes), steps)
    return ctx.emit("graph.slice", [ctx.input(0)], {"starts": S, "ends": E, "steps": ST})


@converter("Gather")
def gather(ctx: ConvertContext):
    t = ctx.type(0)
    if t.rank == 0:
        raise ctx.error("data must have rank >= 1")
    axis = _axis(ctx, ctx.attr("axis", 0), t.rank)
    return ctx.emit("graph.gather", [ctx.input(0), ctx.input(1)], {"axis": axis})


def resolve_reshape(ctx: ConvertContext, in_shape, shape, allowzero: bool) -> list[int]:
    """ONNX Reshape's target made explicit: 0 copies the input dim (unless allowzero), one -1
    is inferred."""
    out, infer = [], None
    for i, d in enumerate(shape):
        if d == -1:
            if infer is not None:
                raise ctx.error(f"shape {shape} has more than one -1")
            infer = i
            out.append(1)
        elif d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ctx.error(f"shape {shape}: 0 at index {i} has no input dim to copy "
                                f"(input shape {list(in_shape)})")
            out.append(in_shape[i])
        elif d < 0:
            raise ctx.error(f"shape {shape} has invalid dim {d}")
        else:
            out.append(d)
    if allowzero and infer is not None and 0 in shape:
        raise ctx.error(f"shape {shape}: -1 together with 0 is invalid when allowzero=1")
    size = int(np.prod(in_shape, dtype=np.int64))
    known = int(np.prod(out, dtype=np.int64))
    if infer is not None:
        if known == 0 or size % known:
            raise ctx.error(f"cannot infer -1 in shape {shape} for input shape {list(in_shape)}")
        out[infer] = size // known
    elif known != size:
        raise ctx.error(f"cannot reshape input shape {list(in_shape)} to {shape}")
    return out


@converter("Reshape")
def reshape(ctx: ConvertContext):
    t = ctx.type(0)
    shape = _int_list(ctx, ctx.const(1, "input 'shape'"), "shape")
    allowzero = bool(ctx.attr("allowzero", 0)) if ctx.opset >= 14 else False
    out = resolve_reshape(ctx, t.shape, shape, allowzero)
    return ctx.emit("graph.reshape", [ctx.input(0)], {"shape": out})


@converter("Flatten")
def flatten(ctx: ConvertContext):
    t = ctx.type(0)
    axis = _axis(ctx, ctx.attr("axis", 1), t.rank, upper=t.rank + 1)
    return ctx.emit("graph.flatten", [ctx.input(0)], {"axis": axis})


@converter("Transpose")
def transpose(ctx: ConvertContext):
    rank = ctx.type(0).rank
    perm = ctx.attr("perm")
    perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
    if sorted(perm) != list(range(rank)):
        raise ctx.error(f"perm {perm} is not a permutation of {rank} axes")
    return ctx.emit("graph.transpose", [ctx.input(0)], {"perm": perm})


@converter("Squeeze")
def squeeze(ctx: ConvertContext):
    t = ctx.type(0)
    axes = _ints_input_or_attr(ctx, 1, "axes", 13)
    if axes is None:
        axes = [k for k, d in enumerate(t.shape) if d == 1]
    axes = _axes(ctx, axes, t.rank)
    bad = [a for a in axes if t.shape[a] != 1]
    if bad:
        raise ctx.error(f"cannot squeeze axes {bad} of shape {list(t.shape)}: not of size 1")
    return ctx.emit("graph.squeeze", [ctx.input(0)], {"axes": axes})


@converter("Unsqueeze")
def unsqueeze(ctx: ConvertContext):
    t = ctx.type(0)
    axes = _ints_input_or_attr(ctx, 1, "axes", 13)
    if axes is None:
        raise ctx.error("axes are required")
    axes = _axes(ctx, axes, t.rank + len(axes))
    return ctx.emit("graph.unsqueeze", [ctx.input(0)], {"axes": axes})


@converter("Tile")
def tile(ctx: ConvertContext):
    t = ctx.type(0)
    reps = _int_list(ctx, ctx.const(1, "input 'repeats'"), "repeats")
    if len(reps) != t.rank or any(r < 0 for r in reps):
        raise ctx.error(f"repeats {reps} must be {t.rank} non-negative ints")
    return ctx.emit("graph.tile", [ctx.input(0)], {"repeats": reps})


@converter("Expand")
def expand(ctx: ConvertContext):
    t = ctx.type(0)
    shape = _int_list(ctx, ctx.const(1, "input 'shape'"), "shape")
    if any(d < 0 for d in shape):
        raise ctx.error(f"shape {shape} has negative dims")
    try:
        out = np.broadcast_shapes(tuple(t.shape), tuple(shape))
    except ValueError:
        raise ctx.error(f"input shape {list(t.shape)} does not broadcast with {shape}") from None
    return ctx.emit("graph.expand", [ctx.input(0)], {"shape": list(out)})


@converter("Shape")
def shape(ctx: ConvertContext):
    rank = ctx.type(0).rank
    start, end = ctx.attr("start", 0), ctx.attr("end", rank)
    if ctx.opset < 15:
        start, end = 0, rank
    start, end = (min(max(v + rank if v < 0 else v, 0), rank) for v in (start, end))
    return ctx.emit("graph.shape", [ctx.input(0)], {"start": start, "end": end})


@converter("ConstantOfShape")
def constant_of_shape(ctx: ConvertContext):
    shape = _int_list(ctx, ctx.const(0, "input 'input' (the shape)"), "shape")
    if any(d < 0 for d in shape):
        raise ctx.error(f"shape {shape} has negative dims")
    value = ctx.attr("value")
    value = np.zeros((1,), np.float32) if value is None else np.asarray(value)
    if value.size != 1:
        raise ctx.error(f"value must have one element, has {value.size}")
    try:
        from ...ir.attributes import DenseElements
        value = DenseElements(value.reshape(1))
    except TypeError:
        raise ctx.error(f"value of dtype {value.dtype} is not supported") from None
    return ctx.emit("graph.constant_of_shape", [], {"shape": shape, "value": value})


@converter("Constant")
def constant(ctx: ConvertContext):
    names = [a.name for a in ctx.node.attribute]
    if len(names) != 1:
        raise ctx.error(f"needs exactly one value attribute, has {names}")
    name = names[0]
    if name in ("sparse_value", "value_string", "value_strings"):
        raise ctx.error(f"attribute {name} is not supported (sparse and string constants)")
    v = ctx.attr(name)
    if name == "value":
        array = np.asarray(v)
    elif name == "value_float":
        array = np.array(v, np.float32)
    elif name == "value_floats":
        array = np.array(list(v), np.float32).reshape(-1)
    elif name == "value_int":
        array = np.array(v, np.int64)
    elif name == "value_ints":
        array = np.array(list(v), np.int64).reshape(-1)
    else:
        raise ctx.error(f"unknown attribute {name}")
    try:
        return [ctx.constant(array)]
    except TypeError:
        raise ctx.error(f"constant of dtype {array.dtype} is not supported") from None


@converter("Size")
def size(ctx: ConvertContext):
    """The element count of a static shape: an i64 scalar constant."""
    return [ctx.constant(np.array(ctx.type(0).size, np.int64))]


@converter("Range")
def range_(ctx: ConvertContext):
    """``start + i * delta`` for ``i < max(ceil((limit - start) / delta), 0)``: the element count
    decides the shape, so the three scalars must be known at compile time (the result is a
    constant)."""
    vals = [ctx.const(i, f"input #{i} ({('start', 'limit', 'delta')[i]})") for i in range(3)]
    if any(v is None for v in vals):
        raise ctx.error("needs the three inputs start, limit and delta")
    start, limit, delta = (np.asarray(v) for v in vals)
    if any(v.size != 1 for v in (start, limit, delta)):
        raise ctx.error("start, limit and delta must be scalars")
    dtype = start.dtype
    if delta.reshape(-1)[0] == 0:
        raise ctx.error("delta is 0")
    s, lim, d = (v.reshape(-1)[0].item() for v in (start, limit, delta))
    n = max(int(np.ceil((lim - s) / d)), 0)
    if n > (1 << 31):
        raise ctx.error(f"Range of {n} elements is too large")
    out = (np.asarray(s, dtype) + np.arange(n, dtype=np.float64 if dtype.kind == "f" else dtype)
           .astype(dtype) * np.asarray(d, dtype)).astype(dtype)
    return [ctx.constant(out)]
