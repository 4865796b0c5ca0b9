"""Logic, bit-shift, the non-strict comparisons and modulo: ``graph.and``, ``graph.or``,
``graph.xor`` (i1 operands), ``graph.bit_shift`` (integers), ``graph.less_or_equal``,
``graph.greater_or_equal`` (i1 results) and ``graph.mod``, all with ONNX broadcasting, each with a
scalar form (so they lower, fuse and compile as every elementwise op does).

    %c = "graph.and"(%a, %b) : (tensor<3x4xi1>, tensor<4xi1>) -> tensor<3x4xi1>
    %s = "graph.bit_shift"(%x, %n) {direction = "LEFT"} : (tensor<3xui8>, tensor<3xui8>)
           -> tensor<3xui8>
    %m = "graph.mod"(%a, %b) {fmod = 0} : (tensor<6xi32>, tensor<6xi32>) -> tensor<6xi32>

``graph.mod`` with ``fmod = 0`` is numpy's ``mod`` (the result has the divisor's sign), with
``fmod = 1`` C's ``fmod`` (the dividend's sign); an integer divided by 0 gives 0 (numpy's answer;
ONNX leaves it undefined). ONNX requires ``fmod = 1`` for floats; ptxc computes numpy's mod for
a float with ``fmod = 0`` too (``fmod(a, b)``, plus ``b`` where the signs differ).
"""

from __future__ import annotations

import numpy as np

from ...ir.spec import Attr, fail
from ..arith import shift
from ...ir.types import I1
from .common import Binary, ttype
from .scalar_forms import _c, _cmp, _form, _op, _select


class Logical(Binary):
    """Binary ops on i1 tensors."""

    def verify(self, op):
        super().verify(op)
        if ttype(op, 0).element != I1:
            fail(op, f"needs i1 operands, got {ttype(op, 0)}")


class And(Logical):
    """``A and B``."""

    name = "graph.and"
    traits = {"pure", "elementwise", "commutative"}

    def fn(self, op, a, b):
        return np.logical_and(a, b)


class Or(Logical):
    """``A or B``."""

    name = "graph.or"
    traits = {"pure", "elementwise", "commutative"}

    def fn(self, op, a, b):
        return np.logical_or(a, b)


class Xor(Logical):
    """``A xor B``."""

    name = "graph.xor"
    traits = {"pure", "elementwise", "commutative"}

    def fn(self, op, a, b):
        return np.logical_xor(a, b)


class BitShift(Binary):
    """``X << Y`` (``direction = "LEFT"``) or ``X >> Y`` ("RIGHT") on integers (ONNX's
    reference: left shifts wrap, signed right shifts are arithmetic, an amount outside
    ``[0, bitwidth)`` gives 0, or -1 for a negative value shifted right)."""

    name = "graph.bit_shift"
    attributes = {"direction": Attr("str", required=True, doc='"LEFT" or "RIGHT"')}

    def verify(self, op):
        super().verify(op)
        el = ttype(op, 0).element
        if el.is_float or el == I1:
            fail(op, f"needs integer operands, got {ttype(op, 0)}")
        if op.attr("direction") not in ("LEFT", "RIGHT"):
            fail(op, f"direction must be LEFT or RIGHT, got {op.attr('direction')!r}")

    def fn(self, op, a, b):
        return shift(a, b, op.attr("direction") == "LEFT")


class Bitwise(Binary):
    """``A & B``, ``A | B`` or ``A ^ B`` (``kind`` "and", "or", "xor") on integers (ONNX
    BitwiseAnd/Or/Xor; BitwiseNot is ``x ^ ~0``)."""

    name = "graph.bitwise"
    attributes = {"kind": Attr("str", required=True, doc='"and", "or" or "xor"')}
    traits = {"pure", "elementwise", "commutative"}

    def verify(self, op):
        super().verify(op)
        el = ttype(op, 0).element
        if el.is_float or el == I1:
            fail(op, f"needs integer operands, got {ttype(op, 0)}")
        if op.attr("kind") not in ("and", "or", "xor"):
            fail(op, f"kind must be and, or or xor, got {op.attr('kind')!r}")

    def fn(self, op, a, b):
        return {"and": np.bitwise_and, "or": np.bitwise_or,
                "xor": np.bitwise_xor}[op.attr("kind")](a, b)


class LessOrEqual(Binary):
    """``A <= B`` as i1."""

    name = "graph.less_or_equal"
    compare = True

    def fn(self, op, a, b):
        return a <= b


class GreaterOrEqual(Binary):
    """``A >= B`` as i1."""

    name = "graph.greater_or_equal"
    compare = True

    def fn(self, op, a, b):
        return a >= b


def mod(a: np.ndarray, b: np.ndarray, fmod: bool) -> np.ndarray:
    """ONNX Mod on numpy arrays (integer division by zero gives 0)."""
    with np.errstate(all="ignore"):
        if a.dtype.kind in "iu":
            safe = np.where(b == 0, np.ones((), b.dtype), b)
            r = np.fmod(a, safe) if fmod else np.mod(a, safe)
            return np.where(b == 0, np.zeros((), a.dtype), r)
        r = np.fmod(a, b)
        if not fmod:
            r = np.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
        return r


class Mod(Binary):
    """``A mod B``: numpy's ``mod`` (``fmod = 0``, the divisor's sign) or C's ``fmod``
    (``fmod = 1``, the dividend's sign)."""

    name = "graph.mod"
    attributes = {"fmod": Attr("int", default=0)}

    def verify(self, op):
        super().verify(op)
        if ttype(op, 0).element == I1:
            fail(op, f"needs numeric operands, got {ttype(op, 0)}")
        if op.attr("fmod") not in (0, 1):
            fail(op, f"fmod must be 0 or 1, got {op.attr('fmod')!r}")

    def fn(self, op, a, b):
        return mod(a, b, bool(op.attr("fmod")))


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (And, Or, Xor, BitShift, Bitwise, LessOrEqual, GreaterOrEqual, Mod)


# ---- scalar forms ------------------------------------------------------------------------------

_form("and")(lambda op, b, args: _op(b, "arith.and", *args))
_form("or")(lambda op, b, args: _op(b, "arith.or", *args))
_form("xor")(lambda op, b, args: _op(b, "arith.xor", *args))
_form("less_or_equal")(lambda op, b, args: _cmp(b, "le", *args))
_form("greater_or_equal")(lambda op, b, args: _cmp(b, "ge", *args))


_form("bitwise")(lambda op, b, args: _op(b, f"arith.bit_{op.attr('kind')}", *args))


@_form("bit_shift")
def _bit_shift(op, b, args):
    return _op(b, "arith.shl" if op.attr("direction") == "LEFT" else "arith.shr", *args)


@_form("mod")
def _mod(op, b, args):
    """``r = rem(x, y)``; with ``fmod = 0`` and a signed or float type, ``r + y`` where ``r`` is
    not 0 and its sign differs from ``y``'s."""
    x, y = args
    r = _op(b, "arith.rem", x, y)
    if op.attr("fmod") or not (x.type.is_float or x.type.is_signed):
        return r
    zero = _c(b, 0, r)
    differ = _op(b, "arith.xor", _cmp(b, "lt", r, zero), _cmp(b, "lt", y, zero))
    fix = _op(b, "arith.and", _cmp(b, "ne", r, zero), differ)
    return _select(b, fix, _op(b, "arith.add", r, y), r)
