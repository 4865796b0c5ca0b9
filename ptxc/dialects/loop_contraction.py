"""The ``contraction`` annotation of a ``loop.parallel``: what a ``tensor.matmul`` or
``tensor.conv`` knew about the loop nest it became, for the schedules that take contractions.

lower-tensor-to-loop writes it on every nest it builds from such an op (and only there;
tensor_to_loop/named.py, "Contractions"); gpu_map/contraction.py reads it instead of
recognizing contractions in loop shapes. Its value is four strings::

    "loop.parallel"() ({ ^bb0(%i: index, %j: index):
      %acc:8 = "loop.for"(...) ({ ^bb0(%k: index, %a0: f32, ...):
        %x = "loop.load"(%A, %i, %k) : (...) -> f16
        %y0 = "loop.load"(%B, %k, %j) : (...) -> f16
        "loop.yield"(%a0 + cast(%x) * cast(%y0), ...)  ...
    }) {contraction = ["matmul", "f16", "MN", "K"], lower = [0, 0], step = [1, 8], ...}

* the source op: ``matmul`` or ``conv``;
* the kind of its products: ``f16`` (f16 loads cast to f32, summed in f32), ``tf32`` (f32 loads
  through ``arith.round_tf32``), ``s8`` (i8 loads cast to i32, summed in i32), or the loads'
  own element type where the product is computed in it (``f32``: no tensor-core kind);
* per dim of the ``loop.parallel``, its role: ``B`` (a batch dim, read by both factors),
  ``M`` (read by the first factor of each product only), ``N`` (the second factor only);
* one ``K`` per loop of the reduction nest, outer to inner: the nest's one top-level
  ``loop.for`` and the ``loop.for``\\ s perfectly nested in it.

The factors are found where the nest computes them, not named: the innermost reduction body
yields, for accumulator ``j``, ``acc_j + a * b`` with ``a`` and ``b`` each a ``loop.load``
through the kind's conversion (:func:`products`); accumulator ``j`` is point ``j`` of the one
dim the nest steps by ``u`` (unroll-and-jam; ``u`` accumulators, one without a step).
:func:`check` verifies all of this (``loop.parallel``'s verifier calls it), so a pass that
changes an annotated nest keeps the annotation true or drops it; one that does neither fails
verification naming the nest.
"""

from __future__ import annotations

import math

import attrs

from ..ir.core import BlockArgument, Operation, OpResult, Value
from ..ir.types import F16, F32, I8, I32

#: the attribute's name on ``loop.parallel``
ATTR = "contraction"
#: the tensor ops whose nests carry it
SOURCES = ("matmul", "conv")
#: kind -> (conversion op, loaded element, converted element) of each factor
CONVERSIONS = {"f16": ("arith.cast", F16, F32), "tf32": ("arith.round_tf32", F32, F32),
               "s8": ("arith.cast", I8, I32)}


@attrs.frozen
class Annotation:
    """The parsed attribute (module docstring)."""
    source: str
    kind: str
    dims: str          # one role per parallel dim: "B", "M" or "N"
    k: int             # reduction loops

    @property
    def value(self) -> tuple:
        """The attribute value."""
        return (self.source, self.kind, self.dims, "K" * self.k)

    def dims_of(self, role: str) -> list[int]:
        """The parallel dims of ``role`` (``"B"``, ``"M"`` or ``"N"``), in order."""
        return [d for d, r in enumerate(self.dims) if r == role]


def annotation(op: Operation) -> Annotation | None:
    """The annotation of ``op`` (a ``loop.parallel``), or None where it has none or it is not
    four strings (the verifier says what is wrong)."""
    v = op.attributes.get(ATTR)
    if not (isinstance(v, tuple) and len(v) == 4 and all(isinstance(s, str) for s in v)):
        return None
    return Annotation(v[0], v[1], v[2], len(v[3]))


def kind_of(loaded, computed, rounds: bool) -> str:
    """The kind of a product of two ``loaded`` factors computed in ``computed`` (the
    accumulator's element), ``rounds``: each factor rounded to tf32 first."""
    if rounds:
        return "tf32"
    for kind, (_, src, dst) in CONVERSIONS.items():
        if kind != "tf32" and (src, dst) == (loaded, computed):
            return kind
    return loaded.name


