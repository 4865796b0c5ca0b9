"""BatchNorm folding: an inference batch norm, or a multiply/add by a per-channel constant, after a
conv, conv-transpose, gemm or matmul with constant weights becomes new constant weights and bias.

Every such consumer is an affine map per output channel, ``y' = y * s + t``; folding it means
``W' = W * s`` (per output channel) and ``b' = b * s + t``. The math runs in float64 and the new
weights are cast to the weights' element type.

* batch norm: ``s = scale / sqrt(var + epsilon)``, ``t = B - mean * s`` (so
  ``b' = (b - mean) * s + B``); its axis 1 must be the producer's output channel axis;
* ``mul`` / ``div`` by a constant: ``s = c`` / ``s = 1 / c``; ``add`` / ``sub`` by a constant:
  ``t = c`` / ``t = -c``, and ``c - y`` is ``s = -1, t = c``. The constant must broadcast along
  the output channel axis only (``[C, 1, 1]`` or ``[1, C, 1, 1]`` after a conv, ``[N]`` after a
  gemm/matmul, or one element), and must not change the output's shape.

Where the weights go, per producer: conv ``W[M, C/g, ...]`` scales axis 0; conv-transpose
``W[C, M/g, ...]`` scales output channel ``g * M/g + j``; gemm scales the columns of ``B'``
(the rows of ``B`` when ``transB``) and its ``C`` becomes ``beta * C * s + t`` with ``beta = 1``
(a per-column ``C`` is stored as ``[N]``, a full one as ``[M, N]``). A matmul has no bias: only a
2-D constant ``B`` is folded (its columns scaled), and a shift is emitted as a ``graph.add`` of a
constant bias right after the matmul, which the epilogue fusion takes in later; an ``add`` of a
per-column constant after a matmul counts as its bias, so further folds update that constant.

The rewritten layer keeps its location and records what was folded into it in the discardable
attribute ``ptxc.fused``; the folded op's result name survives (its readers see the same tensor).

A batch norm with constant parameters that folds into no layer (after a pool or a concat, as
DenseNet's pre-activation ones, or after a layer with other readers) becomes ``x * s + t``
(``graph.mul`` and ``graph.add`` of ``[C, 1, ...]`` constants, at the batch norm's location), so no
batch norm is left for later stages and the elementwise fusion merges it with its neighbours.
"""

from __future__ import annotations

from typing import NamedTuple

import attrs
import numpy as np

from ...dialects.graph.norm import bn_scale_shift
from ...ir.attributes import DenseElements
from ...ir.core import Operation, Value
from ...ir.spec import lookup
from ...ir.types import TensorType
from ..driver import apply_patterns_greedily
from ..explain import op_location
from ..pass_ import Pass, register_pass
from ..pattern import RewritePattern, producer


# ---- helpers shared with the other layout passes -------------------------------------------------

def label(op: Operation) -> str:
    """How a failure reason names an op: its loc (ONNX node name), else ``%result``, else its
    op name."""
    return op_location(op) or op.name


def const_array(v: Value | None) -> np.ndarray | None:
    """The value of ``v`` when a constant op (``graph.constant``, ``graph.constant_of_shape``)
    defines it; else None."""
    p = producer(v) if v is not None else None
    if p is None or p.name not in ("graph.constant", "graph.constant_of_shape"):
        return None
    return np.asarray(lookup(p.name).reference(p, [], None)[0])


def make_constant(rewriter, array: np.ndarray, element, name: str | None,
                  loc: str | None) -> Value:
    """A new ``graph.constant`` of ``array`` cast to ``element``, at the rewriter's insertion
    point."""
    arr = np.ascontiguousarray(array).astype(element.np_dtype)
    value = DenseElements(arr, TensorType(arr.shape, element))
    return rewriter.create("graph.constant", [], {"value": value}, loc=loc,
                           result_names=[name]).result


def replacing(old: Value | None, loc: str | None, name: str | None = None):
    """(name, loc) for a constant that replaces the constant ``old``: its own, else the given."""
    p = producer(old) if old is not None else None
    if p is None:
        return name, loc
    return old.name_hint or name, p.loc or loc


def suffixed(v: Value, suffix: str) -> str | None:
    return v.name_hint + suffix if v.name_hint else None


def with_fused(attributes: dict, *names: str) -> dict:
    """``attributes`` with ``names`` appended to ``ptxc.fused``."""
    out = dict(attributes)
    out["ptxc.fused"] = tuple(attributes.get("ptxc.fused", ())) + tuple(names)
    return out


# ---- the producer: a linear layer with constant weights -----------------------------------------

