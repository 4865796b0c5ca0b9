"""The arith dialect: scalar arithmetic for the bodies of elementwise regions (fused elementwise
chains, conv/gemm epilogues, and later the tensor dialect's generic op).

Ops work on scalars (``f32``, ``f16``, ``f64``, ``i64``, ``i32``, ``i8``, ``i1``, ...). Their
reference semantics are written over numpy arrays, elementwise, so the interpreter runs a scalar
body once over whole broadcast tensors instead of once per element::

    ^bb0(%acc: f32, %res: f32):
      %0 = "arith.add"(%acc, %res) : (f32, f32) -> f32
      %c0 = "arith.constant"() {value = 0.0} : () -> f32
      %1 = "arith.max"(%0, %c0) : (f32, f32) -> f32
      "graph.yield"(%1) : (f32) -> ()
"""

from __future__ import annotations

import numpy as np

from ..ir.spec import Attr, OpSpec, fail
from ..ir.types import I1, ScalarType


def _scalar(op, i=0) -> ScalarType:
    t = op.operands[i].type
    if not isinstance(t, ScalarType):
        fail(op, f"operand #{i} must be a scalar, is {t}")
    return t


def _cast(x, t: ScalarType):
    return np.asarray(x).astype(t.np_dtype, copy=False)


class Constant(OpSpec):
    """A scalar constant; ``value`` is an int, float or bool, ``type`` its scalar type."""

    name = "arith.constant"
    operands = ()
    attributes = {"value": Attr("any", required=True), "type": Attr("type", required=True)}
    traits = {"pure", "constant"}

    def infer_types(self, op):
        t = op.attributes.get("type")
        if not isinstance(t, ScalarType):
            fail(op, "type must be a scalar type")
        return [t]

    def reference(self, op, args, interp):
        t = op.attributes["type"]
        return [np.asarray(op.attributes["value"]).astype(t.np_dtype)[()]]


class _Binary(OpSpec):
    operands = ("lhs", "rhs")
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        a, b = _scalar(op, 0), _scalar(op, 1)
        if a != b:
            fail(op, f"operand types differ: {a} and {b}")
        return [a]

    def reference(self, op, args, interp):
        a, b = args
        with np.errstate(all="ignore"):
            return [_cast(self.fn(a, b), op.results[0].type)]


def _binary(opname: str, fn, doc: str, commutative=False):
    cls = type(opname.title().replace("_", ""), (_Binary,), {
        "__doc__": doc, "name": f"arith.{opname}", "fn": staticmethod(fn),
        "traits": {"pure", "elementwise"} | ({"commutative"} if commutative else set())})
    return cls


