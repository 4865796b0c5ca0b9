"""The nests the ``tiled`` schedule (and the tensor-core schedules after it) can map, read
from a top-level ``loop.parallel``: :func:`analyze` returns a :class:`Nest` (the parallel
dims, the prologue, the reduction nest with its :class:`RedLoop`\\ s, the epilogue, and the
nest's loads grouped by buffer and linear part into :class:`Group`\\ s, their indices affine in
the ivs by :func:`_affine`), or None.

It lives apart from tiled.py's planning and kernel building because more than the tiled
schedule reads it: contraction.py (the mma and wgmma schedules' analysis) builds on
:func:`analyze` and :func:`_affine`, mma_prefetch.py and mma_kernel.py on :func:`_affine` and
:func:`_root`.

What applies (:func:`analyze`; anything else returns None and goes to the next schedule):

* a top-level ``loop.parallel`` with at least one dim whose body is: side-effect-free ops
  without regions (the prologue: constants, index arithmetic, loads), exactly one ``loop.for``
  (the reduction nest), then ops that do not touch the buffers the reduction reads (the
  epilogue: anything, stores included, loops too);
* inside the reduction nest only loads, ``arith``/``math`` ops and nested ``loop.for``\\ s (no
  stores, no ifs, no views);
* every load in the nest indexes its buffer with affine expressions of the parallel and
  reduction induction variables with constant coefficients (the analysis follows
  ``arith.add``/``sub``/``mul`` by constants back to the ivs);

tiled.py then asks for reuse across the block's threads and two parallel dims of more than one
point (its module docstring).
"""

from __future__ import annotations

import math

import attrs

from ...ir.core import BlockArgument, Operation, OpResult, Value
from ...ir.types import INDEX

#: ops allowed inside the reduction nest besides loads, loops and yields
_PURE_DIALECTS = ("arith.", "math.")


