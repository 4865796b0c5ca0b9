"""The math dialect: scalar transcendental and rounding functions for elementwise bodies.

Reference semantics are numpy over arrays, like arith's. ``math.erf`` uses the graph dialect's
float erf so that every stage agrees bit for bit with the graph op it came from.

Two ops exist for exact integer rounding in quantization epilogues (see
:mod:`ptxc.lower.graph_to_tensor.quant`): ``math.roundeven`` (numpy's ``rint``: one
``cvt.rni`` on the GPU instead of an f64 emulation) and ``math.fma`` (``a * b + c`` rounded
once: the correction step of an exact division by a constant).
"""

from __future__ import annotations

import numpy as np

from ..ir.spec import OpSpec, fail, register
from ..ir.types import F32, ScalarType


class _Unary(OpSpec):
    operands = ("x",)
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        t = op.operands[0].type
        if not isinstance(t, ScalarType) or not t.is_float:
            fail(op, f"operand must be a float scalar, is {t}")
        return [t]

    def reference(self, op, args, interp):
        x = np.asarray(args[0])
        with np.errstate(all="ignore"):
            return [np.asarray(self.fn(x)).astype(x.dtype, copy=False)]


def _erf(x):
    from .graph.elementwise import erf
    return erf(x)


def _unary(opname: str, fn, doc: str):
    return register(type(opname.title(), (_Unary,), {
        "__doc__": doc, "name": f"math.{opname}", "fn": staticmethod(fn)}))


_unary("exp", np.exp, "e ** x")
_unary("log", np.log, "natural logarithm")
_unary("tanh", np.tanh, "hyperbolic tangent")
_unary("erf", _erf, "the error function")
_unary("sqrt", np.sqrt, "square root")
_unary("abs", np.abs, "absolute value")
_unary("floor", np.floor, "round down")
_unary("ceil", np.ceil, "round up")
_unary("roundeven", np.rint, """round to the nearest integer, ties to even, in the operand's own
type (numpy's ``rint``; LLVM's ``llvm.roundeven``, PTX ``cvt.rni``). The result of rounding an
f32 is an f32, so quantization rounds in f32 without an f64 detour.""")
_unary("sin", np.sin, "sine")
_unary("cos", np.cos, "cosine")
_unary("tan", np.tan, "tangent")
_unary("asin", np.arcsin, "inverse sine (NaN outside [-1, 1])")
_unary("acos", np.arccos, "inverse cosine (NaN outside [-1, 1])")
_unary("atan", np.arctan, "inverse tangent")
_unary("sinh", np.sinh, "hyperbolic sine")
_unary("cosh", np.cosh, "hyperbolic cosine")
_unary("asinh", np.arcsinh, "inverse hyperbolic sine")
_unary("acosh", np.arccosh, "inverse hyperbolic cosine (NaN below 1)")
_unary("atanh", np.arctanh, "inverse hyperbolic tangent (NaN outside [-1, 1])")

#: the trigonometric family (libm / libdevice functions of the same name)
TRIG = ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")


def fma32(a, b, c) -> np.ndarray:
    """``a * b + c`` on float32 arrays, rounded once to float32 (exactly, ties to even).

    The product of two f32 is exact in f64 (24 + 24 significant bits <= 53). The f64 sum
    ``s = RN64(p + c)`` can differ from the exact sum, and rounding ``s`` to f32 then rounds
    twice; that gives a wrong answer only when ``s`` lands exactly on a midpoint between two
    f32 neighbours (RN64 cannot step across one: midpoints are f64 numbers). There TwoSum's
    error term ``err = (p + c) - s`` (exact) says on which side the exact sum lies, and ``s``
    moves one f64 ulp that way before the final rounding. The overflow midpoint (between
    FLT_MAX and 2**128) counts as a midpoint too.
    """
    a, b, c = (np.asarray(v, np.float32) for v in (a, b, c))
    with np.errstate(all="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)
        cd = c.astype(np.float64)
        s = p + cd
        bv = s - p                                   # TwoSum (Knuth), exact barring overflow
        err = (p - (s - bv)) + (cd - bv)
        t = s.astype(np.float32)
        t64 = np.where(np.isinf(t), np.copysign(2.0 ** 128, t), t.astype(np.float64))
        nb = np.nextafter(t, np.where(s > t64, np.float32(np.inf), np.float32(-np.inf)))
        nb64 = np.where(np.isinf(nb), np.copysign(2.0 ** 128, nb), nb.astype(np.float64))
        tie = (t64 != s) & ((t64 + nb64) * 0.5 == s) & np.isfinite(s)
        fix = tie & (err != 0) & np.isfinite(err)
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        return np.asarray(s.astype(np.float32))


@register
class Fma(OpSpec):
    """``a * b + c`` with one rounding (LLVM ``llvm.fma``, PTX ``fma.rn``).

    Why an op: ptxc never contracts ``mul`` + ``add`` (results equal numpy's bit for bit), so
    where an algorithm needs the exact product, as the correction step of a division by a
    constant does (``e = fma(-q, c, x)`` is exactly ``x - q * c``), it says so. f32 only: the
    reference (:func:`fma32`) is exact for f32, numpy has no f64 fma, and nothing needs one.
    """

    name = "math.fma"
    operands = ("a", "b", "c")
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        types = [v.type for v in op.operands]
        if any(t != F32 for t in types):
            fail(op, f"operands must be f32, are {', '.join(map(str, types))}")
        return [F32]

    def reference(self, op, args, interp):
        return [fma32(*args)]