def _int_div(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "iu":
        q = np.abs(a) // np.where(b == 0, 1, np.abs(b))  # truncate toward zero, as C
        return np.where((a < 0) ^ (b < 0), -q, q)
    return a / b


Add = _binary("add", np.add, "lhs + rhs", True)
Sub = _binary("sub", np.subtract, "lhs - rhs")
Mul = _binary("mul", np.multiply, "lhs * rhs", True)
Div = _binary("div", _int_div, "lhs / rhs (integers truncate toward zero)")
Max = _binary("max", np.maximum, "max(lhs, rhs); NaN propagates", True)
Min = _binary("min", np.minimum, "min(lhs, rhs); NaN propagates", True)
Pow = _binary("pow", np.power, "lhs ** rhs")
And = _binary("and", np.logical_and, "logical and of i1 values", True)
Or = _binary("or", np.logical_or, "logical or of i1 values", True)
Xor = _binary("xor", np.logical_xor, "logical exclusive or of i1 values", True)
BitAnd = _binary("bit_and", np.bitwise_and, "bitwise and of integers", True)
BitOr = _binary("bit_or", np.bitwise_or, "bitwise or of integers", True)
BitXor = _binary("bit_xor", np.bitwise_xor, "bitwise exclusive or of integers", True)


def shift(a, b, left: bool):
    """``a << b`` or ``a >> b`` on integers, as ONNX BitShift: left shifts wrap, right shifts of
    signed integers are arithmetic; an amount outside ``[0, bitwidth)`` gives 0 (right shifts
    of a negative signed value: -1). LLVM's shl/ashr/lshr would be poison there."""
    a, b = np.asarray(a), np.asarray(b)
    a, b = np.broadcast_arrays(a, b)
    bits = a.dtype.itemsize * 8
    bad = (b < 0) | (b >= bits)
    s = np.where(bad, 0, b)
    if left:
        u = np.dtype(f"u{a.dtype.itemsize}")
        y = np.left_shift(a.view(u), s.astype(u)).view(a.dtype)
        return np.where(bad, np.zeros((), a.dtype), y)
    y = np.right_shift(a, s.astype(a.dtype))
    fill = np.where(a < 0, -1, 0).astype(a.dtype) if a.dtype.kind == "i" else np.zeros((), a.dtype)
    return np.where(bad, fill, y)


def _rem(a, b):
    """Truncated remainder (C ``%`` and ``fmod``: the sign of the dividend). Integers: a zero
    divisor gives 0 (as numpy's fmod) and ``INT_MIN % -1`` is 0."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "iu":
        return np.fmod(a, np.where(b == 0, 1, b)) * (b != 0)
    return np.fmod(a, b)


Shl = _binary("shl", lambda a, b: shift(a, b, True),
              "lhs << rhs (integers, wrapping; see shift)")
Shr = _binary("shr", lambda a, b: shift(a, b, False),
              "lhs >> rhs (arithmetic for signed integers, logical for unsigned; see shift)")
Rem = _binary("rem", _rem,
              "truncated remainder: C % for integers (x % 0 is 0), fmod for floats")


class Neg(OpSpec):
    """-x"""

    name = "arith.neg"
    operands = ("x",)
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        return [_scalar(op)]

    def reference(self, op, args, interp):
        return [_cast(np.negative(args[0]), op.results[0].type)]


class Not(OpSpec):
    """logical not of an i1"""

    name = "arith.not"
    operands = ("x",)
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        return [_scalar(op)]

    def reference(self, op, args, interp):
        return [np.logical_not(args[0])]


PREDICATES = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
              "gt": np.greater, "ge": np.greater_equal}


class Cmp(OpSpec):
    """Comparison giving i1; ``predicate`` is eq, ne, lt, le, gt or ge."""

    name = "arith.cmp"
    operands = ("lhs", "rhs")
    attributes = {"predicate": Attr("str", required=True)}
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        if _scalar(op, 0) != _scalar(op, 1):
            fail(op, "operand types differ")
        return [I1]

    def verify(self, op):
        if op.attributes["predicate"] not in PREDICATES:
            fail(op, f"predicate must be one of {sorted(PREDICATES)}")

    def reference(self, op, args, interp):
        return [PREDICATES[op.attributes["predicate"]](*args)]


class Select(OpSpec):
    """cond ? a : b"""

    name = "arith.select"
    operands = ("cond", "a", "b")
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        if _scalar(op, 0) != I1:
            fail(op, "condition must be i1")
        if _scalar(op, 1) != _scalar(op, 2):
            fail(op, "the two choices have different types")
        return [_scalar(op, 1)]

    def reference(self, op, args, interp):
        return [np.where(*args)]


class Cast(OpSpec):
    """Conversion to ``to`` (floats to ints truncate toward zero; to i1 is ``x != 0``)."""

    name = "arith.cast"
    operands = ("x",)
    attributes = {"to": Attr("type", required=True)}
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        _scalar(op)
        return [op.attributes["to"]]

    def reference(self, op, args, interp):
        to = op.attributes["to"]
        x = np.asarray(args[0])
        if to == I1:
            return [x != 0]
        with np.errstate(all="ignore"):
            return [x.astype(to.np_dtype)]


#: the bits a tf32 value keeps of an f32: sign, 8 exponent bits, 10 mantissa bits
TF32_MASK = 0xFFFFE000
#: half a tf32 ulp in f32 mantissa bits: adding it to the magnitude rounds ties away from zero
TF32_HALF = 0x1000


def round_tf32(x) -> np.ndarray:
    """``x`` (f32) rounded to tf32's 10-bit mantissa, to nearest with ties away from zero, as
    PTX's ``cvt.rna.tf32.f32``; the 13 low mantissa bits of the result are zero. NaN and inf
    are returned as they are; a finite value past tf32's largest rounds to inf, as RNA does.

    f32 is sign-magnitude, so adding half a tf32 ulp (``0x1000``) to the bits and clearing the
    13 low bits rounds the magnitude half-up (a carry into the exponent is the right result)."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    with np.errstate(over="ignore"):
        r = ((bits + np.uint32(TF32_HALF)) & np.uint32(TF32_MASK)).view(np.float32)
    return np.where(np.isfinite(x), r, x)


class RoundTf32(OpSpec):
    """``x`` (f32) rounded to tf32 precision, still f32: what a tf32 tensor-core instruction
    reads of an f32 operand. :func:`round_tf32` is the reference (``cvt.rna.tf32.f32``).
    ``precision="tf32"`` puts one after each operand load of a contraction::

        %a = "loop.load"(%A, %i, %k) : (buffer<64x64xf32>, index, index) -> f32
        %at = "arith.round_tf32"(%a) : (f32) -> f32
    """

    name = "arith.round_tf32"
    operands = ("x",)
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        t = _scalar(op)
        if t.name != "f32":
            fail(op, f"operand must be f32, is {t}")
        return [t]

    def reference(self, op, args, interp):
        return [round_tf32(args[0])[()]]


class CheckIndex(OpSpec):
    """A run-time index check: ``index`` (an integer) must be in ``[-size, size)``; the result
    is the index made non-negative (``+ size`` when negative, as ONNX's Gather). ``check`` is a
    description of the indexed op for the error (e.g. ``Gather 'g' axis 0 (size 5)``).

    Its reference raises :class:`~ptxc.errors.IndexOutOfRangeError`. Compiled code cannot raise:
    a bad index sets the program's error flag (an ``int32`` scratch slot, planned like any
    buffer) to this check's number and continues with index 0 (an in-bounds read, never
    garbage from outside the tensor); the runtime reads the flag after the run and raises the
    same error (:mod:`ptxc.lower.loop_to_llvm`)::

        %i = "arith.check_index"(%raw) {size = 5, check = "Gather 'g' axis 0 (size 5)"} : (i64) -> i64
    """

    name = "arith.check_index"
    operands = ("index",)
    attributes = {"size": Attr("int", required=True), "check": Attr("str", required=True)}
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        t = _scalar(op)
        if t.is_float or t == I1:
            fail(op, f"the index must be an integer, is {t}")
        return [t]

    def reference(self, op, args, interp):
        from ..errors import IndexOutOfRangeError
        i = np.asarray(args[0])
        n = op.attributes["size"]
        bad = (i < -n) | (i >= n)
        if np.any(bad):
            v = int(np.asarray(i)[bad].flat[0])
            raise IndexOutOfRangeError(f"{op.attributes['check']}: index {v} out of range "
                                       f"[{-n}, {n})")
        return [_cast(np.where(i < 0, i + n, i), op.results[0].type)]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (Constant, Add, Sub, Mul, Div, Max, Min, Pow, And, Or, Xor, BitAnd, BitOr, BitXor, Shl, Shr,
       Rem, Neg, Not, Cmp, Select, Cast, RoundTf32, CheckIndex)
