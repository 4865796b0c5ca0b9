"""Shape and data-movement ops: concat, split, slice, gather, reshape, flatten, transpose,
squeeze, unsqueeze, tile, expand, shape, constant_of_shape.

Every shape-deciding ONNX input is an attribute here, fully resolved by the converter:

* ``graph.reshape {shape}`` holds the output shape itself (no ``0`` or ``-1`` left);
* ``graph.slice {starts, ends, steps}`` holds one entry per axis of the operand (all axes, so no
  ``axes`` attribute), already clamped as the ONNX spec clamps them: for a positive step
  ``0 <= start, end <= dim``; for a negative step ``0 <= start <= dim - 1`` and
  ``-1 <= end <= dim - 1``, where ``end == -1`` means "through index 0" (an axis of extent 0
  has ``start == end == 0``). The axis then has
  ``len(range(start, end, step))`` elements;
* ``graph.squeeze {axes}`` / ``graph.unsqueeze {axes}``: non-negative, sorted, unique (squeeze's
  axes index the operand, unsqueeze's the result; squeeze without ONNX axes lists every 1-dim);
* ``graph.expand {shape}`` holds the broadcast result shape (the converter resolves ONNX's
  bidirectional broadcast; the op still accepts any shape that broadcasts with its operand);
* ``graph.shape {start, end}``: non-negative, clamped to ``[0, rank]``;
* ``graph.split {split}``: one size per result, summing to the axis' extent.

Reference semantics return numpy views where numpy can (reshape, transpose, slice, split, expand).
"""

from __future__ import annotations

import numpy as np

from ...ir.attributes import DenseElements
from ...ir.spec import Attr, Operand, OpSpec, Result, fail
from ...ir.types import I32, I64, TensorType
from .common import broadcast_shapes, same_elements, ttype


def _ints(op, name) -> tuple[int, ...]:
    v = op.attr(name)
    if not isinstance(v, tuple):
        fail(op, f"attribute {name} must be a list of ints, is {v!r}")
    return v


def _axis(op, rank: int, name: str = "axis", upper: int | None = None) -> int:
    """A normalized (non-negative) axis attribute in ``[0, upper)`` (default ``rank``)."""
    a = op.attr(name)
    upper = rank if upper is None else upper
    if not isinstance(a, int) or not 0 <= a < upper:
        fail(op, f"{name} = {a!r} must be in [0, {upper}) (normalized, non-negative)")
    return a


def _sorted_unique(op, axes, upper: int, name: str = "axes") -> None:
    if list(axes) != sorted(set(axes)) or any(not 0 <= a < upper for a in axes):
        fail(op, f"{name} {list(axes)} must be sorted, unique and in [0, {upper})")


class Concat(OpSpec):
    """Concatenation of the operands along ``axis`` (non-negative); all other dims equal.

    ``in_place = true`` (set by the eliminate-concat pass): every operand is written by its
    producer directly into its slice of the result; bufferization allocates only the result and
    gives each operand an alias into it; no copy. An operand that is a result of a
    ``graph.split`` whose input has no other reader is written by the producer of that input
    (the split has no buffer of its own: each of its results' ranges is written into that
    result's buffer). The meaning (a concatenation) is the same."""

    name = "graph.concat"
    operands = (Operand("inputs", variadic=True),)
    attributes = {"axis": Attr("int", required=True),
                  "in_place": Attr("bool", default=False,
                                   doc="every operand is written by its producer directly into "
                                       "its slice of the result; bufferization allocates only "
                                       "the result and gives each operand an alias into it; "
                                       "no copy")}
    traits = {"pure"}

    def infer_types(self, op):
        if not op.operands:
            fail(op, "needs at least one operand")
        ts = [ttype(op, i) for i in range(len(op.operands))]
        rank = ts[0].rank
        if rank == 0:
            fail(op, "cannot concatenate rank-0 tensors")
        axis = _axis(op, rank)
        for t in ts[1:]:
            if t.rank != rank or any(a != b for k, (a, b) in enumerate(zip(t.shape, ts[0].shape))
                                     if k != axis):
                fail(op, f"operand shapes {[list(x.shape) for x in ts]} differ outside axis {axis}")
        shape = list(ts[0].shape)
        shape[axis] = sum(t.shape[axis] for t in ts)
        return [TensorType(shape, ts[0].element)]

    def verify(self, op):
        same_elements(op)

    def reference(self, op, args, interp):
        return [np.concatenate(args, axis=op.attr("axis"))]


