"""Common-subexpression elimination."""

from __future__ import annotations

import attrs

from ...ir.attributes import DenseElements
from ...ir.core import Block, Operation
from ...ir.spec import lookup
from ..pass_ import Pass, register_pass


def _attr_key(v):
    """A hashable key under which two attribute values are equal only when they mean the same
    (so 1, 1.0 and True differ, and so do 0.0 and -0.0)."""
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, int):
        return ("i", v)
    if isinstance(v, float):
        return ("f", v.hex())  # nan never equals nan: its hex does, which is what we want here
    if isinstance(v, str):
        return ("s", v)
    if isinstance(v, tuple):
        return ("t",) + tuple(_attr_key(x) for x in v)
    if isinstance(v, DenseElements):
        return ("d", v)
    try:
        hash(v)
    except TypeError:
        return ("id", id(v))
    return (type(v).__name__, v)


def op_key(op: Operation):
    """The key under which ``op`` is interchangeable with an earlier op, or None if it never is:
    pure, no regions, at least one result; same name, operands (in any order when commutative),
    attributes and result types."""
    spec = lookup(op.name)
    if spec is None or not spec.has_trait("pure") or op.regions or not op.results:
        return None
    operands = tuple(op.operands)
    if spec.has_trait("commutative"):
        operands = tuple(sorted(operands, key=id))
    attrs_key = tuple(sorted((k, _attr_key(v)) for k, v in op.attributes.items()))
    return (op.name, operands, attrs_key, tuple(r.type for r in op.results))


def eliminate_common_subexpressions(root: Operation) -> int:
    """Replace each pure op equal to an earlier op that dominates it by that op; returns how many
    ops were removed."""
    return sum(_block(b, []) for r in root.regions for b in r.blocks)


def _block(block: Block, outer: list[dict]) -> int:
    table: dict = {}
    scopes = outer + [table]
    n = 0
    for op in list(block.ops):
        if op.regions:
            spec = lookup(op.name)
            inner = [] if spec is not None and spec.has_trait("isolated") else scopes
            n += sum(_block(b, inner) for r in op.regions for b in r.blocks)
            continue
        key = op_key(op)
        if key is None:
            continue
        same = next((s[key] for s in reversed(scopes) if key in s), None)
        if same is None:
            table[key] = op
            continue
        for old, new in zip(op.results, same.results):
            old.replace_all_uses_with(new)
        op.erase()
        n += 1
    return n


@register_pass
@attrs.frozen
class CommonSubexpressionElimination(Pass):
    """Merge identical pure ops: same op, same operands (in any order for commutative ops), same
    attributes and result types. The first one stays (with its name and location) and the later
    ones read it; equal constants are merged too.

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
            %a = "graph.add"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> loc("add_1")
            %b = "graph.add"(%y, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> loc("add_2")
            %ra = "graph.relu"(%a) : (tensor<4xf32>) -> tensor<4xf32> loc("relu_1")
            %rb = "graph.relu"(%b) : (tensor<4xf32>) -> tensor<4xf32> loc("relu_2")
            %s = "graph.add"(%ra, %rb) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> loc("add_3")
            "func.return"(%s) : (tensor<4xf32>) -> ()
          }) {arg_names = ["x", "y"], function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>), result_names = ["s"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
            %a = "graph.add"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> loc("add_1")
            %ra = "graph.relu"(%a) : (tensor<4xf32>) -> tensor<4xf32> loc("relu_1")
            %s = "graph.add"(%ra, %ra) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> loc("add_3")
            "func.return"(%s) : (tensor<4xf32>) -> ()
          }) {arg_names = ["x", "y"], function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>), result_names = ["s"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "cse"

    def run(self, module: Operation) -> bool:
        return eliminate_common_subexpressions(module) > 0
