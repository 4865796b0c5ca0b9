"""The ``tiled`` schedule of map-to-gpu: matmul/conv-like nests with operand tiles staged in
``gpu.shared`` memory.

A MatMul, Gemm or Conv reaches the loop stage as a top-level ``loop.parallel`` over the output
points whose body reads the accumulators' start values (the *prologue*: zero, a bias, a Gemm's
C), runs a *reduction nest* (a ``loop.for`` over k or over (c, kh, kw), carrying the
accumulators) and stores the results after a fused epilogue (bias, ReLU, a residual add).
lower-tensor-to-loop unrolls and jams the innermost parallel dim by 8 (or 4): each point of the
nest computes 8 outputs with 8 accumulators. The pointwise schedule would give each point a
thread that streams every operand from global memory; but each element of ``A[i, k]`` is read
by every thread of the row ``i`` and each ``B[k, j]`` by every thread of the column ``j``. Here
a block of threads stages, chunk by chunk of the reduction, the part of each reused operand
that its tile of points needs in shared memory, and the threads read it from there::

    "loop.parallel"() ({                     "gpu.launch"() ({
    ^bb0(%i: index, %j: index):                %sA = "gpu.shared" : buffer<16x32xf32>
      %z = arith.constant 0.0                  %sB = "gpu.shared" : buffer<32x96xf32>
      %j1 = %j + 1 ... %j7 = %j + 7            ty, tx = thread ids; by, bx = block ids
      %s:8 = "loop.for"(%z x8) ({              %i = by*16 + ty   (min(.., last) at an edge)
      ^bb0(%k: index, %a:8 : f32):             %j = (bx*12 + tx) * 8
        %x = "loop.load"(%A, %i, %k)   ==>     %j1 = %j + 1 ... ; %z = 0.0
        %y0..7 = "loop.load"(%B, %k, %jN)      %s:8 = "loop.for"(%z x8) ({   // kc = 0, 32, 64, 96
        %a' = %a + %x * %yN                    ^bb0(%kc, %a:8):
        "loop.yield"(%a':8)                      for it: lin = it*192 + ty*12 + tx
      }) {lower = 0, upper = 128}                  "loop.if"(lin < 512 && in bounds) {
      "loop.store"(%s0, %Y, %i, %j) ...             sA[lin/32, lin%32] = A[by*16 + .., kc + ..] }
    }) {step = [1, 8], upper = [64, 96]}         (the same for sB: 32 x 96 elements)
                                                 "gpu.barrier"
                                                 %t:8 = "loop.for"(%a:8) ({ ^bb0(%r, %b:8):
                                                   %k = %kc + %r
                                                   %x = "loop.load"(%sA, %i - by*16, %k - %kc)
                                                   %yN = "loop.load"(%sB, %k - %kc, %jN - bx*96)
                                                   ...the original body... })
                                                   {lower = 0, upper = 32}
                                                 "gpu.barrier"; "loop.yield"(%t:8)
                                               }) {lower = 0, upper = 128, step = 32}
                                               the original epilogue (under "loop.if" where a
                                               tile is partial): "loop.store"(%s0, %Y, %i, %j)
                                             }) {block = [12, 16, 1], grid = [1, 4, 1],
                                                 schedule = "tiled"}

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
* reuse: with the chosen thread block, some staged operand is invariant to a parallel dim
  mapped across the block's threads (matmul's ``A[i, k]`` across ``j``, ``B[k, j]`` across
  ``i``; conv's weights ``w[oc, c, kh, kw]`` across ``(oh, ow)``, its input
  ``x[n, c, oh*s + kh, ow*s + kw]`` across ``oc``; a depthwise conv keeps the weights' reuse
  across pixels); a nest whose operands are all different per thread (pooling, softmax) is
  declined;
* two parallel dims of more than one point: a nest with one (a batch-1 MatMul/Gemm, a matrix
  times a vector) only reuses one vector, and the reduction schedule, which splits its long
  reduction over a block, serves it better.

The mapping. The innermost parallel dim (the unrolled one, whose points are contiguous in the
output) goes along ``threadIdx.x``/``blockIdx.x`` (when it has a single point, as a 14-wide conv
unrolled by 8 does, the last other dim takes its place); one other parallel dim (the *row* dim:
``i`` of a matmul, ``oc`` of a conv) along ``threadIdx.y``/``blockIdx.y``; every other parallel
dim (batch, a conv's ``oh``) is one block per value along ``blockIdx.z`` (mixed-radix
decomposed; a nest needing more than 65535 z or y blocks is declined). The row dim is chosen
among the candidates by :func:`_rank`: blocks of at least two warps first, then the least global
traffic per computed point (the staged footprints plus the loads left in global memory, per
point and reduction step). Block: ``bx = min(points along x, 16)``, ``by = min(points along y,
pow2floor(256 / bx))`` (16 x 16 for a large matmul). Each thread keeps its accumulators (8 with
the unroll) in registers, exactly as the original nest.

Partial tiles: a thread past the end of a dim computes with its index *clamped* to the last
point of that dim (so every load it makes is one some valid point makes, in bounds) and only
its epilogue is guarded (``loop.if``); the reduction, its barriers and copies run in uniform
control flow in every thread, as ``__syncthreads`` requires.

Staging. The OUTERMOST reduction loop (trip ``K``) runs in chunks of ``TK`` iterations (32, 16
or 8, smaller only when the footprint needs it); a last partial chunk of ``K % TK`` iterations
is a second copy of the chunk code with a shorter compute loop. Loads of the nest are grouped by
buffer and linear part (the unroll's 8 loads of ``B[k, j + n]`` are one group, with constant
offsets 0..7); per group and buffer dim the footprint of one chunk is the bounding box of its
index over the block's thread offsets, the chunk's iterations, the full ranges of the inner
reduction loops (a conv's 3x3) and the group's offsets. A group is staged when its box has fewer
elements than the reads it serves per chunk (threads x reads per thread), else its loads stay
global. Per chunk, for each staged group, the block's threads copy the box cooperatively (thread
``t`` takes the elements ``t, t + threads, ...`` in row-major order of the box, so consecutive
threads read consecutive addresses of its last dim), each element under a guard that its global
index lies inside the buffer (the box of an edge tile reaches past it: those shared elements
stay unwritten, and no valid thread reads them), then ``gpu.barrier``, the threads run the chunk
reading shared memory at ``global index - box origin``, then ``gpu.barrier`` (before the next
chunk overwrites the tiles). Guards that can never fail (the whole nest's range of that index
stays inside the buffer) are left out. Shared footprint (each buffer padded to whole 16-byte
units, as ptxas aligns them): at most the target's static ``__shared__`` limit per block
(shared_per_block_static, 48 KiB);
when the boxes do not fit, ``TK`` is halved, then the tile (``by``, then ``bx``), and a group
whose box is no smaller than the reads it serves stays global; a nest left without reuse is
declined.

Numerics: each accumulator sums the same products in the same order as the original nest, so
results are bit-identical to it (the interpreter checks before/after equality).

Not handled yet (left to the next issues): register tiling beyond the unroll (several rows per
thread), double buffering and vector loads, bank-conflict padding, split-K for long reductions
with few points, tensor cores; a nest with two reduction loops in one point, or with
non-affine loads in its reduction (gathers), goes to the next schedule.
"""

