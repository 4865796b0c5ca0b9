"""Matrix products: ``graph.matmul`` and ``graph.gemm`` -> ``tensor.matmul`` (+ an epilogue).

* matmul: 1-D operands become matrices by a ``tensor.reshape`` (``(K,)`` -> ``(1, K)`` for A,
  ``(K, 1)`` for B), the product accumulates into a zero fill, and a reshape drops the added
  dims again (numpy.matmul semantics). Batch dims broadcast inside ``tensor.matmul``.
* gemm: ``transA``/``transB`` become ``tensor.matmul``'s ``transpose_a``/``transpose_b`` (the
  operand is read transposed, never copied). The product goes into a zero fill (f32 for f16
  inputs); ``alpha * acc + beta * C`` is one generic (none
  when ``alpha = 1`` and there is no C). Integer gemms whose reference computes in f64 (``alpha``
  or ``beta`` not 1) do so too and round half to even, as numpy.
"""

from __future__ import annotations

import numpy as np

from ...ir.spec import lookup
from ...ir.types import F64, TensorType
from .common import acc_type, c, cast, elementwise, fill, lowers, op_, reshape


def _tf32(tf32: bool) -> dict:
    return {"tf32": True} if tf32 else {}


def matmul(b, op, el=None, tf32=False):
    """Lower ``graph.matmul`` (or the base view of ``graph.fused_matmul``); ``el`` and ``tf32``
    as for :func:`ptxc.lower.graph_to_tensor.nn.conv`."""
    a, bm = op.operands[0], op.operands[1]
    out = op.results[0].type
    out = out.with_element(el or out.element)
    a2 = reshape(b, a, (1,) + a.type.shape) if a.type.rank == 1 else a
    b2 = reshape(b, bm, bm.type.shape + (1,)) if bm.type.rank == 1 else bm
    batch = _broadcast(a2.type.shape[:-2], b2.type.shape[:-2])
    full = TensorType(batch + (a2.type.shape[-2], b2.type.shape[-1]), out.element)
    y = b.create("tensor.matmul", [a2, b2, fill(b, full, 0)], _tf32(tf32) or None).result
    return reshape(b, y, out.shape)


def _broadcast(s1, s2) -> tuple:
    return tuple(np.broadcast_shapes(tuple(s1), tuple(s2)))


@lowers("graph.matmul")
def _matmul(op, b):
    return [matmul(b, op)]


def gemm(b, op, el=None, tf32=False):
    """Lower ``graph.gemm`` (or the base view of ``graph.fused_gemm``); ``el`` and ``tf32`` as
    for :func:`ptxc.lower.graph_to_tensor.nn.conv`."""
    g = lookup("graph.gemm").groups(op)
    a, bm, cc = g["A"], g["B"], g["C"]
    out = op.results[0].type
    out = out.with_element(el or out.element)
    el = out.element
    alpha, beta = op.attr("alpha"), op.attr("beta")
    if cc is not None and beta == 0.0:
        cc = None
    acc = out.with_element(acc_type(el))
    prod = b.create("tensor.matmul", [a, bm, fill(b, acc, 0)], {
        "transpose_a": bool(op.attr("transA")), "transpose_b": bool(op.attr("transB")),
        **_tf32(tf32)}).result
    if alpha == 1.0 and cc is None and acc.element == el:
        return prod
    in_f64 = not el.is_float and (alpha != 1.0 or (cc is not None and beta != 1.0))
    ct = F64 if in_f64 else acc.element

    def body(bb, s):
        y = cast(bb, s[0], ct)
        if alpha != 1.0:
            y = op_(bb, "arith.mul", y, c(bb, alpha, ct))
        if cc is not None:
            cv = cast(bb, s[1], ct)
            if beta != 1.0:
                cv = op_(bb, "arith.mul", cv, c(bb, beta, ct))
            y = op_(bb, "arith.add", y, cv)
        if in_f64:
            y = op_(bb, "math.roundeven", y)
        return cast(bb, y, el)

    return elementwise(b, [prod] + ([cc] if cc is not None else []), out, body,
                       inline_constants=False)


@lowers("graph.gemm")
def _gemm(op, b):
    return [gemm(b, op)]
