"""The bufferization analysis of one tensor-level function: which loop nests absorb which ops,
and where each tensor should be written (before any loop code exists).

Program order is the order of the function's top-level ops; a use inside a generic body
(``tensor.extract``) counts at the generic. Two decisions are made first, both to save memory
traffic (the brief of the loop lowering: an accumulator lives in registers, read once, stored
once):

* **init inlining**: a generic P whose ``outs`` init is the result of a parallel generic B that
  nothing else reads, whose body ignores its own out value and whose out map is a bijection onto
  the init (a bias broadcast: ``fill``-like inits of convolutions and gemms), gets B's body as the
  start value of its accumulator: B is never stored, P never loads its init.
* **epilogue fusion**: a generic P with reduction dims whose one result is read only by a
  parallel generic E, through a bijective map, as one of E's ``ins`` (a conv's activation, the
  residual add of ResNet), computes E's body on the finished accumulator in P's loop nest and
  stores E's result; P's result is never stored. E's other operands must exist before P (its
  ops then run at P's position), and E's own init must not matter (its body ignores it, or it is
  a fill, and its out map covers the result).

Then **placement**, a backward sweep (consumers before producers) that records a *demand*: the
place a value's producer should write it to, so that no copy is needed later:

* a returned value is demanded in its output argument (the first time it is returned);
* the source of a ``tensor.insert_slice`` is demanded in the slice of the result's place when
  the op is ``in_place`` (from a concat the graph optimizer marked: other readers of the source
  are fine, they read the slice) or the source has no other use, and the insert chain under the
  result starts from a ``tensor.empty`` with pairwise disjoint slices (so no write to the
  destination can land on a slice written earlier by a producer);
* the init of a DPS op whose result is demanded somewhere, used only there, is demanded there
  too (the op then updates it in place);
* a ``tensor.pad``'s source is demanded in the interior of the padded buffer (the border is
  filled separately), unless the source is returned or an in-place concat operand (those win).
  Where the pad's last padded dim has at most 16 bytes inside it (:meth:`Plan.short_pad_dim`:
  the last dim, or a space-to-depth's c of (c, by, bx) channels) and the source is the result
  of an all-parallel generic G that only the pad reads, G's out map walking that dim with one
  loop dim (coefficient 1, offset 0), G's nest writes the border along that dim too
  (``pad_into``; nest.py, "Pads along the innermost dim"): the channel pad of a channels-last
  stem is then no kernel of its own.
  G's nest is emitted at the pad's position (its effective position is the pad's, so its
  inputs stay live until then and nothing between the two can write where the pad lies);
* a reshape passes its demand on to its source (as a reshaped place) when the layout allows;
* a value read only through ``tensor.extract_slice`` ops along one axis (a split of a merged
  layer feeding an in-place concat) is *scattered*: its producer's loop nest is emitted once per
  slice, restricted to the slice's range, writing straight into each slice's place.

A demand is a suggestion to the producer: whatever the producer does, the consumer checks where
the value really is and copies when it is elsewhere. Fills and empties get no demands: a fill is
*virtual* (a constant wherever it is read; written out only where a view of it is taken), an
empty has no contents to keep.
"""

from __future__ import annotations

import math

from ...dialects.func import func_body
from ...dialects.tensor.generic import body as generic_body
from ...dialects.tensor.generic import generic_parts
from ...dialects.tensor.maps import row_terms, substitute, unit_row
from ...ir.core import BlockArgument, Operation, OpResult, Value
from ...ir.types import ScalarType
from .storage import ALLOC, Place, boxes_disjoint

#: a use that keeps a value alive to the end of the function
END = math.inf

STRUCTURED = "tensor.generic"


def bijection(m, bounds, shape) -> dict[int, int] | None:
    """For a map ``m`` (over loops ``bounds``) of a tensor of ``shape``: when each element is
    reached by exactly one loop point, each loop dim of extent > 1 reading one dimension with
    coefficient 1 and offset 0, the dict loop dim -> tensor dim; else None."""
    if len(m) != len(shape) or any(b == 0 for b in bounds):
        return None
    dim_row: dict[int, int] = {}
    for k, row in enumerate(m):
        terms = [(i, c) for i, c in row_terms(row) if bounds[i] != 1]
        if not terms:
            if shape[k] != 1 or row[-1] != 0:
                return None
            continue
        if len(terms) != 1 or terms[0][1] != 1 or row[-1] != 0:
            return None
        i = terms[0][0]
        if bounds[i] != shape[k] or i in dim_row:
            return None
        dim_row[i] = k
    if any(b != 1 and i not in dim_row for i, b in enumerate(bounds)):
        return None
    return dim_row


