"""graph -> tensor: every graph op becomes tensor-dialect ops (docs/lowering.md, "graph -> tensor").

One module per op family registers its lowerings (common.py says what a lowering is):
elementwise.py (scalar forms, batch norm, pow), nn.py (conv, conv_transpose, pad), pool.py,
norm.py (instance/layer norm, LRN, softmax), resize.py, linalg.py (matmul, gemm), shape.py,
reduce.py, fused.py (fused_conv/gemm/matmul).

The lowering walks each function in program order, so an op's operands are already tensor
values when it is lowered; the new ops take the graph op's loc (its ONNX node name) and the
value replacing a result takes the result's name. It declares what must be gone after it: no
``graph.*`` op may remain. An op without a lowering, or one whose attributes a lowering cannot
express, is a CompileError listing every such op with its loc, all at once.
"""

from __future__ import annotations

import attrs

from ...dialects.func import func_body, functions
from ...errors import CompileError
from ...ir.builder import Builder
from ...ir.core import Operation
from ...rewrite.pass_ import Pass, register_pass
from ...rewrite.passes.dce import erase_dead_ops
from . import elementwise, fused, linalg, nn, norm, pool, reduce, resize, shape  # noqa: F401
from . import quant  # noqa: F401
from . import attention, einsum, gather_scatter, positional, sample, topk  # noqa: F401
from .common import LOWERINGS, Unsupported

elementwise.register_form_lowerings(LOWERINGS)


def _graph_ops(root: Operation) -> list[Operation]:
    return [op for op in root.walk() if op.name.startswith("graph.")]


def _fail(problems: list[str]) -> None:
    raise CompileError(f"lower-graph-to-tensor: {len(problems)} graph op(s) not lowered:\n  "
                       + "\n  ".join(problems))


def _new_ops(block, prev, op) -> list[Operation]:
    out = []
    cur = prev.next_op if prev is not None else block.first_op
    while cur is not None and cur is not op:
        out.append(cur)
        cur = cur.next_op
    return out


def lower_graph_to_tensor(module: Operation) -> bool:
    """Lower every graph op of every function of ``module`` in place; returns whether anything
    changed. Raises CompileError naming each op that could not be lowered."""
    missing = [f"{op.where}: no lowering for {op.name}" for op in _graph_ops(module)
               if op.name not in LOWERINGS and op.name != "graph.yield"]
    if missing:
        _fail(missing)
    problems: list[str] = []
    changed = False
    for f in functions(module):
        block = func_body(f)
        for op in list(block.ops):
            fn = LOWERINGS.get(op.name)
            if fn is None:
                continue
            prev = op.prev_op
            try:
                values = fn(op, Builder.before_op(op))
            except Unsupported as e:
                problems.append(f"{op.where}: {e}")
                for dead in reversed(_new_ops(block, prev, op)):
                    dead.erase()
                continue
            new = _new_ops(block, prev, op)
            created = {id(r) for o in new for r in o.results}
            for o in new:
                if o.loc is None:
                    o.loc = op.loc
            for r, v in zip(op.results, values, strict=True):
                if id(v) in created and v.name_hint is None:
                    v.name_hint = r.name_hint
                r.replace_all_uses_with(v)
            op.erase()
            changed = True
    if changed:
        erase_dead_ops(module)  # e.g. constants whose one element went into a body
    left = _graph_ops(module)
    if problems or left:
        known = {p.split(":")[0] for p in problems}
        _fail(problems + [f"{op.where}: left behind" for op in left
                          if op.name != "graph.yield" and op.where not in known])
    return changed


@register_pass
@attrs.frozen
class LowerGraphToTensor(Pass):
    """Lower every graph op to the tensor dialect: elementwise ops to generics with their scalar
    form as body, conv/gemm/pools/reductions to named structured ops on padded inputs and filled
    inits, data movement to slices and reshapes (docs/lowering.md). No graph op may remain: one
    that cannot be lowered is a CompileError naming it.

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x3xf32>):
            %y = "graph.relu"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32> loc("relu1")
            "func.return"(%y) : (tensor<2x3xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x3xf32>):
            %0 = "tensor.empty"() : () -> tensor<2x3xf32> loc("relu1")
            %y = "tensor.generic"(%x, %0) ({
            ^bb0(%1: f32, %2: f32):
              %3 = "arith.constant"() {type = f32, value = 0.0} : () -> f32
              %4 = "arith.max"(%1, %3) : (f32, f32) -> f32
              "tensor.yield"(%4) : (f32) -> ()
            }) {bounds = [2, 3], indexing_maps = [[[1, 0, 0], [0, 1, 0]], [[1, 0, 0], [0, 1, 0]]], iterator_types = ["parallel", "parallel"], operand_segments = [1, 1]} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32> loc("relu1")
            "func.return"(%y) : (tensor<2x3xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "lower-graph-to-tensor"

    def run(self, module: Operation) -> bool:
        return lower_graph_to_tensor(module)
