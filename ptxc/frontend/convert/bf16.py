"""bfloat16 at import: a storage type, computed in f32.

ptxc keeps bf16 tensors in memory as bf16 (numpy's ``bfloat16`` from ml_dtypes in the reference
semantics, 16-bit words in the compiled code) but computes every op that reads one in f32: the
importer converts such a node with its bf16 inputs cast to f32 and casts its f32 results back to
bf16 (where ONNX declares them bf16). So accumulation (reductions, matmul, softmax) is fp32, every
lowering and target runs bf16 models without a bf16 arithmetic of its own, and the compiled code
needs only the bf16 <-> f32 casts (exact widening; narrowing rounds to nearest even, as
ml_dtypes). Cast and CastLike convert directly (one rounding).

    before (ONNX):  y: bf16 = Add(a: bf16, b: bf16)
    after (graph):  %a32 = graph.cast(%a) {to = f32}   %b32 = graph.cast(%b) {to = f32}
                    %s = graph.add(%a32, %b32)        %y = graph.cast(%s) {to = bf16}

Results can differ from an op computed in bf16 step by step (as onnx's reference computes some
ops) by the roundings that fp32 accumulation saves.
"""

from __future__ import annotations

import numpy as np
import onnx

from ...ir.types import BF16, F32, TensorType

#: ops that take bf16 operands as they are: the casts convert directly
DIRECT = frozenset({"Cast", "CastLike"})


def _is_bf16(v) -> bool:
    return v is not None and isinstance(getattr(v, "type", None), TensorType) \
        and v.type.element == BF16


def _input_is_bf16(ctx, name: str) -> bool:
    """Whether the tensor ``name`` is bf16, without materializing or reading it (an input the
    converter never reads must not fail here)."""
    if not name:
        return False
    v = ctx.values.get(name)
    if v is None and name in ctx.pending:
        return np.asarray(ctx.pending[name]).dtype == BF16.np_dtype
    return _is_bf16(v)


def reads_bf16(ctx, node: onnx.NodeProto) -> bool:
    if node.op_type in DIRECT:
        return False
    return any(_input_is_bf16(ctx, name) for name in node.input)


def convert_in_f32(ctx, node: onnx.NodeProto, fn) -> list:
    """Run converter ``fn`` on ``node`` with its bf16 inputs cast to f32; f32 results that ONNX
    declares bf16 (or whose type it does not declare) are cast back to bf16."""
    cache = ctx.__dict__.setdefault("_f32_of", {})
    alias = onnx.NodeProto()
    alias.CopyFrom(node)
    for i, name in enumerate(node.input):
        if not _input_is_bf16(ctx, name):
            continue
        v = ctx.input(i)
        if _is_bf16(v):
            if v not in cache:
                cache[v] = ctx.emit1("graph.cast", [v], {"to": F32})
            ctx.values[f"{name}#f32"] = cache[v]
            alias.input[i] = f"{name}#f32"
    ctx.node = alias
    try:
        outs = fn(ctx)
    finally:
        ctx.node = node
    declared = ctx.__dict__.get("declared", {})
    fixed = []
    for name, v in zip(node.output, outs):
        want = declared.get(name)
        if isinstance(getattr(v, "type", None), TensorType) and v.type.element == F32 and \
                want in (None, onnx.TensorProto.BFLOAT16):
            v = ctx.emit1("graph.cast", [v], {"to": BF16})
        fixed.append(v)
    return fixed + list(outs[len(fixed):])