def covers(m, bounds, shape) -> bool:
    """Whether the map ``m`` reaches every element of a tensor of ``shape`` over ``bounds`` (so
    a DPS result written through it owes nothing to its init)."""
    if any(d == 0 for d in shape):
        return True
    if any(b == 0 for b in bounds) or len(m) != len(shape):
        return False
    seen = set()
    for row, d in zip(m, shape):
        terms = [(i, c) for i, c in row_terms(row) if bounds[i] != 1]
        if not terms:
            if d != 1:
                return False
            continue
        if len(terms) != 1:
            return False
        i, c = terms[0]
        if i in seen or bounds[i] != d or not ((c == 1 and row[-1] == 0) or
                                               (c == -1 and row[-1] == d - 1)):
            return False
        seen.add(i)
    return True


def compose_rows(dim_row: dict[int, int], n_dims: int, out_map, n_nest: int) -> tuple:
    """The loop dims of an op whose map onto a tensor is the bijection ``dim_row``, as rows over
    the dims of the nest that produces (or reads) that tensor through ``out_map``."""
    rows = []
    for j in range(n_dims):
        rows.append(tuple(out_map[dim_row[j]]) if j in dim_row else unit_row(n_nest, None))
    return tuple(rows)


class Epilogue:
    """E fused into P: E's loop dims as rows over P's, and which of E's ins is P's result."""

    def __init__(self, op: Operation, rows: tuple, slot: int):
        self.op, self.rows, self.slot = op, rows, slot


class Inline:
    """B inlined as the start value of P's accumulator ``out``: B's loop dims over P's."""

    def __init__(self, op: Operation, rows: tuple, out: int):
        self.op, self.rows, self.out = op, rows, out


class Piece:
    """One slice of a scattered result: its extract_slice result, axis, range and place."""

    def __init__(self, value: Value, axis: int, lo: int, size: int, place: Place):
        self.value, self.axis, self.lo, self.size, self.place = value, axis, lo, size, place


