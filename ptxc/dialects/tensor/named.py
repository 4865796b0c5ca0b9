"""Named structured ops: ``tensor.matmul``, ``tensor.conv``, ``tensor.pool``, ``tensor.reduce``.

Each is destination-passing: its last operand is the init of its result, which it accumulates
into (``C += A @ B``, ``Y += conv(X, W)``, ``Y = max(Y, window max)``, ...). They carry meaning
for scheduling (tiling, tensor cores) and each generalizes to a ``tensor.generic`` with the same
semantics (generalize.py). Their references are fast numpy (one matmul, the graph dialect's
im2col convolution, strided window views, ufunc reductions), fast enough to interpret ResNet-50.

Mixed precision: the out may be f32 where the ins are f16 (an f32 accumulator, as tensor cores
accumulate); the lowering uses that for sums of f16 data. Whatever the types, the reference
computes products and sums in f32 for f16 and rounds once into the out's type. ``tf32 = true``
on a matmul or conv of f32 operands rounds both factors to tf32 first (``arith.round_tf32``,
what a tf32 tensor-core instruction reads; ``precision="tf32"``).
"""

from __future__ import annotations

import numpy as np

from ...ir.spec import Attr, OpSpec, fail
from ...ir.types import F16, F32, I8, I32, TensorType
from ..arith import round_tf32
from ..graph.layout import channels_last, first_type, to_first, to_last
from ..graph.nn import compute_dtype, conv_nd, windows
from .data import tensor_operand


def _accumulator(op, ins, out: TensorType) -> None:
    """The out's element is the ins' element, or f32 for f16 ins, or i32 for i8 ins (an int8
    contraction accumulates in int32)."""
    el = ins[0].element
    if any(t.element != el for t in ins):
        fail(op, "the ins have different element types: "
                 + ", ".join(str(t.element) for t in ins))
    if out.element != el and not (el == F16 and out.element == F32) and \
            not (el == I8 and out.element == I32):
        fail(op, f"the out {out} must have element type {el} (or f32 for f16 ins, i32 for "
                 "i8 ins)")


def _check_tf32(op, a: TensorType) -> None:
    if op.attr("tf32") and a.element != F32:
        fail(op, f"tf32 = true needs f32 operands, they are {a.element}")


def _tf32(op, *xs):
    return [round_tf32(x) for x in xs] if op.attr("tf32") else list(xs)


def _ct(out_dtype) -> np.dtype:
    return compute_dtype(out_dtype)


def out_spatial(in_spatial, kernel, strides, dilations) -> list[int]:
    """floor((in - ((k - 1) * d + 1)) / s) + 1 per axis (input already padded)."""
    return [(i - ((k - 1) * d + 1)) // s + 1
            for i, k, s, d in zip(in_spatial, kernel, strides, dilations)]


def _ints_attr(op, name, n, positive=True):
    v = op.attr(name)
    if not isinstance(v, tuple) or len(v) != n or any(x < (1 if positive else 0) for x in v):
        fail(op, f"{name} must hold {n} {'positive' if positive else 'non-negative'} ints, "
                 f"is {v!r}")
    return v


def matmul_dims(op, a: TensorType, b: TensorType):
    """(M, K) of A and (K, N) of B as the product sees them (after ``transpose_a/b``)."""
    m, k = a.shape[-2:][::-1] if op.attr("transpose_a") else a.shape[-2:]
    k2, n = b.shape[-2:][::-1] if op.attr("transpose_b") else b.shape[-2:]
    return (m, k), (k2, n)


