"""Matrix products: ``graph.matmul`` (numpy matmul semantics) and ``graph.gemm``.

    %y = "graph.gemm"(%a, %b, %c) {alpha = 1.0, beta = 1.0, transA = 0, transB = 1}
       : (tensor<1x2048xf32>, tensor<1000x2048xf32>, tensor<1000xf32>) -> tensor<1x1000xf32>
"""

from __future__ import annotations

import numpy as np

from ...ir.spec import Attr, Operand, OpSpec, fail
from ...ir.types import TensorType
from .common import broadcast_shapes, same_elements, ttype

#: element types the products accept (numpy computes them all)
_TYPES = ("f64", "f32", "f16", "i64", "i32", "ui64", "ui32")


def _check_types(op):
    same_elements(op)
    el = ttype(op).element
    if el.name not in _TYPES:
        fail(op, f"element type {el} is not supported (one of {', '.join(_TYPES)})")


def _product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b``; float16 accumulates in float32 (numpy has no fast float16 kernels)."""
    if a.dtype == np.float16:
        return np.matmul(a.astype(np.float32), b.astype(np.float32))
    return np.matmul(a, b)


def matmul_shape(op, a: tuple, b: tuple) -> tuple:
    """numpy.matmul's result shape: 1-D operands get a 1 prepended (A) or appended (B) that is
    removed again; batch dimensions broadcast."""
    if not a or not b:
        fail(op, "operands must have rank >= 1")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        fail(op, f"inner dimensions differ: {list(a)} @ {list(b)}")
    batch = broadcast_shapes(op, a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


class MatMul(OpSpec):
    """``A @ B`` with numpy.matmul semantics (1-D operands, broadcast batch dimensions)."""

    name = "graph.matmul"
    operands = ("A", "B")
    results = ("Y",)
    traits = {"pure"}

    def infer_types(self, op):
        a, b = ttype(op, 0), ttype(op, 1)
        return [TensorType(matmul_shape(op, a.shape, b.shape), a.element)]

    def verify(self, op):
        _check_types(op)

    def reference(self, op, args, interp):
        a, b = args
        return [np.asarray(_product(a, b)).astype(a.dtype, copy=False)]


class Gemm(OpSpec):
    """``alpha * A' @ B' + beta * C`` with ``A' = A.T if transA``, ``B' = B.T if transB``;
    ``A'`` is (M, K), ``B'`` is (K, N); the optional ``C`` broadcasts to (M, N)."""

    name = "graph.gemm"
    operands = ("A", "B", Operand("C", optional=True))
    results = ("Y",)
    attributes = {"alpha": Attr("float", default=1.0), "beta": Attr("float", default=1.0),
                  "transA": Attr("int", default=0), "transB": Attr("int", default=0)}
    traits = {"pure"}

    def infer_types(self, op):
        a, b = ttype(op, 0), ttype(op, 1)
        if a.rank != 2 or b.rank != 2:
            fail(op, f"A and B must be 2-D, got {a} and {b}")
        m, k = a.shape[::-1] if op.attr("transA") else a.shape
        k2, n = b.shape[::-1] if op.attr("transB") else b.shape
        if k != k2:
            fail(op, f"inner dimensions differ: A' is {[m, k]}, B' is {[k2, n]}")
        if len(op.operands) == 3:
            c = ttype(op, 2)
            try:
                ok = c.rank <= 2 and np.broadcast_shapes(c.shape, (m, n)) == (m, n)
            except ValueError:
                ok = False
            if not ok:
                fail(op, f"C {c} does not broadcast to {[m, n]}")
        return [TensorType((m, n), a.element)]

    def verify(self, op):
        _check_types(op)
        for t in ("transA", "transB"):
            if op.attr(t) not in (0, 1):
                fail(op, f"{t} must be 0 or 1, got {op.attr(t)}")

    def reference(self, op, args, interp):
        a, b = args[0], args[1]
        c = args[2] if len(args) == 3 else None
        if op.attr("transA"):
            a = a.T
        if op.attr("transB"):
            b = b.T
        alpha, beta = op.attr("alpha"), op.attr("beta")
        y = _product(a, b)
        ct = y.dtype
        if alpha != 1.0:
            y = (y * alpha) if ct.kind == "f" else np.asarray(y * alpha)
        if c is not None and beta != 0.0:
            cc = c.astype(ct, copy=False)
            y = y + (cc if beta == 1.0 else cc * beta)
        if y.dtype != args[0].dtype and args[0].dtype.kind in "iu":
            y = np.round(y)
        return [np.asarray(y).astype(args[0].dtype, copy=False)]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (MatMul, Gemm)
