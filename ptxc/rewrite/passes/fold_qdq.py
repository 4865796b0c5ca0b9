"""Q/DQ folding (TensorRT's Q/DQ propagation for explicitly quantized models): a conv, matmul or
gemm whose inputs are dequantized int8 tensors, and whose result is quantized again, becomes one
``graph.qlinear_conv`` / ``graph.qlinear_matmul``: int8 operands, int32 accumulation, the bias
added in int32, and requantization in the epilogue, together with whatever epilogue
(activation, residual add) fuse-epilogues had already fused into the layer.

A QDQ model from onnxruntime.quantization.quantize_static reads::

    xq -> DQ(xs, xz) -> Conv(W = DQ(wq, ws[c], 0), B = DQ(bq:int32, xs*ws[c], 0)) -> Relu -> Q(ys, yz)

After fuse-epilogues (conv + relu -> fused_conv) this pass makes it::

    %y = "graph.qlinear_conv"(%xq, %wq, %bq, %xz, %wz, %m, %yz) ({
    ^bb0(%acc: f32):
      ... relu ...
    }) : (...) -> tensor<...xi8>          with m[c] = (xs * ws[c]) / ys in float32

The epilogue block of the int8 op works in units of the output scale ``ys``: the float epilogue
``e`` stays as it is when it only compares with zero (relu, max/min with 0), which commutes with
a positive scale; one that adds dequantized inputs (a residual) has the division by ``ys``
distributed into it (:func:`_in_output_units`: the residual's DQ scale becomes ``rs / ys``);
any other becomes ``e(v * ys, ...) / ys``. A DQ -> conv/matmul/gemm whose result is
not quantized (a network's last layer) becomes the same op with a float result (multiplier
``xs * ws``, no output zero point).

A layer whose result has users besides a Q folds with a float result (the Q stays).
Declines, each with its reason for ``--explain``: an input that is not a DQ, scales or zero points that are not constants, a per-axis activation
scale, per-axis weight scales along another axis than the output channels, a bias that is not a
constant (or a DQ of an int32 constant with scale ``xs * ws`` and zero point 0), a gemm with
alpha or beta not 1 or transA, a transB gemm with non-constant weights, a non-i8/ui8 type.

A quantized max pool moves its Q before it (:class:`QuantizeBeforeMaxPool`): the pool runs
on int8 and the layer before it folds with an int8 result.

Leftover DQs of constants (weights of layers that did not fold) are folded into float
constants at the end, as fold-constants would have done (it leaves DQs to this pass).
"""

from __future__ import annotations

import attrs
import numpy as np

from ...dialects.arith_magic import round_to_magic_exact
from ...ir.attributes import DenseElements
from ...ir.builder import Builder
from ...ir.core import Block, Operation, Region
from ...ir.spec import lookup, make_op
from ...ir.types import F32, I32
from ..driver import apply_patterns_greedily
from ..explain import op_location
from ..pass_ import Pass, register_pass
from ..pattern import RewritePattern, producer
from ..provenance import FUSED, absorbed
from .fold_constants import constant_value

_LAYERS = {"graph.conv": ("graph.conv", False), "graph.fused_conv": ("graph.conv", True),
           "graph.matmul": ("graph.matmul", False), "graph.fused_matmul": ("graph.matmul", True),
           "graph.gemm": ("graph.gemm", False), "graph.fused_gemm": ("graph.gemm", True)}


class Decline(Exception):
    """The pattern does not apply; the message says why."""


def _label(op) -> str:
    return op_location(op) or op.name


def _const(v, what: str) -> np.ndarray:
    a = constant_value(v) if v is not None else None
    if a is None:
        raise Decline(f"{what} is not a constant")
    return a


def _dq(v, what: str):
    """(quantized value, scale array, zero point array or None) of ``v = DQ(q, s, z)``."""
    p = producer(v)
    if p is None or p.name != "graph.dequantize_linear":
        raise Decline(f"{what} is not dequantized (no DequantizeLinear before it)")
    s = _const(p.operands[1], f"{what}'s scale")
    z = _const(p.operands[2], f"{what}'s zero point") if len(p.operands) == 3 else None
    q = p.operands[0]
    if q.type.element.name not in ("i8", "ui8"):
        raise Decline(f"{what} is {q.type.element}, not int8 or uint8")
    return q, s, z, p


