"""Constants: ``graph.constant`` holds a tensor in its ``value`` attribute.

    %w = "graph.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
"""

from __future__ import annotations

from ...ir.attributes import DenseElements
from ...ir.spec import Attr, OpSpec, fail


class Constant(OpSpec):
    """A compile-time constant tensor (ONNX initializers and Constant nodes)."""

    name = "graph.constant"
    operands = ()
    results = ("output",)
    attributes = {"value": Attr("dense", required=True)}
    traits = {"pure", "constant"}

    def infer_types(self, op):
        v = op.attributes.get("value")
        if not isinstance(v, DenseElements):
            fail(op, "value must be a dense constant")
        return [v.type]

    def reference(self, op, args, interp):
        return [op.attributes["value"].array]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (Constant,)
