"""Elementwise arithmetic, math and comparison ops (ONNX broadcasting for binary ops)."""

from __future__ import annotations

import numpy as np

from ...ir.spec import register
from .common import Binary, Unary


@register
class Relu(Unary):
    """``max(X, 0)``."""

    name = "graph.relu"
    float_only = False

    def fn(self, op, x):
        return np.maximum(x, 0)


@register
class Add(Binary):
    """``A + B``."""

    name = "graph.add"
    traits = {"pure", "elementwise", "commutative"}

    def fn(self, op, a, b):
        return a + b
