"""Epilogue fusion (TensorRT's CBR layers): conv/gemm/matmul + elementwise consumers -> one fused
op with a scalar epilogue."""

from __future__ import annotations

import attrs
import numpy as np

from ...dialects.graph.fused import FUSED_OF
from ...dialects.graph.scalar_forms import BodyBuilder, inline_block, scalar_form
from ...ir.core import Block, Operation, Region
from ...ir.spec import lookup, make_op
from ..driver import apply_patterns_greedily
from ..explain import op_location
from ..pass_ import Pass, register_pass
from ..pattern import RewritePattern

#: the attribute listing the locations of the ops fused into an op
FUSED_ATTR = "ptxc.fused"

_BASE_OF = {fused: base for base, fused in FUSED_OF.items()}


def op_label(op: Operation) -> str:
    """How messages and ``ptxc.fused`` name an op: its loc, else ``%result``, else its name."""
    return op_location(op) or op.name


def fused_labels(op: Operation) -> list[str]:
    """The ops ``op`` stands for: its ``ptxc.fused`` list for a fused graph.elementwise, else
    its own label."""
    if op.name == "graph.elementwise" and FUSED_ATTR in op.attributes:
        return list(op.attributes[FUSED_ATTR])
    return [op_label(op)]


def _enlarging_operand(consumer: Operation, shape: tuple):
    """The first operand of ``consumer`` that does not broadcast into ``shape``."""
    for v in consumer.operands:
        try:
            if tuple(np.broadcast_shapes(tuple(v.type.shape), shape)) != shape:
                return v
        except ValueError:
            return v
    return None


class FuseEpilogue(RewritePattern):
    """``consumer(base(...), others...)`` -> ``fused_base(..., others){consumer(acc, ...)}``.

    Rooted at a conv, gemm or matmul (or one already fused): when its result has exactly one
    user, and that user has a scalar form, keeps the element type and shape of the result (its
    other operands broadcast into it), the pair becomes one fused op placed where the consumer
    was. The base's result becomes the epilogue's accumulator; one-element constants become
    ``arith.constant``; every other tensor operand becomes an epilogue input (deduplicated).
    The fused op keeps the base op's loc and attributes, takes the consumer's result name, and
    lists the consumers' locs in ``ptxc.fused``.
    """

    benefit = 1

    def match_and_rewrite(self, op, rewriter):
        if op.name not in FUSED_OF and op.name not in _BASE_OF:
            return False
        res = op.results[0]
        users = res.users
        if not users:
            return False
        me = op_label(op)
        if len(users) > 1:
            cand = next((u for u in users if scalar_form(u) is not None), None)
            if cand is None:
                return False
            return rewriter.fail(op, f"{me} + {op_label(cand)} not fused: {me} has "
                                     f"{len(users)} users")
        (user,) = users
        if user.name == "func.return" or user.name in FUSED_OF or user.name in _BASE_OF:
            return False  # an output, or conv -> conv: nothing that could have fused
        why = f"{me} + {op_label(user)} not fused"
        if scalar_form(user) is None:
            return rewriter.fail(op, f"{why}: {user.name} has no scalar form")
        out = user.results[0].type
        if out.element != res.type.element:
            return rewriter.fail(op, f"{why}: {op_label(user)} gives {out}, the epilogue must "
                                     f"give {res.type.element}")
        if out.shape != res.type.shape:
            other = _enlarging_operand(user, res.type.shape)
            if other is None:
                return rewriter.fail(op, f"{why}: {op_label(user)}'s result {out} is larger "
                                         f"than {res.type}")
            return rewriter.fail(op, f"{why}: {op_label(user)}'s other operand {other.type} "
                                     f"would broadcast the result {res.type}")
        fused = self.fuse(op, user)
        rewriter.set_insertion_point_before(user)
        rewriter.insert(fused)
        rewriter.replace_op(user, fused)
        rewriter.erase_op(op)
        return True

    @staticmethod
    def fuse(base: Operation, user: Operation) -> Operation:
        """The fused op computing ``user`` of ``base`` (not inserted)."""
        res = base.results[0]
        block = Block([res.type.element], ["acc"])
        if base.name in _BASE_OF:  # already fused: its epilogue first, then the consumer
            spec = lookup(base.name)
            base_operands, extras = spec.split(base)
            base_name = _BASE_OF[base.name]
            old = spec.epilogue(base)
            for v in extras:
                block.add_arg(v.type.element)
            bb = BodyBuilder(block, dict(zip(extras, block.args[1:])))
            bb.inputs = list(extras)
            (acc,) = inline_block(old, bb.builder, block.args)
            fused_locs = list(base.attributes.get(FUSED_ATTR, ()))
        else:
            base_name = base.name
            base_operands = list(base.operands)
            bb = BodyBuilder(block)
            acc = block.args[0]
            fused_locs = list(base.attributes.get(FUSED_ATTR, ()))  # e.g. a folded batch norm
        bb.known[res] = acc
        bb.finish(bb.apply(user))
        groups = lookup(base_name).groups(_Operands(base_name, base_operands, base.attributes))
        operands = [groups[d.name] for d in lookup(base_name).operand_defs] + [bb.inputs]
        attributes = {k: v for k, v in base.attributes.items() if k != "operand_segments"}
        attributes[FUSED_ATTR] = tuple(fused_locs + fused_labels(user))
        return make_op(FUSED_OF[base_name], operands, attributes, result_types=[res.type],
                       regions=[Region([block])], loc=base.loc)