@attrs.define
class RedLoop:
    """A ``loop.for`` of the reduction nest: its op, static range and nesting depth (0 for the
    outermost)."""
    op: Operation
    depth: int

    @property
    def lower(self) -> int:
        return self.op.attr("lower")

    @property
    def step(self) -> int:
        return self.op.attr("step")

    @property
    def trips(self) -> int:
        return max(0, -(-(self.op.attr("upper") - self.lower) // self.step))

    @property
    def last(self) -> int:
        return self.lower + (self.trips - 1) * self.step


@attrs.define
class Group:
    """Loads of one buffer whose indices differ only by constants: ``coefs[d]`` is the linear
    part of buffer dim ``d`` (symbol -> coefficient), ``offsets[n][d]`` the constant of load
    ``n``. ``trips`` = per load, the iterations of the enclosing loops inside the nest below the
    outermost one (reads per outer iteration)."""
    buffer: Value
    coefs: list
    loads: list = attrs.Factory(list)
    offsets: list = attrs.Factory(list)
    trips: list = attrs.Factory(list)


@attrs.define
class Nest:
    op: Operation
    lower: tuple
    upper: tuple
    step: tuple
    counts: tuple                # points per parallel dim
    prologue: list
    red: Operation               # the outermost reduction loop.for
    epilogue: list
    loops: dict                  # id(iv) -> RedLoop
    groups: list

    def last(self, d: int) -> int:
        return self.lower[d] + (self.counts[d] - 1) * self.step[d]


def _root(v: Value) -> Value:
    while isinstance(v, OpResult) and v.owner.name == "loop.view":
        v = v.owner.operands[0]
    return v


def _affine(v: Value, nest_op: Operation, loops: dict, memo: dict):
    """``v`` as {symbol: coefficient, 1: constant} over the parallel dims (``("p", d)``) and the
    reduction ivs (``("r", id(iv))``), or None when it is not affine in them."""
    key = id(v)
    if key in memo:
        return memo[key]
    memo[key] = None  # no cycles in SSA, but a safe default
    out = None
    if v.type == INDEX:
        if isinstance(v, BlockArgument):
            if v.owner is nest_op.regions[0].blocks[0]:
                out = {("p", v.index): 1}
            elif id(v) in loops:
                out = {("r", id(v)): 1}
        else:
            op = v.owner
            if op.name == "arith.constant":
                out = {1: int(op.attr("value"))}
            elif op.name in ("arith.add", "arith.sub", "arith.mul"):
                a = _affine(op.operands[0], nest_op, loops, memo)
                b = _affine(op.operands[1], nest_op, loops, memo)
                if a is not None and b is not None:
                    if op.name == "arith.mul":
                        if set(a) <= {1}:
                            a, b = b, a
                        if set(b) <= {1}:
                            k = b.get(1, 0)
                            out = {s: c * k for s, c in a.items() if c * k}
                    else:
                        sign = 1 if op.name == "arith.add" else -1
                        out = dict(a)
                        for s, c in b.items():
                            out[s] = out.get(s, 0) + sign * c
                        out = {s: c for s, c in out.items() if c}
    memo[key] = out
    return out


def _inside(v: Value, op: Operation) -> bool:
    """Whether ``v`` is defined inside ``op``'s regions."""
    owner = v.owner.block if isinstance(v, OpResult) else v.owner
    while owner is not None:
        p = owner.parent_op
        if p is op:
            return True
        if p is None:
            return False
        owner = p.block
    return False


def analyze(op: Operation) -> Nest | None:
    """The nest ``op`` as the schedule sees it, or None when it is not one (module docstring)."""
    if op.name != "loop.parallel":
        return None
    lower, upper = tuple(op.attr("lower")), tuple(op.attr("upper"))
    if not lower:
        return None
    step = tuple(op.attr("step") or (1,) * len(lower))
    counts = tuple(-(-(u - lo) // s) for lo, u, s in zip(lower, upper, step))
    if any(c <= 0 for c in counts):
        return None
    body = list(op.regions[0].blocks[0].ops)[:-1]  # without loop.yield
    fors = [i for i, o in enumerate(body) if o.name == "loop.for"]
    if len(fors) != 1 or not body[fors[0]].operands:
        return None
    prologue, red, epilogue = body[:fors[0]], body[fors[0]], body[fors[0] + 1:]
    for o in prologue:
        if o.regions or o.name == "loop.store" or not (
                o.name.startswith(_PURE_DIALECTS) or o.name in ("loop.load", "loop.view")):
            return None
    loops: dict = {}
    loads: list = []

    def walk(f: Operation, depth: int) -> bool:
        loops[id(f.regions[0].blocks[0].args[0])] = RedLoop(f, depth)
        for o in f.regions[0].blocks[0].ops:
            if o.name == "loop.for":
                if not walk(o, depth + 1):
                    return False
            elif o.name == "loop.load":
                loads.append(o)
            elif o.name == "loop.yield" or (o.name.startswith(_PURE_DIALECTS) and not o.regions):
                continue
            else:
                return False
        return True

    if not walk(red, 0) or any(loops[k].trips <= 0 for k in loops):
        return None
    memo: dict = {}
    groups: dict = {}
    for ld in loads:
        buf = ld.operands[0]
        if _inside(buf, op):
            return None
        rows = [_affine(i, op, loops, memo) for i in ld.operands[1:]]
        if any(r is None for r in rows):
            return None
        coefs = tuple(tuple(sorted(((s, c) for s, c in r.items() if s != 1), key=repr))
                      for r in rows)
        g = groups.get((id(buf), coefs))
        if g is None:
            g = groups[(id(buf), coefs)] = Group(buf, [dict(c) for c in coefs])
        g.loads.append(ld)
        g.offsets.append([r.get(1, 0) for r in rows])
        trips, p = 1, ld.parent_op
        while p is not red:
            trips *= loops[id(p.regions[0].blocks[0].args[0])].trips
            p = p.parent_op
        g.trips.append(trips)
    # the reduction must not read what the nest writes (a staged copy would be stale)
    stored = {id(_root(o.operands[1])) for e in epilogue for o in e.walk()
              if o.name == "loop.store"}
    if any(id(_root(g.buffer)) in stored for g in groups.values()):
        return None
    return Nest(op, lower, upper, step, counts, prologue, red, epilogue, loops,
                list(groups.values()))


def reduction_points(nest: Nest) -> int:
    """Iterations of the reduction nest's innermost body per output point: the product of its
    loops' trips (a depthwise 3x3 conv: 9; a 3x3 conv over 64 channels: 576)."""
    return math.prod(r.trips for r in nest.loops.values())