class Split(OpSpec):
    """Splits ``input`` along ``axis`` into ``len(split)`` results of the given sizes."""

    name = "graph.split"
    operands = ("input",)
    results = (Result("outputs", variadic=True),)
    attributes = {"axis": Attr("int", default=0), "split": Attr("ints", required=True)}
    traits = {"pure"}

    def infer_types(self, op):
        t = ttype(op)
        if t.rank == 0:
            fail(op, "cannot split a rank-0 tensor")
        axis = _axis(op, t.rank)
        split = _ints(op, "split")
        if not split or any(s < 0 for s in split) or sum(split) != t.shape[axis]:
            fail(op, f"split {list(split)} must be non-negative sizes summing to dim "
                     f"{t.shape[axis]} of axis {axis}")
        out = []
        for s in split:
            shape = list(t.shape)
            shape[axis] = s
            out.append(t.with_shape(shape))
        return out

    def reference(self, op, args, interp):
        bounds = np.cumsum(op.attr("split"))[:-1]
        return list(np.split(args[0], bounds, axis=op.attr("axis")))


def slice_len(start: int, end: int, step: int) -> int:
    return len(range(start, end, step))


class Slice(OpSpec):
    """``data[start:end:step]`` on every axis; starts/ends/steps are normalized and clamped as
    the module docstring says (one entry per axis; ``end == -1`` with a negative step means
    through index 0)."""

    name = "graph.slice"
    operands = ("data",)
    results = ("output",)
    attributes = {"starts": Attr("ints", required=True), "ends": Attr("ints", required=True),
                  "steps": Attr("ints", required=True)}
    traits = {"pure"}

    def infer_types(self, op):
        t = ttype(op)
        starts, ends, steps = (_ints(op, n) for n in ("starts", "ends", "steps"))
        if not len(starts) == len(ends) == len(steps) == t.rank:
            fail(op, f"starts, ends and steps need {t.rank} entries each (one per axis), have "
                     f"{len(starts)}, {len(ends)}, {len(steps)}")
        shape = []
        for k, (d, s, e, st) in enumerate(zip(t.shape, starts, ends, steps)):
            if d == 0:
                ok = st != 0 and s == e == 0
            elif st > 0:
                ok = 0 <= s <= d and 0 <= e <= d
            else:
                ok = st < 0 and 0 <= s <= d - 1 and -1 <= e <= d - 1
            if not ok:
                fail(op, f"axis {k} (dim {d}): start {s}, end {e}, step {st} are not normalized")
            shape.append(slice_len(s, e, st))
        return [t.with_shape(shape)]

    def reference(self, op, args, interp):
        idx = tuple(slice(s, e if e >= 0 else None, st) for s, e, st in
                    zip(op.attr("starts"), op.attr("ends"), op.attr("steps")))
        return [args[0][idx]]