from __future__ import annotations

import math

import attrs

from ...dialects.gpu import MAX_GRID_YZ, block_id, launch_op, shared, thread_id
from ...dialects.loop import for_loop, if_op
from ...ir.builder import Builder
from ...ir.core import Block, BlockArgument, Operation, OpResult, Region, Value
from ...ir.types import INDEX
from ...target import Target
from .common import target_of

SCHEDULE = "tiled"
#: chunk sizes of the outermost reduction loop, preferred first; the second tuple only when no
#: tile fits with the first
TK_CHOICES = ((32, 16, 8), (4, 2, 1))
#: threads per block the first tile aims at
THREADS = 256
#: ops allowed inside the reduction nest besides loads, loops and yields
_PURE_DIALECTS = ("arith.", "math.")


# ---- analysis ---------------------------------------------------------------------------------

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


# ---- planning ---------------------------------------------------------------------------------

@attrs.define
class Box:
    """A staged group's footprint per chunk: per buffer dim the lowest relative index ``lo``
    (relative to the block-uniform part of the index) and the extent ``size``."""
    group: Group
    lo: list
    size: list

    @property
    def elements(self) -> int:
        return math.prod(self.size)


@attrs.define
class Plan:
    x: int
    y: int
    z: list
    bx: int
    by: int
    tk: int
    boxes: list                  # staged groups
    shared_bytes: int
    traffic: float               # global elements read per point and outer reduction step

    @property
    def threads(self) -> int:
        return self.bx * self.by