class Linear(NamedTuple):
    """A layer an affine map can fold into. ``out`` is what the consumer reads: ``op``'s result,
    or, for a matmul with a bias, the ``bias_add`` (``graph.add`` of a per-column constant)."""

    op: Operation
    bias_add: Operation | None
    bias_index: int        # operand index of the constant in bias_add
    out: Value
    axis: int              # the output channel axis of ``out``

    @property
    def channels(self) -> int:
        return self.out.type.shape[self.axis]


def per_channel(c: np.ndarray, out_shape: tuple, axis: int) -> np.ndarray | None:
    """``c`` as a ``[C]`` vector when it broadcasts along ``axis`` of ``out_shape`` only (and does
    not change that shape); else None."""
    rank = len(out_shape)
    if c.ndim > rank:
        return None
    try:
        if tuple(np.broadcast_shapes(c.shape, out_shape)) != tuple(out_shape):
            return None
    except ValueError:
        return None
    padded = (1,) * (rank - c.ndim) + tuple(c.shape)
    if any(d != 1 for i, d in enumerate(padded) if i != axis):
        return None
    return np.broadcast_to(c.reshape(padded[axis]), (out_shape[axis],)).astype(np.float64)


def find_linear(v: Value) -> Linear | None:
    """The linear layer producing ``v``, if any (see :class:`Linear`)."""
    p = producer(v)
    if p is None or not isinstance(v.type, TensorType) or v.type.rank == 0:
        return None
    if p.name in ("graph.conv", "graph.conv_transpose", "graph.gemm"):
        # a channels-last conv (layout NHWC) has its channels last; W's axis 0 is M either way
        return Linear(p, None, 0, v, v.type.rank - 1 if p.attr("layout") == "NHWC" else 1)
    if p.name == "graph.matmul":
        return Linear(p, None, 0, v, v.type.rank - 1)
    if p.name == "graph.add":
        for i in (0, 1):
            mm = producer(p.operands[1 - i])
            c = const_array(p.operands[i])
            if mm is None or mm.name != "graph.matmul" or c is None or len(mm.result.uses) != 1:
                continue
            axis = v.type.rank - 1
            if mm.result.type.shape == v.type.shape and \
                    per_channel(c, v.type.shape, axis) is not None:
                return Linear(mm, p, i, v, axis)
    return None


def why_not_foldable(lin: Linear) -> str | None:
    """Why an affine map cannot fold into ``lin`` (its own constraints); None when it can."""
    op = lin.op
    n = len(lin.out.uses)
    if n != 1:
        return f"{label(lin.bias_add or op)} has {n} users"
    if not lin.out.type.element.is_float:
        return f"{label(op)} computes {lin.out.type.element}, not a float type"
    if const_array(op.operands[1]) is None or (
            len(op.operands) > 2 and const_array(op.operands[2]) is None):
        return "weights are not constant"
    if op.name == "graph.matmul" and op.operands[1].type.rank != 2:
        return f"{label(op)}'s B is not a 2-D matrix"
    return None