class Plan:
    """The analysis of ``func`` (see the module docstring). ``outputs`` are the places of the
    output arguments, in result order."""

    def __init__(self, func: Operation, outputs: list[Place], wide: dict):
        self.func = func
        self.body = func_body(func)
        self.ops = list(self.body.ops)
        self.ret = self.ops[-1]
        self.pos = {id(op): i for i, op in enumerate(self.ops)}
        self.eff = dict(self.pos)
        self.outputs = outputs
        self.wide = wide                      # id(generic) -> (body block, acc type)
        self.uses: dict[Value, list[tuple[Operation, str]]] = {}
        self.epilogue: dict[int, Epilogue] = {}   # id(P) -> its fused epilogue
        self.fused: dict[int, Operation] = {}     # id(E) -> P
        self.inline: dict[int, list[Inline]] = {}  # id(P) -> inlined inits
        self.inlined: dict[int, Operation] = {}   # id(B) -> P
        self.demand: dict[Value, Place] = {}
        self.scatter: dict[Value, list[Piece]] = {}
        self.pad_into: dict[int, Operation] = {}  # id(G) -> the pad whose innermost border G writes
        self.pad_from: dict[int, Operation] = {}  # id(pad) -> G
        self._collect_uses()
        self._fuse()
        self._chains()
        self._place()

    # ---- uses ---------------------------------------------------------------------------------
    def _top(self, v: Value) -> bool:
        if isinstance(v, BlockArgument):
            return v.block is self.body
        return v.op.block is self.body

    def _collect_uses(self) -> None:
        for a in self.body.args:
            self.uses[a] = []
        for op in self.ops:
            for r in op.results:
                self.uses[r] = []
        for op in self.ops:
            ins_n = len(generic_parts(op)[0]) if op.name == STRUCTURED else 0
            for i, v in enumerate(op.operands):
                kind = "operand"
                if op.name == STRUCTURED:
                    kind = "ins" if i < ins_n else "outs"
                elif op.name == "tensor.insert_slice":
                    kind = "source" if i == 0 else "dest"
                elif op.name == "func.return":
                    kind = "return"
                elif op.results and all(isinstance(r.type, ScalarType) for r in op.results):
                    kind = "scalar"   # a top-level scalar op: evaluated inside later nests
                self.uses[v].append((op, kind))
            for inner in list(op.walk())[1:]:
                for v in inner.operands:
                    if v in self.uses and self._top(v):
                        self.uses[v].append((op, "nested"))

    def single_use(self, v: Value) -> bool:
        return len(self.uses.get(v, ())) == 1

    def producer(self, v: Value) -> Operation | None:
        return v.op if isinstance(v, OpResult) and v.op.block is self.body else None

    def last_use(self, v: Value) -> float:
        """The effective position of the last op reading ``v`` (END for results and reads by
        top-level scalars, which may happen in any later nest)."""
        last = -1.0
        for op, kind in self.uses.get(v, ()):
            if kind in ("return", "scalar"):
                return END
            last = max(last, self.eff[id(op)])
        return last

    def def_pos(self, v: Value) -> float:
        p = self.producer(v)
        if p is None or p.name in ("tensor.fill", "tensor.empty"):
            return -1  # an argument; a fill is a constant anywhere; an empty has no contents
        return self.eff[id(p)]

    # ---- fusion ---------------------------------------------------------------------------------
    def _fuse(self) -> None:
        for p in self.ops:
            if p.name != STRUCTURED:
                continue
            self._try_epilogue(p)
        for p in self.ops:
            if p.name != STRUCTURED or id(p) in self.fused:
                continue
            self._try_inline(p)

    def _outside_values(self, op: Operation) -> list[Value]:
        """Values defined outside ``op`` that it or its body reads."""
        inside = set()
        out = []
        for inner in op.walk():
            for r in inner.results:
                inside.add(id(r))
            for region in inner.regions:
                for blk in region.blocks:
                    inside.update(id(a) for a in blk.args)
        for inner in op.walk():
            for v in inner.operands:
                if id(v) not in inside:
                    out.append(v)
        return out

    def _try_epilogue(self, p: Operation) -> None:
        if "reduction" not in p.attr("iterator_types") or len(p.results) != 1:
            return
        r = p.results[0]
        if not self.single_use(r):
            return
        e, kind = self.uses[r][0]
        if e.name != STRUCTURED or kind != "ins" or id(e) in self.fused or id(e) in self.epilogue:
            return
        e_ins, e_outs = generic_parts(e)
        if len(e_outs) != 1 or any(t != "parallel" for t in e.attr("iterator_types")):
            return
        slots = [k for k, v in enumerate(e_ins) if v is r]
        if len(slots) != 1:
            return
        bounds = e.attr("bounds")
        maps = e.attr("indexing_maps")
        dim_row = bijection(maps[slots[0]], bounds, r.type.shape)
        if dim_row is None:
            return
        init = e_outs[0]
        out_arg = generic_body(e).args[len(e_ins)]
        if not covers(maps[-1], bounds, init.type.shape):
            return
        ip = self.producer(init)
        if out_arg.uses and not (ip is not None and ip.name == "tensor.fill"):
            return
        here = self.pos[id(p)]
        for v in self._outside_values(e):
            if v is not r and v is not init and self.def_pos(v) >= here:
                return
        p_ins, _ = generic_parts(p)
        rows = compose_rows(dim_row, len(bounds), p.attr("indexing_maps")[len(p_ins)],
                            len(p.attr("bounds")))
        self.epilogue[id(p)] = Epilogue(e, rows, slots[0])
        self.fused[id(e)] = p
        self.eff[id(e)] = here

    def _try_inline(self, p: Operation) -> None:
        p_ins, p_outs = generic_parts(p)
        maps = p.attr("indexing_maps")
        for k, v in enumerate(p_outs):
            b = self.producer(v)
            if b is None or b.name != STRUCTURED or not self.single_use(v) or \
                    id(b) in self.fused or id(b) in self.epilogue or id(b) in self.inlined or \
                    id(b) in self.inline:
                continue
            b_ins, b_outs = generic_parts(b)
            if len(b_outs) != 1 or any(t != "parallel" for t in b.attr("iterator_types")):
                continue
            if generic_body(b).args[len(b_ins)].uses:
                continue
            dim_row = bijection(b.attr("indexing_maps")[-1], b.attr("bounds"), v.type.shape)
            if dim_row is None:
                continue
            rows = compose_rows(dim_row, len(b.attr("bounds")), maps[len(p_ins) + k],
                                len(p.attr("bounds")))
            self.inline.setdefault(id(p), []).append(Inline(b, rows, k))
            self.inlined[id(b)] = p
            self.eff[id(b)] = self.eff[id(p)]

    # ---- insert chains --------------------------------------------------------------------------
    def _chains(self) -> None:
        """``chain_ok[id(insert_slice)]``: its chain (single-use destinations down to the base)
        starts from a tensor.empty and its slices are pairwise disjoint."""
        self.chain_ok: dict[int, bool] = {}
        inserts = [op for op in self.ops if op.name == "tensor.insert_slice"]
        below = {}
        for op in inserts:
            d = op.operands[1]
            dp = self.producer(d)
            below[id(op)] = dp if (dp is not None and dp.name == "tensor.insert_slice"
                                   and self.single_use(d)) else None
        has_above = {id(b) for b in below.values() if b is not None}
        for top in inserts:
            if id(top) in has_above:
                continue
            chain, cur = [], top
            while cur is not None:
                chain.append(cur)
                nxt = below[id(cur)]
                if nxt is None:
                    base = self.producer(cur.operands[1])
                    ok = base is not None and base.name == "tensor.empty"
                    break
                cur = nxt
            boxes = [(op.attr("offsets"), op.attr("sizes"), op.attr("strides")) for op in chain]
            ok = ok and all(boxes_disjoint(a, b) for i, a in enumerate(boxes)
                            for b in boxes[i + 1:])
            for op in chain:
                self.chain_ok[id(op)] = ok

    # ---- placement --------------------------------------------------------------------------------
    def stored(self, op: Operation | None) -> bool:
        """Whether ``op`` writes its result somewhere (so it can honor a demand)."""
        if op is None:
            return False
        if op.name == STRUCTURED:
            return id(op) not in self.inlined and id(op) not in self.epilogue
        return op.name in ("tensor.insert_slice", "tensor.pad")

    def claim(self, v: Value, place: Place) -> bool:
        """Record that ``v`` should be written to ``place``; False when it cannot be (already
        claimed, or its producer cannot write into a given place)."""
        if v in self.demand:
            return False
        p = self.producer(v)
        if p is None:
            return False
        if self.stored(p) or p.name in ("tensor.reshape", "tensor.extract_slice"):
            self.demand[v] = place
            return True
        return False

    def _place(self) -> None:
        strong = set()
        for v in self.ret.operands:
            strong.add(id(v))
        for op in self.ops:
            if op.name == "tensor.insert_slice" and op.attr("in_place"):
                strong.add(id(op.operands[0]))
        seen = set()
        for v, place in zip(self.ret.operands, self.outputs):
            if id(v) not in seen:
                seen.add(id(v))
                self.claim(v, place)
        for op in reversed(self.ops[:-1]):
            if op.name == "tensor.insert_slice":
                self._insert_slice(op)
            elif op.name == "tensor.pad":
                self._pad(op, strong)
            elif op.name == "tensor.reshape":
                d = self.demand.get(op.results[0])
                if d is not None:
                    inner = d.reshaped(op.operands[0].type.shape)
                    if inner is not None:
                        self.claim(op.operands[0], inner)
            elif op.name == STRUCTURED and (self.stored(op) or id(op) in self.fused):
                self._generic(op)

    def _fresh(self, v: Value) -> Place:
        return Place.fresh(ALLOC, v.type, v.name_hint)

    def _insert_slice(self, op: Operation) -> None:
        r, (s, d) = op.results[0], op.operands
        here = self.demand.get(r)
        if here is None:
            here = self.demand[r] = self._fresh(r)
        dp = self.producer(d)
        if self.single_use(d) and dp is not None and dp.name != "tensor.fill":
            self.claim(d, here)
        if self.chain_ok.get(id(op)) and (op.attr("in_place") or self.single_use(s)):
            self.claim(s, here.sub(op.attr("offsets"), op.attr("sizes"), op.attr("strides")))

    def _pad(self, op: Operation, strong: set) -> None:
        r, s = op.results[0], op.operands[0]
        here = self.demand.get(r)
        if here is None:
            here = self.demand[r] = self._fresh(r)
        if id(s) not in strong:
            rank = s.type.rank
            if self.claim(s, here.sub(op.attr("low"), s.type.shape, (1,) * rank)):
                self._try_pad_into(op)

    @staticmethod
    def short_pad_dim(pad: Operation) -> int | None:
        """The dim of ``pad``'s border that a producer's nest may write (module docstring):
        the last padded dim, when the dims inside it are at most 16 bytes (one vector run:
        the border along it is then runs too short for a fill of their own: a channels-last
        channel pad, or a space-to-depth's channel pad of (c, by, bx) channels, c padded
        with 2 x 2 inside); else None."""
        s = pad.operands[0]
        low, high = pad.attr("low"), pad.attr("high")
        padded = [d for d in range(s.type.rank) if low[d] or high[d]]
        if not padded:
            return None
        p = padded[-1]
        inner = 1
        for n in s.type.shape[p + 1:]:
            inner *= n
        return p if inner * max(1, s.type.element.bitwidth // 8) <= 16 else None

    def pad_dim(self, g: Operation, pad: Operation) -> int | None:
        """The loop dim of the generic ``g`` that walks dim :meth:`short_pad_dim` of its result
        (read by ``pad``) with coefficient 1 and offset 0, when ``g`` can write ``pad``'s
        border along that dim (below); else None."""
        s = pad.operands[0]
        rank = s.type.rank
        p = self.short_pad_dim(pad)
        if rank == 0 or p is None or g.name != STRUCTURED or \
                len(g.results) != 1 or not self.single_use(s) or not self.stored(g) or \
                id(g) in self.fused or any(t != "parallel" for t in g.attr("iterator_types")):
            return None
        ins, _ = generic_parts(g)
        bounds = g.attr("bounds")
        m = g.attr("indexing_maps")[len(ins)]
        if bijection(m, bounds, s.type.shape) is None:
            return None
        terms = row_terms(m[p])
        if len(terms) != 1 or terms[0][1] != 1 or m[p][-1] != 0:
            return None
        return terms[0][0]

    def _try_pad_into(self, pad: Operation) -> None:
        """Fold ``pad``'s border along the innermost dim into the nest of the elementwise
        generic G that produces its source (lower-tensor-to-loop's module docstring, "Pads
        along the innermost dim"): G's nest runs at the pad's position (its inputs stay live
        until then), over the padded extent of that dim."""
        g = self.producer(pad.operands[0])
        if g is None or self.pad_dim(g, pad) is None:
            return
        self.pad_into[id(g)] = pad
        self.pad_from[id(pad)] = g
        self.eff[id(g)] = self.eff[id(pad)]

    def final_out_map(self, op: Operation):
        """The out map of the nest that stores ``op``'s result, over that nest's dims (a fused
        epilogue's map composed onto its producer's dims)."""
        ins, _ = generic_parts(op)
        m = op.attr("indexing_maps")[len(ins)]
        p = self.fused.get(id(op))
        if p is not None:
            m = substitute(m, self.epilogue[id(p)].rows)
        return m

    def _generic(self, op: Operation) -> None:
        ins, outs = generic_parts(op)
        maps = op.attr("indexing_maps")
        if len(outs) == 1 and op.results[0] not in self.demand:
            self._try_scatter(op)
        if id(op) in self.fused:
            return
        body_args = generic_body(op).args
        for k, (r, v) in enumerate(zip(op.results, outs)):
            d = self.demand.get(r)
            if d is None or not self.single_use(v) or any(b.out == k for b in
                                                           self.inline.get(id(op), ())):
                continue
            reads = bool(body_args[len(ins) + k].uses) or not covers(
                maps[len(ins) + k], op.attr("bounds"), v.type.shape)
            vp = self.producer(v)
            if reads and vp is not None and vp.name not in ("tensor.fill", "tensor.empty"):
                self.claim(v, d)

    def _try_scatter(self, op: Operation) -> None:
        x = op.results[0]
        uses = self.uses[x]
        if not uses or any(u.name != "tensor.extract_slice" for u, _ in uses):
            return
        slices = [u.results[0] for u, _ in uses]
        if not any(w in self.demand for w in slices):
            return
        rank = x.type.rank
        axis = None
        for u, _ in uses:
            off, size, st = u.attr("offsets"), u.attr("sizes"), u.attr("strides")
            diff = [k for k in range(rank) if not (off[k] == 0 and size[k] == x.type.shape[k]
                                                  and st[k] == 1)]
            if len(diff) > 1 or (diff and st[diff[0]] != 1):
                return
            if diff:
                if axis is not None and diff[0] != axis:
                    return
                axis = diff[0]
        if axis is None:
            return
        row = self.final_out_map(op)[axis]
        terms = row_terms(row)
        if len(terms) != 1 or terms[0][1] != 1 or row[-1] != 0:
            return
        pieces = []
        for u, _ in uses:
            w = u.results[0]
            place = self.demand.get(w) or self._fresh(w)
            self.demand[w] = place
            pieces.append(Piece(w, axis, u.attr("offsets")[axis], u.attr("sizes")[axis], place))
        self.scatter[x] = pieces
