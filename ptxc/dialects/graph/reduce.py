"""Reductions: ``graph.reduce_{mean,sum,max,min,prod}``, ``graph.arg_max`` and ``graph.arg_min``.

A reduction always carries its ``axes`` explicitly: non-negative, sorted, unique. ONNX's "no axes
means all axes" is resolved by the importer into the full list, and ``noop_with_empty_axes``
becomes ``graph.identity``, so ``axes = []`` here means "reduce nothing" (the result equals the
input, with the same shape). ``keepdims`` is 1 (reduced axes kept with size 1) or 0.

    %r = "graph.reduce_mean"(%x) {axes = [2, 3], keepdims = 1}
           : (tensor<1x64x7x7xf32>) -> tensor<1x64x1x1xf32>
    %i = "graph.arg_max"(%x) {axis = 1, keepdims = 0, select_last_index = 0}
           : (tensor<2x10xf32>) -> tensor<2xi64>

Reducing an empty set gives the operation's identity: 0 for sums, -inf (or the type's lowest) for
max, +inf (or the highest) for min, NaN for mean, as ONNX specifies.
"""

from __future__ import annotations

import numpy as np

from ...ir.spec import Attr, OpSpec, fail
from ...ir.types import I1, I64, TensorType
from .common import ttype


def _check_flag(op, name: str) -> None:
    if op.attr(name) not in (0, 1):
        fail(op, f"{name} must be 0 or 1, got {op.attr(name)!r}")


class Reduce(OpSpec):
    """Base of ``graph.reduce_*``: ``reduced = fn(data, axes, keepdims)``."""

    operands = ("data",)
    results = ("reduced",)
    attributes = {"axes": Attr("ints", required=True, doc="non-negative, sorted, unique"),
                  "keepdims": Attr("int", default=1)}
    traits = {"pure"}
    allow_bool = False

    def infer_types(self, op):
        t = ttype(op)
        axes = op.attributes.get("axes", ())
        self._check_axes(op, axes, t.rank)
        if op.attr("keepdims"):
            shape = tuple(1 if i in axes else d for i, d in enumerate(t.shape))
        else:
            shape = tuple(d for i, d in enumerate(t.shape) if i not in axes)
        return [TensorType(shape, t.element)]

    @staticmethod
    def _check_axes(op, axes, rank) -> None:
        if any(not 0 <= a < rank for a in axes):
            fail(op, f"axes {list(axes)} out of range for rank {rank} (must be non-negative)")
        if list(axes) != sorted(set(axes)):
            fail(op, f"axes {list(axes)} must be sorted and unique")

    def verify(self, op):
        _check_flag(op, "keepdims")
        if ttype(op).element == I1 and not self.allow_bool:
            fail(op, f"needs a numeric tensor, got {ttype(op)}")

    def fn(self, x, axes, keepdims):  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def reference(self, op, args, interp):
        x = args[0]
        axes = tuple(op.attr("axes"))
        with np.errstate(all="ignore"):
            y = self.fn(x, axes, bool(op.attr("keepdims")))
        return [np.asarray(y).astype(x.dtype, copy=False).reshape(op.results[0].type.shape)]


def _acc(x: np.ndarray):
    """Accumulator dtype: float32 for float16, the tensor's own dtype otherwise."""
    return np.float32 if x.dtype == np.float16 else x.dtype


class ReduceSum(Reduce):
    """Sum over ``axes``."""

    name = "graph.reduce_sum"

    def fn(self, x, axes, keepdims):
        return np.sum(x, axis=axes, keepdims=keepdims, dtype=_acc(x))


class ReduceMean(Reduce):
    """Arithmetic mean over ``axes`` (integer tensors truncate toward zero)."""

    name = "graph.reduce_mean"

    def fn(self, x, axes, keepdims):
        if x.dtype.kind in "iu":
            m = np.mean(x, axis=axes, keepdims=keepdims, dtype=np.float64)
            return np.trunc(m)
        return np.mean(x, axis=axes, keepdims=keepdims, dtype=_acc(x))


def _lowest(dtype):
    if dtype == np.bool_:
        return False
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    return -np.inf


def _highest(dtype):
    if dtype == np.bool_:
        return True
    if dtype.kind in "iu":
        return np.iinfo(dtype).max
    return np.inf


class ReduceMax(Reduce):
    """Maximum over ``axes`` (i1 allowed: logical or); the empty set gives -inf / the lowest."""

    name = "graph.reduce_max"
    allow_bool = True

    def fn(self, x, axes, keepdims):
        return np.max(x, axis=axes, keepdims=keepdims, initial=_lowest(x.dtype))


class ReduceMin(Reduce):
    """Minimum over ``axes`` (i1 allowed: logical and); the empty set gives +inf / the highest."""

    name = "graph.reduce_min"
    allow_bool = True

    def fn(self, x, axes, keepdims):
        return np.min(x, axis=axes, keepdims=keepdims, initial=_highest(x.dtype))


class ReduceProd(Reduce):
    """Product over ``axes`` (f16 multiplies in f32); the empty set gives 1."""

    name = "graph.reduce_prod"

    def fn(self, x, axes, keepdims):
        return np.prod(x, axis=axes, keepdims=keepdims, dtype=_acc(x))


class ArgMax(OpSpec):
    """Index (i64) of the maximum along ``axis``; the first one, or the last one with
    ``select_last_index = 1``. ``axis`` is non-negative; ``keepdims`` keeps it with size 1."""

    name = "graph.arg_max"
    operands = ("data",)
    results = ("reduced",)
    attributes = {"axis": Attr("int", required=True), "keepdims": Attr("int", default=1),
                  "select_last_index": Attr("int", default=0)}
    traits = {"pure"}

    def infer_types(self, op):
        t = ttype(op)
        axis = op.attributes.get("axis", 0)
        if not 0 <= axis < max(t.rank, 1) or t.rank == 0:
            fail(op, f"axis {axis} out of range for rank {t.rank} (must be non-negative)")
        if t.shape[axis] == 0:
            fail(op, f"cannot take {self.name[6:]} over an empty axis {axis} of {t}")
        if op.attr("keepdims"):
            shape = t.shape[:axis] + (1,) + t.shape[axis + 1:]
        else:
            shape = t.shape[:axis] + t.shape[axis + 1:]
        return [TensorType(shape, I64)]

    def verify(self, op):
        _check_flag(op, "keepdims")
        _check_flag(op, "select_last_index")

    def reference(self, op, args, interp):
        x = args[0]
        axis = op.attr("axis")
        fn = np.argmin if self.name == "graph.arg_min" else np.argmax
        if op.attr("select_last_index"):
            flipped = np.flip(x, axis=axis)
            idx = x.shape[axis] - 1 - fn(flipped, axis=axis)
        else:
            idx = fn(x, axis=axis)
        idx = np.asarray(idx, dtype=np.int64)
        if op.attr("keepdims"):
            idx = np.expand_dims(idx, axis)
        return [idx]


class ArgMin(ArgMax):
    """Index (i64) of the minimum along ``axis`` (first, or last with ``select_last_index``;
    a NaN counts as the minimum, as numpy's argmin)."""

    name = "graph.arg_min"


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ArgMax, ArgMin)