def _zero(z, el):
    return np.zeros((), el.np_dtype) if z is None else z


class FoldQDQ(RewritePattern):
    """DQ -> conv/matmul/gemm (fused or not) [-> Q] -> one int8 op; see the module docstring.
    ``fma_multipliers``: FoldQDQPass's option of that name."""

    benefit = 2

    def __init__(self, fma_multipliers: bool = False):
        self.fma_multipliers = fma_multipliers

    def match_and_rewrite(self, op, rewriter):
        if op.name not in _LAYERS:
            return False
        users = op.results[0].users
        q = users[0] if len(users) == 1 and users[0].name == "graph.quantize_linear" else None
        base, fused = _LAYERS[op.name]
        spec = lookup(op.name)
        try:
            first = producer(op.operands[0])
            if first is None or first.name != "graph.dequantize_linear":
                return False  # a float layer: not this pattern's business
            new = self._build(op, base, fused, spec, q)
        except Decline as e:
            qname = f" -> {_label(q)}" if q is not None else ""
            return rewriter.fail(op, f"Q/DQ around {_label(op)}{qname} not folded into an int8 "
                                     f"op: {e}")
        rewriter.set_insertion_point_before(q if q is not None else op)
        rewriter.insert(new)
        if q is not None:
            rewriter.replace_op(q, new.results)
            rewriter.erase_op(op)
        else:
            rewriter.replace_op(op, new.results)
        return True

    def _build(self, op, base, fused, spec, q) -> Operation:
        if fused:
            base_vals, extras = spec.split(op)
            epilogue = spec.epilogue(op)
        else:
            base_vals, extras, epilogue = list(op.operands), [], None
        bspec = lookup(base)
        g = bspec.groups(_Vals(base, base_vals, op.attributes))
        a_name, w_name = ("X", "W") if base == "graph.conv" else ("A", "B")
        bias = g.get("B") if base == "graph.conv" else g.get("C")
        attrs = {}
        if base == "graph.conv":
            attrs = {k: op.attr(k) for k in ("kernel_shape", "strides", "pads", "dilations",
                                              "group")}
        xq, xs, xz, xdq = _dq(g[a_name], "the input")
        if xs.size != 1:
            raise Decline("the input has per-axis scales (per-tensor activations are needed)")
        wq, ws, wz, wdq = _dq(g[w_name], "the weight")
        w_axis = 0 if base == "graph.conv" else wq.type.rank - 1
        if base == "graph.gemm":
            if op.attr("alpha") != 1.0 or op.attr("beta") != 1.0 or op.attr("transA"):
                raise Decline("gemm with alpha or beta not 1, or transA")
            if op.attr("transB"):
                w_axis = 0
        if ws.size != 1 and wdq.attr("axis") != w_axis:
            raise Decline(f"the weight's scales are per axis {wdq.attr('axis')}, not along the "
                          f"output channels (axis {w_axis})")
        if base == "graph.gemm" and op.attr("transB"):
            wq = self._transposed(wq)
        if base == "graph.matmul" and wq.type.rank != 2 and ws.size != 1:
            raise Decline("per-channel weights of a batched matmul")
        channels = wq.type.shape[w_axis if base == "graph.conv" else -1]
        acc_scale = (np.float32(xs.reshape(())) * ws.astype(np.float32).reshape(-1))
        float_bias = None
        if q is None and bias is not None and not _is_int32_dq(bias):
            # a float result keeps a float bias exact: added in the epilogue, not rounded
            float_bias = _const(bias, "the bias").astype(np.float32).reshape(-1)
            bias = None
        bias_q = self._bias(bias, acc_scale, channels)
        if q is not None:
            ys = _const(q.operands[1], "the output's scale")
            yz = _const(q.operands[2], "the output's zero point") if len(q.operands) == 3 \
                else np.zeros((), q.attr("to").np_dtype)
            if ys.size != 1:
                raise Decline("the output has per-axis scales")
            if q.attr("to").name not in ("i8", "ui8"):
                raise Decline(f"the output is quantized to {q.attr('to')}, not int8 or uint8")
            mult = (acc_scale / np.float32(ys.reshape(()))).astype(np.float32)
        else:
            ys, mult = None, acc_scale.astype(np.float32)
        if self.fma_multipliers:
            mult = round_to_magic_exact(mult)   # the one-fma grid: at most 2 ulps
        b = Builder.before_op(op)

        def const(arr, el=None):
            return b.create("graph.constant", [], {"value": DenseElements(
                np.asarray(arr) if el is None else np.asarray(arr, el.np_dtype))}).result

        xz_v = const(_zero(xz, xq.type.element).reshape(()))
        wz_arr = _zero(wz, wq.type.element)
        wz_v = const(wz_arr.reshape(()) if wz_arr.size == 1 else wz_arr.reshape(-1))
        m_v = const(mult.reshape(()) if mult.size == 1 else mult.reshape(-1))
        b_v = const(bias_q) if bias_q is not None else None
        yz_v = const(yz.reshape(())) if q is not None else None
        extras = list(extras)
        if float_bias is not None:
            rank = op.results[0].type.rank
            shape = (channels,) + (1,) * (rank - 2) if base == "graph.conv" else (channels,)
            extras = [const(np.broadcast_to(float_bias, (channels,)).reshape(shape))] + extras
        ys_f = None if ys is None else float(ys.reshape(()))
        units = None
        if ys_f is not None and epilogue is not None and not _scale_free(epilogue):
            units = _in_output_units(epilogue, ys_f, extras, b, self.fma_multipliers)
        if units is not None:
            region, extras = units
        else:
            region = self._epilogue(epilogue, [v.type.element for v in extras], ys_f,
                                    float_bias is not None)
        name = "graph.qlinear_conv" if base == "graph.conv" else "graph.qlinear_matmul"
        out = q.results[0] if q is not None else op.results[0]
        # provenance: the float op's own fusions (a residual Add, a Relu) and the Q/DQ it takes
        fused = absorbed(op, *[o for o in (xdq, wdq, q) if o is not None])
        if fused:
            attrs[FUSED] = fused
        return make_op(name, [xq, wq, b_v, xz_v, wz_v, m_v, yz_v, list(extras)], attrs,
                       regions=[region], loc=op.loc, result_names=[out.name_hint])

    @staticmethod
    def _transposed(wq):
        arr = constant_value(wq)
        if arr is None:
            raise Decline("gemm transB with non-constant weights")
        b = Builder.before_op(wq.op)
        return b.create("graph.constant", [], {"value": DenseElements(
            np.ascontiguousarray(arr.T))}).result

    @staticmethod
    def _bias(bias, acc_scale, channels):
        """The bias in int32 units of ``xs * ws``: an int32 DQ as is, a float constant rounded."""
        if bias is None:
            return None
        p = producer(bias)
        if p is not None and p.name == "graph.dequantize_linear" and \
                p.operands[0].type.element == I32:
            bq = _const(p.operands[0], "the bias")
            bs = _const(p.operands[1], "the bias's scale")
            bz = _const(p.operands[2], "the bias's zero point") if len(p.operands) == 3 else None
            if bz is not None and np.any(bz != 0):
                raise Decline("the bias has a non-zero zero point")
            if not np.allclose(np.broadcast_to(bs.reshape(-1), (channels,)).astype(np.float32),
                               np.broadcast_to(acc_scale, (channels,)), rtol=1e-6, atol=0):
                raise Decline("the bias's scale is not input scale x weight scale")
            arr = bq
        else:
            arr = constant_value(bias)
            if arr is None:
                raise Decline("the bias is not a constant")
            scale = np.broadcast_to(acc_scale, (channels,)).astype(np.float64)
            arr = np.rint(arr.astype(np.float64).reshape(-1) / scale)
            if np.any(np.abs(arr) > 2**31 - 1):
                raise Decline("the bias does not fit int32 at scale x_scale x w_scale")
        arr = np.broadcast_to(np.asarray(arr).reshape(-1), (channels,))
        return arr.astype(np.int32)

    @staticmethod
    def _epilogue(old: Block | None, extra_types, ys: float | None, bias_first: bool) -> Region:
        """The int8 op's epilogue: ``old(v * ys, ...) / ys`` (``old`` as is where it commutes
        with a positive scale, or ys is None: a float result in real units); with
        ``bias_first`` the first epilogue input (a float bias) is added before."""
        from ...dialects.graph.scalar_forms import inline_block
        block = Block([F32] + list(extra_types))
        bb = Builder.at_end(block)
        args = list(block.args)
        if bias_first:
            args = [bb.create("arith.add", [args[0], args[1]]).result] + args[2:]
        if old is None:
            bb.create("graph.yield", [args[0]], result_types=[])
            return Region([block])
        if old.args[0].type != F32:
            raise Decline(f"the layer's epilogue works in {old.args[0].type}, not f32")
        scale = ys is not None and not _scale_free(old)
        v = args[0]
        if scale:
            c = bb.create("arith.constant", [], {"value": ys, "type": F32}).result
            v = bb.create("arith.mul", [v, c]).result
        (y,) = inline_block(old, bb, [v] + args[1:])
        if scale:
            c = bb.create("arith.constant", [], {"value": ys, "type": F32}).result
            y = bb.create("arith.div", [y, c]).result
        bb.create("graph.yield", [y], result_types=[])
        return Region([block])


