"""The verifier: types, dominance and per-op rules, generic over op specs.

Errors are :class:`~ptxc.errors.VerifyError` naming the op and its origin (ONNX node name):
``"graph.conv" (node 'conv1'): result #0 has type tensor<1x8xf32>, inferred tensor<1x4xf32>``.
"""

from __future__ import annotations

from ..errors import VerifyError
from .attributes import check_kind
from .core import Block, Operation
from .spec import lookup


def _fail(op: Operation, msg: str):
    raise VerifyError(f"{op.where}: {msg}")


def verify_op_local(op: Operation) -> None:
    """Checks of one op against its spec (not its nested regions, not dominance)."""
    spec = lookup(op.name)
    if spec is None:
        _fail(op, "unknown op (no dialect registers it)")
    defs = spec.operand_defs
    n = len(op.operands)
    segmented, fixed, optional, variadic, fixed_r, variadic_r = spec.arity
    if segmented:
        seg = op.attributes.get("operand_segments")
        if not (isinstance(seg, tuple) and len(seg) == len(defs)):
            _fail(op, f"needs operand_segments with {len(defs)} entries")
        if sum(seg) != n:
            _fail(op, f"operand_segments {list(seg)} do not add up to {n} operands")
        for d, k in zip(defs, seg):
            if (d.single and k != 1) or (d.optional and k > 1) or k < 0:
                _fail(op, f"operand group {d.name} has {k} values")
    else:
        if n < fixed or (not variadic and n > fixed + optional):
            want = f"{fixed}" + (f" to {fixed + optional}" if optional else "") + \
                   (" or more" if variadic else "")
            _fail(op, f"has {n} operands, expects {want}")
    if len(op.results) < fixed_r or (len(op.results) != fixed_r and not variadic_r):
        _fail(op, f"has {len(op.results)} results, expects {fixed_r}"
              + (" or more" if variadic_r else ""))
    for name, a in spec.attributes.items():
        if name in op.attributes:
            if not check_kind(op.attributes[name], a.kind):
                _fail(op, f"attribute {name} = {op.attributes[name]!r} is not of kind {a.kind}")
        elif a.required:
            _fail(op, f"missing required attribute {name}")
    for name in op.attributes:
        if name not in spec.attributes and name != "operand_segments" and "." not in name:
            _fail(op, f"unknown attribute {name!r}")
    if len(op.regions) != spec.regions:
        _fail(op, f"has {len(op.regions)} regions, expects {spec.regions}")
    if spec.has_trait("terminator") and op.block is not None and op.block.last_op is not op:
        _fail(op, "is a terminator but not the last op of its block")
    inferred = spec.infer_types(op)
    if inferred is not None:
        if len(inferred) != len(op.results):
            _fail(op, f"has {len(op.results)} results, inferred {len(inferred)}")
        for r, t in zip(op.results, inferred):
            if r.type != t:
                _fail(op, f"result #{r.index} has type {r.type}, inferred {t}")
    spec.verify(op)


def verify(root: Operation) -> None:
    """Verify ``root`` and everything nested in it; raises VerifyError at the first problem."""
    _verify_op(root, set(), {})


def _verify_op(op: Operation, visible: set[int], uses: dict) -> None:
    # nested ops first: their errors are more precise than a container's summary check
    spec = lookup(op.name)
    if spec is None:
        _fail(op, "unknown op (no dialect registers it)")
    inner = set() if spec.has_trait("isolated") else visible
    for region in op.regions:
        for block in region.blocks:
            _verify_block(block, set(inner), uses)
    verify_op_local(op)


def _verify_block(block: Block, visible: set[int], uses: dict) -> None:
    """``uses``: id(value) -> its use-list as {(id(op), index)}, built once per value (a value
    used thousands of times, a thread id in a mapped kernel, was scanned once per use)."""
    for a in block.args:
        visible.add(id(a))
    for op in block.ops:
        for i, v in enumerate(op.operands):
            if id(v) not in visible:
                _fail(op, f"operand #{i} ({v.type}) does not dominate this use")
            listed = uses.get(id(v))
            if listed is None:
                listed = uses[id(v)] = {(id(u.op), u.index) for u in v.uses}
            if (id(op), i) not in listed:
                _fail(op, f"operand #{i} is missing from its value's use-list")
        _verify_op(op, visible, uses)
        for r in op.results:
            visible.add(id(r))
