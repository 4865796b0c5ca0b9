"""Layers with a fused epilogue: ``graph.fused_conv``, ``graph.fused_gemm``, ``graph.fused_matmul``.

A fused op is its base op (same operands and attributes) followed by a scalar epilogue applied to
every element of the base op's result, as TensorRT's CBR layers are. The epilogue can read extra
tensors (a residual to add, a per-channel scale), each broadcast to the result's shape:

    %y = "graph.fused_conv"(%x, %w, %b, %res) ({
    ^bb0(%acc: f32, %r: f32):
      %s = "arith.add"(%acc, %r) : (f32, f32) -> f32
      %z = "arith.constant"() {type = f32, value = 0.0} : () -> f32
      %o = "arith.max"(%s, %z) : (f32, f32) -> f32
      "graph.yield"(%o) : (f32) -> ()
    }) {dilations = [1, 1], group = 1, kernel_shape = [3, 3], operand_segments = [1, 1, 1, 1],
        pads = [1, 1, 1, 1], strides = [1, 1]} : (...) -> tensor<1x8x8x8xf32>

is ``relu(conv(x, w, b) + res)``. Operands: the base op's (optional ones may be absent, as
``operand_segments`` records) then ``epilogue_inputs``. The epilogue block takes the accumulator
(the base result's element) then one scalar per epilogue input, and yields the result element.

Everything about the base computation (type inference, checks, reference) is the base op's own,
applied to a view of the fused op that shows only the base operands; nothing is written twice.

Reduced precision (``ptxc.rewrite.passes.precision``): the epilogue's accumulator argument may be
*wider* than the base result's element (:data:`WIDE_ACCUMULATOR`: f32 for f16 operands), and
the epilogue may yield another element type than its accumulator; the result's element is what
the epilogue yields. So an fp16 layer is f16 operands, an f32 accumulator and epilogue, and the
store's cast at the end of the epilogue::

    %y = "graph.fused_conv"(%x, %w, %b) ({
    ^bb0(%acc: f32):
      %r = "arith.max"(%acc, %zero) : (f32, f32) -> f32
      %h = "arith.cast"(%r) {to = f16} : (f32) -> f16
      "graph.yield"(%h) : (f16) -> ()
    }) {...} : (tensor<1x3x8x8xf16>, tensor<4x3x3x3xf16>, tensor<4xf16>) -> tensor<1x4x8x8xf16>

``ptxc.precision = "tf32"`` on a fused op rounds its two multiplied operands to tf32 before the
product (:func:`ptxc.dialects.arith.round_tf32`), as a tf32 tensor-core instruction reads them.
"""

from __future__ import annotations

import numpy as np

from ...ir.core import Operation
from ...ir.spec import Operand, OpSpec, fail, lookup
from ...ir.types import F16, F32, ScalarType, TensorType
from .common import broadcast_shapes
from .linalg import Gemm, MatMul
from .nn import Conv
from .region import run_scalar_body


#: base result element -> the wider accumulator an epilogue may take instead (precision passes)
WIDE_ACCUMULATOR: dict[ScalarType, ScalarType] = {F16: F32}
#: the attribute that asks for tf32 operands (value "tf32")
PRECISION_ATTR = "ptxc.precision"


class BaseView:
    """The fused op as its base op sees it: the base name, base operands, same attributes."""

    __slots__ = ("op", "name", "operands")

    def __init__(self, op: Operation, base: str, operands):
        self.op, self.name, self.operands = op, base, operands

    def __getattr__(self, item):  # attributes, loc, results, where, ...
        return getattr(self.op, item)

    def attr(self, name, default=None):
        if name in self.op.attributes:
            return self.op.attributes[name]
        d = lookup(self.name).attributes.get(name)
        return d.default if d is not None and d.default is not None else default

    @property
    def where(self) -> str:
        return self.op.where


