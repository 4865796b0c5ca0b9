"""``to-channels-last``: convolutional graphs run channels-last (NHWC, filters KRSC) inside.

Why: an implicit-GEMM convolution reduces over ``(r, s, c)``; with the input channel innermost in
both the activation (``NHWC``) and the filter (``KRSC``) every operand row of the reduction is
contiguous, which 16-byte vector loads, ``cp.async`` and ``ldmatrix`` need (CUTLASS and cuDNN's
tensor-core convolutions are NHWC for that reason).

How. Every value gets a *physical layout*: a permutation ``p`` of its logical (ONNX) dims, the
tensor in memory being ``transpose(logical, p)``. Function arguments and results keep ONNX's
layout (the identity). The pass walks each function once, in program order:

* a convolution (``graph.conv``, ``graph.fused_conv``, the int8 ``graph.qlinear_conv``), a
  max/average pool or an LRN becomes its channels-last form (``layout = "NHWC"``,
  graph/layout.py): its input is asked for in the channels-last permutation
  ``(0, 2, .., r-1, 1)``, a constant filter is transposed to KRSC at compile time, a fused
  epilogue input is asked for in the result's layout (per-channel biases, zero points and
  multipliers are 1-D and stay as they are);
* per-tensor ``quantize_linear``/``dequantize_linear`` (one-element scale and zero point) are
  elementwise and follow their input;
* global average/max pools become ``reduce_mean``/``reduce_max`` over the spatial dims where they
  lie (the channels-last form needs no new op);
* layout-agnostic ops follow their input: elementwise ops (every ``elementwise`` op, fused
  ``graph.elementwise`` bodies included; broadcast operands are permuted, constants at compile
  time), ``concat``/``split`` (axis remapped), ``pad`` and ``slice`` (per-axis lists permuted),
  ``resize`` (sizes, scales, roi permuted), ``softmax``/``log_softmax`` (axis remapped),
  ``reduce_*`` (axes remapped; ``keepdims = 0`` drops the reduced dims from the permutation),
  ``transpose`` (absorbed: its result is its input in memory, under a new permutation);
* reshapes (``reshape``, ``flatten``, ``squeeze``, ``unsqueeze``) stay reshapes in memory
  where each group of dims they merge or split lies in order (a channel split of NHWC data, the
  ``N x 1 x 1 x C`` after a global pool); a flatten read only by fully connected layers with
  constant weights flattens the data as it lies and permutes the weight's rows instead; other
  reshapes get one transpose first (a channel shuffle's data movement);
* every other op (``gemm``, ``batch_normalization``, ``instance_normalization``, ...)
  and the function's return need the logical layout: the value is transposed back, once per
  value. Where that transpose only moves dims of size 1 (the ``N x 1 x 1 x C`` after a global
  pool) it is a ``graph.reshape`` (a view), not a transpose.

Asking for a value in a layout it is not in inserts one ``graph.transpose`` (cached per value and
layout), except for constants, which are permuted at compile time. So transposes appear only at
function arguments and results, and around ops that need channels-first; each one is a
``graph.transpose`` in the op report (``ptxc explore --report``), and ResNet-50 has exactly one,
at its input.

Channel padding (``channel-multiple=4``, what cuda compiles with; ``int8-channel-multiple=16``
for an int8 conv where that adds at most a third: the 12 channels of a space-to-depth stem,
space_to_depth.py, become 16, one 16-byte copy per pixel): a non-grouped convolution
whose input channels are not a multiple of ``channel-multiple`` reads its input padded with zero
channels (one ``graph.pad`` on the channel axis, whose interior the producer writes directly,
see lower-tensor-to-loop) and its filter padded with zero channels at compile time, so an
pixel's channels are whole cp.async chunks (4 halves: 8 bytes; 4 int8: 4 bytes) and a load never
straddles two pixels; the result does not change. The multiple counts elements of any width: an
int8 conv pads its 3-channel image to 4 as fp16 does (not to 8: that doubled the int8 stem's K,
7 x 7 x 8 = 392 against 196, and its padded input), where its
filter's zero point is 0 (so ``w - zw`` is 0 on the padded channels). Off by default (``1``): fp32 CUDA-core and CPU kernels
gain nothing from it (docs/graph-opt.md, "Layout").

The pass does not decide *whether* a graph should run channels-last; ``compile(layout=...)``
does (docs/graph-opt.md). Run after graph-opt, then cancel-transposes and eliminate-concat
(which re-checks in-place concats, whose operands may now be reshape views).

Example (``tensor<1x3x8x8>`` input, a 3x3 conv, a ReLU, a global average pool, a flatten)::

    Before:
        %y = "graph.fused_conv"(%x, %w, %b) ({relu}) {...} : (1x3x8x8, 4x3x3x3, 4) -> 1x4x8x8
        %g = "graph.global_average_pool"(%y) : (1x4x8x8) -> 1x4x1x1
        %f = "graph.flatten"(%g) {axis = 1} : (1x4x1x1) -> 1x4
    After:
        %t = "graph.transpose"(%x) {perm = [0, 2, 3, 1]} : (1x3x8x8) -> 1x8x8x3
        %w_krsc = "graph.constant"() {value = ...} : () -> 4x3x3x3          (W transposed)
        %y = "graph.fused_conv"(%t, %w_krsc, %b) ({relu}) {..., layout = "NHWC"}
           : (1x8x8x3, 4x3x3x3, 4) -> 1x8x8x4
        %g = "graph.reduce_mean"(%y) {axes = [1, 2], keepdims = 1} : (1x8x8x4) -> 1x1x1x4
        %r = "graph.reshape"(%g) {shape = [1, 4, 1, 1]} : (1x1x1x4) -> 1x4x1x1
        %f = "graph.flatten"(%r) {axis = 1} : (1x4x1x1) -> 1x4
"""

