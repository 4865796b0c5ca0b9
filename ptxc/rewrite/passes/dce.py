"""Dead-code elimination."""

from __future__ import annotations

import attrs

from ...ir.core import Block, Operation
from ..driver import is_trivially_dead
from ..pass_ import Pass, register_pass


def erase_dead_ops(root: Operation) -> int:
    """Erase every pure op nested in ``root`` whose results are unused, transitively; returns
    how many were erased."""
    total = 0
    while True:
        n = sum(_sweep(b) for r in root.regions for b in reversed(r.blocks))
        total += n
        if not n:
            return total


def _sweep(block: Block) -> int:
    # backwards: an op's users come after it, so they are gone before it is looked at
    n = 0
    op = block.last_op
    while op is not None:
        prev = op.prev_op
        if is_trivially_dead(op):
            op.erase()
            n += 1
        else:
            n += sum(_sweep(b) for r in op.regions for b in reversed(r.blocks))
        op = prev
    return n


@register_pass
@attrs.frozen
class DeadCodeElimination(Pass):
    """Remove pure ops whose results are not used, transitively (dead layers, unused outputs of
    the model's internals). Ops with side effects stay, and so do the function's arguments even
    when unused: they are the model's input bindings.

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<4xf32>, %unused: tensor<4xf32>):
            %c = "graph.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>} : () -> tensor<4xf32>
            %dead = "graph.add"(%x, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> loc("add_1")
            %y = "graph.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32> loc("relu_1")
            "func.return"(%y) : (tensor<4xf32>) -> ()
          }) {arg_names = ["x", "unused"], function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<4xf32>, %unused: tensor<4xf32>):
            %y = "graph.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32> loc("relu_1")
            "func.return"(%y) : (tensor<4xf32>) -> ()
          }) {arg_names = ["x", "unused"], function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "dce"

    def run(self, module: Operation) -> bool:
        return erase_dead_ops(module) > 0
