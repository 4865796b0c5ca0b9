"""Converters of the ONNX quantization ops: QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

Opset differences resolved here (ptxc/dialects/graph/quant.py has the semantics):

* Q/DQ opset 10: per-tensor only, no ``axis``; 13: ``axis`` (default 1); 19: ``saturate``
  (float8 only); 21: ``block_size``, ``output_dtype`` (Q: the result type when there is no zero
  point; default uint8); 23+: DQ's ``output_dtype``; Q's ``precision``.
* Supported: int8, uint8, int16, uint16 data (and int32 for DequantizeLinear, as onnxruntime
  writes quantized biases); per-tensor and per-axis. Refused with a ModelError naming the node:
  float8/4-bit/2-bit types, blocked quantization (``block_size`` > 0), Q ``precision`` other
  than float32.
* DynamicQuantizeLinear becomes its ONNX function body (min/max with 0, scale, zero point by a
  quantize of ``-min``, then QuantizeLinear): the same float32 operations onnxruntime does.
* QLinear* ops compute the requantization multiplier ``(a_scale * b_scale) / y_scale`` in
  float32 from their scale inputs (folded when they are constants), as onnxruntime does.
"""

from __future__ import annotations

import numpy as np

from ...dialects.graph.quant import QTYPES, identity_epilogue
from ...errors import VerifyError
from ...ir.types import F32, ScalarType
from ...ir.verifier import verify_op_local
from .context import ConvertContext, converter, scalar_type_of
from .nn import ints_attr, resolve_pads

_ONNX_QTYPES = {2: "ui8", 3: "i8", 4: "ui16", 5: "i16"}