class Gather(OpSpec):
    """``np.take(data, indices, axis)``: indices (i32 or i64, any shape, may be run-time data)
    index ``data`` along ``axis``; negative indices count from the end."""

    name = "graph.gather"
    operands = ("data", "indices")
    results = ("output",)
    attributes = {"axis": Attr("int", default=0)}
    traits = {"pure"}

    def infer_types(self, op):
        d, i = ttype(op, 0), ttype(op, 1)
        if d.rank == 0:
            fail(op, "data must have rank >= 1")
        axis = _axis(op, d.rank)
        if i.element not in (I32, I64):
            fail(op, f"indices must be i32 or i64, are {i.element}")
        return [d.with_shape(d.shape[:axis] + i.shape + d.shape[axis + 1:])]

    def reference(self, op, args, interp):
        data, idx = args
        axis = op.attr("axis")
        n = data.shape[axis]
        if idx.size and (idx.min() < -n or idx.max() >= n):
            from ...errors import IndexOutOfRangeError
            v = int(idx.min() if idx.min() < -n else idx.max())
            raise IndexOutOfRangeError(f"Gather" + (f" {op.loc!r}" if op.loc else "")
                                       + f" axis {axis} (size {n}): index {v} out of range "
                                       f"[{-n}, {n})")
        return [np.take(data, idx.astype(np.int64, copy=False), axis=axis)]


class Reshape(OpSpec):
    """Reshapes ``data`` (row-major) to ``shape``, fully resolved: no 0 or -1 entries."""

    name = "graph.reshape"
    operands = ("data",)
    results = ("reshaped",)
    attributes = {"shape": Attr("ints", required=True)}
    traits = {"pure"}

    def infer_types(self, op):
        t = ttype(op)
        shape = _ints(op, "shape")
        if any(d < 0 for d in shape) or int(np.prod(shape, dtype=np.int64)) != t.size:
            fail(op, f"cannot reshape {t} to {list(shape)}")
        return [t.with_shape(shape)]

    def reference(self, op, args, interp):
        return [args[0].reshape(op.attr("shape"))]


class Flatten(OpSpec):
    """2-D reshape: ``(prod(dims[:axis]), prod(dims[axis:]))``, ``0 <= axis <= rank``."""

    name = "graph.flatten"
    operands = ("input",)
    results = ("output",)
    attributes = {"axis": Attr("int", default=1)}
    traits = {"pure"}

    def infer_types(self, op):
        t = ttype(op)
        axis = _axis(op, t.rank, upper=t.rank + 1)
        outer = int(np.prod(t.shape[:axis], dtype=np.int64))
        return [t.with_shape((outer, int(np.prod(t.shape[axis:], dtype=np.int64))))]

    def reference(self, op, args, interp):
        return [args[0].reshape(op.results[0].type.shape)]


class Transpose(OpSpec):
    """Permutes the axes: ``output.shape[i] = data.shape[perm[i]]`` (perm always explicit)."""

    name = "graph.transpose"
    operands = ("data",)
    results = ("transposed",)
    attributes = {"perm": Attr("ints", required=True)}
    traits = {"pure"}

    def infer_types(self, op):
        t = ttype(op)
        perm = _ints(op, "perm")
        if sorted(perm) != list(range(t.rank)):
            fail(op, f"perm {list(perm)} is not a permutation of {t.rank} axes")
        return [t.with_shape([t.shape[p] for p in perm])]

    def reference(self, op, args, interp):
        return [np.transpose(args[0], op.attr("perm"))]


class Squeeze(OpSpec):
    """Removes the listed axes (each of size 1; sorted, non-negative, explicit)."""

    name = "graph.squeeze"
    operands = ("data",)
    results = ("squeezed",)
    attributes = {"axes": Attr("ints", required=True)}
    traits = {"pure"}

    def infer_types(self, op):
        t = ttype(op)
        axes = _ints(op, "axes")
        _sorted_unique(op, axes, t.rank)
        if any(t.shape[a] != 1 for a in axes):
            fail(op, f"cannot squeeze axes {list(axes)} of {t}: not all of size 1")
        return [t.with_shape([d for k, d in enumerate(t.shape) if k not in axes])]

    def reference(self, op, args, interp):
        return [args[0].reshape(op.results[0].type.shape)]


