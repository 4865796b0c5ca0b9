"""Transposes and reshapes that cancel or compose.

* ``transpose(transpose(x, p1), p2)`` is ``transpose(x, q)`` with ``q[i] = p1[p2[i]]``; when
  ``q`` is the identity the pair is removed and the outer result is ``x`` itself.
* A chain of reshape-like ops (``graph.reshape``, ``graph.flatten``, ``graph.squeeze``,
  ``graph.unsqueeze``: each only reinterprets the row-major element order under a new shape)
  is one ``graph.reshape`` of the chain's input to the last shape; when that shape is the
  input's own, the chain is removed.

The rule for a producer with other users: compose anyway. The outer op is replaced by one op
that reads the inner op's input; the inner op stays for its other users (and is erased when it
has none). This never adds an op or a data movement (two transposes before, at most two after;
a reshape is a view), it only shortens the path from ``x``, so there is no near-miss to report.
Each new op keeps the outer op's loc and result name.

Transposes next to reshapes (``reshape -> transpose -> reshape``, the channel shuffle) do not
compose into one of either and are left alone.
"""

from __future__ import annotations

import attrs

from ...ir.core import Operation
from ..driver import apply_patterns_greedily
from ..pass_ import Pass, register_pass
from ..pattern import RewritePattern, producer
from ..rewriter import PatternRewriter

#: ops whose result is their operand's elements, in row-major order, under another shape
RESHAPE_LIKE = frozenset({"graph.reshape", "graph.flatten", "graph.squeeze", "graph.unsqueeze"})


class ComposeTransposes(RewritePattern):
    """``transpose(transpose(x, p1), p2) -> transpose(x, p1[p2])``, or ``x`` when that is the
    identity permutation."""

    root = "graph.transpose"

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> bool:
        inner = producer(op.operands[0])
        if inner is None or inner.name != "graph.transpose":
            return False
        p1, p2 = inner.attr("perm"), op.attr("perm")
        perm = tuple(p1[i] for i in p2)
        x = inner.operands[0]
        if perm == tuple(range(len(perm))):
            rewriter.replace_op(op, [x])
        else:
            new = rewriter.create("graph.transpose", [x], {"perm": perm},
                                  result_names=[op.result.name_hint])
            rewriter.replace_op(op, new)
        return True


class ComposeReshapes(RewritePattern):
    """``reshape_like(reshape_like(x)) -> reshape(x)`` to the outer shape, or ``x`` when that is
    ``x``'s shape (``reshape_like``: reshape, flatten, squeeze, unsqueeze)."""

    root = None  # any of RESHAPE_LIKE

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> bool:
        if op.name not in RESHAPE_LIKE:
            return False
        inner = producer(op.operands[0])
        if inner is None or inner.name not in RESHAPE_LIKE:
            return False
        x = inner.operands[0]
        out = op.result.type
        if out == x.type:
            rewriter.replace_op(op, [x])
        else:
            new = rewriter.create("graph.reshape", [x], {"shape": out.shape},
                                  result_names=[op.result.name_hint])
            rewriter.replace_op(op, new)
        return True


@register_pass
@attrs.frozen
class CancelTransposes(Pass):
    """Compose chains of transposes into one transpose and chains of reshapes (reshape, flatten,
    squeeze, unsqueeze) into one reshape, removing those that come back to their input; see
    :mod:`ptxc.rewrite.passes.cancel_transposes` (a producer with other users stays for them).

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x3x4xf32>):
            %t1 = "graph.transpose"(%x) {perm = [0, 2, 1]} : (tensor<2x3x4xf32>) -> tensor<2x4x3xf32> loc("transpose_1")
            %t2 = "graph.transpose"(%t1) {perm = [0, 2, 1]} : (tensor<2x4x3xf32>) -> tensor<2x3x4xf32> loc("transpose_2")
            %u = "graph.unsqueeze"(%t2) {axes = [0]} : (tensor<2x3x4xf32>) -> tensor<1x2x3x4xf32> loc("unsqueeze_3")
            %y = "graph.flatten"(%u) {axis = 2} : (tensor<1x2x3x4xf32>) -> tensor<2x12xf32> loc("flatten_4")
            "func.return"(%y) : (tensor<2x12xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<2x3x4xf32>) -> (tensor<2x12xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x3x4xf32>):
            %y = "graph.reshape"(%x) {shape = [2, 12]} : (tensor<2x3x4xf32>) -> tensor<2x12xf32> loc("flatten_4")
            "func.return"(%y) : (tensor<2x12xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<2x3x4xf32>) -> (tensor<2x12xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "cancel-transposes"

    def run(self, module: Operation) -> bool:
        return apply_patterns_greedily(module, [ComposeTransposes, ComposeReshapes])
