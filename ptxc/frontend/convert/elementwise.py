"""Converters of elementwise ONNX ops: arithmetic, variadic, comparison and logic, unary math,
Cast, Identity and Dropout."""

from __future__ import annotations

import numpy as np
import onnx

from .context import ConvertContext, converter, scalar_type_of


@converter("Relu")
def relu(ctx: ConvertContext):
    return ctx.emit("graph.relu", [ctx.input(0)])


@converter("Add")
def add(ctx: ConvertContext):
    return ctx.emit("graph.add", [ctx.input(0), ctx.input(1)])


def _check_broadcast(ctx: ConvertContext) -> None:
    """Opsets before 7 had ``broadcast``/``axis`` attributes; the version converter removes them
    for models it upgrades, so one seen here is from an invalid model."""
    if ctx.has_attr("axis") or ctx.has_attr("broadcast"):
        raise ctx.error("legacy broadcast/axis attributes are not supported")


_BINARY = {"Sub": "graph.sub", "Mul": "graph.mul", "Div": "graph.div",
           "Equal": "graph.equal", "Less": "graph.less", "Greater": "graph.greater"}


@converter(*_BINARY)
def binary(ctx: ConvertContext):
    _check_broadcast(ctx)
    return ctx.emit(_BINARY[ctx.node.op_type], [ctx.input(0), ctx.input(1)])


@converter("Pow")
def pow_(ctx: ConvertContext):
    # graph.pow accepts an exponent of another numeric type (ONNX T1), as ONNX Pow >= 12 does
    return ctx.emit("graph.pow", [ctx.input(0), ctx.input(1)])


_VARIADIC = {"Max": "graph.max", "Min": "graph.min", "Sum": "graph.sum", "Mean": "graph.mean"}


@converter(*_VARIADIC)
def variadic(ctx: ConvertContext):
    xs = ctx.inputs()
    if not xs or any(x is None for x in xs):
        raise ctx.error("needs one or more inputs, none of them empty")
    return ctx.emit(_VARIADIC[ctx.node.op_type], xs)


@converter("Where")
def where(ctx: ConvertContext):
    return ctx.emit("graph.where", [ctx.input(0), ctx.input(1), ctx.input(2)])


_UNARY = {"Not": "graph.not", "Sqrt": "graph.sqrt", "Exp": "graph.exp", "Log": "graph.log",
          "Neg": "graph.neg", "Abs": "graph.abs", "Reciprocal": "graph.reciprocal",
          "Floor": "graph.floor", "Ceil": "graph.ceil", "Erf": "graph.erf"}


@converter(*_UNARY)
def unary(ctx: ConvertContext):
    return ctx.emit(_UNARY[ctx.node.op_type], [ctx.input(0)])


@converter("Cast")
def cast(ctx: ConvertContext):
    from ...errors import ModelError
    to = ctx.attr("to")
    if to is None:
        raise ctx.error("attribute 'to' is required")
    try:
        el = scalar_type_of(to, "cast")
    except ModelError:
        try:
            name = onnx.TensorProto.DataType.Name(to)
        except ValueError:
            name = str(to)
        raise ctx.error(f"cast to {name} is not supported (ptxc's element types are "
                        "float64/32/16, bfloat16, signed and unsigned 8-64 bit integers, "
                        "bool)") from None
    return ctx.emit("graph.cast", [ctx.input(0)], {"to": el})


@converter("Identity")
def identity(ctx: ConvertContext):
    return ctx.emit("graph.identity", [ctx.input(0)])


@converter("Dropout")
def dropout(ctx: ConvertContext):
    """Inference dropout is the identity. A training_mode known to be true is refused (the
    output would be random) unless the ratio is known to be 0; one given at run time is ignored,
    as inference engines do."""
    ratio = ctx.attr("ratio", 0.5)  # an attribute before opset 12, an input from then on
    if ctx.opset >= 12:
        ratio = 0.5 if ctx.input(1) is None else None
        if ctx.is_const(1):
            ratio = float(np.asarray(ctx.const(1)).reshape(-1)[0])
        if ctx.is_const(2) and bool(np.asarray(ctx.const(2)).reshape(-1)[0]) and ratio != 0:
            raise ctx.error("training_mode is true: training-mode dropout is random and "
                            "not supported for inference")
    attrs = {"ratio": float(ratio)} if ratio is not None else None
    return ctx.emit("graph.dropout", [ctx.input(0)], attrs)


@converter("CastLike")
def cast_like(ctx: ConvertContext):
    """Cast to the element type of the second input (its values are not read)."""
    return ctx.emit("graph.cast", [ctx.input(0)], {"to": ctx.type(1).element})