class Unsqueeze(OpSpec):
    """Inserts size-1 dims at ``axes`` (sorted, non-negative positions in the result)."""

    name = "graph.unsqueeze"
    operands = ("data",)
    results = ("expanded",)
    attributes = {"axes": Attr("ints", required=True)}
    traits = {"pure"}

    def infer_types(self, op):
        t = ttype(op)
        axes = _ints(op, "axes")
        rank = t.rank + len(axes)
        _sorted_unique(op, axes, rank)
        dims = iter(t.shape)
        return [t.with_shape([1 if k in axes else next(dims) for k in range(rank)])]

    def reference(self, op, args, interp):
        return [args[0].reshape(op.results[0].type.shape)]


class Tile(OpSpec):
    """Repeats the operand ``repeats[i]`` times along axis ``i`` (one entry per axis)."""

    name = "graph.tile"
    operands = ("input",)
    results = ("output",)
    attributes = {"repeats": Attr("ints", required=True)}
    traits = {"pure"}

    def infer_types(self, op):
        t = ttype(op)
        reps = _ints(op, "repeats")
        if len(reps) != t.rank or any(r < 0 for r in reps):
            fail(op, f"repeats {list(reps)} must be {t.rank} non-negative ints")
        return [t.with_shape([d * r for d, r in zip(t.shape, reps)])]

    def reference(self, op, args, interp):
        x = args[0]
        return [np.tile(x, op.attr("repeats")) if x.ndim else x.copy()]


class Expand(OpSpec):
    """Broadcasts ``input`` with ``shape`` (ONNX bidirectional broadcasting): the result has
    shape ``broadcast(input.shape, shape)``; the converter stores that result shape."""

    name = "graph.expand"
    operands = ("input",)
    results = ("output",)
    attributes = {"shape": Attr("ints", required=True)}
    traits = {"pure"}

    def infer_types(self, op):
        t = ttype(op)
        shape = _ints(op, "shape")
        if any(d < 0 for d in shape):
            fail(op, f"shape {list(shape)} has negative dims")
        return [t.with_shape(broadcast_shapes(op, t.shape, shape))]

    def reference(self, op, args, interp):
        return [np.broadcast_to(args[0], op.results[0].type.shape)]


class Shape(OpSpec):
    """The operand's dims ``start:end`` as a rank-1 i64 tensor; start/end non-negative and
    clamped to ``[0, rank]``. Depends only on the operand's type (``shape_only``)."""

    name = "graph.shape"
    operands = ("data",)
    results = ("shape",)
    attributes = {"start": Attr("int", default=0), "end": Attr("int")}
    traits = {"pure", "shape_only"}

    def _range(self, op):
        rank = ttype(op).rank
        start, end = op.attr("start"), op.attr("end", rank)
        if not (isinstance(start, int) and isinstance(end, int)
                and 0 <= start <= rank and 0 <= end <= rank):
            fail(op, f"start {start!r} and end {end!r} must be in [0, {rank}]")
        return start, end

    def infer_types(self, op):
        start, end = self._range(op)
        return [TensorType((max(end - start, 0),), I64)]

    def reference(self, op, args, interp):
        start, end = self._range(op)
        return [np.array(ttype(op).shape[start:end], dtype=np.int64).reshape(-1)]


class ConstantOfShape(OpSpec):
    """A tensor of ``shape`` filled with ``value`` (a one-element tensor; its element type is
    the result's; default 0.0 f32)."""

    name = "graph.constant_of_shape"
    operands = ()
    results = ("output",)
    attributes = {"shape": Attr("ints", required=True),
                  "value": Attr("dense", default=DenseElements(np.zeros((1,), np.float32)))}
    traits = {"pure"}

    def infer_types(self, op):
        shape = _ints(op, "shape")
        value = op.attr("value")
        if not isinstance(value, DenseElements) or value.type.size != 1:
            fail(op, "value must be a one-element dense tensor")
        if any(d < 0 for d in shape):
            fail(op, f"shape {list(shape)} has negative dims")
        return [TensorType(shape, value.type.element)]

    def reference(self, op, args, interp):
        value = op.attr("value").array
        return [np.full(op.attr("shape"), value.reshape(()), dtype=value.dtype)]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (Concat, Split, Slice, Gather, Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Tile,
       Expand, Shape, ConstantOfShape)
