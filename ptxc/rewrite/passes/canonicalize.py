"""Canonicalization: the registered canonicalization patterns, to a fixpoint."""

from __future__ import annotations

import attrs

from ...ir.core import Operation
from ..canonicalization import canonicalization_patterns
from ..driver import apply_patterns_greedily
from ..pass_ import Pass, register_pass


@register_pass
@attrs.frozen
class Canonicalize(Pass):
    """Apply every registered canonicalization pattern (see
    :mod:`ptxc.rewrite.canonicalization`) with the greedy driver until none fires, erasing pure
    ops that become unused on the way. ``max-iterations`` bounds the driver's sweeps;
    ``verify-patterns`` verifies the IR after every single rewrite (to find a broken pattern).

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<4xf32>):
            %a = "graph.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32> loc("relu_1")
            %b = "graph.add"(%a, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> loc("add_1")
            %y = "graph.add"(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> loc("add_2")
            "func.return"(%y) : (tensor<4xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<4xf32>) -> (tensor<4xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<4xf32>):
            %y = "graph.add"(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> loc("add_2")
            "func.return"(%y) : (tensor<4xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<4xf32>) -> (tensor<4xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "canonicalize"
    max_iterations: int = 10
    verify_patterns: bool = False

    def run(self, module: Operation) -> bool:
        return apply_patterns_greedily(module, canonicalization_patterns(),
                                       max_iterations=self.max_iterations,
                                       verify_each=self.verify_patterns)
