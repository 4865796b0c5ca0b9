"""The ``recognize-patterns`` pass: decomposed subgraphs, as exporters leave them, rewritten into
the single graph ops that have them (GELU, LayerNorm, softmax, HardSwish).

One module per recognizer (gelu, layer_norm, softmax, hard_swish, attention); the matching helpers in
``match``, the pattern base in ``common``. The pass is in the pass table
(:func:`ptxc.rewrite.passes.all_passes`).
"""

from __future__ import annotations

import attrs

from ....ir.core import Operation
from ...driver import apply_patterns_greedily
from ...pass_ import Pass, register_pass
from .attention import RecognizeAttention
from .gelu import RecognizeGelu
from .hard_swish import RecognizeHardSwish
from .layer_norm import FoldLayerNormBias, FoldLayerNormScale, RecognizeLayerNorm
from .softmax import RecognizeSoftmax

#: the patterns of the pass, in the order the driver tries them on one op
PATTERNS = (RecognizeGelu, RecognizeHardSwish, RecognizeSoftmax, RecognizeLayerNorm,
            FoldLayerNormScale, FoldLayerNormBias, RecognizeAttention)


@register_pass
@attrs.frozen
class RecognizePatterns(Pass):
    """Rewrite decomposed subgraphs into the graph ops that have them:

    * Erf-GELU ``x * 0.5 * (1 + erf(x / sqrt 2))`` -> ``graph.gelu``; the tanh form
      ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` -> ``graph.gelu`` (``approximate =
      "tanh"``);
    * LayerNorm ``(x - mean) / sqrt(var + eps) * gamma + beta`` over trailing axes ->
      ``graph.layer_normalization`` (also ``* reciprocal(sqrt(...))``; gamma, beta optional);
    * softmax ``exp(x) / reduce_sum(exp(x))`` (after ``x - reduce_max(x)`` or not) ->
      ``graph.softmax``;
    * HardSwish ``x * hard_sigmoid(x)`` (alpha 1/6) or ``x * relu6(x + 3) / 6`` ->
      ``graph.hard_swish``;
    * attention ``softmax(scale * Q @ Kt [+ mask]) @ V`` (exported chains and the ONNX Attention
      converter's composition) -> ``graph.attention``, softmax in f32 (recognize/attention.py
      has its own before/after example).

    Operand orders and associations vary as exporters write them; constants match by value
    within a few ulps of their type. Every intermediate must have no reader outside the pattern;
    when one has, or a constant or axis is off, ``--explain`` says so at the root op ("mul_5 not
    recognized as GELU: div_1 has 2 users"). The new op takes the root's loc and result name and
    lists the absorbed ops' locs in ``ptxc.fused``.

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x4xf32>):
            %c1 = "graph.constant"() {value = dense<1.4142135> : tensor<f32>} : () -> tensor<f32>
            %d = "graph.div"(%x, %c1) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32> loc("div_1")
            %e = "graph.erf"(%d) : (tensor<2x4xf32>) -> tensor<2x4xf32> loc("erf_2")
            %c2 = "graph.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
            %a = "graph.add"(%e, %c2) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32> loc("add_3")
            %m = "graph.mul"(%x, %a) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32> loc("mul_4")
            %c3 = "graph.constant"() {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
            %y = "graph.mul"(%m, %c3) : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32> loc("mul_5")
            "func.return"(%y) : (tensor<2x4xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<2x4xf32>) -> (tensor<2x4xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x4xf32>):
            %y = "graph.gelu"(%x) {approximate = "none", ptxc.fused = ["div_1", "erf_2", "add_3", "mul_4"]} : (tensor<2x4xf32>) -> tensor<2x4xf32> loc("mul_5")
            "func.return"(%y) : (tensor<2x4xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<2x4xf32>) -> (tensor<2x4xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "recognize-patterns"
    max_iterations: int = 10

    def run(self, module: Operation) -> bool:
        return apply_patterns_greedily(module, PATTERNS, max_iterations=self.max_iterations)


__all__ = ["RecognizePatterns", "PATTERNS", "RecognizeAttention", "RecognizeGelu",
           "RecognizeHardSwish", "RecognizeSoftmax", "RecognizeLayerNorm", "FoldLayerNormScale", "FoldLayerNormBias"]
