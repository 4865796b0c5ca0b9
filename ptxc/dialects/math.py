"""The math dialect: scalar transcendental and rounding functions for elementwise bodies.

Reference semantics are numpy over arrays, like arith's. ``math.erf`` uses the graph dialect's
float erf so that every stage agrees bit for bit with the graph op it came from.
"""

from __future__ import annotations

import numpy as np

from ..ir.spec import OpSpec, fail, register
from ..ir.types import ScalarType


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