def _sym_range(nest: Nest, sym, x, y, bx, by, tk):
    """The range of a symbol's varying part within one block and chunk, or None when the
    symbol is block-uniform."""
    kind, key = sym
    if kind == "p":
        if key == x:
            return 0, (bx - 1) * nest.step[x]
        if key == y:
            return 0, (by - 1) * nest.step[y]
        return None
    lp = nest.loops[key]
    if lp.op is nest.red:
        return 0, (tk - 1) * lp.step
    return lp.lower, lp.last


def _box(nest: Nest, g: Group, x, y, bx, by, tk) -> Box:
    lo, size = [], []
    for d, coefs in enumerate(g.coefs):
        offs = [o[d] for o in g.offsets]
        vmin, vmax = min(offs), max(offs)
        for sym, c in coefs.items():
            r = _sym_range(nest, sym, x, y, bx, by, tk)
            if r is not None:
                vmin += min(c * r[0], c * r[1])
                vmax += max(c * r[0], c * r[1])
        lo.append(vmin)
        size.append(vmax - vmin + 1)
    return Box(g, lo, size)


def _shared_shape(box: Box) -> list[int]:
    """The gpu.shared buffer of a box: its dims of extent > 1 (at least one dim), the first one
    padded so that the buffer is a whole number of 16-byte units (shared arrays are 16-byte
    aligned: the padding is what ptxas allocates anyway, and counting it keeps the 48 KiB check
    and the kernel table exact). Indexing is unchanged: the padding rows are never touched."""
    shape = [s for s in box.size if s > 1] or [1]
    row = math.prod(shape[1:]) * box.group.buffer.type.element.np_dtype.itemsize
    unit = 16 // math.gcd(16, row)
    shape[0] = -(-shape[0] // unit) * unit
    return shape


def _shared_nbytes(box: Box) -> int:
    return math.prod(_shared_shape(box)) * box.group.buffer.type.element.np_dtype.itemsize


def _invariant(g: Group, dim: int) -> bool:
    return all(("p", dim) not in c for c in g.coefs)


def _try(nest: Nest, x, y, bx, by, tk, shared_limit: int) -> Plan | None:
    threads = bx * by
    staged, traffic, nbytes, reuse = [], 0, 0, False
    for g in nest.groups:
        b = _box(nest, g, x, y, bx, by, tk)
        reads = threads * tk * sum(g.trips)
        if b.elements < reads:
            staged.append(b)
            traffic += b.elements
            nbytes += _shared_nbytes(b)
            reuse = reuse or (bx > 1 and _invariant(g, x)) or \
                (by > 1 and _invariant(g, y))
        else:
            traffic += reads
    if not reuse or nbytes > shared_limit:
        return None
    z = [d for d in range(len(nest.counts)) if d not in (x, y)]
    return Plan(x, y, z, bx, by, tk, staged, nbytes, traffic / (threads * tk))


def _pow2floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _tiles(nest: Nest, x, y):
    """Block shapes to try, largest first: halve by, then bx."""
    bx = min(nest.counts[x], 16)
    by = min(nest.counts[y], _pow2floor(THREADS // bx))
    out = []
    while True:
        out.append((bx, by))
        if by > 1:
            by = (by + 1) // 2
        elif bx > 1:
            bx = (bx + 1) // 2
        else:
            return out


def _rank(p: Plan) -> tuple:
    """Plans compare by this: blocks of at least two warps first (fewer leave the SM's
    schedulers idle), then the least global traffic per point."""
    return (p.threads < 64, p.traffic)


def plan(nest: Nest, target: Target) -> Plan | None:
    """The block shape, row dim and chunk size (module docstring) for ``target``, or None. The
    staged boxes fit the target's static shared memory per block (shared_per_block_static:
    the tiled kernels' shared arrays are static ``__shared__``)."""
    x = len(nest.counts) - 1
    k = nest.loops[id(nest.red.regions[0].blocks[0].args[0])].trips
    others = [d for d in range(len(nest.counts)) if d != x and nest.counts[d] > 1]
    if nest.counts[x] <= 1 and others:  # the unrolled dim has one point: tile two others
        x, others = others[-1], others[:-1]
    if not others:
        return None
    best = None
    for y in others:
        found = None
        for tks in TK_CHOICES:
            for bx, by in _tiles(nest, x, y):
                for tk in sorted({min(t, k) for t in tks}, reverse=True):
                    found = _try(nest, x, y, bx, by, tk, target.shared_per_block_static)
                    if found is not None:
                        break
                if found is not None:
                    break
            if found is not None:
                break
        if found is None:
            continue
        z_blocks = math.prod(nest.counts[d] for d in found.z)
        gy = -(-nest.counts[y] // found.by)
        if z_blocks > MAX_GRID_YZ or gy > MAX_GRID_YZ:
            continue
        if best is None or _rank(found) < _rank(best):
            best = found
    return best


# ---- emission ---------------------------------------------------------------------------------

class _Ix:
    """Index arithmetic at an insertion point, folding Python ints; constants are made once at
    the top of the launch body."""

    def __init__(self, b: Builder, top: Builder, consts: dict):
        self.b, self.top, self.consts = b, top, consts

    def at(self, b: Builder) -> "_Ix":
        return _Ix(b, self.top, self.consts)

    def v(self, x) -> Value:
        if isinstance(x, Value):
            return x
        c = self.consts.get(int(x))
        if c is None:
            c = self.consts[int(x)] = self.top.create(
                "arith.constant", [], {"value": int(x), "type": INDEX}).result
        return c

    def _op(self, name, a, b):
        return self.b.create(name, [self.v(a), self.v(b)]).result

    def add(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if isinstance(b, int) and b == 0:
            return a
        if isinstance(a, int) and a == 0:
            return b
        return self._op("arith.add", a, b)

    def sub(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return a - b
        if isinstance(b, int) and b == 0:
            return a
        return self._op("arith.sub", a, b)

    def mul(self, a, k: int):
        if isinstance(a, int):
            return a * k
        if k == 0:
            return 0
        return a if k == 1 else self._op("arith.mul", a, k)

    def div(self, a, k: int):
        if isinstance(a, int):
            return a // k
        return a if k == 1 else self._op("arith.div", a, k)

    def min(self, a, b):
        return self._op("arith.min", a, b)

    def cmp(self, pred, a, b):
        return self.b.create("arith.cmp", [self.v(a), self.v(b)], {"predicate": pred}).result

    def all(self, conds):
        out = None
        for c in conds:
            out = c if out is None else self.b.create("arith.and", [out, c]).result
        return out


def _clone_into(b: Builder, ops, mapping: dict, hook) -> None:
    """Clone ``ops`` at ``b`` (recursively through regions), asking ``hook(op, builder)`` first:
    it returns the replacement's results for ops it rewrites, else None."""
    for o in ops:
        new = hook(o, b)
        if new is not None:
            for r, v in zip(o.results, new):
                mapping[r] = v
            continue
        if not o.regions:
            b.insert(o.clone(mapping))
            continue
        n = Operation(o.name, [mapping.get(v, v) for v in o.operands],
                      [r.type for r in o.results], dict(o.attributes), loc=o.loc,
                      result_names=[r.name_hint for r in o.results])
        for r_old, r_new in zip(o.results, n.results):
            mapping[r_old] = r_new
        for region in o.regions:
            nr = n.add_region(Region())
            for blk in region.blocks:
                nb = Block([a.type for a in blk.args], [a.name_hint for a in blk.args])
                nr.append(nb)
                for a_old, a_new in zip(blk.args, nb.args):
                    mapping[a_old] = a_new
                _clone_into(Builder.at_end(nb), list(blk.ops), mapping, hook)
        b.insert(n)


def emit(nest: Nest, p: Plan) -> Operation:
    op = nest.op
    x, y = p.x, p.y
    gx = -(-nest.counts[x] // p.bx)
    gy = -(-nest.counts[y] // p.by)
    gz = math.prod(nest.counts[d] for d in p.z) if p.z else 1
    launch, lb = launch_op(Builder.before_op(op), (gx, gy, gz), (p.bx, p.by, 1), SCHEDULE,
                           loc=op.loc)
    shared_bufs = [shared(lb, _shared_shape(box), box.group.buffer.type.element)
                   for box in p.boxes]
    tx = thread_id(lb, 0)
    ix = _Ix(lb, Builder.before_op(tx.owner), {})   # index constants go before the ids
    bidx = block_id(lb, 0)
    ty, bidy = thread_id(lb, 1), block_id(lb, 1)
    bidz = block_id(lb, 2) if p.z else 0

    mapping: dict = {}
    ivs = op.regions[0].blocks[0].args
    guards, tile_base = [], {}
    for d, t, bid, bsz in ((x, tx, bidx, p.bx), (y, ty, bidy, p.by)):
        first = ix.mul(bid, bsz)                                 # the tile's first point
        raw = ix.add(first, t)
        n = nest.counts[d]
        g = gx if d == x else gy
        if g * bsz > n:                                          # a partial tile exists
            guards.append(ix.cmp("lt", raw, n))
            raw = ix.min(raw, n - 1)
        mapping[ivs[d]] = ix.v(ix.add(nest.lower[d], ix.mul(raw, nest.step[d])))
        tile_base[d] = ix.add(nest.lower[d], ix.mul(first, nest.step[d]))
    q = bidz
    for i, d in enumerate(reversed(p.z)):                       # bid.z, mixed radix
        n = nest.counts[d]
        if i == len(p.z) - 1:
            t = q
        else:
            nq = ix.div(q, n)
            t = ix.sub(q, ix.mul(nq, n))
            q = nq
        mapping[ivs[d]] = ix.v(ix.add(nest.lower[d], ix.mul(t, nest.step[d])))
    valid = ix.all(guards)

    _clone_into(lb, nest.prologue, mapping, lambda o, b: None)

    red = nest.red
    rl = nest.loops[id(red.regions[0].blocks[0].args[0])]
    full, rem = divmod(rl.trips, p.tk)
    staged = {id(ld): (k, n) for k, box in enumerate(p.boxes)
              for n, ld in enumerate(box.group.loads)}

    def uniform(ix: _Ix, coefs: dict, kc) -> object:
        """The block- and chunk-uniform part of an index (emitted by ``ix``)."""
        u = 0
        for (kind, key), c in coefs.items():
            if kind == "p":
                if key in tile_base:
                    u = ix.add(u, ix.mul(tile_base[key], c))
                else:
                    u = ix.add(u, ix.mul(mapping[ivs[key]], c))
            elif nest.loops[key].op is red:
                u = ix.add(u, ix.mul(kc, c))
        return u

    def nest_range(coefs: dict) -> tuple[int, int]:
        """The range of an index's uniform part over every block and chunk."""
        lo = hi = 0
        chunks = full + (1 if rem else 0)
        for (kind, key), c in coefs.items():
            if kind == "p":
                if key in tile_base:
                    bsz, g = (p.bx, gx) if key == x else (p.by, gy)
                    r = (nest.lower[key], nest.lower[key] + (g - 1) * bsz * nest.step[key])
                else:
                    r = (nest.lower[key], nest.last(key))
            elif nest.loops[key].op is red:
                r = (rl.lower, rl.lower + (chunks - 1) * p.tk * rl.step)
            else:
                continue
            lo += min(c * r[0], c * r[1])
            hi += max(c * r[0], c * r[1])
        return lo, hi

    def chunk(b: Builder, kc, trips: int, carried: list) -> list:
        """One chunk: stage the boxes, barrier, run ``trips`` iterations from shared memory,
        barrier. Returns the accumulators after it."""
        cx = ix.at(b)
        bases = []
        tid = cx.add(cx.mul(ty, p.bx), tx)
        for box, sh in zip(p.boxes, shared_bufs):
            g = box.group
            base = [cx.add(uniform(cx, c, kc), lo) for c, lo in zip(g.coefs, box.lo)]
            bases.append(base)
            total = box.elements
            rounds = -(-total // p.threads)
            if rounds > 1:
                _, cb, it, _ = for_loop(b, 0, rounds)
                cc = ix.at(cb)
                lin = cc.add(cc.mul(it, p.threads), tid)
            else:
                cb, cc, lin = b, cx, tid
            conds = []
            if rounds * p.threads > total:
                conds.append(cc.cmp("lt", lin, total))
            # coordinates in the box (row-major), then global indices
            coords, rest = [], lin
            strides = [math.prod(box.size[d + 1:]) for d in range(len(box.size))]
            for d, s in enumerate(box.size):
                if s == 1:
                    coords.append(0)
                    continue
                if strides[d] == 1:
                    c = rest
                else:
                    c = cc.div(rest, strides[d])
                    rest = cc.sub(rest, cc.mul(c, strides[d]))
                coords.append(c)
            gidx = [cc.add(bd, c) for bd, c in zip(base, coords)]
            shape = g.buffer.type.shape
            for d, coefs in enumerate(g.coefs):
                lo, hi = nest_range(coefs)
                lo, hi = lo + box.lo[d], hi + box.lo[d] + box.size[d] - 1
                if lo < 0:
                    conds.append(cc.cmp("ge", gidx[d], 0))
                if hi >= shape[d]:
                    conds.append(cc.cmp("lt", gidx[d], shape[d]))
            if conds:
                _, ib = if_op(cb, cc.all(conds))
                ci = ix.at(ib)
            else:
                ib, ci = cb, cc
            v = ib.create("loop.load", [g.buffer, [ci.v(i) for i in gidx]]).result
            ib.create("loop.store", [v, sh, [ci.v(c) for c, s in zip(coords, box.size)
                                            if s > 1] or [ci.v(0)]])
        b.create("gpu.barrier", [])
        fop, fb, r, inner = for_loop(b, 0, trips, inits=carried)
        fx = ix.at(fb)
        rblock = red.regions[0].blocks[0]
        mapping[rblock.args[0]] = fx.v(fx.add(kc, fx.mul(r, rl.step)))
        for a, v in zip(rblock.args[1:], inner):
            mapping[a] = v

        def hook(o: Operation, ob: Builder):
            hit = staged.get(id(o))
            if hit is None:
                return None
            k, _ = hit
            box = p.boxes[k]
            ox = ix.at(ob)
            idx = [ox.v(ox.sub(mapping.get(i, i), base)) for i, base, s in
                   zip(o.operands[1:], bases[k], box.size) if s > 1] or [ox.v(0)]
            return [ob.create("loop.load", [shared_bufs[k], idx]).result]

        body = list(rblock.ops)
        _clone_into(fb, body[:-1], mapping, hook)
        fb.create("loop.yield", [mapping.get(v, v) for v in body[-1].operands])
        b.create("gpu.barrier", [])
        return list(fop.results)

    carried = [mapping.get(v, v) for v in red.operands]
    if full:
        step = p.tk * rl.step
        lo = rl.lower
        fl, fb, kc, inner = for_loop(lb, lo, lo + full * step, step, inits=carried)
        fb.create("loop.yield", chunk(fb, kc, p.tk, inner))
        carried = list(fl.results)
    if rem:
        carried = chunk(lb, rl.lower + full * p.tk * rl.step, rem, carried)
    for r, v in zip(red.results, carried):
        mapping[r] = v

    if valid is not None:
        _, eb = if_op(lb, valid, loc=op.loc)
    else:
        eb = lb
    _clone_into(eb, nest.epilogue, mapping, lambda o, b: None)
    return launch


def reduction_points(nest: Nest) -> int:
    """Iterations of the reduction nest's innermost body per output point: the product of its
    loops' trips (a depthwise 3x3 conv: 9; a 3x3 conv over 64 channels: 576)."""
    return math.prod(r.trips for r in nest.loops.values())


#: map-to-gpu's tiled-min-reduction default (timed on the H200: MapToGpu's docstring)
DEFAULT_MIN_REDUCTION = 16


def schedule(op: Operation, options=None) -> Operation | None:
    """Insert the tiled gpu.launch for ``op`` before it and return it, or None when the schedule
    does not apply. ``options``: map-to-gpu's ``tiled_min_reduction`` (tile sizes are chosen here)."""
    nest = analyze(op)
    if nest is None:
        return None
    least = getattr(options, "tiled_min_reduction", DEFAULT_MIN_REDUCTION)
    if least and reduction_points(nest) < least:
        return None  # a short reduction (a depthwise conv's 9 taps): the pointwise schedule's
    p = plan(nest, target_of(options))
    if p is None:
        return None
    return emit(nest, p)