from __future__ import annotations

import attrs
import numpy as np

from ...dialects.func import func_body, functions
from ...dialects.graph.layout import last_perm
from ...ir.attributes import DenseElements
from ...ir.builder import Builder
from ...ir.core import Operation, OpResult, Value
from ...ir.spec import lookup
from ...ir.types import TensorType
from ..pass_ import Pass, register_pass
from .dce import erase_dead_ops
from .fold_batchnorm import const_array

#: ops with a channel axis that have a channels-last form (``layout = "NHWC"``)
CHANNEL_OPS = frozenset({"graph.conv", "graph.fused_conv", "graph.max_pool",
                         "graph.average_pool", "graph.lrn", "graph.qlinear_conv"})
#: convolutions (their filter is transposed to KRSC, their input channels may be padded)
CONVS = frozenset({"graph.conv", "graph.fused_conv", "graph.qlinear_conv"})
#: per-tensor quantize/dequantize: elementwise when their scale and zero point are one element
QDQ = frozenset({"graph.quantize_linear", "graph.dequantize_linear"})
#: global pools and the reduction that is their channels-last form
GLOBAL_POOLS = {"graph.global_average_pool": "graph.reduce_mean",
                "graph.global_max_pool": "graph.reduce_max"}
#: ops whose per-axis attributes (all begins, then all ends, or one entry per axis) follow a
#: permutation of their input
PER_AXIS = {"graph.pad": ("pads",), "graph.slice": ("starts", "ends", "steps"),
            "graph.resize": ("sizes", "scales", "roi")}
#: ops whose result is their operand's elements, row-major, under another shape
RESHAPES = frozenset({"graph.reshape", "graph.flatten", "graph.squeeze", "graph.unsqueeze"})
REDUCTIONS = frozenset({"graph.reduce_mean", "graph.reduce_sum", "graph.reduce_max",
                        "graph.reduce_min"})


def identity(rank: int) -> tuple[int, ...]:
    return tuple(range(rank))


def inverse(perm) -> tuple[int, ...]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def moves_only_unit_dims(perm, shape) -> bool:
    """Whether ``transpose(x, perm)`` of an ``x`` of ``shape`` keeps the order of the dims of
    size > 1, so that it is a reshape (a view), not a data movement."""
    big = [d for d in perm if shape[d] != 1]
    return big == sorted(big)


def reshape_groups(sin, sout):
    """The dims of a reshape from ``sin`` to ``sout`` in matching groups ``(in dims, out dims)``
    of equal element counts (dims of size 1 left out); None when there are none."""
    nin = [d for d, n in enumerate(sin) if n != 1]
    nout = [d for d, n in enumerate(sout) if n != 1]
    groups, a, b = [], 0, 0
    try:
        while a < len(nin) or b < len(nout):
            gi, gj = [nin[a]], [nout[b]]
            pi, pj = sin[nin[a]], sout[nout[b]]
            a, b = a + 1, b + 1
            while pi != pj:
                if pi < pj:
                    gi.append(nin[a])
                    pi, a = pi * sin[nin[a]], a + 1
                else:
                    gj.append(nout[b])
                    pj, b = pj * sout[nout[b]], b + 1
            groups.append((gi, gj))
    except IndexError:
        return None
    return groups