#: epilogue ops that commute with dividing by a positive scale once their operands are divided
#: (constants included); ``arith.mul`` / ``arith.div`` by a constant keep the constant
_LINEAR = frozenset({"arith.add", "arith.sub", "arith.max", "arith.min", "arith.neg"})


def _in_output_units(old: Block, ys: float, extras: list, b: Builder,
                     fma_multipliers: bool = False):
    """``old(v * ys, e...) / ys`` as ``old'(v, e' ...)``: the division by the output scale
    distributed down to the leaves, as TensorRT's requantization multipliers are, or None where
    ``old`` does more than add, subtract, negate, take max/min, and multiply or divide by
    constants, or an epilogue input is not a DequantizeLinear with a constant scale.

    The accumulator argument ``v * ys`` becomes ``v`` (already ``acc * xs * ws / ys``); an input
    ``DQ(rq, rs, rz)`` becomes ``DQ(rq, rs / ys, rz)`` (a new DQ before the layer); a constant
    added or compared is divided by ``ys`` at compile time, a constant factor kept. Example (a
    residual block's last conv, ys = 0.02; the residual's scale 0.01)::

        before: ^bb0(%v, %r):  %a = arith.mul %v, 0.02;  %s = arith.add %a, %r
                               %y = arith.max %s, 0.0;   %q = arith.div %y, 0.02
                with %r = DQ(%rq, 0.01)
        after:  ^bb0(%v, %r'): %s = arith.add %v, %r';  %q = arith.max %s, 0.0
                with %r' = DQ(%rq, 0.5)

    Real-number equal; in float32 each form rounds differently, so an output at a rounding tie
    may come out one step apart: within the quantization step that the int8 contract allows
    (the interpreter, cpu and cuda all run this same form, so they still agree bit for bit).
    What it buys: an int8 residual epilogue loses a multiply, the exact division (a multiply,
    two fmas and a clamp) and nothing else changes (ResNet-50's conv3 + Add + Relu kernels:
    about 9 of 25 instructions per output)."""
    if not ys > 0 or not np.isfinite(ys):
        return None
    scaled_extras = []
    for e in extras:
        p = producer(e)
        if p is None or p.name != "graph.dequantize_linear" or e.type.element != F32:
            return None
        rs = constant_value(p.operands[1])
        if rs is None:
            return None
        ratio = (rs.astype(np.float32) / np.float32(ys)).astype(np.float32)
        if fma_multipliers:
            ratio = round_to_magic_exact(ratio)
        if not np.all(np.isfinite(ratio)):
            return None
        sv = b.create("graph.constant", [], {"value": DenseElements(ratio)}).result
        dq = b.create("graph.dequantize_linear", [p.operands[0], sv] + list(p.operands[2:]),
                      dict(p.attributes), result_types=[e.type], loc=p.loc)
        scaled_extras.append(dq.results[0])
    block = Block([F32] + [F32] * len(extras))
    bb = Builder.at_end(block)
    value = dict(zip(old.args, block.args))   # old value -> its new value over ys
    consts = {}                                # old constant result -> its number

    def number(x: float):
        return bb.create("arith.constant", [], {"value": x, "type": F32}).result

    def operand(v, divided: bool):
        if v in value:
            return value[v]
        if v in consts:
            return number(float(np.float32(consts[v]) / np.float32(ys)) if divided
                          else consts[v])
        return None

    for op in old.ops:
        if op.name == "graph.yield":
            y = operand(op.operands[0], True)
            if y is None:
                return None
            bb.create("graph.yield", [y], result_types=[])
            return Region([block]), scaled_extras
        if op.name == "arith.constant":
            if op.results[0].type != F32:
                return None
            consts[op.results[0]] = float(op.attributes["value"])
            continue
        if op.name in _LINEAR:
            args = [operand(v, True) for v in op.operands]
        elif op.name in ("arith.mul", "arith.div") and op.operands[1] in consts:
            args = [operand(op.operands[0], True), operand(op.operands[1], False)]
        elif op.name == "arith.mul" and op.operands[0] in consts:
            args = [operand(op.operands[0], False), operand(op.operands[1], True)]
        else:
            return None
        if any(a is None for a in args) or op.results[0].type != F32:
            return None
        value[op.results[0]] = bb.create(op.name, args, dict(op.attributes),
                                         result_types=[F32]).result
    return None