def reduction_chain(op: Operation, depth: int):
    """``(loops outer to inner, innermost block)``: the one top-level ``loop.for`` of ``op``'s
    body and the ``depth - 1`` loops perfectly nested in it (each level holds one loop.for
    carrying the level's values straight through, yielding its results, besides loads and
    arith/math ops); None where the body is not that."""
    fors = [o for o in op.regions[0].blocks[0].ops if o.name == "loop.for"]
    if len(fors) != 1 or depth < 1:
        return None
    loops = [fors[0]]
    while True:
        block = loops[-1].regions[0].blocks[0]
        inner = [o for o in block.ops if o.name == "loop.for"]
        if len(loops) == depth:
            return (loops, block) if not inner else None
        if len(inner) != 1 or list(inner[0].operands) != list(block.args[1:]):
            return None
        y = block.last_op
        if y.name != "loop.yield" or list(y.operands) != list(inner[0].results):
            return None
        if any(o is not inner[0] and o is not y and o.name != "loop.load" and
               not o.name.startswith(("arith.", "math.")) for o in block.ops):
            return None
        loops.append(inner[0])


def factor_load(v: Value, kind: str) -> Operation | None:
    """The ``loop.load`` behind factor ``v`` of a product of ``kind``, or None."""
    conv = CONVERSIONS.get(kind)
    if conv is not None:
        name, src, dst = conv
        if not isinstance(v, OpResult) or v.owner.name != name or v.type != dst:
            return None
        v = v.owner.operands[0]
        if v.type != src:
            return None
    elif getattr(v.type, "name", None) != kind:
        return None
    return v.owner if isinstance(v, OpResult) and v.owner.name == "loop.load" else None


def products(block, kind: str) -> list | None:
    """Per accumulator of the innermost reduction ``block``, the loads ``(a, b)`` of the
    product it adds (``acc + a * b``, in the product's operand order), or None where an
    accumulator's update is not that."""
    y = block.last_op
    accs = list(block.args[1:])
    if y is None or y.name != "loop.yield" or len(y.operands) != len(accs):
        return None
    out = []
    for acc, upd in zip(accs, y.operands):
        if not isinstance(upd, OpResult) or upd.owner.name != "arith.add":
            return None
        s, t = upd.owner.operands
        prod = t if s is acc else (s if t is acc else None)
        if not isinstance(prod, OpResult) or prod.owner.name != "arith.mul":
            return None
        pair = tuple(factor_load(f, kind) for f in prod.owner.operands)
        if None in pair:
            return None
        out.append(pair)
    return out


def _dims_read(load: Operation, op: Operation, memo: dict) -> set:
    """The parallel dims of ``op`` that ``load``'s indices depend on."""
    top = op.regions[0].blocks[0]
    out = set()
    for v in load.operands[1:]:
        out |= _depends(v, top, memo)
    return out


def _depends(v: Value, top, memo: dict) -> frozenset:
    got = memo.get(id(v))
    if got is not None:
        return got
    if isinstance(v, BlockArgument):
        out = frozenset({v.index}) if v.owner is top else frozenset()
    else:
        out = frozenset()
        for w in v.owner.operands:
            out |= _depends(w, top, memo)
    memo[id(v)] = out
    return out


def check(op: Operation) -> str | None:
    """What is wrong with ``op``'s annotation (module docstring), or None when it holds."""
    v = op.attributes.get(ATTR)
    ann = annotation(op)
    if ann is None:
        return f"{ATTR} must be four strings (source, kind, roles, loops), is {v!r}"
    n = len(op.attributes["lower"])
    if ann.source not in SOURCES:
        return f"{ATTR} source {ann.source!r} is not one of {', '.join(SOURCES)}"
    if len(ann.dims) != n or set(ann.dims) - set("BMN"):
        return f"{ATTR} roles {ann.dims!r} must give B, M or N for each of the {n} dims"
    if ann.k < 1 or v[3] != "K" * ann.k:
        return f"{ATTR} loops {v[3]!r} must be one K per reduction loop"
    chain = reduction_chain(op, ann.k)
    if chain is None:
        return f"the body is not one perfect nest of {ann.k} reduction loop(s)"
    loops, inner = chain
    steps = [s for s in (op.attr("step") or ()) if s != 1]
    u = math.prod(steps)
    if len(steps) > 1 or len(loops[0].operands) != u:
        return (f"the reduction carries {len(loops[0].operands)} accumulator(s) for steps "
                f"{list(op.attr('step') or ())}: one per point of the one stepped dim")
    pairs = products(inner, ann.kind)
    if pairs is None:
        return f"an accumulator's update is not acc + a * b of {ann.kind} loads"
    memo: dict = {}
    a, b = (_dims_read(ld, op, memo) for ld in pairs[0])
    roles = "".join("B" if d in a and d in b else "M" if d in a else "N" if d in b else "-"
                    for d in range(n))
    if roles != ann.dims:
        return f"{ATTR} roles {ann.dims!r}, but the factors' loads read the dims as {roles!r}"
    return None