def fold_affine(rewriter, lin: Linear, s: np.ndarray, t: np.ndarray,
                consumer: Operation) -> None:
    """Replace ``consumer`` (which computes ``lin.out * s + t`` per output channel) by ``lin``
    with folded weights; ``s`` and ``t`` are float64 ``[C]`` vectors."""
    op = lin.op
    el = lin.out.type.element
    W = const_array(op.operands[1]).astype(np.float64)
    old_b = op.operands[2] if len(op.operands) > 2 else None
    b = const_array(old_b).astype(np.float64) if old_b is not None else None
    attributes = with_fused(op.attributes, label(consumer))
    nb = None
    if op.name == "graph.conv":
        W2 = W * s.reshape((-1,) + (1,) * (W.ndim - 1))
        if b is not None or t.any():
            nb = (b if b is not None else 0.0) * s + t
    elif op.name == "graph.conv_transpose":
        g = op.attr("group")
        cin, mg = W.shape[0], W.shape[1]
        k1 = (1,) * (W.ndim - 2)
        W2 = (W.reshape((g, cin // g, mg) + W.shape[2:]) * s.reshape((g, 1, mg) + k1)
              ).reshape(W.shape)
        if b is not None or t.any():
            nb = (b if b is not None else 0.0) * s + t
    elif op.name == "graph.gemm":
        W2 = W * (s[:, None] if op.attr("transB") else s[None, :])
        m, n = lin.out.type.shape
        if b is not None:
            c = op.attr("beta") * b
            percol = tuple(np.broadcast_shapes(c.shape, (1, n))) == (1, n)
            nb = np.broadcast_to(c, (1, n) if percol else (m, n)) * s + t
            nb = nb.reshape(n) if percol else nb
        elif t.any():
            nb = t
        if nb is not None and op.attr("beta") != 1.0:
            attributes["beta"] = 1.0
    else:  # matmul: B is a constant 2-D matrix, the bias an add after it
        W2 = W * s[None, :]
        if lin.bias_add is not None:
            c = const_array(lin.bias_add.operands[lin.bias_index]).astype(np.float64)
            shape = c.shape[:-1] + (lin.channels,) if c.ndim else (lin.channels,)
            nb = np.broadcast_to(c, shape) * s + t
        elif t.any():
            nb = t
    w_val = make_constant(rewriter, W2, el, *replacing(op.operands[1], op.loc))
    if op.name == "graph.matmul":
        new = rewriter.create("graph.matmul", [op.operands[0], w_val], attributes, loc=op.loc)
        out = new.result
        if nb is not None:
            add_loc = (lin.bias_add or consumer).loc
            old_c = lin.bias_add.operands[lin.bias_index] if lin.bias_add is not None else None
            b_val = make_constant(rewriter, nb, el,
                                  *replacing(old_c, add_loc, suffixed(op.operands[1], "_bias")))
            out = rewriter.create("graph.add", [out, b_val], loc=add_loc).result
    else:
        operands = [op.operands[0], w_val]
        if nb is not None:
            operands.append(make_constant(
                rewriter, nb, el, *replacing(old_b, op.loc, suffixed(op.operands[1], "_bias"))))
        out = rewriter.create(op.name, operands, attributes, loc=op.loc).result
    rewriter.replace_op(consumer, [out])
    if lin.bias_add is not None:
        rewriter.erase_op(lin.bias_add)
    rewriter.erase_op(op)


# ---- patterns ------------------------------------------------------------------------------------

class FoldBatchNorm(RewritePattern):
    """``batch_normalization(linear(x))`` -> ``linear'(x)`` with the batch norm in its weights."""

    root = "graph.batch_normalization"
    benefit = 2

    def match_and_rewrite(self, op, rewriter):
        lin = find_linear(op.operands[0])
        if lin is None:
            return False
        head = f"{label(op)} not folded into {label(lin.op)}"
        reason = why_not_foldable(lin)
        if reason is not None:
            return rewriter.fail(op, f"{head}: {reason}")
        if lin.axis != 1:
            return rewriter.fail(op, f"{head}: the normalized axis 1 is not its output channel "
                                     f"axis {lin.axis}")
        st = bn_affine(op)
        if st is None:
            return rewriter.fail(op, f"{head}: the batch norm's parameters are not constant")
        fold_affine(rewriter, lin, *st, op)
        return True


def bn_affine(op: Operation):
    """(s, t), float64 ``[C]``: the batch norm ``op`` is ``x * s + t`` per channel; None when
    its parameters are not constant."""
    params = [const_array(v) for v in op.operands[1:]]
    if any(p is None for p in params):
        return None
    scale, beta, mean, var = (p.astype(np.float64) for p in params)
    s = scale / np.sqrt(var + float(op.attr("epsilon")))
    return s, beta - mean * s


class DecomposeBatchNorm(RewritePattern):
    """A batch norm with constant parameters that folds into no layer (it follows a pool, a
    concat, a layer with other readers) -> ``x * s + t`` with per-channel constants, which the
    elementwise fusion merges with its neighbours (DenseNet's pre-activation BN, Mul, Add,
    Relu become one elementwise op)."""

    root = "graph.batch_normalization"
    benefit = 1

    def match_and_rewrite(self, op, rewriter):
        params = [const_array(v) for v in op.operands[1:]]
        if any(p is None for p in params):
            return False
        t_x = op.operands[0].type
        # s and t rounded as the op's own semantics round them (bn_scale_shift), so that the
        # decomposed x * s + t is the batch norm bit for bit
        st = bn_scale_shift(*params, op.attr("epsilon"),
                            np.float64 if t_x.element.name == "f64" else np.float32)
        el = t_x.element
        shape = (t_x.shape[1],) + (1,) * (t_x.rank - 2)
        name = op.result.name_hint
        y = op.operands[0]
        for kind, vec, skip, suffix in (("graph.mul", st[0], 1.0, "_scale"),
                                        ("graph.add", st[1], 0.0, "_shift")):
            if (vec == skip).all():
                continue
            c = make_constant(rewriter, vec.reshape(shape), el,
                              name + suffix if name else None, op.loc)
            y = rewriter.create(kind, [y, c], loc=op.loc).result
        rewriter.replace_op(op, [y])
        return True


class _FoldBinary(RewritePattern):
    """``linear(x) op c`` with a per-channel constant ``c``, folded into the weights."""

    benefit = 1

    def affine(self, c: np.ndarray, linear_first: bool):
        """(s, t) for ``y op c`` (``linear_first``) or ``c op y``; None when not affine."""
        raise NotImplementedError

    def match_and_rewrite(self, op, rewriter):
        for i in (0, 1):
            lin = find_linear(op.operands[i])
            c = const_array(op.operands[1 - i])
            if lin is None or c is None or op.result.type != lin.out.type:
                continue
            vec = per_channel(c, lin.out.type.shape, lin.axis)
            head = f"{label(op)} not folded into {label(lin.op)}"
            if vec is None:
                return rewriter.fail(op, f"{head}: the constant {list(c.shape)} is not per "
                                         f"output channel")
            st = self.affine(vec, i == 0)
            if st is None:
                return False
            s, t = st
            if lin.op.name == "graph.matmul" and lin.bias_add is None and (s == 1).all():
                return False  # matmul + add of a constant is already the bias form
            reason = why_not_foldable(lin)
            if reason is not None:
                return rewriter.fail(op, f"{head}: {reason}")
            fold_affine(rewriter, lin, s, t, op)
            return True
        return False


class FoldChannelMul(_FoldBinary):
    """``linear(x) * c`` (either order)."""

    root = "graph.mul"

    def affine(self, c, linear_first):
        return c, np.zeros_like(c)


class FoldChannelDiv(_FoldBinary):
    """``linear(x) / c`` with no zero in ``c``."""

    root = "graph.div"

    def affine(self, c, linear_first):
        if not linear_first or not c.all():
            return None
        return 1.0 / c, np.zeros_like(c)


class FoldChannelAdd(_FoldBinary):
    """``linear(x) + c`` (either order)."""

    root = "graph.add"

    def affine(self, c, linear_first):
        return np.ones_like(c), c


class FoldChannelSub(_FoldBinary):
    """``linear(x) - c`` and ``c - linear(x)``."""

    root = "graph.sub"

    def affine(self, c, linear_first):
        if linear_first:
            return np.ones_like(c), -c
        return -np.ones_like(c), c


PATTERNS = (FoldBatchNorm, DecomposeBatchNorm, FoldChannelMul, FoldChannelDiv, FoldChannelAdd,
            FoldChannelSub)


@register_pass
@attrs.frozen
class FoldBatchNormPass(Pass):
    """Fold inference batch norms, and multiplies/adds by per-channel constants, into the
    constant weights and bias of the conv, conv-transpose, gemm or matmul before them (see
    :mod:`ptxc.rewrite.passes.fold_batchnorm`). The producer must have no other user and constant
    weights; ``--explain`` says when it has not ("bn_3 not folded into conv_2: conv_2 has 2
    users"). A batch norm that folds nowhere becomes a multiply and an add by constants.

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<1x2x2x2xf32>):
            %w = "graph.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<2x2x1x1xf32>} : () -> tensor<2x2x1x1xf32> loc("w")
            %c = "graph.conv"(%x, %w) {dilations = [1, 1], group = 1, kernel_shape = [1, 1], pads = [0, 0, 0, 0], strides = [1, 1]} : (tensor<1x2x2x2xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x2x2xf32> loc("conv_1")
            %scale = "graph.constant"() {value = dense<[2.0, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
            %bias = "graph.constant"() {value = dense<[0.5, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
            %mean = "graph.constant"() {value = dense<[1.0, 0.0]> : tensor<2xf32>} : () -> tensor<2xf32>
            %var = "graph.constant"() {value = dense<[4.0, 0.25]> : tensor<2xf32>} : () -> tensor<2xf32>
            %y = "graph.batch_normalization"(%c, %scale, %bias, %mean, %var) {epsilon = 0.0} : (tensor<1x2x2x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32> loc("bn_2")
            "func.return"(%y) : (tensor<1x2x2x2xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<1x2x2x2xf32>) -> (tensor<1x2x2x2xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<1x2x2x2xf32>):
            %w = "graph.constant"() {value = dense<[1.0, 2.0, 6.0, 8.0]> : tensor<2x2x1x1xf32>} : () -> tensor<2x2x1x1xf32> loc("w")
            %w_bias = "graph.constant"() {value = dense<[-0.5, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32> loc("conv_1")
            %y = "graph.conv"(%x, %w, %w_bias) {dilations = [1, 1], group = 1, kernel_shape = [1, 1], pads = [0, 0, 0, 0], ptxc.fused = ["bn_2"], strides = [1, 1]} : (tensor<1x2x2x2xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32> loc("conv_1")
            "func.return"(%y) : (tensor<1x2x2x2xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<1x2x2x2xf32>) -> (tensor<1x2x2x2xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "fold-batchnorm"

    def run(self, module: Operation) -> bool:
        return apply_patterns_greedily(module, PATTERNS)