def _is_int32_dq(v) -> bool:
    p = producer(v)
    return p is not None and p.name == "graph.dequantize_linear" and \
        p.operands[0].type.element == I32


def _scale_free(block: Block) -> bool:
    """Whether the epilogue commutes with a positive scale: only max/min against 0 (relu)."""
    for op in block.ops:
        if op.name == "graph.yield":
            continue
        if op.name == "arith.constant":
            if op.attributes["value"] != 0:
                return False
            continue
        if op.name not in ("arith.max", "arith.min"):
            return False
        consts = [producer(v) for v in op.operands]
        if not any(p is not None and p.name == "arith.constant" for p in consts):
            return False
    return True


class _Vals:
    def __init__(self, name, operands, attributes):
        self.name, self.operands, self.attributes = name, operands, attributes


class QuantizeBeforeMaxPool(RewritePattern):
    """``Q(max_pool(x))`` -> ``max_pool(Q(x))``: the max pool runs on int8, and the layer that
    makes ``x`` ends in the Q, so FoldQDQ gives it an int8 result. Exact: quantization with a
    positive scale is monotone (rounding and saturation never reorder two values), so the max
    of the quantized window is the quantized max; the int8 pool pads with the type's lowest
    value, which is what ``Q`` gives the float pool's ``-inf`` padding. Implicit quantization
    (quantize_int8) quantizes conv inputs, so ResNet's stem conv -> max pool -> conv left the
    stem writing f32 and the pool reading it, 4 bytes an element::

        before: %c = fused_conv(...) : f32;  %p = max_pool(%c) : f32;  %q = Q(%p, s, z) : i8
        after:  %c = fused_conv(...) : f32;  %q0 = Q(%c, s, z) : i8;   %q = max_pool(%q0) : i8
                (then FoldQDQ: %q0 = qlinear_conv(...) : i8)

    Only when the pool's value has no other user, its indices output none, and the scale is a
    constant whose elements are all positive.
    """

    root = "graph.quantize_linear"

    def match_and_rewrite(self, op, rewriter):
        pool = producer(op.operands[0])
        if pool is None or pool.name != "graph.max_pool" or len(pool.results[0].users) != 1:
            return False
        if any(r.users for r in pool.results[1:]):
            return False
        scale = constant_value(op.operands[1])
        if scale is None or not np.all(np.asarray(scale) > 0):
            return False
        x = pool.operands[0]
        rewriter.set_insertion_point_before(op)   # where the scale and zero point dominate
        q = rewriter.create(op.name, [x] + list(op.operands[1:]), dict(op.attributes),
                            result_types=[x.type.with_element(op.results[0].type.element)],
                            loc=op.loc)
        new = rewriter.create(pool.name, [q.results[0]], dict(pool.attributes),
                              result_types=[op.results[0].type], loc=pool.loc)
        rewriter.replace_op(op, [new.results[0]])
        rewriter.erase_op(pool)
        return True


