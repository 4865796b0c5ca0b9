"""ONNX ops that ONNX itself defines as functions, imported by expanding their function body.

Many ONNX ops carry a *function body* in their schema: a small graph of simpler ONNX ops that
computes them (NegativeLogLikelihoodLoss from Gather/Where/ReduceSum, Swish from Sigmoid and Mul,
...). Some bodies are *context dependent*: ONNX builds them for one node, from its attributes and
input types (SoftmaxCrossEntropyLoss, SpaceToDepth). For the ops listed in :data:`EXPANDED`, the
importer asks ONNX for the body that fits the node and the model's opset, and converts the body's
nodes with the ordinary converters, as if they had been in the model. One general mechanism, so
each such op runs wherever its body's ops run (interpreter, cpu, cuda), and its semantics are
exactly ONNX's definition.

    before (ONNX):  loss = NegativeLogLikelihoodLoss(input, target)   reduction = "mean"
    after (graph):  %g = graph.gather_elements(input, unsqueeze(target)) ... %loss = graph.div(
                        graph.reduce_sum(neg(%g)), graph.reduce_sum(weights))   (the body's ops)

Names inside the body are prefixed with the node's name (``node/inner``) so they cannot collide
with the model's; a body node's ops are tagged with that prefixed name. A body op ptxc does not
support is an ``UnsupportedOpError`` naming the expanded node. Attributes a body refers to
(``ref_attr_name``) take the node's value, or the schema's default.
"""

from __future__ import annotations

import onnx
from onnx import defs, helper

from ...errors import PtxcError, UnsupportedOpError
from .context import ONNX_TYPES, ConvertContext, MissingOutput, converter

#: ONNX ops imported through their function body (each op's body must use supported ops only
#: for the node tests to pass; a body op that is not supported is refused with a typed error)
EXPANDED = (
    "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", "Swish", "MeanVarianceNormalization",
    "SwiGLU", "CenterCropPad", "HannWindow", "HammingWindow",
    "BlackmanWindow", "CausalConvWithState",
)


def _elem_type(el) -> int:
    for k, v in ONNX_TYPES.items():
        if v == el.name:
            return k
    raise PtxcError(f"element type {el} has no ONNX counterpart")


def _body(ctx: ConvertContext) -> onnx.FunctionProto:
    """The function body of ``ctx.node`` for the model's opset (the newest body not newer)."""
    node = ctx.node
    try:
        schema = defs.get_schema(node.op_type, ctx.opset, "")
    except Exception:
        raise ctx.error(f"ONNX has no schema for {node.op_type} at opset {ctx.opset}") from None
    full = onnx.NodeProto()
    full.CopyFrom(node)
    have = {a.name for a in node.attribute}
    for name, a in schema.attributes.items():  # the body may refer to defaulted attributes
        if name not in have and a.default_value.name:
            full.attribute.append(a.default_value)
    fp = onnx.FunctionProto()
    plain = [v for v in schema.function_opset_versions if v <= ctx.opset]
    if schema.has_function and plain:
        fp.ParseFromString(schema.get_function_with_opset_version(max(plain)))
        return fp, full
    dep = [v for v in schema.context_dependent_function_opset_versions if v <= ctx.opset]
    if schema.has_context_dependent_function and dep:
        types = []
        for i in range(len(node.input)):
            v = ctx.input(i)
            if v is None:
                types.append(onnx.TypeProto())
            else:
                types.append(helper.make_tensor_type_proto(_elem_type(v.type.element),
                                                           list(v.type.shape)))
        try:
            data = schema.get_context_dependent_function_with_opset_version(
                max(dep), full.SerializeToString(), [t.SerializeToString() for t in types])
        except Exception as e:
            raise ctx.error(f"ONNX cannot build the function body: {e}") from None
        fp.ParseFromString(data)
        if fp.node:
            return fp, full
    raise ctx.error(f"{node.op_type} has no function body at opset {ctx.opset}")


def _inner_nodes(fp: onnx.FunctionProto, node: onnx.NodeProto, prefix: str):
    """The body's nodes with the node's tensor names and attribute values substituted."""
    rename = {}
    for formal, actual in zip(fp.input, node.input):
        rename[formal] = actual
    for formal in fp.input[len(node.input):]:
        rename[formal] = ""
    for formal, actual in zip(fp.output, node.output):
        rename[formal] = actual
    attrs = {a.name: a for a in node.attribute}
    out = []
    for k, inner in enumerate(fp.node):
        n = onnx.NodeProto()
        n.CopyFrom(inner)
        n.name = f"{prefix}/{inner.name or inner.op_type + '_' + str(k)}"
        for seq in (n.input, n.output):
            for i, name in enumerate(seq):
                if name:
                    seq[i] = rename.setdefault(name, f"{prefix}/{name}")
        kept = []
        for a in n.attribute:
            if a.ref_attr_name:
                if a.ref_attr_name in attrs:
                    b = onnx.AttributeProto()
                    b.CopyFrom(attrs[a.ref_attr_name])
                    b.name = a.name
                    kept.append(b)
            else:
                kept.append(a)
        del n.attribute[:]
        n.attribute.extend(kept)
        out.append(n)
    return out


def convert_node(ctx: ConvertContext, node: onnx.NodeProto, name: str) -> None:
    """Convert one ONNX node with its converter from ``ctx.converters``; its outputs go into
    ``ctx.values`` (an output the converter does not produce becomes a MissingOutput)."""
    table = ctx.converters
    ctx.node, ctx.node_name = node, name
    if node.domain not in ("", "ai.onnx") or node.op_type not in table:
        raise UnsupportedOpError({node.op_type: [name]}, ctx.model_name)
    from .bf16 import convert_in_f32, reads_bf16
    try:
        if reads_bf16(ctx, node):
            outs = convert_in_f32(ctx, node, table[node.op_type])
        else:
            outs = table[node.op_type](ctx)
    except PtxcError:
        raise
    except Exception as e:  # a converter bug must still name the node
        raise ctx.error(f"cannot convert: {type(e).__name__}: {e}") from e
    for out_name, v in zip(node.output, outs):
        if out_name:
            v.name_hint = out_name
            ctx.values[out_name] = v
    for out_name in node.output[len(outs):]:
        if out_name:
            ctx.values[out_name] = MissingOutput(name, node.op_type, out_name)


@converter(*EXPANDED)
def expand_function(ctx: ConvertContext):
    node, name, opset = ctx.node, ctx.node_name, ctx.opset
    fp, full = _body(ctx)
    body_opset = next((o.version for o in fp.opset_import if o.domain in ("", "ai.onnx")),
                      opset)
    inner = _inner_nodes(fp, full, name)
    ctx.opset = body_opset
    try:
        for n in inner:
            convert_node(ctx, n, n.name)
    finally:
        ctx.node, ctx.node_name, ctx.opset = node, name, opset
    outs = []
    for out_name in node.output:
        v = ctx.values.get(out_name) if out_name else None
        if v is None:
            break
        outs.append(v)
    return outs