class Fused(OpSpec):
    """Base of fused ops; subclasses set ``name`` and ``base``."""

    base: str = ""
    regions = 1
    traits = {"pure"}

    @classmethod
    def declare(cls, name: str, base: type[OpSpec]):
        """The fused op ``name`` of the base op declared by ``base``."""
        return type(name.split(".")[1].title().replace("_", ""), (cls,), {
            "__doc__": f"{base.name} with a scalar epilogue (see the module docstring).",
            "name": name, "base": base.name,
            "operands": tuple(base.operand_defs) + (Operand("epilogue_inputs", variadic=True),),
            "results": tuple(base.result_defs),
            "attributes": dict(base.attributes),
        })

    # ---- parts -------------------------------------------------------------------------------------
    def split(self, op, values=None):
        """(base operands or values, epilogue inputs or values)."""
        values = list(op.operands if values is None else values)
        if self.needs_segments():
            sizes = op.attributes.get("operand_segments")
            if not isinstance(sizes, tuple) or len(sizes) != len(self.operand_defs):
                fail(op, "needs operand_segments for its base operands and epilogue_inputs")
            n_base = sum(sizes[:-1])
        else:
            n_base = len(self.operand_defs) - 1  # all base operands are single
        return values[:n_base], values[n_base:]

    def view(self, op) -> BaseView:
        return BaseView(op, self.base, self.split(op)[0])

    def epilogue(self, op):
        return op.regions[0].blocks[0]

    # ---- spec --------------------------------------------------------------------------------------
    def accumulator(self, op):
        """The epilogue's accumulator element (the base result's, or its wide accumulator)."""
        blocks = op.regions[0].blocks if op.regions else []
        if blocks and blocks[0].args:
            return blocks[0].args[0].type
        return None

    def infer_types(self, op):
        (base,) = lookup(self.base).infer_types(self.view(op))
        blocks = op.regions[0].blocks if op.regions else []
        last = blocks[0].last_op if len(blocks) == 1 else None
        if last is not None and last.name == "graph.yield" and len(last.operands) == 1 and \
                isinstance(last.operands[0].type, ScalarType):
            return [base.with_element(last.operands[0].type)]
        return [base]

    def verify(self, op):
        lookup(self.base).verify(self.view(op))
        (base,) = lookup(self.base).infer_types(self.view(op))
        prec = op.attributes.get(PRECISION_ATTR)
        if prec is not None and (prec != "tf32" or base.element != F32):
            fail(op, f"{PRECISION_ATTR} = {prec!r}: only 'tf32', on f32 operands")
        out = op.results[0].type
        extras = self.split(op)[1]
        for v in extras:
            if not isinstance(v.type, TensorType):
                fail(op, "epilogue inputs must be tensors")
            if broadcast_shapes(op, out.shape, v.type.shape) != out.shape:
                fail(op, f"epilogue input {v.type} does not broadcast to the result {out}")
        blocks = op.regions[0].blocks
        if len(blocks) != 1:
            fail(op, "epilogue must be one block")
        block = blocks[0]
        acc = block.args[0].type if block.args else None
        if acc not in (base.element, WIDE_ACCUMULATOR.get(base.element)):
            acc = base.element
        want = [acc] + [v.type.element for v in extras]
        if [a.type for a in block.args] != want:
            fail(op, "epilogue arguments must be the accumulator's and the epilogue inputs' "
                     f"element types ({', '.join(map(str, want))})")
        last = block.last_op
        if last is None or last.name != "graph.yield" or len(last.operands) != 1 or \
                last.operands[0].type != out.element:
            fail(op, f"epilogue must end with graph.yield of one {out.element}")

    def reference(self, op, args, interp):
        base_args, extra_args = self.split(op, args)
        wide = self.accumulator(op)
        if wide is not None and wide != lookup(self.base).infer_types(self.view(op))[0].element:
            base_args = [np.asarray(a).astype(wide.np_dtype) for a in base_args]
        if op.attributes.get(PRECISION_ATTR) == "tf32":
            from ..arith import round_tf32
            base_args = [round_tf32(a) if i < 2 else a for i, a in enumerate(base_args)]
        (acc,) = lookup(self.base).reference(self.view(op), base_args, interp)
        shape = op.results[0].type.shape
        arrays = [acc] + [np.broadcast_to(a, shape) for a in extra_args]
        out = run_scalar_body(self.epilogue(op), arrays, interp)
        return [np.broadcast_to(out, shape).astype(op.results[0].type.element.np_dtype)]


FusedConv = Fused.declare("graph.fused_conv", Conv)
FusedGemm = Fused.declare("graph.fused_gemm", Gemm)
FusedMatMul = Fused.declare("graph.fused_matmul", MatMul)

#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (FusedConv, FusedGemm, FusedMatMul)

#: base op name -> fused op name
FUSED_OF = {"graph.conv": "graph.fused_conv", "graph.gemm": "graph.fused_gemm",
            "graph.matmul": "graph.fused_matmul"}
