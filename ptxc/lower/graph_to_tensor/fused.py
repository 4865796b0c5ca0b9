"""Fused graph ops: ``graph.fused_conv``, ``graph.fused_gemm``, ``graph.fused_matmul`` -> the base
op's lowering (applied to the base view of the fused op, so nothing is written twice) followed by
one epilogue generic whose body is the epilogue block: the accumulator and the epilogue inputs
(broadcast) in, the result element out. The base result has the epilogue's accumulator element
(f32 for an fp16 layer: the f16 operands accumulate in f32 and only the epilogue's last cast
rounds to f16), and ``ptxc.precision = "tf32"`` becomes the named op's ``tf32``. The tensor-level fusion (fuse-tensor-elementwise) folds
that generic together with the elementwise generics after it.

``graph.elementwise`` needs nothing here: its scalar form inlines its body (elementwise.py).
"""

from __future__ import annotations

from ...dialects.graph.fused import PRECISION_ATTR
from ...dialects.graph.scalar_forms import inline_block
from ...ir.spec import lookup
from .common import elementwise, lowers
from .linalg import gemm, matmul
from .nn import conv

_BASE = {"graph.fused_conv": conv, "graph.fused_gemm": gemm, "graph.fused_matmul": matmul}


@lowers(*_BASE)
def _fused(op, b):
    spec = lookup(op.name)
    acc = _BASE[op.name](b, spec.view(op), el=spec.accumulator(op),
                         tf32=op.attributes.get(PRECISION_ATTR) == "tf32")
    extras = spec.split(op)[1]
    block = spec.epilogue(op)

    def body(bb, s):
        (y,) = inline_block(block, bb, s)
        return y

    return [elementwise(b, [acc] + list(extras), op.results[0].type, body)]
