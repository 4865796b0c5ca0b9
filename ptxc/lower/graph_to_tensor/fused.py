"""Fused graph ops: ``graph.fused_conv``, ``graph.fused_gemm``, ``graph.fused_matmul`` -> the base
op's lowering (applied to the base view of the fused op, so nothing is written twice) followed by
one epilogue generic whose body is the epilogue block: the accumulator and the epilogue inputs
(broadcast) in, the result element out. The tensor-level fusion (fuse-tensor-elementwise) folds
that generic together with the elementwise generics after it.

``graph.elementwise`` needs nothing here: its scalar form inlines its body (elementwise.py).
"""

from __future__ import annotations

from ...dialects.graph.scalar_forms import inline_block
from ...ir.spec import lookup
from .common import elementwise, lowers
from .linalg import gemm, matmul
from .nn import conv

_BASE = {"graph.fused_conv": conv, "graph.fused_gemm": gemm, "graph.fused_matmul": matmul}


@lowers(*_BASE)
def _fused(op, b):
    spec = lookup(op.name)
    acc = _BASE[op.name](b, spec.view(op))
    extras = spec.split(op)[1]
    block = spec.epilogue(op)

    def body(bb, s):
        (y,) = inline_block(block, bb, s)
        return y

    return [elementwise(b, [acc] + list(extras), op.results[0].type, body)]
