"""Graph ops that carry a scalar body: ``graph.elementwise`` (a fused chain of elementwise ops)
and ``graph.yield`` (the body's terminator).

    %y = "graph.elementwise"(%x, %b) ({
    ^bb0(%a: f32, %c: f32):
      %s = "arith.add"(%a, %c) : (f32, f32) -> f32
      %z = "arith.constant"() {type = f32, value = 0.0} : () -> f32
      %r = "arith.max"(%s, %z) : (f32, f32) -> f32
      "graph.yield"(%r) : (f32) -> ()
    }) : (tensor<1x8xf32>, tensor<8xf32>) -> tensor<1x8xf32>

The operands broadcast (ONNX rules) to the result's shape; the body sees one scalar of each and
yields the result's element. The interpreter runs the body once over whole broadcast arrays
(arith and math ops are elementwise over numpy arrays), not once per element.
"""

from __future__ import annotations

import numpy as np

from ...ir.core import Block
from ...ir.spec import Operand, OpSpec, fail
from ...ir.types import TensorType
from .common import broadcast_shapes, ttype


def run_scalar_body(block: Block, arrays, interp) -> np.ndarray:
    """Run a scalar body over arrays (already broadcast to one shape); returns what it yields."""
    (out,) = interp.run_block(block, list(arrays))
    return np.asarray(out)


class Yield(OpSpec):
    """Ends a scalar body, giving its value."""

    name = "graph.yield"
    operands = (Operand("values", variadic=True),)
    results = ()
    traits = {"terminator"}

    def reference(self, op, args, interp):
        return []


class Elementwise(OpSpec):
    """A chain of elementwise ops fused into one op with a scalar body; see the module doc."""

    name = "graph.elementwise"
    operands = (Operand("inputs", variadic=True),)
    results = ("output",)
    regions = 1
    traits = {"pure", "elementwise"}

    def infer_types(self, op):
        return None  # the result type is declared; verify() checks it against the body

    def verify(self, op):
        out = op.results[0].type
        if not isinstance(out, TensorType):
            fail(op, "result must be a tensor")
        shapes = [ttype(op, i).shape for i in range(len(op.operands))]
        if broadcast_shapes(op, out.shape, *shapes) != out.shape:
            fail(op, f"operands do not broadcast to the result shape {list(out.shape)}")
        body = op.regions[0].blocks
        if len(body) != 1:
            fail(op, "body must be one block")
        block = body[0]
        want = [ttype(op, i).element for i in range(len(op.operands))]
        if [a.type for a in block.args] != want:
            fail(op, "body arguments must be the operands' element types "
                     f"({', '.join(map(str, want))})")
        last = block.last_op
        if last is None or last.name != "graph.yield" or len(last.operands) != 1:
            fail(op, "body must end with graph.yield of one value")
        if last.operands[0].type != out.element:
            fail(op, f"body yields {last.operands[0].type}, result element is {out.element}")
        for inner in block.ops:
            if any(isinstance(r.type, TensorType) for r in inner.results):
                fail(op, f"body op {inner.name} produces a tensor; bodies are scalar")

    def reference(self, op, args, interp):
        shape = op.results[0].type.shape
        arrays = [np.broadcast_to(a, shape) for a in args]
        out = run_scalar_body(op.regions[0].blocks[0], arrays, interp)
        t = op.results[0].type
        return [np.broadcast_to(out, shape).astype(t.element.np_dtype)]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (Yield, Elementwise)
