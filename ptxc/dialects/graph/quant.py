"""Quantization ops: ``graph.quantize_linear``, ``graph.dequantize_linear`` and the integer
products ``graph.qlinear_conv`` / ``graph.qlinear_matmul``.

Scales and zero points are operands (ONNX inputs that may be computed at run time, as
DynamicQuantizeLinear's are); a one-element scale is per-tensor, a 1-D one per-axis along
``axis`` (normalized non-negative). The numerics are onnxruntime's, element for element:

* quantize: ``q = saturate(rint(x / scale) + zero_point)`` in float32 (float16 inputs are widened),
  ``rint`` rounding half to even, saturating to the result type (i8, ui8, i16, ui16);
* dequantize: ``y = float32(q - zero_point) * scale``;
* qlinear products (MLAS's requantization): ``acc = (X - x_zp) (*) (W - w_zp) + B`` in int32,
  then, when ``multiplier`` is given, ``f = epilogue(float32(acc) * multiplier)`` (multiplier
  per tensor or per output channel: ``x_scale * w_scale / y_scale`` for a QLinearConv), and
  when ``y_zero_point`` is given ``y = saturate(rint(f) + y_zero_point)``.

So ``graph.qlinear_conv`` is ConvInteger (no multiplier: the i32 accumulator), a float-output
int8 conv (multiplier, no y zero point) or QLinearConv (both), and the Q/DQ folding pass makes
it with an epilogue (bias, activation, residual) in the requantization::

    %y = "graph.qlinear_conv"(%x, %w, %b, %xz, %wz, %m, %yz) ({
    ^bb0(%acc: f32):
      %z = "arith.constant"() {type = f32, value = 0.0} : () -> f32
      %r = "arith.max"(%acc, %z) : (f32, f32) -> f32
      "graph.yield"(%r) : (f32) -> ()
    }) {dilations = [1, 1], group = 1, kernel_shape = [3, 3], operand_segments = [1, 1, 1, 1, 1, 1, 1, 0],
        pads = [1, 1, 1, 1], strides = [1, 1]}
       : (tensor<1x8x8x8xi8>, tensor<16x8x3x3xi8>, tensor<16xi32>, tensor<i8>, tensor<16xi8>,
          tensor<16xf32>, tensor<i8>) -> tensor<1x16x8x8xi8>

The epilogue block takes the scaled accumulator (f32) and one scalar per epilogue input; it
works in units of the output scale (the folding pass divides residuals by it).
"""

from __future__ import annotations

import numpy as np

from ...ir.builder import Builder
from ...ir.core import Block, Region
from ...ir.spec import Attr, Operand, OpSpec, fail
from ...ir.types import F32, I32, ScalarType, TensorType
from .common import broadcast_shapes, ttype
from .nn import Conv, conv_nd, conv_out_shape, spatial_attrs
from .linalg import matmul_shape
from .region import run_scalar_body
from .layout import channels_last, first_type, last_perm, to_first, to_last

#: integer element types a quantized tensor may have
QTYPES = ("i8", "ui8", "i16", "ui16")


def quant_range(el: ScalarType) -> tuple[int, int]:
    info = np.iinfo(el.np_dtype)
    return int(info.min), int(info.max)


def per_axis(op, name: str, t: TensorType, x: TensorType, axis: int) -> None:
    """``t`` (a scale or zero point) is one element (per tensor) or 1-D along ``axis`` of x."""
    if t.size == 1 and t.rank <= 1:
        return
    if t.rank != 1 or not x.rank or t.shape[0] != x.shape[axis]:
        fail(op, f"{name} {t} must have one element or be 1-D with the size of axis {axis} of "
                 f"{x}")