def _order(dims, shape, key) -> tuple[int, ...]:
    """``dims`` sorted by ``key`` (non-unit dims), each unit dim right after the dim before it
    (unit dims can lie anywhere; this keeps them where they were)."""
    prev = (-1,)
    keys = {}
    for d in dims:
        if shape[d] != 1:
            prev = key(d)
        keys[d] = prev + (d,)
    return tuple(sorted(dims, key=lambda d: keys[d]))


def _permute_axis_list(values, perm):
    """A per-axis attribute under ``perm``: one entry per axis, or begins then ends."""
    v, r = list(values), len(perm)
    if len(v) == r:
        return [v[p] for p in perm]
    if len(v) == 2 * r:
        return [v[p] for p in perm] + [v[r + p] for p in perm]
    return v  # empty (resize's roi when unused)


def zero_weights_add_nothing(op: Operation) -> bool:
    """Whether zero filter taps or channels added to conv ``op`` add nothing: always for a
    float conv; for an int8 one when the filter's zero point is absent or 0 (then ``w - zw`` is
    0 there). Channel padding here and space_to_depth.py's blocked filters rely on it."""
    if op.name != "graph.qlinear_conv":
        return True
    zw = lookup(op.name).groups(op)["w_zero_point"]
    if zw is None:
        return True
    a = const_array(zw)
    return a is not None and not a.any()


