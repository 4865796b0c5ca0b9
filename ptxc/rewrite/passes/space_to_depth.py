"""``space-to-depth-stem``: a stride-2 convolution on a few input channels (ResNet's 7x7 stem on
an RGB image) becomes a space-to-depth of its input and a stride-1 convolution on 4x the
channels, with the same results (TensorRT and MLPerf submissions do this to ResNet's stem).

Why: the stem's implicit GEMM gathers one pixel's channels per copy. With 3 channels (padded to
4) an int8 copy is 4 bytes, and the stem ran no faster in int8 than in fp16, the copies
rather than the math bounding it (bench/history/2026-12-03.md). After the rewrite a pixel of the blocked input holds 4C channels: 12,
padded to 16 for int8 by to-channels-last (``int8-channel-multiple``), one 16-byte copy per
pixel.

The rewrite, for a convolution of stride 2 with kernel R x S and pads (p_top, p_left, p_bottom,
p_right) on an N x C x H x W input (H, W even). Input row ``2 oh - p_top + r``; with ``s =
p_top mod 2`` and ``r' = r + s`` it is ``2 (oh - P) + r'``, ``P = (p_top + s) / 2``: block row
``oh - P + r' // 2``, row ``by = r' mod 2`` within the block (the same for columns)::

    x' = reshape(transpose(reshape(x, [N, C, H/2, 2, W/2, 2]), [0, 1, 3, 5, 2, 4]),
                 [N, 4C, H/2, W/2])                     channel 4 c + 2 by + bx
    W'[o, 4 c + 2 by + bx, i, j] = W8[o, c, 2 i + by, 2 j + bx]
    conv(x', W', stride 1, kernel R' x S', pads (P_top, P_left, P_bottom', P_right'))

where W8 is W placed at offset ``s`` in a 2R' x 2S' filter of zeros, ``R' = ceil((R + s) / 2)``
and the bottom / right pads cover the last output's window. Every tap of the original reads the
same input element (or a pad zero) with the same weight; the added taps have weight zero: the
results are the same up to the order of the sum (exactly, in int8). The channel order (c, by,
bx) puts c outermost, so that padding the 12 channels to 16 is padding c from 3 to 4, which
the tensor stage keeps inside the input's one preparation kernel (sink-collapse-reshapes).

Taken where: a graph.conv, fused_conv or qlinear_conv in NCHW (before to-channels-last), rank 4,
group 1, stride 2, dilation 1, kernel at least 3 x 3, at most ``max-channels`` (4) input
channels, H and W even, a constant filter (an int8 one with zero points 0: the inserted zeros
must add nothing). An int8 conv whose input is a per-tensor ``graph.quantize_linear`` read by it
alone gets the space-to-depth before the quantize (elementwise, so the two commute), so that the
quantize fuses with the transposes into one kernel.
"""

from __future__ import annotations

import attrs
import numpy as np

from ...dialects.func import func_body, functions
from ...ir.attributes import DenseElements
from ...ir.builder import Builder
from ...ir.core import Operation, OpResult, Value
from ..pass_ import Pass, register_pass
from .channels_last import CONVS, zero_weights_add_nothing
from .dce import erase_dead_ops
from .fold_batchnorm import const_array

#: channels at most of a convolution's input that the rewrite takes (an RGB image, padded to 4)
MAX_CHANNELS = 4


