"""Concat elimination: producers write straight into their slices of a concat's result.

A ``graph.concat`` is marked ``in_place = true`` (see the Concat op spec): bufferization allocates
only the result and gives each operand's producer an alias (a view) into its slice, so no copy is
left. The meaning does not change, so the interpreter still concatenates. A concat can be in
place when every operand

* is the result of an op: not a function argument (its buffer is the caller's) and not a
  constant (a global weight, not written by anyone);
* is not a function result too (it has its own output binding);
* is not itself a view of another tensor (a ``graph.split`` / ``graph.slice`` result or a
  ``graph.reshape`` / ``flatten`` / ``squeeze`` / ``unsqueeze``: bufferization aliases those to
  their source, so they cannot alias the concat as well). The exception is a ``graph.split`` of
  a value that nothing else reads (a layer merged by merge-siblings whose first branch goes
  straight to a concat, as Inception's 1x1 branch): that value needs no buffer of its own, so
  its producer writes each split result's channel range into that result's buffer, which for
  this operand is its slice of the concat (TensorRT's merged 1x1 layer writing into the
  eliminated concat);
* appears once in this concat and in no other concat (one tensor has one place to live).

Other readers of an operand are fine: they read the slice. An operand that is itself an in-place
concat is fine too (nested aliases: DenseNet's chain ``concat(concat(concat(x0, x1), x2), x3)``
ends up as one buffer with every layer writing its own channels). A concat that stays a copy says
why in ``--explain`` ("concat_9 stays a copy: operand #0 is the function argument 'x'").

The pass also re-checks concats that are already marked and clears the mark where an earlier
rewrite broke the rule; and it removes concats that undo a split (every result of a
``graph.split``, in order, along its axis: the split's input instead), which is what horizontal
merging leaves when the merged siblings were concatenated.
"""

from __future__ import annotations

import attrs

from ...ir.core import BlockArgument, Operation, Value
from ...ir.spec import lookup
from ..driver import apply_patterns_greedily
from ..pass_ import Pass, register_pass
from ..pattern import RewritePattern, producer
from .fold_batchnorm import label

#: ops whose result bufferizes to a view of their operand
VIEW_OPS = frozenset({"graph.split", "graph.slice", "graph.reshape", "graph.flatten",
                      "graph.squeeze", "graph.unsqueeze"})


def _arg_name(v: BlockArgument) -> str:
    owner = v.block.parent_op
    names = owner.attributes.get("arg_names") if owner is not None else None
    if names and v.index < len(names):
        return names[v.index]
    return v.name_hint or f"#{v.index}"


def scatters(split: Operation) -> bool:
    """Whether ``split`` has no buffer of its own to be a view of: it is a ``graph.split`` of an op
    result (not a constant, not a view) that nothing else reads, so the producer of its input can
    write each of its results' channel ranges straight into that result's buffer (what
    merge-siblings leaves: a merged layer whose split results go to different places)."""
    if split.name != "graph.split":
        return False
    src = split.operands[0]
    p = producer(src)
    if p is None or p.name in VIEW_OPS or p.name in ("graph.constant", "graph.constant_of_shape"):
        return False
    return len(src.uses) == 1


def operand_reason(concat: Operation, i: int, v: Value) -> str | None:
    """Why operand ``i`` (``v``) of ``concat`` cannot be written in place; None when it can."""
    if isinstance(v, BlockArgument):
        return f"operand #{i} is the function argument '{_arg_name(v)}'"
    p = producer(v)
    spec = lookup(p.name)
    if p.name in ("graph.constant", "graph.constant_of_shape") or (
            spec is not None and spec.has_trait("constant")):
        return f"operand #{i} is the constant '{label(p)}'"
    j = concat.operands.index(v)
    if j != i:
        return f"operand #{i} repeats operand #{j}"
    if p.name in VIEW_OPS and not scatters(p):
        return f"operand #{i} is a view ({p.name} '{label(p)}') of another tensor"
    if any(u.op.name == "func.return" for u in v.uses):
        return f"operand #{i} ({label(p)}) is also a function result"
    for u in v.uses:
        if u.op.name == "graph.concat" and u.op is not concat:
            return f"operand #{i} ({label(p)}) is also an operand of {label(u.op)}"
    return None