class _Function:
    """The rewrite of one function body (see the module docstring)."""

    def __init__(self, block, channel_multiple: int, int8_channel_multiple: int = 1):
        self.block = block
        self.multiple = channel_multiple
        self.int8_multiple = int8_channel_multiple
        self.phys: dict[int, tuple[Value, tuple]] = {}   # logical value -> (physical, perm)
        self.cache: dict[tuple, Value] = {}               # (id(value), perm) -> value
        self.op: Operation | None = None                  # the op being rewritten

    # ---- layouts of values -----------------------------------------------------------------
    def layout(self, v: Value):
        """(physical value, perm) of logical ``v``."""
        got = self.phys.get(id(v))
        if got is not None:
            return got
        rank = v.type.rank if isinstance(v.type, TensorType) else 0
        return v, identity(rank)

    def logical_shape(self, v: Value) -> tuple[int, ...]:
        """``v``'s logical shape (an op rewritten in place has its physical type)."""
        pv, perm = self.layout(v)
        shape = [0] * len(perm)
        for i, p in enumerate(perm):
            shape[p] = pv.type.shape[i]
        return tuple(shape)

    def builder(self) -> Builder:
        return Builder.before_op(self.op)

    def _transpose(self, pv: Value, t, loc) -> Value:
        """``pv`` transposed by ``t``; a reshape when only unit dims move."""
        shape = pv.type.shape
        out = pv.type.with_shape(tuple(shape[i] for i in t))
        b = self.builder()
        if moves_only_unit_dims(t, shape):
            return b.create("graph.reshape", [pv], {"shape": out.shape}, loc=loc).result
        return b.create("graph.transpose", [pv], {"perm": tuple(t)}, loc=loc).result

    def as_perm(self, v: Value, perm) -> Value:
        """``v`` (logical) laid out in memory as ``transpose(v, perm)``."""
        perm = tuple(perm)
        pv, cur = self.layout(v)
        if cur == perm:
            return pv
        key = (id(v), perm)
        if key in self.cache:
            return self.cache[key]
        arr = const_array(v) if cur == identity(len(perm)) else None
        if arr is not None:  # a constant: permuted at compile time
            new = np.ascontiguousarray(arr.transpose(perm))
            r = self.builder().create("graph.constant", [], {
                "value": DenseElements(new, v.type.with_shape(new.shape))},
                loc=self._loc(v), result_names=[self._name(v, "nhwc")]).result
        else:
            t = tuple(cur.index(p) for p in perm)  # physical dims in the new order
            r = self._transpose(pv, t, self._loc(v))
        self.cache[key] = r
        return r

    def logical(self, v: Value) -> Value:
        return self.as_perm(v, identity(v.type.rank)) if isinstance(v.type, TensorType) else v

    def broadcast(self, v: Value, perm, rank: int) -> Value:
        """Operand ``v`` of an op whose rank-``rank`` result is laid out by ``perm``: ``v``
        broadcasts against the result right-aligned (ONNX), so it is extended with leading unit
        dims, permuted, and its leading unit dims dropped again (a per-channel ``(C, 1, 1)`` is
        ``(C,)`` channels last)."""
        if not isinstance(v.type, TensorType) or v.type.rank == rank:
            return self.as_perm(v, perm) if isinstance(v.type, TensorType) else v
        if v.type.rank == 0:
            return v
        full = (1,) * (rank - v.type.rank) + self.logical_shape(v)
        shape = [full[p] for p in perm]
        while len(shape) > 1 and shape[0] == 1:
            shape.pop(0)
        if tuple(shape) == self.logical_shape(v) and moves_only_unit_dims(perm, full):
            return self.logical(v)  # same elements, same broadcast
        key = (id(v), "bcast", tuple(perm))
        if key in self.cache:
            return self.cache[key]
        arr = const_array(v)
        b = self.builder()
        if arr is not None:
            new = np.ascontiguousarray(arr.reshape(full).transpose(perm).reshape(shape))
            r = b.create("graph.constant", [], {
                "value": DenseElements(new, v.type.with_shape(new.shape))},
                loc=self._loc(v), result_names=[self._name(v, "nhwc")]).result
        else:
            x = b.create("graph.reshape", [self.logical(v)], {"shape": full}).result
            r = self._transpose(x, perm, self._loc(v))
            if r.type.shape != tuple(shape):
                r = b.create("graph.reshape", [r], {"shape": tuple(shape)}).result
        self.cache[key] = r
        return r

    @staticmethod
    def _loc(v: Value):
        return v.op.loc if isinstance(v, OpResult) else None

    @staticmethod
    def _name(v: Value, suffix: str):
        return f"{v.name_hint}_{suffix}" if v.name_hint else None

    def set_result(self, op: Operation, perm) -> None:
        """``op`` now computes its result laid out by ``perm`` (its type permuted in place)."""
        for r in op.results:
            r.type = r.type.with_shape(tuple(r.type.shape[p] for p in perm))
            if tuple(perm) != identity(len(perm)):
                self.phys[id(r)] = (r, tuple(perm))

    # ---- the walk ----------------------------------------------------------------------------
    def run(self) -> bool:
        for op in list(self.block.ops):
            self.op = op
            if op.name in CHANNEL_OPS:
                self.channel_op(op)
            elif op.name in GLOBAL_POOLS:
                self.global_pool(op)
            elif op.name == "graph.transpose" and self.follows(op):
                self.absorb_transpose(op)
            elif op.name in RESHAPES and id(op.operands[0]) in self.phys:
                self.reshape(op)
            elif self.follows(op):
                self.follow(op)
            else:
                self.keep(op)
        return bool(self.phys) or bool(self.cache)

    def keep(self, op: Operation) -> None:
        """``op`` reads its operands in the logical layout."""
        for i, v in enumerate(op.operands):
            if id(v) in self.phys:
                op.set_operand(i, self.logical(v))

    def main_perm(self, op: Operation):
        """The layout ``op`` should follow: that of its first full-rank operand with a
        non-identity layout; None when it has none (or when ``op`` cannot follow one)."""
        if len(op.results) == 0 or not isinstance(op.results[0].type, TensorType):
            return None
        rank = op.results[0].type.rank
        for v in op.operands:
            if isinstance(v.type, TensorType) and id(v) in self.phys:
                perm = self.phys[id(v)][1]
                if v.type.rank == rank or op.name in REDUCTIONS or op.name == "graph.transpose":
                    return perm
        return None

    def follows(self, op: Operation) -> bool:
        spec = lookup(op.name)
        agnostic = (spec is not None and spec.has_trait("elementwise")) or op.name in (
            "graph.concat", "graph.split", "graph.softmax", "graph.log_softmax",
            "graph.transpose") or op.name in PER_AXIS or op.name in REDUCTIONS or (
            op.name in QDQ and all(v.type.size == 1 for v in op.operands[1:]))
        return agnostic and self.main_perm(op) is not None

    def follow(self, op: Operation) -> None:
        """Rewrite a layout-agnostic ``op`` in place to compute in its input's layout."""
        perm = self.main_perm(op)
        rank = len(perm)
        name = op.name
        if name in REDUCTIONS:
            px = self.as_perm(op.operands[0], perm)
            op.set_operand(0, px)
            axes = sorted(op.attr("axes"))
            op.attributes["axes"] = tuple(sorted(perm.index(a) for a in axes))
            if op.attr("keepdims"):
                self.set_result(op, perm)
            else:
                kept = [i for i, d in enumerate(perm) if d not in axes]  # physical dims
                left = [perm[i] for i in kept]
                rank_of = {d: i for i, d in enumerate(sorted(left))}
                out = tuple(rank_of[d] for d in left)
                # the result's logical type is the reduced one; physically its dims follow perm
                r = op.results[0]
                r.type = r.type.with_shape(tuple(px.type.shape[i] for i in kept))
                if out != identity(len(out)):
                    self.phys[id(r)] = (r, out)
            return
        for i, v in enumerate(op.operands):
            if name == "graph.pad" and i == 1:
                continue  # the scalar pad value
            op.set_operand(i, self.broadcast(v, perm, rank))
        if name in ("graph.concat", "graph.split", "graph.softmax", "graph.log_softmax"):
            op.attributes["axis"] = perm.index(op.attr("axis"))
        for a in PER_AXIS.get(name, ()):
            if op.attributes.get(a) is not None:
                op.attributes[a] = tuple(_permute_axis_list(op.attributes[a], perm))
        self.set_result(op, perm)

    def absorb_transpose(self, op: Operation) -> None:
        """``y = transpose(x, t)`` with ``x`` in memory as ``transpose(x, p)``: ``y`` is the
        same memory under the permutation ``q`` with ``t[q[i]] = p[i]``."""
        x = op.operands[0]
        pv, p = self.layout(x)
        t = tuple(op.attr("perm"))
        q = tuple(t.index(d) for d in p)
        # recorded even when q is the identity: pv may itself be the key of another logical
        # value (an op rewritten in place), so y's uses cannot simply be pointed at it
        self.phys[id(op.results[0])] = (pv, q)

    def reshape(self, op: Operation) -> None:
        """A reshape of a permuted value is a reshape in memory when each group of input dims
        that becomes a group of output dims lies contiguous and in order in memory (a channel
        split ``C -> (g, C/g)`` of NHWC data, a flatten of ``N x 1 x 1 x C``): the result is
        then permuted by its groups' order. Otherwise the value is first transposed so that the
        groups lie in order (a real data movement, the one a channel shuffle makes)."""
        x = op.operands[0]
        sin, sout = self.logical_shape(x), op.results[0].type.shape
        groups = reshape_groups(sin, sout)
        if groups is None:
            return self.keep(op)
        perm = self.phys[id(x)][1]
        phys = [d for d in perm if sin[d] != 1]
        pos = {d: i for i, d in enumerate(phys)}
        first = {}
        fits = True
        for gi, gj in groups:
            p = [pos[d] for d in gi]
            fits &= p == list(range(p[0], p[0] + len(p)))
            for d in gj:
                first[d] = (min(p),)
        if not fits and self.flatten_into_fc(op, x, perm):
            return
        if not fits:  # lay the input out by its groups, in their order in memory
            rank_of = {}
            for gi, _ in groups:
                for d in gi:
                    rank_of[d] = (min(pos[e] for e in gi), d)
            new_in = _order(range(len(sin)), sin, lambda d: rank_of[d])
            self.phys[id(x)] = (self.as_perm(x, new_in), new_in)
            return self.reshape(op)
        q = _order(range(len(sout)), sout, lambda d: first[d])
        pv = self.phys[id(x)][0]
        out = op.results[0].type.with_shape(tuple(sout[d] for d in q))
        r = self.builder().create("graph.reshape", [pv], {"shape": out.shape}, loc=op.loc,
                                  result_names=[op.results[0].name_hint]).result
        self.phys[id(op.results[0])] = (r, q)

    def flatten_into_fc(self, op: Operation, x: Value, perm) -> bool:
        """A flatten ``(N, C, H, W) -> (N, C*H*W)`` of channels-last data read only as the A
        of fully connected layers (gemm/fused_gemm without transA, matmul) with constant B:
        flatten the data as it lies (``H*W*C`` order) and permute B's rows the same way at
        compile time, instead of transposing the activation (AlexNet's and VGG's classifier)."""
        sin, sout = self.logical_shape(x), op.results[0].type.shape
        if len(sout) != 2 or perm[0] != 0 or sout[0] != sin[0]:
            return False
        users = op.results[0].users
        fcs = ("graph.gemm", "graph.fused_gemm", "graph.matmul", "graph.fused_matmul")
        for u in users:
            if u.name not in fcs or u.operands[0] is not op.results[0] or \
                    op.results[0] in u.operands[1:] or u.attr("transA", 0) or \
                    const_array(u.operands[1]) is None or u.operands[1].type.rank != 2:
                return False
        # row k of the data as it lies is row idx[k] of the logical flatten
        idx = np.arange(int(np.prod(sin[1:]))).reshape(sin[1:])
        idx = idx.transpose([p - 1 for p in perm[1:]]).reshape(-1)
        b = self.builder()
        pv = self.phys[id(x)][0]
        r = b.create("graph.reshape", [pv], {"shape": tuple(sout)}, loc=op.loc,
                     result_names=[op.results[0].name_hint]).result
        for u in users:
            w = u.operands[1]
            arr = const_array(w)
            arr = arr[:, idx] if u.attr("transB", 0) else arr[idx]
            wv = b.create("graph.constant", [], {
                "value": DenseElements(np.ascontiguousarray(arr), w.type)},
                loc=self._loc(w), result_names=[self._name(w, "nhwc")]).result
            u.set_operand(1, wv)
        op.results[0].replace_all_uses_with(r)
        return True

    def channel_op(self, op: Operation) -> None:
        x = op.operands[0]
        if op.attr("layout") == "NHWC" or x.type.rank < 3:
            return self.keep(op)
        rank = x.type.rank
        perm = last_perm(rank)
        xs = self.as_perm(x, perm)
        if op.name in CONVS:
            w = op.operands[1]
            ws = self.as_perm(w, perm)
            multiple = self.multiple_for(op, self.logical_shape(x)[1])
            if multiple > 1 and op.attr("group") == 1 and zero_weights_add_nothing(op):
                xs, ws = self.pad_channels(xs, ws, multiple)
            op.set_operand(1, ws)
            if op.name == "graph.fused_conv":
                spec = lookup(op.name)
                n_base = len(spec.split(op)[0])
            elif op.name == "graph.qlinear_conv":   # epilogue inputs: the result's layout
                n_base = len(op.operands) - len(lookup(op.name).groups(op)["epilogue_inputs"])
            else:
                n_base = len(op.operands)
            for i in range(n_base, len(op.operands)):
                op.set_operand(i, self.broadcast(op.operands[i], perm, rank))
        op.set_operand(0, xs)
        op.attributes["layout"] = "NHWC"
        self.set_result(op, perm)

    def multiple_for(self, op: Operation, c: int) -> int:
        """The channel multiple of conv ``op`` on ``c`` input channels: ``int8_multiple`` for an
        int8 conv where that pads at most a third more channels (12 -> 16: a space-to-depth
        stem's, space_to_depth.py), else ``multiple`` (module docstring)."""
        m = self.int8_multiple
        if op.name == "graph.qlinear_conv" and m > 1 and 3 * (-(-c // m) * m) <= 4 * c:
            return m
        return self.multiple

    def pad_channels(self, x: Value, w: Value, multiple: int):
        """``x`` (channels last) and ``w`` (KRSC, constant) with zero channels up to a multiple
        of ``multiple`` elements (module docstring); unchanged when already a multiple or
        ``w`` is not constant."""
        c = x.type.shape[-1]
        cp = -(-c // multiple) * multiple
        warr = const_array(w)
        if cp == c or warr is None:
            return x, w
        key = (id(x), "pad", cp)
        if key not in self.cache:
            r = x.type.rank
            pads = [0] * (2 * r)
            pads[-1] = cp - c
            self.cache[key] = self.builder().create("graph.pad", [x], {"pads": tuple(pads)},
                                                    loc=self._loc(x)).result
        wide = np.zeros(warr.shape[:-1] + (cp,), warr.dtype)
        wide[..., :c] = warr
        wv = self.builder().create("graph.constant", [], {
            "value": DenseElements(wide, w.type.with_shape(wide.shape))},
            loc=self._loc(w), result_names=[self._name(w, "padded")]).result
        return self.cache[key], wv

    def global_pool(self, op: Operation) -> None:
        x = op.operands[0]
        if id(x) not in self.phys:
            return self.keep(op)
        pv, perm = self.phys[id(x)]
        axes = tuple(sorted(perm.index(d) for d in range(2, x.type.rank)))
        r = self.builder().create(GLOBAL_POOLS[op.name], [pv], {"axes": axes, "keepdims": 1},
                                  loc=op.loc, result_names=[op.results[0].name_hint]).result
        self.phys[id(op.results[0])] = (r, perm)


def to_channels_last(module: Operation, channel_multiple: int = 1,
                     int8_channel_multiple: int = 1) -> bool:
    """Rewrite every function of ``module`` (see the module docstring); returns whether
    anything changed."""
    changed = False
    for f in functions(module):
        changed |= _Function(func_body(f), channel_multiple, int8_channel_multiple).run()
    if changed:
        erase_dead_ops(module)
    return changed


def prefers_channels_last(module: Operation, min_convs: int = 4) -> bool:
    """The policy of ``layout="auto"``: a graph with at least ``min_convs`` non-grouped 2-D
    convolutions (the layers an implicit-GEMM tensor-core schedule takes) runs channels-last."""
    n = 0
    for op in module.walk():
        if op.name in CONVS and op.attr("group") == 1 and \
                op.operands[0].type.rank == 4:
            n += 1
    return n >= min_convs


@register_pass
@attrs.frozen
class ToChannelsLast(Pass):
    """Run convolutions, pools and what lies between them channels-last (NHWC activations, KRSC
    filters folded at compile time), with transposes only at the function's boundary and around
    ops that need channels-first; see :mod:`ptxc.rewrite.passes.channels_last`.

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<1x2x3x3xf32>):
            %w = "graph.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<2x2x1x1xf32>} : () -> tensor<2x2x1x1xf32> loc("w")
            %c = "graph.conv"(%x, %w) {dilations = [1, 1], group = 1, kernel_shape = [1, 1], pads = [0, 0, 0, 0], strides = [1, 1]} : (tensor<1x2x3x3xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x3x3xf32> loc("conv_1")
            %y = "graph.relu"(%c) : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32> loc("relu_2")
            "func.return"(%y) : (tensor<1x2x3x3xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<1x2x3x3xf32>) -> (tensor<1x2x3x3xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<1x2x3x3xf32>):
            %0 = "graph.transpose"(%x) {perm = [0, 2, 3, 1]} : (tensor<1x2x3x3xf32>) -> tensor<1x3x3x2xf32>
            %w_nhwc = "graph.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<2x1x1x2xf32>} : () -> tensor<2x1x1x2xf32> loc("w")
            %c = "graph.conv"(%0, %w_nhwc) {dilations = [1, 1], group = 1, kernel_shape = [1, 1], layout = "NHWC", pads = [0, 0, 0, 0], strides = [1, 1]} : (tensor<1x3x3x2xf32>, tensor<2x1x1x2xf32>) -> tensor<1x3x3x2xf32> loc("conv_1")
            %y = "graph.relu"(%c) : (tensor<1x3x3x2xf32>) -> tensor<1x3x3x2xf32> loc("relu_2")
            %1 = "graph.transpose"(%y) {perm = [0, 3, 1, 2]} : (tensor<1x3x3x2xf32>) -> tensor<1x2x3x3xf32> loc("relu_2")
            "func.return"(%1) : (tensor<1x2x3x3xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<1x2x3x3xf32>) -> (tensor<1x2x3x3xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "to-channels-last"
    channel_multiple: int = 1
    int8_channel_multiple: int = 1

    def run(self, module: Operation) -> bool:
        for name, v in (("channel-multiple", self.channel_multiple),
                        ("int8-channel-multiple", self.int8_channel_multiple)):
            if v < 1:
                from ...errors import CompileError
                raise CompileError(f"to-channels-last: {name} must be >= 1, got {v}")
        return to_channels_last(module, self.channel_multiple, self.int8_channel_multiple)
