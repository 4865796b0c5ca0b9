"""Shared pieces of graph ops: base specs for unary and broadcasting binary elementwise ops,
shape helpers, and the error helper that names the op."""

from __future__ import annotations

import numpy as np

from ...ir.core import Operation
from ...ir.spec import OpSpec, fail
from ...ir.types import I1, TensorType


def ttype(op: Operation, i: int = 0) -> TensorType:
    """The tensor type of operand ``i`` (fails naming the op if it is not a tensor)."""
    t = op.operands[i].type
    if not isinstance(t, TensorType):
        fail(op, f"operand #{i} must be a tensor, is {t}")
    return t


def broadcast_shapes(op: Operation, *shapes) -> tuple[int, ...]:
    """Numpy/ONNX multidirectional broadcasting; fails naming the op on mismatch."""
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        fail(op, "operand shapes " + ", ".join(str(list(s)) for s in shapes)
             + " do not broadcast")


def norm_axis(op: Operation, axis: int, rank: int, name: str = "axis") -> int:
    """``axis`` made non-negative; fails if out of range for ``rank``."""
    if not -rank <= axis < max(rank, 1):
        fail(op, f"{name} {axis} out of range for rank {rank}")
    return axis % rank if rank else 0


def same_elements(op: Operation, indices=None) -> None:
    """All listed operands (default: all) have one element type."""
    idx = range(len(op.operands)) if indices is None else indices
    els = {ttype(op, i).element for i in idx}
    if len(els) > 1:
        fail(op, "operands have different element types: " + ", ".join(sorted(map(str, els))))


class Unary(OpSpec):
    """Base of unary elementwise ops: ``Y = fn(X)``, same type. Subclasses define ``fn``."""

    operands = ("X",)
    results = ("Y",)
    traits = {"pure", "elementwise"}
    float_only = True

    def infer_types(self, op):
        return [ttype(op)]

    def verify(self, op):
        if self.float_only and not ttype(op).element.is_float:
            fail(op, f"needs a float tensor, got {ttype(op)}")

    def fn(self, op, x):  # pragma: no cover - every registered subclass defines it
        raise NotImplementedError

    def reference(self, op, args, interp):
        x = args[0]
        with np.errstate(all="ignore"):
            y = self.fn(op, x)
        return [np.asarray(y).astype(x.dtype, copy=False)]


class Binary(OpSpec):
    """Base of binary elementwise ops with ONNX broadcasting. Subclasses define ``fn``;
    ``compare`` ops return i1."""

    operands = ("A", "B")
    results = ("C",)
    traits = {"pure", "elementwise"}
    compare = False

    def infer_types(self, op):
        a, b = ttype(op, 0), ttype(op, 1)
        shape = broadcast_shapes(op, a.shape, b.shape)
        return [TensorType(shape, I1 if self.compare else a.element)]

    def verify(self, op):
        same_elements(op)

    def fn(self, op, a, b):  # pragma: no cover - every registered subclass defines it
        raise NotImplementedError

    def reference(self, op, args, interp):
        a, b = args
        with np.errstate(all="ignore"):
            c = self.fn(op, a, b)
        dtype = np.bool_ if self.compare else a.dtype
        return [np.asarray(c).astype(dtype, copy=False)]
