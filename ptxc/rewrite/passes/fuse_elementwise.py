"""Elementwise fusion: chains and DAGs of elementwise ops -> one ``graph.elementwise`` with a
scalar body."""

from __future__ import annotations

import attrs

from ...dialects.graph.scalar_forms import BodyBuilder, scalar_form
from ...ir.core import Block, Operation, Region
from ...ir.spec import lookup, make_op
from ..driver import apply_patterns_greedily
from ..pass_ import Pass, register_pass
from ..pattern import RewritePattern, producer
from .fuse_epilogues import FUSED_ATTR, fused_labels, op_label


class FuseElementwiseProducers(RewritePattern):
    """``consumer(producer(a, b), c)`` -> ``graph.elementwise(a, b, c){consumer(producer)}``.

    Rooted at any op with a scalar form: its operands' producers that have a scalar form, no
    other user, and the consumer's result shape are folded into one ``graph.elementwise`` placed
    where the consumer was, with the consumer's loc and result name. Its operands are the distinct
    outer tensors in the order the body first reads them; one-element constants become
    ``arith.constant``. ``ptxc.fused`` lists the locs of all the ops it was made from.
    Repeated by the driver, a whole chain or DAG ends up as one op.
    """

    def match_and_rewrite(self, op, rewriter):
        if scalar_form(op) is None:
            return False
        out = op.results[0].type
        fusable: list[Operation] = []
        reasons: list[str] = []
        for v in dict.fromkeys(op.operands):
            p = producer(v)
            if p is None or p.name == "graph.constant" or p in fusable:
                continue
            why = f"{op_label(p)} + {op_label(op)} not fused"
            if scalar_form(p) is None:
                spec = lookup(p.name)
                if spec is not None and spec.has_trait("elementwise"):
                    reasons.append(f"{why}: {p.name} has no scalar form here")
                continue
            users = v.users
            if len(users) != 1 or len(p.results) != 1:
                reasons.append(f"{why}: {op_label(p)} has {len(users)} users")
                continue
            if v.type.shape != out.shape:
                reasons.append(f"{why}: {op_label(p)}'s result {v.type} would be broadcast "
                               f"to {out}")
                continue
            fusable.append(p)
        if not fusable:
            return rewriter.fail(op, "; ".join(reasons)) if reasons else False
        block = Block()
        bb = BodyBuilder(block)
        chosen = set(fusable)

        def scalar(v):
            p = producer(v)
            if p in chosen and v not in bb.known:
                return bb.apply(p, [bb.scalar(o) for o in p.operands])
            return bb.scalar(v)

        bb.finish(bb.apply(op, [scalar(v) for v in op.operands]))
        labels = [lbl for p in fusable for lbl in fused_labels(p)] + fused_labels(op)
        new = make_op("graph.elementwise", bb.inputs, {FUSED_ATTR: tuple(labels)},
                      result_types=[out], regions=[Region([block])], loc=op.loc)
        rewriter.insert(new)
        rewriter.replace_op(op, new)
        for p in fusable:
            rewriter.erase_op(p)
        return True


@register_pass
@attrs.frozen
class FuseElementwise(Pass):
    """Fuse chains and DAGs of elementwise ops (those with a scalar form: activations,
    arithmetic, comparisons, where, cast, ...) into one ``graph.elementwise`` whose body composes
    their scalar forms, so the chain reads its inputs once and writes one result. A producer is
    fused into its consumer when the consumer is its only user and its result has the consumer's
    shape (no broadcast in between); a lone elementwise op is left as it is. Operands of the
    fused op are the distinct outer tensors; one-element constants become ``arith.constant``.
    The fused op keeps the last op's loc and lists every fused op in ``ptxc.fused``.

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x3xf32>, %b: tensor<3xf32>):
            %k = "graph.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
            %m = "graph.mul"(%x, %k) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32> loc("mul_1")
            %a = "graph.add"(%m, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32> loc("add_2")
            %y = "graph.tanh"(%a) : (tensor<2x3xf32>) -> tensor<2x3xf32> loc("tanh_3")
            "func.return"(%y) : (tensor<2x3xf32>) -> ()
          }) {arg_names = ["x", "b"], function_type = (tensor<2x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x3xf32>, %b: tensor<3xf32>):
            %y = "graph.elementwise"(%x, %b) ({
            ^bb0(%0: f32, %1: f32):
              %2 = "arith.constant"() {type = f32, value = 2.0} : () -> f32
              %3 = "arith.mul"(%0, %2) : (f32, f32) -> f32
              %4 = "arith.add"(%3, %1) : (f32, f32) -> f32
              %5 = "math.tanh"(%4) : (f32) -> f32
              "graph.yield"(%5) : (f32) -> ()
            }) {ptxc.fused = ["mul_1", "add_2", "tanh_3"]} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32> loc("tanh_3")
            "func.return"(%y) : (tensor<2x3xf32>) -> ()
          }) {arg_names = ["x", "b"], function_type = (tensor<2x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "fuse-elementwise"

    def run(self, module: Operation) -> bool:
        return apply_patterns_greedily(module, [FuseElementwiseProducers()])