class MatMul(OpSpec):
    """``C[..., i, j] += sum_k A[..., i, k] * B[..., k, j]``; A and B have rank >= 2 and their
    batch dims broadcast (numpy rules) to C's. ``transpose_a`` / ``transpose_b`` read A or B
    with its last two dims swapped (ONNX Gemm's transA/transB: a fully connected layer's weight
    stays as stored, ``(N, K)``, instead of being copied transposed; docs/lowering.md's table
    has no such attribute, this is ptxc's addition)."""

    name = "tensor.matmul"
    operands = ("A", "B", "C")
    attributes = {"transpose_a": Attr("bool", default=False),
                  "transpose_b": Attr("bool", default=False),
                  "tf32": Attr("bool", default=False)}
    traits = {"pure"}

    def infer_types(self, op):
        return [tensor_operand(op, 2)]

    def verify(self, op):
        a, b, c = (tensor_operand(op, i) for i in range(3))
        if a.rank < 2 or b.rank < 2:
            fail(op, f"A and B must have rank >= 2, are {a} and {b}")
        (m, k), (k2, n) = matmul_dims(op, a, b)
        if k != k2:
            fail(op, f"inner dims differ: {a} @ {b}")
        try:
            batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError:
            fail(op, f"batch dims of {a} and {b} do not broadcast")
        want = tuple(batch) + (m, n)
        if c.shape != want:
            fail(op, f"C is {c}, expected shape {list(want)}")
        _accumulator(op, [a, b], c)
        _check_tf32(op, a)

    def reference(self, op, args, interp):
        a, b, c = args
        a, b = _tf32(op, a, b)
        ct = _ct(c.dtype)
        if op.attr("transpose_a"):
            a = a.swapaxes(-1, -2)
        if op.attr("transpose_b"):
            b = b.swapaxes(-1, -2)
        prod = np.matmul(a.astype(ct, copy=False), b.astype(ct, copy=False))
        return [(c.astype(ct, copy=False) + prod).astype(c.dtype, copy=False)]


class Conv(OpSpec):
    """``Y += conv(X, W)`` on an already padded ``X`` ``(N, C, *spatial)``, ``W``
    ``(M, C / group, *kernel)``, ``Y`` ``(N, M, *out)`` with
    ``out = floor((in - ((k - 1) * dilation + 1)) / stride) + 1``. ``layout = "NHWC"``
    (graph/layout.py): ``X`` ``(N, *spatial, C)``, ``W`` ``(M, *kernel, C / group)`` (KRSC),
    ``Y`` ``(N, *out, M)``."""

    name = "tensor.conv"
    operands = ("X", "W", "Y")
    attributes = {"strides": Attr("ints", required=True),
                  "dilations": Attr("ints", required=True),
                  "group": Attr("int", default=1),
                  "layout": Attr("str", default="NCHW", doc="NCHW or NHWC (W then KRSC)"),
                  "tf32": Attr("bool", default=False)}
    traits = {"pure"}

    def infer_types(self, op):
        return [tensor_operand(op, 2)]

    def verify(self, op):
        x, w, y = (tensor_operand(op, i) for i in range(3))
        if x.rank < 3 or w.rank != x.rank or y.rank != x.rank:
            fail(op, f"X, W and Y must have one rank >= 3, are {x}, {w}, {y}")
        if channels_last(op):
            x, w, y = first_type(x), first_type(w), first_type(y)
        n = x.rank - 2
        strides = _ints_attr(op, "strides", n)
        dilations = _ints_attr(op, "dilations", n)
        g = op.attr("group")
        if g < 1 or x.shape[1] % g or w.shape[0] % g or w.shape[1] * g != x.shape[1]:
            fail(op, f"group {g} does not fit X {x} and W {w}")
        out = out_spatial(x.shape[2:], w.shape[2:], strides, dilations)
        want = (x.shape[0], w.shape[0], *out)
        if y.shape != want or min(out, default=1) < 1:
            fail(op, f"Y is {y}, expected shape {list(want)}")
        _accumulator(op, [x, w], y)
        _check_tf32(op, x)

    def reference(self, op, args, interp):
        x, w, y = args
        if channels_last(op):
            x, w = to_first(x), to_first(w)
        x, w = _tf32(op, x, w)
        n = x.ndim - 2
        ct = _ct(y.dtype)
        r = conv_nd(x.astype(ct, copy=False), w.astype(ct, copy=False), None,
                    op.attr("strides"), (0,) * (2 * n), op.attr("dilations"), op.attr("group"))
        if channels_last(op):
            r = to_last(r)
        return [(y.astype(ct, copy=False) + r).astype(y.dtype, copy=False)]


POOL_KINDS = ("max", "sum")