def _axis(ctx: ConvertContext, rank: int) -> int:
    axis = int(ctx.attr("axis", 1))
    if ctx.opset < 13:
        axis = 1
    if rank == 0:
        return 0
    if not -rank <= axis < rank:
        raise ctx.error(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def _check_affine(ctx: ConvertContext, what: str, el_of_data) -> tuple[int, object]:
    """Common checks of Q and DQ: block_size, scale rank/size; returns (axis, zero point)."""
    if int(ctx.attr("block_size", 0) or 0) > 0:
        raise ctx.error(f"blocked quantization (block_size={ctx.attr('block_size')}) is not "
                        "supported; per-tensor and per-axis are")
    x = ctx.type(0)
    s = ctx.type(1)
    if s.rank > 1:
        raise ctx.error(f"{what} scale must be a scalar or 1-D, got {s}")
    if s.size == 1:
        return 0, ctx.input(2)   # per tensor: the axis plays no part
    axis = _axis(ctx, x.rank)
    if (s.rank != 1 or not x.rank or s.shape[0] != x.shape[axis]):
        raise ctx.error(f"per-axis scale {s} must have the size of axis {axis} of {x}")
    if not s.element.is_float:
        raise ctx.error(f"scale must be float, got {s}")
    return axis, ctx.input(2)


def _qtype(ctx: ConvertContext, el: ScalarType | None, what: str) -> ScalarType:
    if el is None or el.name not in QTYPES:
        raise ctx.error(f"{what} type {el} is not supported (int8, uint8, int16, uint16)")
    return el


@converter("QuantizeLinear")
def quantize_linear(ctx: ConvertContext):
    axis, zp = _check_affine(ctx, "y_scale", None)
    prec = ctx.attr("precision", 0)
    if prec not in (0, None, 1):
        raise ctx.error(f"precision={prec} is not supported (float32 is)")
    out = ctx.attr("output_dtype", 0)
    if zp is not None:
        to = zp.type.element
        if out and _ONNX_QTYPES.get(out) != to.name:
            raise ctx.error(f"output_dtype {out} differs from the zero point's type {to}")
    elif out:
        if out not in _ONNX_QTYPES:
            raise ctx.error(f"output_dtype {out} is not supported (int8, uint8, int16, uint16)")
        to = ScalarType(_ONNX_QTYPES[out])
    else:
        to = ScalarType("ui8")
    _qtype(ctx, to, "quantized")
    if not ctx.type(0).element.is_float:
        raise ctx.error(f"x must be float, got {ctx.type(0)}")
    return ctx.emit("graph.quantize_linear", [ctx.input(0), ctx.input(1), zp],
                    {"axis": axis, "to": to})


@converter("DequantizeLinear")
def dequantize_linear(ctx: ConvertContext):
    axis, zp = _check_affine(ctx, "x_scale", None)
    el = ctx.type(0).element
    if el.name not in QTYPES + ("i32",):
        raise ctx.error(f"x type {el} is not supported (int8, uint8, int16, uint16, int32)")
    (y,) = ctx.emit("graph.dequantize_linear", [ctx.input(0), ctx.input(1), zp],
                    {"axis": axis})
    out = ctx.attr("output_dtype", 0)
    if out:
        to = scalar_type_of(out, f"node {ctx.node_name!r}")
        if to != y.type.element:
            (y,) = ctx.emit("graph.cast", [y], {"to": to})
    return [y]


@converter("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: ConvertContext):
    x = ctx.input(0)
    if x.type.element != F32:
        raise ctx.error(f"x must be float32, got {x.type}")
    axes = tuple(range(x.type.rank))
    zero = ctx.constant(np.zeros((), np.float32))
    lo = ctx.emit1("graph.min", [ctx.emit1("graph.reduce_min", [x], {"axes": axes,
                                                                      "keepdims": 0}), zero])
    hi = ctx.emit1("graph.max", [ctx.emit1("graph.reduce_max", [x], {"axes": axes,
                                                                      "keepdims": 0}), zero])
    scale = ctx.emit1("graph.div", [ctx.emit1("graph.sub", [hi, lo]),
                                    ctx.constant(np.array(255.0, np.float32))])
    ui8 = ScalarType("ui8")
    # zero point: saturate(rint(0 - lo / scale)) == a quantize of -lo with zero point 0
    neg = ctx.emit1("graph.neg", [lo])
    zp = ctx.emit1("graph.quantize_linear", [neg, scale, None], {"axis": 0, "to": ui8})
    y = ctx.emit1("graph.quantize_linear", [x, scale, zp], {"axis": 0, "to": ui8})
    return [y, scale, zp]


def _f32(ctx, v):
    return v if v.type.element == F32 else ctx.emit1("graph.cast", [v], {"to": F32})


def _multiplier(ctx, a_scale, b_scale, y_scale):
    """``(a_scale * b_scale) / y_scale`` in float32."""
    ab = ctx.emit1("graph.mul", [_f32(ctx, a_scale), _f32(ctx, b_scale)])
    return ctx.emit1("graph.div", [ab, _f32(ctx, y_scale)])


def _conv_attrs(ctx: ConvertContext, x, w) -> dict:
    if x.type.rank < 3 or w.type.rank != x.type.rank:
        raise ctx.error(f"x must have rank >= 3 and w the same rank, got {x.type} and {w.type}")
    n = x.type.rank - 2
    kernel = ints_attr(ctx, "kernel_shape", n, w.type.shape[2:])
    if kernel != tuple(w.type.shape[2:]):
        raise ctx.error(f"kernel_shape {list(kernel)} does not match w {w.type}")
    strides = ints_attr(ctx, "strides", n, (1,) * n)
    dilations = ints_attr(ctx, "dilations", n, (1,) * n)
    pads = resolve_pads(ctx, x.type.shape[2:], kernel, strides, dilations)
    return {"kernel_shape": kernel, "strides": strides, "pads": pads, "dilations": dilations,
            "group": int(ctx.attr("group", 1))}


def _emit_qlinear(ctx, name, operands, attrs=None):
    """A qlinear op with the identity epilogue; errors from its checks name the node."""
    for v, what in ((operands[0], "x"), (operands[1], "w")):
        if v.type.element.name not in ("i8", "ui8"):
            raise ctx.error(f"{what} must be int8 or uint8, got {v.type}")
    try:
        op = ctx.builder.create(name, [*operands, []], attrs, regions=[identity_epilogue()],
                                loc=ctx.node_name)
        verify_op_local(op)
    except VerifyError as e:
        raise ctx.error(str(e)) from None
    return [op.result]


@converter("MatMulInteger")
def matmul_integer(ctx: ConvertContext):
    a, b = ctx.input(0), ctx.input(1)
    return _emit_qlinear(ctx, "graph.qlinear_matmul", [a, b, None, ctx.input(2), ctx.input(3),
                                                        None, None])


@converter("ConvInteger")
def conv_integer(ctx: ConvertContext):
    x, w = ctx.input(0), ctx.input(1)
    return _emit_qlinear(ctx, "graph.qlinear_conv", [x, w, None, ctx.input(2), ctx.input(3),
                                                      None, None], _conv_attrs(ctx, x, w))


@converter("QLinearMatMul")
def qlinear_matmul(ctx: ConvertContext):
    a, b = ctx.input(0), ctx.input(3)
    m = _multiplier(ctx, ctx.input(1), ctx.input(4), ctx.input(6))
    return _emit_qlinear(ctx, "graph.qlinear_matmul", [a, b, None, ctx.input(2), ctx.input(5),
                                                        m, ctx.input(7)])


@converter("QLinearConv")
def qlinear_conv(ctx: ConvertContext):
    x, w = ctx.input(0), ctx.input(3)
    m = _multiplier(ctx, ctx.input(1), ctx.input(4), ctx.input(6))
    return _emit_qlinear(ctx, "graph.qlinear_conv", [x, w, ctx.input(8), ctx.input(2),
                                                      ctx.input(5), m, ctx.input(7)],
                         _conv_attrs(ctx, x, w))