class _Operands:
    """Just enough of an op for ``OpSpec.groups``: operands and attributes."""

    def __init__(self, name, operands, attributes):
        self.name, self.operands, self.attributes = name, operands, attributes


@register_pass
@attrs.frozen
class FuseEpilogues(Pass):
    """Fuse the elementwise ops that follow a conv, gemm or matmul into its epilogue
    (TensorRT's conv + bias + activation and residual fusions): a base op whose only user is an
    elementwise op with a scalar form (activations, add, mul, clip, ... or a fused
    ``graph.elementwise``) becomes ``graph.fused_conv``/``fused_gemm``/``fused_matmul`` with
    the consumer applied to the accumulator; repeated, a whole chain is absorbed. The consumer's
    other tensor operands (a residual, a per-channel scale) become epilogue inputs; one-element
    constants become ``arith.constant``. The fused op keeps the base op's loc and lists the
    absorbed ops in ``ptxc.fused``. Declines, with a reason for ``--explain``, when the base has
    several users, when the consumer has no scalar form, changes the element type, or has an
    operand that would broadcast the result to a larger shape.

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<1x2x4x4xf32>, %w: tensor<2x2x3x3xf32>):
            %c = "graph.conv"(%x, %w) {dilations = [1, 1], group = 1, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [1, 1]} : (tensor<1x2x4x4xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x4x4xf32> loc("conv_1")
            %s = "graph.add"(%c, %x) : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> loc("add_2")
            %y = "graph.relu"(%s) : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> loc("relu_3")
            "func.return"(%y) : (tensor<1x2x4x4xf32>) -> ()
          }) {arg_names = ["x", "w"], function_type = (tensor<1x2x4x4xf32>, tensor<2x2x3x3xf32>) -> (tensor<1x2x4x4xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<1x2x4x4xf32>, %w: tensor<2x2x3x3xf32>):
            %y = "graph.fused_conv"(%x, %w, %x) ({
            ^bb0(%acc: f32, %0: f32):
              %1 = "arith.add"(%acc, %0) : (f32, f32) -> f32
              %2 = "arith.constant"() {type = f32, value = 0.0} : () -> f32
              %3 = "arith.max"(%1, %2) : (f32, f32) -> f32
              "graph.yield"(%3) : (f32) -> ()
            }) {dilations = [1, 1], group = 1, kernel_shape = [3, 3], operand_segments = [1, 1, 0, 1], pads = [1, 1, 1, 1], ptxc.fused = ["add_2", "relu_3"], strides = [1, 1]} : (tensor<1x2x4x4xf32>, tensor<2x2x3x3xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> loc("conv_1")
            "func.return"(%y) : (tensor<1x2x4x4xf32>) -> ()
          }) {arg_names = ["x", "w"], function_type = (tensor<1x2x4x4xf32>, tensor<2x2x3x3xf32>) -> (tensor<1x2x4x4xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "fuse-epilogues"

    def run(self, module: Operation) -> bool:
        return apply_patterns_greedily(module, [FuseEpilogue()])
