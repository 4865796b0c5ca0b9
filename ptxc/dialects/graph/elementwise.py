"""Elementwise arithmetic, math and comparison ops (ONNX broadcasting for binary ops), and the
data-movement no-ops ``graph.cast``, ``graph.identity`` and ``graph.dropout``.

Binary and variadic ops broadcast multidirectionally (numpy rules); comparisons return ``i1``.
Integer ``graph.div`` truncates toward zero as C and ONNX do (numpy's ``//`` floors).
``graph.pow`` is the one binary op whose operands may differ in element type (ONNX ``Pow`` has
separate type constraints T and T1); its result has the base's type.

    %c = "graph.sub"(%a, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    %m = "graph.max"(%a, %b, %c) : (...) -> tensor<2x3xf32>
    %y = "graph.cast"(%x) {to = i64} : (tensor<4xf32>) -> tensor<4xi64>
"""

from __future__ import annotations

import numpy as np

from ...ir.spec import Attr, Operand, OpSpec, fail
from ...ir.types import I1, ScalarType, TensorType
from ..math import erf
from .common import Binary, Unary, broadcast_shapes, same_elements, ttype


class Relu(Unary):
    """``max(X, 0)``."""

    name = "graph.relu"
    float_only = False

    def fn(self, op, x):
        return np.maximum(x, 0)


class Add(Binary):
    """``A + B``."""

    name = "graph.add"
    traits = {"pure", "elementwise", "commutative"}

    def fn(self, op, a, b):
        return a + b


# ---- binary arithmetic ---------------------------------------------------------------------

class Arith(Binary):
    """Binary arithmetic: numeric operands of one element type (not i1)."""

    def verify(self, op):
        super().verify(op)
        if ttype(op, 0).element == I1:
            fail(op, f"needs numeric operands, got {ttype(op, 0)}")


class Sub(Arith):
    """``A - B`` (integers wrap around)."""

    name = "graph.sub"

    def fn(self, op, a, b):
        return a - b


class Mul(Arith):
    """``A * B`` (integers wrap around)."""

    name = "graph.mul"
    traits = {"pure", "elementwise", "commutative"}

    def fn(self, op, a, b):
        return a * b


def trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division rounding toward zero (C semantics); x / 0 gives 0 (undefined in ONNX)."""
    with np.errstate(all="ignore"):
        q = np.floor_divide(a, b)
        r = a - q * b
    if np.issubdtype(np.result_type(a, b), np.signedinteger):
        q = q + ((r != 0) & ((a < 0) != (b < 0))).astype(q.dtype)
    return q


class Div(Arith):
    """``A / B``; integer division truncates toward zero (ONNX/C), not toward -inf."""

    name = "graph.div"

    def fn(self, op, a, b):
        if a.dtype.kind in "iu":
            return trunc_div(a, b)
        return a / b


class Pow(OpSpec):
    """``A ** B`` with broadcasting. As ONNX ``Pow`` (T, T1), the exponent may have another
    numeric element type than the base; the result has the base's type.

    An integer base with an integer exponent is :func:`int_pow`: the exact power wrapped to the
    base's type (two's complement), as ONNX's reference (numpy) computes it, on every target.
    onnxruntime agrees wherever its double ``pow`` is exact (results within 2**53) and for the
    exponents 2 and 3, which it multiplies out; beyond, its ``(int)pow(double, double)`` is
    undefined in C++ (x86 gives the type's minimum, Arm saturates) and rounds results past
    2**53, so ptxc does not follow it there. A negative exponent truncates the real power:
    ``1 ** -n == 1``, ``(-1) ** -n == +-1``, other bases 0, and ``0 ** -n`` the type's
    minimum (signed; onnxruntime on x86) or 0 (unsigned).

    A signed integer base with a float exponent computes ``trunc(pow(double(A), double(B)))``;
    a result that is not finite or does not fit the type gives the type's minimum (as
    onnxruntime and numpy on x86; issue 40: the compiled code saturated to the maximum). Other
    mixed types compute in float64 and convert."""

    name = "graph.pow"
    operands = ("A", "B")
    results = ("C",)
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        a, b = ttype(op, 0), ttype(op, 1)
        return [TensorType(broadcast_shapes(op, a.shape, b.shape), a.element)]

    def verify(self, op):
        for i in (0, 1):
            if ttype(op, i).element == I1:
                fail(op, f"operand #{i} must be numeric, got {ttype(op, i)}")

    def reference(self, op, args, interp):
        a, b = args
        with np.errstate(all="ignore"):
            if a.dtype.kind in "iu" and b.dtype.kind in "iu":
                c = int_pow(a, b)
            elif a.dtype.kind == "i":
                c = np.trunc(np.power(a.astype(np.float64), b.astype(np.float64)))
                bits = a.dtype.itemsize * 8
                ok = (c >= -2.0 ** (bits - 1)) & (c < 2.0 ** (bits - 1))
                c = np.where(ok, c, -2.0 ** (bits - 1))
            elif a.dtype == b.dtype:
                c = np.power(a, b)
            else:
                c = np.power(a.astype(np.float64), b.astype(np.float64))
            return [np.asarray(c).astype(a.dtype)]


def int_pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a ** b`` for integer arrays (broadcast), in ``a``'s type: for ``b >= 0`` the exact
    power modulo 2**bits (square-and-multiply in uint64, whose products wrap, then truncated:
    two's complement for a signed ``a``); for ``b < 0`` the real power truncated toward zero,
    ``0 ** -n`` giving a signed type's minimum (an unsigned type's 0)."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    neg = b < 0 if b.dtype.kind == "i" else np.zeros(b.shape, bool)
    with np.errstate(all="ignore"):
        c = np.power(a.astype(np.uint64), np.where(neg, 0, b).astype(np.uint64))
        out = c.astype(a.dtype)
        if neg.any():
            signed = a.dtype.kind == "i"
            zero = np.iinfo(a.dtype).min if signed else 0
            odd = (b & 1) != 0
            minus_one = (a == -1) if signed else np.zeros(a.shape, bool)
            real = np.where(a == 1, 1, np.where(minus_one, np.where(odd, -1, 1),
                                                np.where(a == 0, zero, 0)))
            out = np.where(neg, real.astype(a.dtype), out)
    return out


# ---- variadic ------------------------------------------------------------------------------

class Variadic(OpSpec):
    """Base of variadic elementwise ops (ONNX Max, Min, Sum, Mean): one or more operands of one
    element type, broadcast together (the opset 6-7 forms without broadcasting are a subset)."""

    operands = (Operand("data", variadic=True),)
    results = ("result",)
    traits = {"pure", "elementwise", "commutative"}
    float_only = False

    def infer_types(self, op):
        if not op.operands:
            fail(op, "needs at least one operand")
        shape = broadcast_shapes(op, *[ttype(op, i).shape for i in range(len(op.operands))])
        return [TensorType(shape, ttype(op, 0).element)]

    def verify(self, op):
        same_elements(op)
        el = ttype(op, 0).element
        if self.float_only and not el.is_float:
            fail(op, f"needs float operands, got {ttype(op, 0)}")
        if el == I1:
            fail(op, f"needs numeric operands, got {ttype(op, 0)}")

    def combine(self, xs, dtype):  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def reference(self, op, args, interp):
        shape = op.results[0].type.shape
        dtype = args[0].dtype
        with np.errstate(all="ignore"):
            y = self.combine(args, dtype)
        return [np.broadcast_to(np.asarray(y).astype(dtype, copy=False), shape).copy()]


class Max(Variadic):
    """Elementwise maximum of all operands (NaN propagates)."""

    name = "graph.max"

    def combine(self, xs, dtype):
        y = xs[0]
        for x in xs[1:]:
            y = np.maximum(y, x)
        return y


class Min(Variadic):
    """Elementwise minimum of all operands (NaN propagates)."""

    name = "graph.min"

    def combine(self, xs, dtype):
        y = xs[0]
        for x in xs[1:]:
            y = np.minimum(y, x)
        return y


class Sum(Variadic):
    """Elementwise sum of all operands."""

    name = "graph.sum"

    def combine(self, xs, dtype):
        y = xs[0]
        for x in xs[1:]:
            y = y + x
        return y


class Mean(Variadic):
    """Elementwise mean of all operands (float types)."""

    name = "graph.mean"
    float_only = True

    def combine(self, xs, dtype):
        y = xs[0]
        for x in xs[1:]:
            y = y + x
        return y / np.asarray(len(xs), dtype)


# ---- comparisons and logic -----------------------------------------------------------------

class Equal(Binary):
    """``A == B`` as i1."""

    name = "graph.equal"
    compare = True
    traits = {"pure", "elementwise", "commutative"}

    def fn(self, op, a, b):
        return a == b


class Less(Binary):
    """``A < B`` as i1."""

    name = "graph.less"
    compare = True

    def fn(self, op, a, b):
        return a < b


class Greater(Binary):
    """``A > B`` as i1."""

    name = "graph.greater"
    compare = True

    def fn(self, op, a, b):
        return a > b


class Where(OpSpec):
    """``condition ? X : Y``, the three operands broadcast together; ``condition`` is i1."""

    name = "graph.where"
    operands = ("condition", "X", "Y")
    results = ("output",)
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        c, x, y = ttype(op, 0), ttype(op, 1), ttype(op, 2)
        return [TensorType(broadcast_shapes(op, c.shape, x.shape, y.shape), x.element)]

    def verify(self, op):
        if ttype(op, 0).element != I1:
            fail(op, f"condition must be i1, got {ttype(op, 0)}")
        same_elements(op, (1, 2))

    def reference(self, op, args, interp):
        c, x, y = args
        return [np.where(c, x, y).astype(x.dtype, copy=False)]


class Not(Unary):
    """Logical negation of an i1 tensor."""

    name = "graph.not"
    float_only = False

    def verify(self, op):
        if ttype(op).element != I1:
            fail(op, f"needs an i1 tensor, got {ttype(op)}")

    def fn(self, op, x):
        return np.logical_not(x)


# ---- unary math ----------------------------------------------------------------------------

def _f32(x: np.ndarray) -> np.ndarray:
    """float16 computes in float32 (as GPU kernels do); other types as they are."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


