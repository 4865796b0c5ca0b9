"""The trigonometric family: ``graph.sin``, ``cos``, ``tan``, ``asin``, ``acos``, ``atan``,
``sinh``, ``cosh``, ``asinh``, ``acosh``, ``atanh`` (ONNX's op types in snake case), unary float
ops with numpy's functions as reference (float16 computed in float32, as GPU kernels do). Each
has the scalar form ``math.<name>`` (widened to f32 for f16)::

    %y = "graph.sin"(%x) : (tensor<2x8xf32>) -> tensor<2x8xf32>
"""

from __future__ import annotations

import numpy as np

from ..math import TRIG
from .common import Unary
from .scalar_forms import _form, _math, _widened

_NUMPY = {"sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
          "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
          "acosh": np.arccosh, "atanh": np.arctanh}


def _make(stem: str):
    fn = _NUMPY[stem]

    def apply(self, op, x):
        return fn(x.astype(np.float32) if x.dtype == np.float16 else x)

    cls = type(stem.title(), (Unary,), {"__doc__": f"numpy's {fn.__name__}, elementwise.",
                                        "name": f"graph.{stem}", "fn": apply})
    _form(stem)(_widened(_math(f"math.{stem}")))
    return cls


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = tuple(_make(stem) for stem in TRIG)