class FoldConstantDQ(RewritePattern):
    """DQ of a constant (a weight whose layer did not fold) -> a float constant."""

    root = "graph.dequantize_linear"

    def match_and_rewrite(self, op, rewriter):
        arrays = [constant_value(v) for v in op.operands]
        if any(a is None for a in arrays):
            return False
        outs = lookup(op.name).reference(op, arrays, None)
        c = rewriter.create("graph.constant", [], {"value": DenseElements(
            np.asarray(outs[0]), op.results[0].type)}, result_names=[op.results[0].name_hint])
        rewriter.replace_op(op, c.results)
        return True


@register_pass
@attrs.frozen
class FoldQDQPass(Pass):
    """Fold DequantizeLinear -> conv/matmul/gemm -> QuantizeLinear into one int8 op
    (``graph.qlinear_conv``/``qlinear_matmul``: int32 accumulation, requantization and the
    layer's fused epilogue together); say under ``--explain`` why a pair did not fold; then fold
    the DQs of constants that are left. See :mod:`ptxc.rewrite.passes.fold_qdq`.

    Before:
        %xd = "graph.dequantize_linear"(%xq, %xs, %xz) : (tensor<1x4xi8>, tensor<f32>, tensor<i8>) -> tensor<1x4xf32>
        %wd = "graph.dequantize_linear"(%wq, %ws, %wz) : (tensor<4x2xi8>, tensor<f32>, tensor<i8>) -> tensor<4x2xf32>
        %m = "graph.matmul"(%xd, %wd) : (tensor<1x4xf32>, tensor<4x2xf32>) -> tensor<1x2xf32>
        %y = "graph.quantize_linear"(%m, %ys, %yz) {to = i8} : (tensor<1x2xf32>, tensor<f32>, tensor<i8>) -> tensor<1x2xi8>
    After:
        %y = "graph.qlinear_matmul"(%xq, %wq, %xz, %wz, %mult, %yz) ({
        ^bb0(%acc: f32):
          "graph.yield"(%acc) : (f32) -> ()
        }) {operand_segments = [1, 1, 0, 1, 1, 1, 1, 0]} : (tensor<1x4xi8>, tensor<4x2xi8>, tensor<i8>, tensor<i8>, tensor<f32>, tensor<i8>) -> tensor<1x2xi8>
    with %mult = xs * ws / ys (float32), a constant.
    """

    name = "fold-qdq"
    #: round each requantization multiplier (``xs * ws / ys``, a residual's ``rs / ys``) to the
    #: nearest f32 whose significand is a multiple of 4 (at most 2 ulps): llvm_scalar then
    #: converts and scales the int32 sum with one fma instead of an add and a multiply
    #: (``_scaled_small_int``), the same number. For implicit int8 (``precision="int8"``: the
    #: scales are ptxc's own calibration's, ptxc.pipeline.build_pipeline sets it); off for a
    #: model's own Q/DQ, whose multipliers are onnxruntime's to the bit.
    fma_multipliers: bool = False

    def run(self, module: Operation) -> bool:
        changed = apply_patterns_greedily(module, [QuantizeBeforeMaxPool()])
        changed = apply_patterns_greedily(module, [FoldQDQ(self.fma_multipliers)]) or changed
        return apply_patterns_greedily(module, [FoldConstantDQ()]) or changed
