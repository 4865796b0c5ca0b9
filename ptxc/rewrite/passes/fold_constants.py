"""Constant folding: graph ops whose value is known at compile time become ``graph.constant``.

An op is folded when it is a pure ``graph.*`` op without regions (and not itself a constant),
every result is a tensor, and

* every operand is the result of a ``graph.constant`` (ops without operands, such as
  ``graph.constant_of_shape``, qualify: the light model-zoo models make all their weights that
  way), or
* the op is ``shape_only`` (``graph.shape``): its value depends on its operands' types alone,
  so it folds whatever produces them.

The value is the op's own reference semantics (``spec.reference``, run with an
:class:`~ptxc.ir.interpreter.Interpreter`), so folding computes exactly what interpreting the
op would. A ``shape_only`` op is handed zero-strided arrays of its operands' shapes and dtypes
(no memory, no values). Chains fold one op at a time through the greedy driver:
Shape -> Gather -> Concat computing a shape ends as one constant.

Each new constant takes the folded op's loc and the name of the value it replaces; the constants
that fed it are erased once nothing reads them. ``max-elements`` (0: no limit) leaves ops whose
results would hold more elements unfolded (an op that broadcasts a small constant into a large
one, say), and says so under ``--explain``, as it does for an op whose reference semantics fail on
its constant operands (an out-of-range gather index: left for run time to report).
"""

from __future__ import annotations

import attrs
import numpy as np

from ...ir.attributes import DenseElements
from ...ir.core import Operation
from ...ir.interpreter import Interpreter
from ...ir.types import TensorType
from ..driver import apply_patterns_greedily
from ..explain import op_location
from ..pass_ import Pass, register_pass
from ..pattern import RewritePattern, producer
from ..rewriter import PatternRewriter


#: ops left unfolded: a DequantizeLinear of an int8 weight is what fold-qdq turns into an int8
#: layer (it folds the DQs it does not absorb itself)
LEFT_TO_FOLD_QDQ = frozenset({"graph.dequantize_linear"})


def constant_value(v) -> np.ndarray | None:
    """The array of ``v`` when a ``graph.constant`` defines it, else None."""
    p = producer(v)
    if p is not None and p.name == "graph.constant":
        return p.attributes["value"].array
    return None


def _label(op: Operation) -> str:
    return op_location(op) or op.name


class FoldConstantOp(RewritePattern):
    """Evaluate a pure graph op on constant operands (or a ``shape_only`` op on any operands)
    and replace it by ``graph.constant`` ops; see the module docstring."""

    root = None

    def __init__(self, max_elements: int = 0):
        self.max_elements = max_elements

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> bool:
        spec = op.spec
        if op.name in LEFT_TO_FOLD_QDQ:
            return False
        if (spec is None or not op.name.startswith("graph.") or op.regions or not op.results
                or not spec.has_trait("pure") or spec.has_trait("constant")
                or not all(isinstance(r.type, TensorType) for r in op.results)):
            return False
        shape_only = spec.has_trait("shape_only")
        args = []
        for v in op.operands:
            x = constant_value(v)
            if x is None:
                if not shape_only or not isinstance(v.type, TensorType):
                    return False
                x = np.broadcast_to(np.zeros((), v.type.element.np_dtype), v.type.shape)
            args.append(x)
        size = sum(r.type.size for r in op.results)
        if self.max_elements and size > self.max_elements:
            return rewriter.fail(op, f"{_label(op)} not folded: its result has {size} elements, "
                                     f"more than max-elements={self.max_elements}")
        try:
            outs = spec.reference(op, args, Interpreter())
        except Exception as e:  # noqa: BLE001 - left for run time, and said why
            return rewriter.fail(op, f"{_label(op)} not folded: its reference semantics fail on "
                                     f"its constant operands: {type(e).__name__}: {e}")
        arrays = []
        for r, x in zip(op.results, outs, strict=True):
            x = np.asarray(x)
            if x.shape != r.type.shape or x.dtype != r.type.element.np_dtype:
                return rewriter.fail(op, f"{_label(op)} not folded: its reference gave "
                                         f"{x.dtype}{list(x.shape)} for {r.type}")
            arrays.append(x)
        values = []
        for r, x in zip(op.results, arrays):
            c = rewriter.create("graph.constant", [], {"value": DenseElements(x, r.type)},
                                loc=op.loc, result_names=[r.name_hint])
            values.append(c.result)
        rewriter.replace_op(op, values)
        return True


@register_pass
@attrs.frozen
class FoldConstants(Pass):
    """Replace ops computable at compile time by constants: pure graph ops whose operands are
    all ``graph.constant`` (ConstantOfShape weights, arithmetic on weights, Shape/Gather/Concat
    shape chains) and ``graph.shape`` of anything. ``max-elements`` (0: unlimited) bounds the
    elements of a folded result. See :mod:`ptxc.rewrite.passes.fold_constants`.

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x3xf32>):
            %w = "graph.constant_of_shape"() {shape = [3], value = dense<[2.0]> : tensor<1xf32>} : () -> tensor<3xf32> loc("ConstantOfShape_0")
            %c = "graph.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
            %wc = "graph.mul"(%w, %c) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32> loc("mul_1")
            %s = "graph.shape"(%x) : (tensor<2x3xf32>) -> tensor<2xi64> loc("shape_2")
            %y = "graph.add"(%x, %wc) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32> loc("add_3")
            "func.return"(%y, %s) : (tensor<2x3xf32>, tensor<2xi64>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2xi64>), result_names = ["y", "s"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x3xf32>):
            %wc = "graph.constant"() {value = dense<[2.0, 4.0, 6.0]> : tensor<3xf32>} : () -> tensor<3xf32> loc("mul_1")
            %s = "graph.constant"() {value = dense<[2, 3]> : tensor<2xi64>} : () -> tensor<2xi64> loc("shape_2")
            %y = "graph.add"(%x, %wc) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32> loc("add_3")
            "func.return"(%y, %s) : (tensor<2x3xf32>, tensor<2xi64>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2xi64>), result_names = ["y", "s"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "fold-constants"
    max_elements: int = attrs.field(default=0, validator=attrs.validators.ge(0))

    def run(self, module: Operation) -> bool:
        return apply_patterns_greedily(module, [FoldConstantOp(self.max_elements)])
