"""The math dialect: scalar transcendental and rounding functions for elementwise bodies.

Reference semantics are numpy over arrays, like arith's. ``math.erf`` and ``graph.erf`` share
:func:`erf` (vectorized, float64), so every stage agrees bit for bit with the graph op it came
from.

Two ops exist for exact integer rounding in quantization epilogues (see
:mod:`ptxc.lower.graph_to_tensor.quant`): ``math.roundeven`` (numpy's ``rint``: one
``cvt.rni`` on the GPU instead of an f64 emulation) and ``math.fma`` (``a * b + c`` rounded
once: the correction step of an exact division by a constant).
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.spec import OpSpec, fail
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


# erf, vectorized: Chebyshev interpolants of smooth functions built once from math.erf/erfc at
# their nodes (a few dozen scalar calls at import), evaluated by Clenshaw's recurrence:
#   0 <= x < 1    erf(x) = x * p0(x*x)                 p0 ~ erf(sqrt t)/sqrt t on t in [0, 1]
#   1 <= x < 2.5  erf(x) = 1 - exp(-x*x) * p1(x)       p1 ~ erfc(x) exp(x*x)
#   2.5 <= x < 6  erf(x) = 1 - exp(-x*x) * p2(x)       p2 likewise
#   6 <= x        erf(x) = 1 (erfc(6) = 2e-17 is below float64's half ulp of 1)
# Relative error is below 2e-14 everywhere (tests/test_graph_elementwise.py checks it against
# math.erf); odd symmetry gives negative x, NaN stays NaN.

def _cheb(f, a: float, b: float, deg: int):
    k = np.arange(deg + 1)
    nodes = np.cos(np.pi * (k + 0.5) / (deg + 1))
    vals = np.array([f(0.5 * (b - a) * t + 0.5 * (b + a)) for t in nodes])
    coef = np.polynomial.chebyshev.chebfit(nodes, vals, deg)
    return coef, a, b


def _p0(t: float) -> float:
    return math.erf(math.sqrt(t)) / math.sqrt(t) if t > 0 else 2.0 / math.sqrt(math.pi)


_ERF_PIECES = (
    _cheb(_p0, 0.0, 1.0, 12),
    _cheb(lambda x: math.erfc(x) * math.exp(x * x), 1.0, 2.5, 20),
    _cheb(lambda x: math.erfc(x) * math.exp(x * x), 2.5, 6.0, 20),
)


def _cheb_eval(piece, x: np.ndarray) -> np.ndarray:
    coef, a, b = piece
    return np.polynomial.chebyshev.chebval((2.0 * x - (a + b)) / (b - a), coef)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, vectorized, in float64 (relative error < 2e-14); returns float64."""
    x = np.asarray(x, dtype=np.float64)
    ax = np.abs(x)
    y = np.ones_like(ax)
    with np.errstate(all="ignore"):
        m = ax < 1.0
        if m.any():
            v = ax[m]
            y[m] = v * _cheb_eval(_ERF_PIECES[0], v * v)
        for piece in _ERF_PIECES[1:]:
            m = (ax >= piece[1]) & (ax < piece[2])
            if m.any():
                v = ax[m]
                y[m] = 1.0 - np.exp(-v * v) * _cheb_eval(piece, v)
    y = np.copysign(y, x)
    return np.where(np.isnan(x), np.nan, y)


def _unary(opname: str, fn, doc: str):
    return type(opname.title(), (_Unary,), {
        "__doc__": doc, "name": f"math.{opname}", "fn": staticmethod(fn)})


Exp = _unary("exp", np.exp, "e ** x")
Log = _unary("log", np.log, "natural logarithm")
Tanh = _unary("tanh", np.tanh, "hyperbolic tangent")
Erf = _unary("erf", erf, "the error function")
Sqrt = _unary("sqrt", np.sqrt, "square root")
Abs = _unary("abs", np.abs, "absolute value")
Floor = _unary("floor", np.floor, "round down")
Ceil = _unary("ceil", np.ceil, "round up")
Roundeven = _unary("roundeven", np.rint, """round to the nearest integer, ties to even, in the
operand's own type (numpy's ``rint``; LLVM's ``llvm.roundeven``, PTX ``cvt.rni``). The result of
rounding an f32 is an f32, so quantization rounds in f32 without an f64 detour.""")
Sin = _unary("sin", np.sin, "sine")
Cos = _unary("cos", np.cos, "cosine")
Tan = _unary("tan", np.tan, "tangent")
Asin = _unary("asin", np.arcsin, "inverse sine (NaN outside [-1, 1])")
Acos = _unary("acos", np.arccos, "inverse cosine (NaN outside [-1, 1])")
Atan = _unary("atan", np.arctan, "inverse tangent")
Sinh = _unary("sinh", np.sinh, "hyperbolic sine")
Cosh = _unary("cosh", np.cosh, "hyperbolic cosine")
Asinh = _unary("asinh", np.arcsinh, "inverse hyperbolic sine")
Acosh = _unary("acosh", np.arccosh, "inverse hyperbolic cosine (NaN below 1)")
Atanh = _unary("atanh", np.arctanh, "inverse hyperbolic tangent (NaN outside [-1, 1])")

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


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (Exp, Log, Tanh, Erf, Sqrt, Abs, Floor, Ceil, Roundeven, Sin, Cos, Tan, Asin, Acos, Atan,
       Sinh, Cosh, Asinh, Acosh, Atanh, Fma)