def why_copy(concat: Operation) -> str | None:
    """The first reason ``concat`` must stay a copy; None when it can be in place."""
    for i, v in enumerate(concat.operands):
        r = operand_reason(concat, i, v)
        if r is not None:
            return r
    return None


class ConcatOfSplit(RewritePattern):
    """``concat(..., split(x)#0, ..., split(x)#n-1, ...)`` along the split's axis, every result of
    the split in order -> ``concat(..., x, ...)``, and a concat of one operand -> that operand
    (what merge-siblings leaves when the merged siblings were concatenated, as in Inception's
    and SqueezeNet's modules and Q/K/V projections)."""

    root = "graph.concat"
    benefit = 2

    def match_and_rewrite(self, op, rewriter):
        if len(op.operands) == 1:
            rewriter.replace_op(op, [op.operands[0]])
            return True
        axis = op.attr("axis")
        for i, v in enumerate(op.operands):
            p = producer(v)
            if p is None or p.name != "graph.split" or v is not p.results[0] or \
                    p.attr("axis") != axis or len(p.results) < 2:
                continue
            n = len(p.results)
            if list(op.operands[i:i + n]) != list(p.results):
                continue
            rest = list(op.operands[:i]) + [p.operands[0]] + list(op.operands[i + n:])
            if len(rest) == 1:
                rewriter.replace_op(op, [rest[0]])
            else:
                new = rewriter.create("graph.concat", [rest], dict(op.attributes), loc=op.loc)
                rewriter.replace_op(op, new.results)
            return True
        return False


class MarkConcatInPlace(RewritePattern):
    """concat -> concat {in_place = true} when every operand can be written into its slice."""

    root = "graph.concat"

    def match_and_rewrite(self, op, rewriter):
        reason = why_copy(op)
        marked = op.attr("in_place") is True
        if reason is None:
            if marked:
                return False
            rewriter.set_attr(op, "in_place", True)
            return True
        if marked:  # an earlier rewrite broke the rule: back to a copy
            rewriter.set_attr(op, "in_place", None)
            return True
        return rewriter.fail(op, f"{label(op)} stays a copy: {reason}")


@register_pass
@attrs.frozen
class EliminateConcat(Pass):
    """Mark concats whose operands can be written straight into their slices of the result as
    ``in_place`` (an alias, not a copy; see :mod:`ptxc.rewrite.passes.eliminate_concat`);
    ``--explain`` says why the others stay copies.

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<1x2x4xf32>):
            %a = "graph.relu"(%x) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> loc("relu_1")
            %b = "graph.sigmoid"(%x) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> loc("sigmoid_2")
            %c = "graph.concat"(%a, %b) {axis = 1} : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x4x4xf32> loc("concat_3")
            %d = "graph.concat"(%x, %c) {axis = 1} : (tensor<1x2x4xf32>, tensor<1x4x4xf32>) -> tensor<1x6x4xf32> loc("concat_4")
            "func.return"(%d) : (tensor<1x6x4xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<1x2x4xf32>) -> (tensor<1x6x4xf32>), result_names = ["d"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<1x2x4xf32>):
            %a = "graph.relu"(%x) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> loc("relu_1")
            %b = "graph.sigmoid"(%x) : (tensor<1x2x4xf32>) -> tensor<1x2x4xf32> loc("sigmoid_2")
            %c = "graph.concat"(%a, %b) {axis = 1, in_place = true} : (tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x4x4xf32> loc("concat_3")
            %d = "graph.concat"(%x, %c) {axis = 1} : (tensor<1x2x4xf32>, tensor<1x4x4xf32>) -> tensor<1x6x4xf32> loc("concat_4")
            "func.return"(%d) : (tensor<1x6x4xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<1x2x4xf32>) -> (tensor<1x6x4xf32>), result_names = ["d"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "eliminate-concat"

    def run(self, module: Operation) -> bool:
        return apply_patterns_greedily(module, [ConcatOfSplit, MarkConcatInPlace])
