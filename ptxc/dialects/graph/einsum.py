"""``graph.einsum``: numpy's einsum with an explicit equation (the importer resolves ONNX's
implicit output and expands ``...`` into letters), one or more operands of one float or integer
type, f16 products summed in f32.

    %y = "graph.einsum"(%a, %b) {equation = "bij,bjk->bik"}
           : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
"""

from __future__ import annotations

import numpy as np

from ...ir.spec import Attr, Operand, OpSpec, fail
from ...ir.types import I1, TensorType
from .common import same_elements, ttype


def parse(op, equation: str, ranks):
    """(input subscripts, output subscript) of an explicit, ellipsis-free equation."""
    if "->" not in equation or "." in equation:
        fail(op, f"equation {equation!r} must be explicit (a '->') with no '...'")
    lhs, out = equation.replace(" ", "").split("->")
    ins = lhs.split(",")
    if len(ins) != len(ranks):
        fail(op, f"equation {equation!r} has {len(ins)} operands, the op {len(ranks)}")
    for s, r in zip(ins, ranks):
        if len(s) != r or not s.isalpha() and s:
            fail(op, f"subscript {s!r} does not fit an operand of rank {r}")
    if len(set(out)) != len(out) or any(ch not in lhs for ch in out):
        fail(op, f"output subscript {out!r} repeats a letter or names one no input has")
    return ins, out


class Einsum(OpSpec):
    """Sum over the letters missing from the output of the product of the operands."""

    name = "graph.einsum"
    operands = (Operand("Inputs", variadic=True),)
    results = ("Output",)
    attributes = {"equation": Attr("str", required=True)}
    traits = {"pure"}

    def infer_types(self, op):
        if not op.operands:
            fail(op, "needs at least one operand")
        same_elements(op)
        ts = [ttype(op, i) for i in range(len(op.operands))]
        if ts[0].element == I1:
            fail(op, "needs numeric operands")
        ins, out = parse(op, op.attributes.get("equation", ""), [t.rank for t in ts])
        size = {}
        for s, t in zip(ins, ts):
            for ch, d in zip(s, t.shape):
                if size.setdefault(ch, d) != d:
                    if d != 1 and size[ch] != 1:
                        fail(op, f"letter {ch!r} has sizes {size[ch]} and {d}")
                    size[ch] = max(size[ch], d)
        return [TensorType(tuple(size[ch] for ch in out), ts[0].element)]

    def reference(self, op, args, interp):
        dt = args[0].dtype
        ct = np.float32 if dt == np.float16 else dt
        y = np.einsum(op.attr("equation"), *[a.astype(ct, copy=False) for a in args])
        return [np.asarray(y).astype(dt).reshape(op.results[0].type.shape)]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (Einsum,)
