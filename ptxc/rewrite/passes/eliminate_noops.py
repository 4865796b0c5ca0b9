"""No-op elimination: layers that compute nothing are replaced by their input, and a
``graph.split`` whose outputs are partly unused is narrowed to slices of the used ones.

What counts as a no-op (each rule is exact: the result equals the operand bit for bit, NaN and
-0.0 included):

* ``graph.identity`` and ``graph.dropout`` (inference mode), always;
* ``graph.reshape``, ``graph.flatten``, ``graph.squeeze``, ``graph.unsqueeze`` and
  ``graph.expand`` whose result type equals the operand's type;
* ``graph.transpose`` with the identity permutation; ``graph.cast`` to the operand's own type;
* ``graph.pad`` whose pads are all zero (any mode);
* ``graph.concat``, ``graph.sum``, ``graph.max``, ``graph.min``, ``graph.mean`` of one operand
  whose type is the result's;
* ``graph.slice`` that keeps every element in order (each axis with step 1 from 0 to its
  extent, or of extent at most 1); ``graph.split`` with one result; ``graph.tile`` whose
  repeats are all 1.

Arithmetic identities with constants (``x + 0``, ``x * 1``) are deliberately left out: they are
exact only up to the sign of zero.

Every pattern here is also a canonicalization pattern (listed in :data:`CANONICALIZATIONS`,
which :func:`ptxc.rewrite.passes.all_canonicalizations` gathers), so ``canonicalize`` applies
them too; the split narrowing only where one result is used, so that it never adds ops (one
split becomes one slice). Replacing ``%y = noop(%x)`` by ``%x`` keeps ``%x``'s name; an output of the function
that was such a ``%y`` is returned as ``%x`` under its own binding name (the function's
``result_names`` are unchanged).
"""

from __future__ import annotations

import attrs

from ...ir.core import Operation
from ..driver import apply_patterns_greedily
from ..pass_ import Pass, register_pass
from ..pattern import RewritePattern
from ..rewriter import PatternRewriter


class ForwardNoop(RewritePattern):
    """Base: replace a one-result op whose result type is its first operand's type, and which
    :meth:`is_noop` says computes nothing, by that operand. Subclasses set ``root``."""

    def is_noop(self, op: Operation) -> bool:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> bool:
        if (len(op.results) != 1 or not op.operands
                or op.results[0].type != op.operands[0].type or not self.is_noop(op)):
            return False
        rewriter.replace_op(op, [op.operands[0]])
        return True


def _always(self, op):
    return True


def _declare(cls_name: str, root: str, is_noop, doc: str) -> type[ForwardNoop]:
    return type(cls_name, (ForwardNoop,), {"root": root, "is_noop": is_noop, "__doc__": doc,
                                           "__module__": __name__})


def _perm_is_identity(self, op):
    return tuple(op.attr("perm")) == tuple(range(len(op.attr("perm"))))


def _pads_are_zero(self, op):
    return all(p == 0 for p in op.attr("pads"))


def _one_operand(self, op):
    return len(op.operands) == 1


def _repeats_are_one(self, op):
    return all(r == 1 for r in op.attr("repeats"))


def _slice_keeps_all(self, op):
    shape = op.operands[0].type.shape
    return all(d <= 1 or (s == 0 and e == d and st == 1)
               for d, s, e, st in zip(shape, op.attr("starts"), op.attr("ends"),
                                      op.attr("steps")))


def _one_result(self, op):
    return len(op.results) == 1


RemoveIdentity = _declare("RemoveIdentity", "graph.identity", _always,
                          "identity(x) -> x")
RemoveDropout = _declare("RemoveDropout", "graph.dropout", _always,
                         "dropout(x) -> x (inference)")
RemoveNoopReshape = _declare("RemoveNoopReshape", "graph.reshape", _always,
                             "reshape(x) -> x when the shape does not change")
RemoveNoopFlatten = _declare("RemoveNoopFlatten", "graph.flatten", _always,
                             "flatten(x) -> x when the shape does not change")
RemoveNoopSqueeze = _declare("RemoveNoopSqueeze", "graph.squeeze", _always,
                             "squeeze(x) -> x when no axis is removed")
RemoveNoopUnsqueeze = _declare("RemoveNoopUnsqueeze", "graph.unsqueeze", _always,
                               "unsqueeze(x) -> x when no axis is inserted")
RemoveNoopExpand = _declare("RemoveNoopExpand", "graph.expand", _always,
                            "expand(x) -> x when the shape does not change")
RemoveNoopCast = _declare("RemoveNoopCast", "graph.cast", _always,
                          "cast(x) -> x when x already has the target type")
RemoveIdentityTranspose = _declare("RemoveIdentityTranspose", "graph.transpose",
                                   _perm_is_identity, "transpose(x, [0, 1, ...]) -> x")
RemoveZeroPad = _declare("RemoveZeroPad", "graph.pad", _pads_are_zero,
                         "pad(x) -> x when every pad is 0")
