"""tensor -> loop: bufferization and loop nests (docs/lowering.md, "Bufferization" and "The loop
dialect").

* storage.py: roots (arguments, outputs, scratch buffers, weights) and places (layouts on them);
* plan.py: the analysis: fusions into loop nests (inlined inits, epilogues), where each tensor
  is written (demands: outputs, concat slices, pad interiors, scattered splits);
* nest_spec.py: what one loop nest computes (bodies, where their operands come from, where
  the results go);
* nest.py: loop nests of structured ops with accumulators carried in registers;
* scope.py: insertion points inside a nest, with the scalars cached per level;
* data.py: fills, pad borders, copies;
* named.py: named ops as generics (f16 sums with an f32 accumulator);
* function.py: the new loop-level function, op by op.

The pass declares what must be gone after it: no ``tensor.*`` op; an op it cannot lower is a
CompileError listing every such op with its loc, all at once.

Decisions beyond docs/lowering.md (which names ``bufferize.py`` and ``tensor_to_loop.py``; this
is one package because the analysis decides what the nests look like):

* bufferization and lowering are one pass: a loop-level function is the only thing a tensor
  value's buffer can be expressed in (a separate "bufferized tensor" stage would need its own
  interpreter);
* a DPS op reads its init from wherever the init is and writes its result where it is placed;
  the init is copied into the result's buffer only when the out map skips elements (the rest
  must keep the init). In place means the same buffer, chosen when the init is dead afterwards;
* ``tensor.fill`` is not stored unless a view of it is taken: every other reader uses the
  constant (an accumulator's start value, a padded border, an inserted slice);
* named ops are lowered through their generic (same nest, no extra traffic), f16 sums with an
  f32 accumulator as their reference computes;
* loop nests absorb an inlined bias init and a fused epilogue (conv + bias + activation is one
  kernel writing its final result where it is consumed);
* a pad fills only its border; its source's producer writes the interior when it can, and
  the border along the innermost dim too when it is an elementwise nest (plan.py, nest.py);
* an elementwise nest whose innermost dim is one short run (4 to 16 bytes) computes it whole
  per point, so its stores merge into one vector store (nest.py, "Short innermost dims");
* a result named like an input gets a ``_out`` suffix (one name, one binding).
"""

from __future__ import annotations

import attrs

from ...dialects.func import functions, module_body
from ...dialects.tensor import NAMED_OPS
from ...ir.core import Operation
from ...ir.types import TensorType
from ...rewrite.pass_ import Pass, register_pass
from ..tensor_passes import fuse_elementwise
from .function import Lowerer, lower_function  # noqa: F401
from .named import generalize_all


def _is_tensor_function(f: Operation) -> bool:
    ft = f.attributes["function_type"]
    return any(isinstance(t, TensorType) for t in (*ft.inputs, *ft.results)) or any(
        op.name.startswith("tensor.") for op in f.walk())


def lower_tensor_to_loop(module: Operation, jam_min_points: int = 0) -> bool:
    """Lower every tensor-level function of ``module`` to the loop dialect, in place; returns
    whether anything changed. ``jam_min_points``: the pass's option (nest.py, ``jam_pays``)."""
    changed = False
    tensor_funcs = [f for f in functions(module) if _is_tensor_function(f)]
    named = [op for f in tensor_funcs for op in f.walk() if op.name in NAMED_OPS]
    if named:
        for f in tensor_funcs:
            generalize_all(f, wide_too=False)
        fuse_elementwise(module)  # into the generalized named ops (see named.py)
    for f in tensor_funcs:
        new = lower_function(f, jam_min_points)
        module_body(module).insert_before(f, new)
        f.detach()
        changed = True
    return changed


def _check_jam_min_points(instance, attribute, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"jam-min-points must be a count of points >= 0, is {value!r}")


@register_pass
@attrs.frozen
class LowerTensorToLoop(Pass):
    """Bufferize a tensor-level function and lower it to loop nests: arguments become input
    buffers, results output buffers (``loop.outputs``), DPS results are written where they are
    consumed (outputs, concat slices, padded buffers) or in place; each structured op is a
    ``loop.parallel`` with ``loop.for`` reductions carrying their accumulators; slices and
    reshapes are views; constants are ``loop.global``. No tensor op may remain.

    ``jam-min-points`` (0, the default: always): a streaming reduction nest (every load its
    reduction walks moves with every parallel dim: a pool, a Reduce*, softmax's sums) is
    unrolled and jammed along its innermost parallel dim only while it keeps at least this
    many points; below, it has one point per output (nest.py, "Unroll-and-jam": the cuda
    pipeline sets the threads its target holds at once, ``Target.resident_threads``, its SM
    count x threads per SM, so ResNet-50 b32's global average pool has 65536 threads on an
    H200, not 8192).
    Contractions (an operand shared between points) are always jammed; results are
    bit-identical either way.

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x3xf32>):
            %0 = "tensor.empty"() : () -> tensor<2x1xf32>
            %1 = "tensor.fill"(%0) {value = 0.0} : (tensor<2x1xf32>) -> tensor<2x1xf32>
            %s = "tensor.reduce"(%x, %1) {axes = [1], kind = "sum"} : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x1xf32> loc("sum1")
            %2 = "tensor.empty"() : () -> tensor<2x1xf32>
            %y = "tensor.generic"(%s, %2) ({
            ^bb0(%3: f32, %4: f32):
              %5 = "arith.constant"() {type = f32, value = 0.0} : () -> f32
              %6 = "arith.max"(%3, %5) : (f32, f32) -> f32
              "tensor.yield"(%6) : (f32) -> ()
            }) {bounds = [2, 1], indexing_maps = [[[1, 0, 0], [0, 1, 0]], [[1, 0, 0], [0, 1, 0]]], iterator_types = ["parallel", "parallel"], operand_segments = [1, 1]} : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x1xf32> loc("relu1")
            "func.return"(%y) : (tensor<2x1xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<2x3xf32>) -> (tensor<2x1xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: buffer<2x3xf32>, %y: buffer<2x1xf32>):
            "loop.parallel"() ({
            ^bb0(%0: index):
              %1 = "arith.constant"() {type = index, value = 0} : () -> index
              %2 = "arith.constant"() {type = f32, value = 0.0} : () -> f32
              %3 = "loop.for"(%2) ({
              ^bb0(%4: index, %5: f32):
                %6 = "loop.load"(%x, %0, %4) : (buffer<2x3xf32>, index, index) -> f32
                %7 = "arith.add"(%5, %6) : (f32, f32) -> f32
                "loop.yield"(%7) : (f32) -> ()
              }) {lower = 0, upper = 3} : (f32) -> f32
              %8 = "arith.constant"() {type = f32, value = 0.0} : () -> f32
              %9 = "arith.max"(%3, %8) : (f32, f32) -> f32
              "loop.store"(%9, %y, %0, %1) : (f32, buffer<2x1xf32>, index, index) -> ()
              "loop.yield"() : () -> ()
            }) {lower = [0], upper = [2]} : () -> () loc("sum1")
            "func.return"() : () -> ()
          }) {arg_names = ["x", "y"], function_type = (buffer<2x3xf32>, buffer<2x1xf32>) -> (), loop.outputs = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "lower-tensor-to-loop"
    jam_min_points: int = attrs.field(default=0, validator=_check_jam_min_points)

    def run(self, module: Operation) -> bool:
        return lower_tensor_to_loop(module, self.jam_min_points)
