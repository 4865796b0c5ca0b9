"""Activation ops (``graph.relu`` lives in elementwise.py). Each is elementwise with ONNX
semantics and ONNX attribute names and defaults:

    %y = "graph.leaky_relu"(%x) {alpha = 0.01} : (tensor<4xf32>) -> tensor<4xf32>
    %y = "graph.clip"(%x, %lo, %hi) {operand_segments = [1, 1, 1]} : (...) -> tensor<4xf32>
    %y = "graph.gelu"(%x) {approximate = "tanh"} : (tensor<4xf32>) -> tensor<4xf32>

float16 tensors compute in float32 and round once; ``graph.gelu`` with ``approximate = "none"``
uses the float64 erf of elementwise.py.
"""

from __future__ import annotations

import numpy as np

from ...ir.spec import Attr, Operand, OpSpec, fail
from ...ir.types import I1
from .common import Unary, broadcast_shapes, ttype
from .elementwise import erf


def _wide(x: np.ndarray) -> np.ndarray:
    """float16 computes in float32; other float types as they are."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _c(value, like: np.ndarray):
    """A Python float attribute as a scalar of ``like``'s dtype (keeps float32 math float32)."""
    return like.dtype.type(value)


class LeakyRelu(Unary):
    """``X < 0 ? alpha * X : X``."""

    name = "graph.leaky_relu"
    attributes = {"alpha": Attr("float", default=0.01)}

    def fn(self, op, x):
        x = _wide(x)
        return np.where(x < 0, x * _c(op.attr("alpha"), x), x)


class PRelu(OpSpec):
    """``X < 0 ? slope * X : X``; ``slope`` broadcasts unidirectionally to ``X``'s shape."""

    name = "graph.prelu"
    operands = ("X", "slope")
    results = ("Y",)
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        return [ttype(op, 0)]

    def verify(self, op):
        x, s = ttype(op, 0), ttype(op, 1)
        if x.element != s.element:
            fail(op, f"X is {x}, slope is {s}: element types differ")
        if x.element == I1:
            fail(op, f"needs a numeric tensor, got {x}")
        if broadcast_shapes(op, x.shape, s.shape) != x.shape:
            fail(op, f"slope {list(s.shape)} does not broadcast to X {list(x.shape)}")

    def reference(self, op, args, interp):
        x, s = args
        with np.errstate(all="ignore"):
            y = np.where(x < 0, x * s, x)
        return [y.astype(x.dtype, copy=False)]


class Sigmoid(Unary):
    """``1 / (1 + exp(-X))`` (evaluated without overflow for large |X|)."""

    name = "graph.sigmoid"

    def fn(self, op, x):
        x = _wide(x)
        e = np.exp(-np.abs(x))
        one = _c(1.0, x)
        return np.where(x >= 0, one / (one + e), e / (one + e))


class Tanh(Unary):
    """Hyperbolic tangent."""

    name = "graph.tanh"

    def fn(self, op, x):
        return np.tanh(_wide(x))


class Clip(OpSpec):
    """``min(max(input, min), max)``; ``min`` and ``max`` are optional scalar (one-element)
    operands of ``input``'s type, absent meaning unbounded. When min > max every element becomes
    ``max`` (ONNX). Older opsets' ``min``/``max`` attributes become constant operands."""

    name = "graph.clip"
    operands = ("input", Operand("min", optional=True), Operand("max", optional=True))
    results = ("output",)
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        return [ttype(op, 0)]

    def verify(self, op):
        g = self.groups(op)
        t = ttype(op, 0)
        if t.element == I1:
            fail(op, f"needs a numeric tensor, got {t}")
        for k in ("min", "max"):
            v = g[k]
            if v is None:
                continue
            if v.type.element != t.element:
                fail(op, f"{k} is {v.type}, input is {t}: element types differ")
            if v.type.size != 1:
                fail(op, f"{k} must be a scalar, got {v.type}")

    def reference(self, op, args, interp):
        g = self.groups(op, args)
        y = g["input"]
        if g["min"] is not None:
            y = np.maximum(y, g["min"].reshape(()))
        if g["max"] is not None:
            y = np.minimum(y, g["max"].reshape(()))
        return [np.asarray(y).astype(g["input"].dtype, copy=True)]


class Elu(Unary):
    """``X < 0 ? alpha * (exp(X) - 1) : X``."""

    name = "graph.elu"
    attributes = {"alpha": Attr("float", default=1.0)}

    def fn(self, op, x):
        x = _wide(x)
        return np.where(x < 0, _c(op.attr("alpha"), x) * np.expm1(np.minimum(x, 0)), x)


class Selu(Unary):
    """``gamma * (X <= 0 ? alpha * (exp(X) - 1) : X)``."""

    name = "graph.selu"
    attributes = {"alpha": Attr("float", default=1.67326319217681884765625),
                  "gamma": Attr("float", default=1.05070102214813232421875)}

    def fn(self, op, x):
        x = _wide(x)
        a, g = _c(op.attr("alpha"), x), _c(op.attr("gamma"), x)
        return np.where(x <= 0, g * (a * np.expm1(np.minimum(x, 0))), g * x)


class HardSigmoid(Unary):
    """``max(0, min(1, alpha * X + beta))``."""

    name = "graph.hard_sigmoid"
    attributes = {"alpha": Attr("float", default=0.2), "beta": Attr("float", default=0.5)}

    def fn(self, op, x):
        x = _wide(x)
        y = _c(op.attr("alpha"), x) * x + _c(op.attr("beta"), x)
        return np.clip(y, _c(0.0, x), _c(1.0, x))


class HardSwish(Unary):
    """``X * max(0, min(1, X / 6 + 1/2))``."""

    name = "graph.hard_swish"

    def fn(self, op, x):
        x = _wide(x)
        return x * np.clip(x * _c(1 / 6, x) + _c(0.5, x), _c(0.0, x), _c(1.0, x))


class Softplus(Unary):
    """``log(1 + exp(X))`` (evaluated without overflow)."""

    name = "graph.softplus"

    def fn(self, op, x):
        return np.logaddexp(_c(0.0, _wide(x)), _wide(x))


class Gelu(Unary):
    """``X * Phi(X)``: ``0.5 X (1 + erf(X / sqrt 2))``, or with ``approximate = "tanh"``
    ``0.5 X (1 + tanh(sqrt(2 / pi) (X + 0.044715 X^3)))``."""

    name = "graph.gelu"
    attributes = {"approximate": Attr("str", default="none")}

    def verify(self, op):
        super().verify(op)
        if op.attr("approximate") not in ("none", "tanh"):
            fail(op, f"approximate must be 'none' or 'tanh', got {op.attr('approximate')!r}")

    def fn(self, op, x):
        x = _wide(x)
        half, one = _c(0.5, x), _c(1.0, x)
        if op.attr("approximate") == "tanh":
            k = _c(np.sqrt(2.0 / np.pi), x)
            return half * x * (one + np.tanh(k * (x + _c(0.044715, x) * x * x * x)))
        return half * x * (one + erf(x * _c(1 / np.sqrt(2.0), x)).astype(x.dtype))


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (LeakyRelu, PRelu, Sigmoid, Tanh, Clip, Elu, Selu, HardSigmoid, HardSwish, Softplus, Gelu)