def geometry(size: int, kernel: int, lo: int, hi: int):
    """One spatial dim of the rewrite: ``(s, kernel', lo', hi')`` (module docstring) for an
    input of ``size`` (even), or None where the blocked conv would not give the same output
    size."""
    s = lo % 2
    k2 = -(-(kernel + s) // 2)
    lo2 = (lo + s) // 2
    out = (size + lo + hi - kernel) // 2 + 1
    hi2 = max(0, out - 1 - lo2 + k2 - size // 2)
    if (size // 2 + lo2 + hi2 - k2) + 1 != out:
        return None
    return s, k2, lo2, hi2


def blocked_filter(w: np.ndarray, s: tuple[int, int], k2: tuple[int, int]) -> np.ndarray:
    """``W'`` of the module docstring: ``w`` (O x C x R x S) at offset ``s`` in a 2R' x 2S'
    filter of zeros, its taps moved to channel ``4 c + 2 by + bx``."""
    o, c, r, q = w.shape
    w8 = np.zeros((o, c, 2 * k2[0], 2 * k2[1]), w.dtype)
    w8[:, :, s[0]:s[0] + r, s[1]:s[1] + q] = w
    return w8.reshape(o, c, k2[0], 2, k2[1], 2).transpose(0, 1, 3, 5, 2, 4).reshape(
        o, 4 * c, k2[0], k2[1])


def _plan(op: Operation, max_channels: int = MAX_CHANNELS):
    """``(geometry per dim, filter array)`` where ``op`` qualifies (module docstring), else
    None."""
    if op.name not in CONVS or op.attributes.get("layout") not in (None, "NCHW"):
        return None
    x, w = op.operands[0], op.operands[1]
    shape = getattr(x.type, "shape", None)
    if shape is None or len(shape) != 4 or shape[1] > max_channels:
        return None
    if op.attr("group") != 1 or tuple(op.attr("strides")) != (2, 2) or \
            tuple(op.attr("dilations") or (1, 1)) != (1, 1):
        return None
    warr = const_array(w)
    if warr is None or warr.ndim != 4 or min(warr.shape[2:]) < 3 or \
            not zero_weights_add_nothing(op):
        return None
    pads = tuple(op.attr("pads"))
    dims = []
    for d in range(2):
        if shape[2 + d] % 2:
            return None
        g = geometry(shape[2 + d], warr.shape[2 + d], pads[d], pads[2 + d])
        if g is None:
            return None
        dims.append(g)
    return dims, warr


def space_to_depth(b: Builder, x: Value, loc) -> Value:
    """``x`` (N x C x H x W) as N x 4C x H/2 x W/2, channel ``4 c + 2 by + bx``."""
    n, c, h, w = x.type.shape
    r = b.create("graph.reshape", [x], {"shape": (n, c, h // 2, 2, w // 2, 2)}, loc=loc).result
    t = b.create("graph.transpose", [r], {"perm": (0, 1, 3, 5, 2, 4)}, loc=loc).result
    return b.create("graph.reshape", [t], {"shape": (n, 4 * c, h // 2, w // 2)}, loc=loc).result


def _per_tensor_quantize(v: Value, user: Operation) -> Operation | None:
    """The graph.quantize_linear producing ``v`` when it is per-tensor and ``user`` alone reads
    it (the space-to-depth can then go before it)."""
    q = v.op if isinstance(v, OpResult) else None
    if q is None or q.name != "graph.quantize_linear" or len(v.users) != 1:
        return None
    if any(getattr(o.type, "shape", ()) not in ((), (1,)) for o in q.operands[1:]):
        return None
    return q


def rewrite(op: Operation, dims, warr: np.ndarray) -> None:
    """Rewrite ``op`` in place (module docstring)."""
    (sh, kh, th, bh), (sw, kw, tw, bw) = dims
    x, w = op.operands[0], op.operands[1]
    wb = blocked_filter(warr, (sh, sw), (kh, kw))
    b = Builder.before_op(op)
    wv = b.create("graph.constant", [], {"value": DenseElements(
        np.ascontiguousarray(wb), w.type.with_shape(wb.shape))}, loc=op.loc,
        result_names=[f"{w.name_hint}_s2d" if w.name_hint else None]).result
    q = _per_tensor_quantize(x, op)
    if q is not None:   # quantize(space_to_depth(x0)): one elementwise kernel with the moves
        src = space_to_depth(Builder.before_op(q), q.operands[0], q.loc)
        q.set_operand(0, src)
        q.results[0].type = q.results[0].type.with_shape(src.type.shape)
        xb = q.results[0]
    else:
        xb = space_to_depth(b, x, op.loc)
    op.set_operand(0, xb)
    op.set_operand(1, wv)
    op.attributes["kernel_shape"] = (kh, kw)
    op.attributes["strides"] = (1, 1)
    op.attributes["pads"] = (th, tw, bh, bw)


def space_to_depth_stems(module: Operation, max_channels: int = MAX_CHANNELS) -> bool:
    """Rewrite every convolution that qualifies (module docstring); whether any did."""
    changed = False
    for f in functions(module):
        for op in list(func_body(f).ops):
            found = _plan(op, max_channels)
            if found is not None:
                rewrite(op, *found)
                changed = True
    if changed:
        erase_dead_ops(module)
    return changed


@register_pass
@attrs.frozen
class SpaceToDepthStem(Pass):
    """A stride-2 convolution on at most ``max-channels`` (4) input channels becomes a
    space-to-depth of its input and a stride-1 convolution on 4x the channels, same results
    (ptxc/rewrite/passes/space_to_depth.py). Part of the cuda channels-last passes, before
    to-channels-last. Example: a 3x3 stride-2 conv (pads 1) on one channel becomes a 2x2 conv on
    the 4 channels of the 2x2 blocks (pads 1 above and left), its filter W at offset 1 in a 4x4
    one, blocked.

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<1x1x4x4xf32>):
            %w = "graph.constant"() {value = dense<[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]> : tensor<1x1x3x3xf32>} : () -> tensor<1x1x3x3xf32> loc("w")
            %y = "graph.conv"(%x, %w) {dilations = [1, 1], group = 1, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]} : (tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x2x2xf32> loc("conv")
            "func.return"(%y) : (tensor<1x1x2x2xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<1x1x4x4xf32>) -> (tensor<1x1x2x2xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<1x1x4x4xf32>):
            %w_s2d = "graph.constant"() {value = dense<[0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 3.0, 5.0, 0.0, 1.0, 0.0, 7.0, 0.0, 2.0, 6.0, 8.0]> : tensor<1x4x2x2xf32>} : () -> tensor<1x4x2x2xf32> loc("conv")
            %0 = "graph.reshape"(%x) {shape = [1, 1, 2, 2, 2, 2]} : (tensor<1x1x4x4xf32>) -> tensor<1x1x2x2x2x2xf32> loc("conv")
            %1 = "graph.transpose"(%0) {perm = [0, 1, 3, 5, 2, 4]} : (tensor<1x1x2x2x2x2xf32>) -> tensor<1x1x2x2x2x2xf32> loc("conv")
            %2 = "graph.reshape"(%1) {shape = [1, 4, 2, 2]} : (tensor<1x1x2x2x2x2xf32>) -> tensor<1x4x2x2xf32> loc("conv")
            %y = "graph.conv"(%2, %w_s2d) {dilations = [1, 1], group = 1, kernel_shape = [2, 2], pads = [1, 1, 0, 0], strides = [1, 1]} : (tensor<1x4x2x2xf32>, tensor<1x4x2x2xf32>) -> tensor<1x1x2x2xf32> loc("conv")
            "func.return"(%y) : (tensor<1x1x2x2xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<1x1x4x4xf32>) -> (tensor<1x1x2x2xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "space-to-depth-stem"
    max_channels: int = MAX_CHANNELS

    def run(self, module: Operation) -> bool:
        return space_to_depth_stems(module, self.max_channels)
