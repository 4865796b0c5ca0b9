"""Ops whose result element depends on its position: ``graph.trilu`` (keep the upper or lower
triangle of the last two dims), ``graph.cum_sum`` and ``graph.cum_prod`` (running sum/product
along ``axis``, ``exclusive`` and ``reverse`` as ONNX).

    %u = "graph.trilu"(%x) {k = 1, upper = 1} : (tensor<2x4x5xf32>) -> tensor<2x4x5xf32>
    %s = "graph.cum_sum"(%x) {axis = 1, exclusive = 0, reverse = 1}
           : (tensor<3x6xf32>) -> tensor<3x6xf32>

Trilu's ``k`` (an ONNX input) is a compile-time attribute here; ``axis`` is non-negative.
Running sums accumulate in the tensor's own type, in order, as numpy's cumsum.
"""

from __future__ import annotations

import numpy as np

from ...ir.spec import Attr, OpSpec, fail
from ...ir.types import I1
from .common import ttype


class Trilu(OpSpec):
    """Zero every element below (``upper = 1``: ``j - i < k``) or above (``upper = 0``:
    ``j - i > k``) the ``k``-th diagonal of the last two dims."""

    name = "graph.trilu"
    operands = ("input",)
    results = ("output",)
    attributes = {"upper": Attr("int", default=1), "k": Attr("int", default=0)}
    traits = {"pure"}

    def infer_types(self, op):
        return [ttype(op)]

    def verify(self, op):
        if ttype(op).rank < 2:
            fail(op, f"needs a tensor of rank >= 2, got {ttype(op)}")
        if op.attr("upper") not in (0, 1):
            fail(op, f"upper must be 0 or 1, got {op.attr('upper')!r}")

    def reference(self, op, args, interp):
        x = args[0]
        fn = np.triu if op.attr("upper") else np.tril
        return [fn(x, op.attr("k")).astype(x.dtype, copy=False)]


class Cumulative(OpSpec):
    """Base of running reductions along ``axis``."""

    operands = ("x",)
    results = ("y",)
    attributes = {"axis": Attr("int", required=True), "exclusive": Attr("int", default=0),
                  "reverse": Attr("int", default=0)}
    traits = {"pure"}
    ufunc = np.add
    identity = 0

    def infer_types(self, op):
        return [ttype(op)]

    def verify(self, op):
        t = ttype(op)
        if t.rank == 0:
            fail(op, "needs a tensor of rank >= 1")
        if not 0 <= op.attr("axis") < t.rank:
            fail(op, f"axis {op.attr('axis')} out of range for rank {t.rank}")
        if t.element == I1:
            fail(op, f"needs a numeric tensor, got {t}")
        for name in ("exclusive", "reverse"):
            if op.attr(name) not in (0, 1):
                fail(op, f"{name} must be 0 or 1, got {op.attr(name)!r}")

    def reference(self, op, args, interp):
        x = args[0]
        axis = op.attr("axis")
        if op.attr("reverse"):
            x = np.flip(x, axis)
        with np.errstate(all="ignore"):
            y = self.ufunc.accumulate(x, axis=axis, dtype=x.dtype)
        if op.attr("exclusive"):
            y = np.roll(y, 1, axis=axis)
            idx = [slice(None)] * x.ndim
            idx[axis] = 0
            y[tuple(idx)] = self.identity
        if op.attr("reverse"):
            y = np.flip(y, axis)
        return [np.ascontiguousarray(y)]


class CumSum(Cumulative):
    """Running sum along ``axis`` (``exclusive``: the element itself left out; ``reverse``:
    from the end)."""

    name = "graph.cum_sum"


class CumProd(Cumulative):
    """Running product along ``axis`` (``exclusive``, ``reverse`` as cum_sum)."""

    name = "graph.cum_prod"
    ufunc = np.multiply
    identity = 1


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (Trilu, CumSum, CumProd)