class Signed(Unary):
    """Unary ops defined for floats and signed integers (ONNX Neg, Abs takes unsigned too)."""

    float_only = False
    allow_unsigned = False

    def verify(self, op):
        el = ttype(op).element
        if el == I1 or (not el.is_float and not el.is_signed and not self.allow_unsigned):
            fail(op, f"needs a float or signed integer tensor, got {ttype(op)}")


class Neg(Signed):
    """``-X`` (integers wrap around)."""

    name = "graph.neg"

    def fn(self, op, x):
        return np.negative(x)


class Abs(Signed):
    """``|X|``."""

    name = "graph.abs"
    allow_unsigned = True

    def fn(self, op, x):
        return np.abs(x)


class Sqrt(Unary):
    """``sqrt(X)`` (NaN for negative X)."""

    name = "graph.sqrt"

    def fn(self, op, x):
        return np.sqrt(x)


class Exp(Unary):
    """``e ** X``."""

    name = "graph.exp"

    def fn(self, op, x):
        return np.exp(_f32(x))


class Log(Unary):
    """Natural logarithm (-inf at 0, NaN below)."""

    name = "graph.log"

    def fn(self, op, x):
        return np.log(_f32(x))


class Reciprocal(Unary):
    """``1 / X``."""

    name = "graph.reciprocal"

    def fn(self, op, x):
        return np.reciprocal(x)


class Floor(Unary):
    """Round toward -inf."""

    name = "graph.floor"

    def fn(self, op, x):
        return np.floor(x)


class Ceil(Unary):
    """Round toward +inf."""

    name = "graph.ceil"

    def fn(self, op, x):
        return np.ceil(x)


class Erf(Unary):
    """The Gauss error function (computed in float64, rounded to the tensor's type)."""

    name = "graph.erf"

    def fn(self, op, x):
        return erf(x)


# ---- casts and no-ops ----------------------------------------------------------------------

class Cast(OpSpec):
    """Convert every element to the type ``to`` (ONNX Cast): float to integer truncates toward
    zero, anything to i1 is ``x != 0``, i1 to numbers is 0/1; out-of-range values are undefined
    as in ONNX. The float8 ``saturate`` attribute has no meaning for ptxc's types and is dropped."""

    name = "graph.cast"
    operands = ("input",)
    results = ("output",)
    attributes = {"to": Attr("type", required=True, doc="the result element type")}
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        to = op.attributes.get("to")
        if not isinstance(to, ScalarType):
            fail(op, f"attribute to must be a scalar type, got {to!r}")
        return [ttype(op).with_element(to)]

    def reference(self, op, args, interp):
        x = args[0]
        dt = op.attributes["to"].np_dtype
        with np.errstate(all="ignore"):
            if dt == np.bool_:
                return [x != 0]
            if x.dtype.kind == "f" and dt.kind in "iu":
                x = np.trunc(x)
            return [x.astype(dt)]


class Identity(OpSpec):
    """``output = input``; removed by the graph optimizer."""

    name = "graph.identity"
    operands = ("input",)
    results = ("output",)
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        return [ttype(op)]

    def reference(self, op, args, interp):
        return [args[0].copy()]


class Dropout(OpSpec):
    """Inference-mode dropout: ``output = data`` (ONNX Dropout outside training; the mask output
    is not modelled). ``ratio``, when known at import, is kept for display only. Removed by the
    graph optimizer ("Dropout removed")."""

    name = "graph.dropout"
    operands = ("data",)
    results = ("output",)
    attributes = {"ratio": Attr("float", doc="the training drop ratio, informative")}
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        return [ttype(op)]

    def reference(self, op, args, interp):
        return [args[0].copy()]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (Relu, Add, Sub, Mul, Div, Pow, Max, Min, Sum, Mean, Equal, Less, Greater, Where, Not, Neg,
       Abs, Sqrt, Exp, Log, Reciprocal, Floor, Ceil, Erf, Cast, Identity, Dropout)