RemoveSingleConcat = _declare("RemoveSingleConcat", "graph.concat", _one_operand,
                              "concat(x) -> x")
RemoveSingleSum = _declare("RemoveSingleSum", "graph.sum", _one_operand, "sum(x) -> x")
RemoveSingleMax = _declare("RemoveSingleMax", "graph.max", _one_operand, "max(x) -> x")
RemoveSingleMin = _declare("RemoveSingleMin", "graph.min", _one_operand, "min(x) -> x")
RemoveSingleMean = _declare("RemoveSingleMean", "graph.mean", _one_operand, "mean(x) -> x")
RemoveFullSlice = _declare("RemoveFullSlice", "graph.slice", _slice_keeps_all,
                           "slice(x) -> x when it keeps every element in order")
RemoveSingleSplit = _declare("RemoveSingleSplit", "graph.split", _one_result,
                             "split(x) with one result -> x")
RemoveUnitTile = _declare("RemoveUnitTile", "graph.tile", _repeats_are_one,
                          "tile(x, [1, 1, ...]) -> x")


class SplitUnusedOutputs(RewritePattern):
    """A ``graph.split`` with some results unused becomes one ``graph.slice`` per used result
    (the same elements, so exact; each slice keeps the split's loc and its result's name).
    A split whose results are all used, or all unused (dead: the driver erases it), stays.

    ``max_used`` (None: any number) limits how many used results it rewrites: the instance
    registered for ``canonicalize`` takes 1, so that canonicalization never adds ops."""

    root = "graph.split"

    def __init__(self, max_used: int | None = None):
        self.max_used = max_used

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> bool:
        used = [r for r in op.results if r.uses]
        if not used or len(used) == len(op.results):
            return False
        if self.max_used is not None and len(used) > self.max_used:
            return False
        t = op.operands[0].type
        axis = op.attr("axis")
        offset = 0
        for r, size in zip(op.results, op.attr("split")):
            if r.uses:
                starts, ends = [0] * t.rank, list(t.shape)
                starts[axis], ends[axis] = offset, offset + size
                s = rewriter.create("graph.slice", [op.operands[0]],
                                    {"starts": starts, "ends": ends, "steps": [1] * t.rank},
                                    result_names=[r.name_hint])
                rewriter.replace_all_uses_with(r, s.result)
            offset += size
        rewriter.erase_op(op)
        return True


#: the patterns of ``eliminate-noops``, in the order they are tried
NOOP_PATTERNS = (RemoveIdentity, RemoveDropout, RemoveNoopReshape, RemoveNoopFlatten,
                 RemoveNoopSqueeze, RemoveNoopUnsqueeze, RemoveNoopExpand, RemoveNoopCast,
                 RemoveIdentityTranspose, RemoveZeroPad, RemoveSingleConcat, RemoveSingleSum,
                 RemoveSingleMax, RemoveSingleMin, RemoveSingleMean, RemoveFullSlice,
                 RemoveSingleSplit, RemoveUnitTile, SplitUnusedOutputs())

#: the canonicalization patterns of this module, in order: the no-ops, and the split narrowing
#: only where one result is used (so that canonicalization never adds ops)
CANONICALIZATIONS = NOOP_PATTERNS[:-1] + (SplitUnusedOutputs(max_used=1),)


@register_pass
@attrs.frozen
class EliminateNoops(Pass):
    """Remove layers that compute nothing (Identity, Dropout, reshapes, casts, expands, pads,
    tiles, slices and transposes that change nothing, Concat/Sum/Max/Min/Mean of one input,
    Split with one output) and narrow a Split with unused outputs to slices of the used ones;
    see :mod:`ptxc.rewrite.passes.eliminate_noops` for the exact rules. Pure ops left unused
    are erased.

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x4xf32>):
            %i = "graph.identity"(%x) : (tensor<2x4xf32>) -> tensor<2x4xf32> loc("identity_1")
            %t = "graph.transpose"(%i) {perm = [0, 1]} : (tensor<2x4xf32>) -> tensor<2x4xf32> loc("transpose_2")
            %a, %b = "graph.split"(%t) {axis = 1, split = [3, 1]} : (tensor<2x4xf32>) -> (tensor<2x3xf32>, tensor<2x1xf32>) loc("split_3")
            %y = "graph.dropout"(%a) {ratio = 0.5} : (tensor<2x3xf32>) -> tensor<2x3xf32> loc("dropout_4")
            "func.return"(%y) : (tensor<2x3xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<2x4xf32>) -> (tensor<2x3xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x4xf32>):
            %a = "graph.slice"(%x) {ends = [2, 3], starts = [0, 0], steps = [1, 1]} : (tensor<2x4xf32>) -> tensor<2x3xf32> loc("split_3")
            "func.return"(%a) : (tensor<2x3xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<2x4xf32>) -> (tensor<2x3xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "eliminate-noops"

    def run(self, module: Operation) -> bool:
        return apply_patterns_greedily(module, NOOP_PATTERNS)