class Pool(OpSpec):
    """Window max or sum over the spatial dims of an already padded ``X`` ``(N, C, *spatial)``,
    combined into ``Y`` ``(N, C, *out)`` (out as for ``tensor.conv``); ``layout = "NHWC"``: the
    channels last in both."""

    name = "tensor.pool"
    operands = ("X", "Y")
    attributes = {"kind": Attr("str", required=True),
                  "kernel_shape": Attr("ints", required=True),
                  "strides": Attr("ints", required=True),
                  "dilations": Attr("ints", required=True),
                  "layout": Attr("str", default="NCHW", doc="NCHW or NHWC")}
    traits = {"pure"}

    def infer_types(self, op):
        return [tensor_operand(op, 1)]

    def verify(self, op):
        x, y = tensor_operand(op, 0), tensor_operand(op, 1)
        if op.attr("kind") not in POOL_KINDS:
            fail(op, f"kind must be one of {list(POOL_KINDS)}, is {op.attr('kind')!r}")
        if x.rank < 3 or y.rank != x.rank:
            fail(op, f"X and Y must have one rank >= 3, are {x} and {y}")
        if channels_last(op):
            x, y = first_type(x), first_type(y)
        n = x.rank - 2
        k = _ints_attr(op, "kernel_shape", n)
        out = out_spatial(x.shape[2:], k, _ints_attr(op, "strides", n),
                          _ints_attr(op, "dilations", n))
        want = x.shape[:2] + tuple(out)
        if y.shape != want or min(out, default=1) < 1:
            fail(op, f"Y is {y}, expected shape {list(want)}")
        if op.attr("kind") == "max" and y.element != x.element:
            fail(op, f"a max pool's Y must have X's element type {x.element}")
        _accumulator(op, [x], y)

    def reference(self, op, args, interp):
        x, y = args
        if channels_last(op):
            return [to_last(self._combine(op, to_first(x), to_first(y)))]
        return [self._combine(op, x, y)]

    def _combine(self, op, x, y):
        n = x.ndim - 2
        v = windows(x, op.attr("kernel_shape"), op.attr("strides"), op.attr("dilations"),
                    y.shape[2:])
        axes = tuple(range(2 + n, 2 + 2 * n))
        if op.attr("kind") == "max":
            return np.maximum(y, v.max(axis=axes))
        # a sum adds the window's positions to Y one at a time, in row-major window order, as
        # the loop nest does (not numpy's pairwise order): the same rounding as compiled code
        acc = y.astype(_ct(y.dtype))
        for pos in np.ndindex(*op.attr("kernel_shape")):
            acc = acc + v[(Ellipsis,) + pos]
        return acc.astype(y.dtype, copy=False)


REDUCE_KINDS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


class Reduce(OpSpec):
    """``Y`` (``X``'s shape with the ``axes`` of size 1) combined with ``X`` over ``axes`` by
    ``kind`` (sum, prod, max, min). NaN propagates through max and min."""

    name = "tensor.reduce"
    operands = ("X", "Y")
    attributes = {"kind": Attr("str", required=True), "axes": Attr("ints", required=True)}
    traits = {"pure"}

    def infer_types(self, op):
        return [tensor_operand(op, 1)]

    def verify(self, op):
        x, y = tensor_operand(op, 0), tensor_operand(op, 1)
        if op.attr("kind") not in REDUCE_KINDS:
            fail(op, f"kind must be one of {sorted(REDUCE_KINDS)}, is {op.attr('kind')!r}")
        axes = op.attr("axes")
        if list(axes) != sorted(set(axes)) or any(not 0 <= a < x.rank for a in axes):
            fail(op, f"axes {list(axes)} must be sorted, unique and in [0, {x.rank})")
        want = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        if y.shape != want:
            fail(op, f"Y is {y}, expected shape {list(want)}")
        if op.attr("kind") in ("max", "min") and y.element != x.element:
            fail(op, f"a {op.attr('kind')} reduction's Y must have X's element type")
        _accumulator(op, [x], y)

    def reference(self, op, args, interp):
        x, y = args
        ufunc = REDUCE_KINDS[op.attr("kind")]
        axes = tuple(op.attr("axes"))
        if x.dtype == np.bool_:
            r = ufunc.reduce(x, axis=axes, keepdims=True) if x.size else np.broadcast_to(
                y, y.shape)
            return [ufunc(y, r)]
        ct = _ct(y.dtype)
        with np.errstate(all="ignore"):
            if x.size == 0 and ufunc in (np.maximum, np.minimum):
                return [np.array(y, copy=True)]  # nothing to combine: Y keeps its init
            r = ufunc.reduce(x.astype(ct, copy=False), axis=axes, keepdims=True, dtype=ct)
            return [ufunc(y.astype(ct, copy=False), r).astype(y.dtype, copy=False)]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (MatMul, Conv, Pool, Reduce)