def along(a: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """``a`` (one element, or 1-D along ``axis``) shaped to broadcast against rank ``rank``."""
    a = np.asarray(a)
    if a.size == 1:
        return a.reshape(())
    shape = [1] * rank
    shape[axis] = a.size
    return a.reshape(shape)


def quantize(x: np.ndarray, scale, zero_point, el: ScalarType) -> np.ndarray:
    """onnxruntime's QuantizeLinear: rint(x / scale) + zp in float32, saturated."""
    lo, hi = quant_range(el)
    with np.errstate(all="ignore"):
        q = np.rint(np.asarray(x, np.float32) / np.asarray(scale, np.float32))
    q = q + np.asarray(zero_point, np.float32)
    return np.clip(q, lo, hi).astype(el.np_dtype)


def dequantize(q: np.ndarray, scale, zero_point) -> np.ndarray:
    d = (np.asarray(q, np.int32) - np.asarray(zero_point, np.int32)).astype(np.float32)
    return d * np.asarray(scale, np.float32)


class _Affine(OpSpec):
    operands = ("x", "scale", Operand("zero_point", optional=True))
    results = ("y",)
    attributes = {"axis": Attr("int", default=1, doc="per-axis scales only")}
    traits = {"pure"}

    def _check(self, op):
        x, s = ttype(op, 0), ttype(op, 1)
        axis = op.attr("axis")
        if s.size != 1 and not 0 <= axis < x.rank:
            fail(op, f"axis {axis} out of range for {x}")
        if not s.element.is_float:
            fail(op, f"scale must be float, is {s}")
        per_axis(op, "scale", s, x, axis)
        if len(op.operands) == 3:
            z = ttype(op, 2)
            per_axis(op, "zero_point", z, x, axis)
            if z.size != 1 and s.size != z.size:
                fail(op, f"scale {s} and zero_point {z} differ in size")
        return x, s

    def _args(self, op, args):
        x = args[0]
        axis = op.attr("axis")
        s = along(args[1], x.ndim, axis)
        z = along(args[2], x.ndim, axis) if len(args) == 3 else np.zeros((), np.int32)
        return x, s, z


class QuantizeLinear(_Affine):
    """``y = saturate(rint(x / scale) + zero_point)``; ``y``'s element type is the zero point's
    (the importer resolves ONNX's output_dtype and uint8 default into it)."""

    name = "graph.quantize_linear"
    attributes = {"axis": Attr("int", default=1), "to": Attr("type", required=True)}

    def infer_types(self, op):
        return [ttype(op, 0).with_element(op.attr("to"))]

    def verify(self, op):
        x, _ = self._check(op)
        to = op.attr("to")
        if not x.element.is_float:
            fail(op, f"x must be float, is {x}")
        if to.name not in QTYPES:
            fail(op, f"to must be one of {', '.join(QTYPES)}, is {to}")
        if len(op.operands) == 3 and ttype(op, 2).element != to:
            fail(op, f"zero_point {ttype(op, 2)} must have the result type {to}")

    def reference(self, op, args, interp):
        x, s, z = self._args(op, args)
        return [quantize(x, s, z, op.attr("to"))]


class DequantizeLinear(_Affine):
    """``y = float32(x - zero_point) * scale``, in the scale's element type."""

    name = "graph.dequantize_linear"

    def infer_types(self, op):
        return [ttype(op, 0).with_element(ttype(op, 1).element)]

    def verify(self, op):
        x, _ = self._check(op)
        if x.element.name not in QTYPES + ("i32",):
            fail(op, f"x must be one of {', '.join(QTYPES)}, i32; is {x}")
        if len(op.operands) == 3 and ttype(op, 2).element != x.element:
            fail(op, f"zero_point {ttype(op, 2)} must have x's type {x.element}")

    def reference(self, op, args, interp):
        x, s, z = self._args(op, args)
        el = op.results[0].type.element
        return [dequantize(x, s, z).astype(el.np_dtype)]


# ---- integer products ----------------------------------------------------------------------------

def identity_epilogue(extra_types=()) -> Region:
    """An epilogue that yields the scaled accumulator (``extra_types``: epilogue inputs)."""
    block = Block([F32] + list(extra_types))
    Builder.at_end(block).create("graph.yield", [block.args[0]], result_types=[])
    return Region([block])


def is_identity_epilogue(block: Block) -> bool:
    last = block.last_op
    return block.first_op is last and last.operands[0] is block.args[0]


class QLinear(OpSpec):
    """Base of ``graph.qlinear_conv`` and ``graph.qlinear_matmul`` (module docstring)."""

    operands = ("X", "W", Operand("B", optional=True), Operand("x_zero_point", optional=True),
                Operand("w_zero_point", optional=True), Operand("multiplier", optional=True),
                Operand("y_zero_point", optional=True),
                Operand("epilogue_inputs", variadic=True))
    results = ("Y",)
    regions = 1
    traits = {"pure"}
    channel_of_w = 0      # the axis of W that is the output channel
    channel_of_y = 1      # the axis of Y that is the output channel

    def out_shape(self, op, x: TensorType, w: TensorType) -> tuple:
        raise NotImplementedError

    def y_channel(self, op, rank: int) -> int:
        """The axis of Y that is the output channel (a per-channel multiplier's, B's)."""
        return self.channel_of_y % rank

    def infer_types(self, op):
        g = self.groups(op)
        x, w = g["X"].type, g["W"].type
        shape = self.out_shape(op, x, w)
        if g["multiplier"] is None:
            el = I32
        elif g["y_zero_point"] is None:
            el = F32
        else:
            el = g["y_zero_point"].type.element
        return [TensorType(shape, el)]

    def verify(self, op):
        g = self.groups(op)
        x, w = g["X"].type, g["W"].type
        y = op.results[0].type
        for name in ("X", "W"):
            if g[name].type.element.name not in ("i8", "ui8"):
                fail(op, f"{name} must be i8 or ui8, is {g[name].type}")
        m = w.shape[self.channel_of_w % w.rank]
        for name, el in (("x_zero_point", x.element), ("w_zero_point", w.element)):
            v = g[name]
            if v is not None and v.type.element != el:
                fail(op, f"{name} {v.type} must have the element type of its tensor ({el})")
        if g["x_zero_point"] is not None and g["x_zero_point"].type.size != 1 and not (
                self.name == "graph.qlinear_matmul" and g["x_zero_point"].type.shape ==
                (x.shape[-2],)):
            fail(op, f"x_zero_point {g['x_zero_point'].type} must be one element (or one per "
                     "row of a matmul's A)")
        for name in ("w_zero_point", "multiplier"):
            v = g[name]
            if v is not None and v.type.size != 1 and v.type.shape != (m,):
                fail(op, f"{name} {v.type} must be one element or one per output channel ({m})")
        if g["B"] is not None and (g["B"].type.element != I32 or g["B"].type.shape != (m,)):
            fail(op, f"B {g['B'].type} must be i32 with one element per output channel ({m})")
        if g["multiplier"] is not None and g["multiplier"].type.element != F32:
            fail(op, f"multiplier {g['multiplier'].type} must be f32")
        yz = g["y_zero_point"]
        if yz is not None:
            if g["multiplier"] is None:
                fail(op, "y_zero_point needs a multiplier")
            if yz.type.size != 1 or yz.type.element.name not in ("i8", "ui8"):
                fail(op, f"y_zero_point {yz.type} must be one i8 or ui8")
        extras = g["epilogue_inputs"]
        for v in extras:
            if not isinstance(v.type, TensorType) or \
                    broadcast_shapes(op, y.shape, v.type.shape) != y.shape:
                fail(op, f"epilogue input {v.type} does not broadcast to the result {y}")
        blocks = op.regions[0].blocks
        if len(blocks) != 1:
            fail(op, "epilogue must be one block")
        block = blocks[0]
        want = [F32] + [v.type.element for v in extras]
        if [a.type for a in block.args] != want:
            fail(op, f"epilogue arguments must be ({', '.join(map(str, want))})")
        last = block.last_op
        if last is None or last.name != "graph.yield" or len(last.operands) != 1 or \
                last.operands[0].type != F32:
            fail(op, "epilogue must end with graph.yield of one f32")
        if g["multiplier"] is None and (extras or not is_identity_epilogue(block)):
            fail(op, "an i32 result (no multiplier) takes no epilogue")

    def product(self, op, x: np.ndarray, w: np.ndarray, g: dict) -> np.ndarray:
        raise NotImplementedError

    def reference(self, op, args, interp):
        g = self.groups(op, args)
        x = np.asarray(g["X"], np.int32)
        w = np.asarray(g["W"], np.int32)
        if g["x_zero_point"] is not None:
            xz = np.asarray(g["x_zero_point"], np.int32)
            x = x - (xz.reshape(()) if xz.size == 1 else xz.reshape(-1, 1))
        if g["w_zero_point"] is not None:
            w = w - along(np.asarray(g["w_zero_point"], np.int32), w.ndim,
                          self.channel_of_w % w.ndim)
        # exact: |acc| < 2**31 is far inside float64's 53-bit integers (and BLAS is fast)
        acc = self.product(op, x.astype(np.float64), w.astype(np.float64), g)
        y = op.results[0].type
        if g["B"] is not None:
            acc = acc + along(np.asarray(g["B"], np.float64), y.rank, self.y_channel(op, y.rank))
        acc = acc.astype(np.int64).astype(np.int32)  # wraps as int32 arithmetic would
        if g["multiplier"] is None:
            return [acc]
        m = along(np.asarray(g["multiplier"], np.float32), y.rank, self.y_channel(op, y.rank))
        f = acc.astype(np.float32) * m
        extras = [np.broadcast_to(a, y.shape) for a in g["epilogue_inputs"]]
        f = np.broadcast_to(run_scalar_body(op.regions[0].blocks[0], [f] + extras, interp),
                            y.shape).astype(np.float32)
        if g["y_zero_point"] is None:
            return [f]
        lo, hi = quant_range(y.element)
        with np.errstate(all="ignore"):
            q = np.rint(f) + np.float32(np.asarray(g["y_zero_point"]).reshape(()))
        return [np.clip(q, lo, hi).astype(y.element.np_dtype)]


class QLinearConv(QLinear):
    """Integer convolution (ONNX ConvInteger / QLinearConv, and folded Q/DQ convs); conv's
    attributes (explicit pads, strides, dilations, kernel_shape, group, and ``layout``:
    ``NHWC`` takes X ``(N, *spatial, C)`` and W ``KRSC`` and gives Y channels last, as
    graph.conv's channels-last form does, graph/layout.py)."""

    name = "graph.qlinear_conv"
    attributes = dict(Conv.attributes)

    def y_channel(self, op, rank: int) -> int:
        return rank - 1 if channels_last(op) else 1

    def out_shape(self, op, x, w):
        if channels_last(op):
            if x.rank < 3 or w.rank != x.rank:
                fail(op, f"X must have rank >= 3 and W the same rank, are {x} and {w}")
            y = self._out_first(op, first_type(x), first_type(w))
            return tuple(y[i] for i in last_perm(len(y)))
        return self._out_first(op, x, w)

    def _out_first(self, op, x, w):
        if x.rank < 3 or w.rank != x.rank:
            fail(op, f"X must have rank >= 3 and W the same rank, are {x} and {w}")
        a = spatial_attrs(op, x.rank - 2)
        g = op.attr("group")
        if g < 1 or x.shape[1] != w.shape[1] * g or w.shape[0] % g:
            fail(op, f"group {g} does not fit X {x} and W {w}")
        if tuple(w.shape[2:]) != a["kernel_shape"]:
            fail(op, f"kernel_shape {list(a['kernel_shape'])} does not match W {w}")
        out = conv_out_shape(x.shape[2:], a)
        if any(o < 1 for o in out):
            fail(op, f"output spatial shape {out} is empty")
        return (x.shape[0], w.shape[0], *out)

    def product(self, op, x, w, g):
        a = spatial_attrs(op, x.ndim - 2)
        if channels_last(op):
            return to_last(conv_nd(to_first(x), to_first(w), None, a["strides"], a["pads"],
                                   a["dilations"], op.attr("group")))
        return conv_nd(x, w, None, a["strides"], a["pads"], a["dilations"], op.attr("group"))


class QLinearMatMul(QLinear):
    """Integer matmul (ONNX MatMulInteger / QLinearMatMul, folded Q/DQ matmuls and gemms):
    numpy matmul semantics; per-channel means per column of B (its last axis)."""

    name = "graph.qlinear_matmul"
    channel_of_w = -1
    channel_of_y = -1

    def out_shape(self, op, x, w):
        if x.rank < 2 or w.rank < 2:
            fail(op, f"X and W must have rank >= 2, are {x} and {w}")
        return matmul_shape(op, x.shape, w.shape)

    def product(self, op, x, w, g):
        return np.matmul(x, w)


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (QuantizeLinear, DequantizeLinear, QLinearConv, QLinearMatMul)
