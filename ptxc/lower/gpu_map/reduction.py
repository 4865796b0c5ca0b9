"""The ``reduction`` schedule of map-to-gpu: one block per point, its threads split the reduction.

A nest that lower-tensor-to-loop makes for a reduction (ReduceSum/Mean/Max/Min/Prod, softmax's
max and sum, LayerNorm's moments, GlobalAveragePool, a batch-1 MatMul/Gemm) is a top-level
``loop.parallel`` whose body, per point, reads a few values (the *prologue*), runs one
``loop.for`` whose carried values are each combined with one of ``arith.add``/``mul``/``max``/
``min``, then stores the results (the *epilogue*). The pointwise schedule gives such a nest one
thread per point, each looping over the whole reduction: with few points (a batch-1 FC layer has
125 points of 8 outputs, a softmax row or a full reduction one) that leaves almost all of the
GPU idle. Here each point gets a block of B threads instead::

    "loop.parallel"() ({                        "gpu.launch"() ({
    ^bb0(%i: index):                              %sh = "gpu.shared"() : () -> buffer<256xf32>
      %z = arith.constant 0.0                     %i = "gpu.block_id"() {dim = 0}
      %s = "loop.for"(%z) ({                      %t = "gpu.thread_id"() {dim = 0}
      ^bb0(%k: index, %a: f32):                   %p = "loop.for"(%zero) ({   // 3 full rounds
        %x = "loop.load"(%X, %i, %k)      ==>     ^bb0(%j: index, %a: f32):     // j = 0, 256, 512
        %b = "arith.add"(%a, %x)                    %k = j + t; %x = load X[i, k]; yield a + x
        "loop.yield"(%b)                          }) {lower = 0, upper = 768, step = 256}
      }) {lower = 0, upper = 1000}                "loop.store"(%p, %sh, %t)
      "loop.store"(%s, %Y, %i)                    "loop.if"(t < 232) { k = 768 + t;  // the tail
      "loop.yield"()                                 sh[t] = sh[t] + load X[i, k] }
    }) {lower = [0], upper = [4]}                 barrier; if (t < 128) sh[t] += sh[t + 128]
                                                  barrier; if (t < 64) sh[t] += sh[t + 64] ...
                                                  barrier; if (t < 1) sh[t] += sh[t + 1]
                                                  "loop.if"(t == 0) { %s = sh[0] + %z (init)
                                                                      "loop.store"(%s, %Y, %i) }
                                                }) {block = [256, 1, 1], grid = [4, 1, 1],
                                                    schedule = "reduction"}

What applies (:func:`analyze` says why a nest does not):

* a top-level ``loop.parallel`` (any number of dims, steps, including none: a full reduction is
  a 0-dim parallel, one point) whose body holds exactly one ``loop.for`` with carried values;
  ops before it (the prologue) have no side effects (pure ops, loads, views; no regions); ops
  after it (the epilogue) have no regions (they run on one thread);
* the reduction loop may nest further ``loop.for``\\ s as a *perfect carried chain* (each level's
  body is side-effect-free ops plus one ``loop.for`` taking exactly the level's carried values
  and yielding exactly its results): the chain is collapsed into one linear range of
  ``N = prod(trips)`` iterations (GlobalAveragePool's 7x7, a full reduction's every axis), so
  threads split all of it, not just an outer loop of 3; consecutive threads take consecutive
  linear iterations, so when the innermost level walks a buffer's last dim the loads coalesce;
* in the innermost body, every carried value is used exactly once, by a combiner
  ``add|mul|max|min(carried, v)`` (either order) whose result is used only by the yield; hence
  ``v`` cannot depend on any carried value, and the body may hold anything side-effect free
  (loads, math, inner loops that compute ``v``), but no store;
* splitting pays: ``N >= MIN_TRIP`` (32: a warp's worth of iterations to split),
  ``N * carried >= MIN_WORK`` (256: the serial work one thread would otherwise do per point:
  unroll-and-jam's 8 accumulators count 8 times) and ``points < MAX_POINTS`` (8192). Pointwise
  launches one thread per point; below 8192 that is under 3% of an H200's ~270k resident threads
  (its SMs x 2048), while this schedule launches ``points x B`` threads whose loads are issued
  in parallel. Above it pointwise already fills the machine and needs no shared memory or
  barriers.

Against the pointwise schedule (numba-cuda, CUDA-graph replay; measured when this schedule
was written, before bench/history): a batch-1 FC (with or without Gemm's transB), a full
ReduceMean of a large tensor (faster with blocks of 1024 than 256) and a ReduceSum over rows
of 512 all ran several times faster; rows of 64 and 256 still win at 8192 and 32768 points
(the rows are contiguous, so the threads of a block coalesce where pointwise threads, 8 rows
apart, do not); 16 rows of 32 is a wash. So 8192 is conservative for reductions along a
contiguous axis; a reduction along a strided axis (ReduceSum over axis 0) coalesces better
pointwise, which is why the bound is not raised without an access-pattern test (future work).

On the cuda pipeline a streaming reduction (every operand its loop walks moves with every
parallel dim: Reduce*, softmax's max and sum, a norm's moments) reaches this schedule with one
point per output when jammed it would have fewer points than an H200 holds threads
(lower-tensor-to-loop's ``jam-min-points``, tensor_to_loop/nest.py "Unroll-and-jam"): a
softmax over 4 rows is 4 blocks of one row each, not one block carrying the 4 rows' partials
side by side. The nests of the tests here come from the cpu pipeline (jammed).

Threads per block: ``B = clamp(next_pow2(ceil(N / 4)), 32, 256)`` (a power of two, so the
tree halves evenly; at least 4 iterations per thread before the tree is worth its
``log2(B)`` barriers; 256 is the usual choice of CUB and PyTorch for long rows), up to 1024
when there are fewer points than the target has SMs (each block has an SM to itself, and more
threads keep more loads in flight), and never more than the partials fit in the target's
static shared memory per block (48 KiB). map-to-gpu's ``reduction-block-size`` (0, the
default: this rule) replaces ``B`` for tuning (gpu_map/tactics.py), halved where the target
cannot hold it (:func:`fit_block`). Each thread
starts its partials at the combiner's identity (0, 1, -inf/+inf for floats, the type's min/max
for integers), runs ``N // B`` full rounds (iterations ``t, t + B, ...``) with the partials in
registers (a ``loop.for`` with static bounds, no guard), stores them to shared memory (one
``gpu.shared`` buffer of B elements per carried value), then the ``N % B`` threads with a tail
iteration add it to their own slot under ``loop.if (t < N % B)``. The tree combine (strides
B/2 ... 1, a ``gpu.barrier`` before each step, outside the ``loop.if``) handles every carried
value in one pass, then thread 0 combines the original initial value (when it is not already the
identity constant) and runs the epilogue under ``loop.if (t == 0)``.

Numerics: float add and mul are reassociated (per-thread strided partial sums, then a tree), as
in every GPU library (cuBLAS, CUB, cuDNN); results differ from the sequential loop by rounding,
typically less, since pairwise sums grow error as ``log N`` rather than ``N``. max and min are
exact (NaN still propagates: the identity never hides one).

Not handled (the nest goes to the next schedule, pointwise): an ``ordered`` reduction loop (a
windowed pool's sum, whose window order is its semantics: ``tensor.generic``'s ``ordered``), a
body with two reduction loops or
a loop in the epilogue, a store inside the reduction, a carried value used by anything but its
combiner (a running sum also stored per step), top-level ``loop.for`` kernels (their results
cannot be used, so they are never reductions; full reductions arrive as 0-dim parallels), and
many points with a short reduction (the thresholds above). Gaps: one block per point caps a
full reduction of a large tensor at one SM (a split over several blocks with a second pass, or
atomics, would need a scratch buffer and a second launch); warp shuffles for the last 5 tree
steps and several points per block for medium-sized nests would speed this up further.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from ...dialects.gpu import barrier, block_id, launch_op, shared, thread_id
from ...dialects.graph.scalar_forms import constant_attr
from ...dialects.loop import for_loop, if_op
from ...errors import CompileError
from ...ir.builder import Builder
from ...ir.core import Operation, Value
from ...ir.types import INDEX, ScalarType
from ...target import Target
from .common import target_of

NAME = "reduction"

#: the combiners a carried value may use, each commutative and associative (floats up to rounding)
COMBINERS = ("arith.add", "arith.mul", "arith.max", "arith.min")

#: thresholds; see the module docstring. A pipeline may override them through ``options``
#: attributes of the same names in lower case (``reduction_min_trip`` ...).
MIN_TRIP = 32
MIN_WORK = 64
MAX_POINTS = 8192
MAX_BLOCK = 256
MIN_BLOCK = 32
#: with fewer points than the target has SMs, blocks may grow to this many threads: each
#: block has an SM to itself anyway, and more threads keep more loads in flight (the
#: partials must still fit the target's static ``__shared__`` limit, shared_per_block_static)
MAX_BLOCK_FEW = 1024
#: iterations each thread should at least run before the tree combine
ITERS_PER_THREAD = 4

#: ops that may appear where this schedule recomputes or reorders code (no side effects)
_SIDE_EFFECT_FREE = {"loop.load", "loop.view", "loop.for", "loop.yield"}


@attrs.frozen
class Match:
    """What :func:`analyze` found in a reduction nest."""

    par: Operation              # the top-level loop.parallel
    red: Operation              # its reduction loop.for (outermost level)
    levels: tuple               # the perfect carried chain, outermost first (levels[0] is red)
    combiners: tuple            # per carried value, the combiner's op name
    trip: int                   # iterations of the collapsed chain
    points: int                 # iteration points of the parallel

    @property
    def carried(self) -> int:
        return len(self.combiners)


def _trip(lo: int, hi: int, step: int) -> int:
    return max(0, -(-(hi - lo) // step))


def _par_ranges(par: Operation) -> list[tuple[int, int, int]]:
    lo, hi = par.attributes["lower"], par.attributes["upper"]
    step = par.attr("step") or (1,) * len(lo)
    return list(zip(lo, hi, step))


def _for_range(op: Operation) -> tuple[int, int, int]:
    return op.attributes["lower"], op.attributes["upper"], op.attr("step")


def _body(op: Operation):
    return op.regions[0].blocks[0]


def _side_effect_free(op: Operation, allow_regions: bool) -> bool:
    """Whether ``op`` (and all it nests) only computes values: pure ops, loads, views, loops."""
    for o in op.walk():
        if o.regions and not allow_regions:
            return False
        spec = o.spec
        if o.name in _SIDE_EFFECT_FREE or (spec is not None and spec.has_trait("pure")):
            continue
        return False
    return True


def _combiner(y: Value, carried: Value) -> str | None:
    """The combiner name when ``y`` is ``comb(carried, v)`` or ``comb(v, carried)`` with
    ``carried`` used only there and ``y`` used only by the loop's yield; else None."""
    if not hasattr(y, "op") or y.op.name not in COMBINERS:
        return None
    c = y.op
    if c.block is not carried.owner or len(c.operands) != 2:
        return None
    if carried not in c.operands or all(o is carried for o in c.operands):
        return None
    if len(carried.uses) != 1 or len(y.uses) != 1 or y.uses[0].op.name != "loop.yield":
        return None
    return c.name


def identity(combiner: str, t: ScalarType):
    """The identity of ``combiner`` on ``t`` (0, 1, -inf/+inf, or an integer type's min/max)."""
    if combiner == "arith.add":
        return 0
    if combiner == "arith.mul":
        return 1
    if t.is_float:
        return -math.inf if combiner == "arith.max" else math.inf
    info = np.iinfo(t.np_dtype)
    return int(info.min) if combiner == "arith.max" else int(info.max)


def _chain(red: Operation) -> list[Operation] | str:
    """The perfect carried chain starting at ``red`` (see the module docstring), or why not."""
    levels = [red]
    cur = red
    while True:
        block = _body(cur)
        carried = list(block.args[1:])
        inner = [o for o in block.ops if o.name == "loop.for"]
        if len(inner) != 1:
            return levels
        inner = inner[0]
        y = block.last_op
        if (list(inner.operands) != carried or list(y.operands) != list(inner.results)
                or any(len(c.uses) != 1 for c in carried)
                or any(len(r.uses) != 1 for r in inner.results)):
            return levels
        others = [o for o in block.ops if o is not inner and o is not y]
        if not all(_side_effect_free(o, allow_regions=False) for o in others):
            return levels
        levels.append(inner)
        cur = inner


def analyze(op: Operation, min_trip: int = MIN_TRIP, min_work: int = MIN_WORK,
            max_points: int = MAX_POINTS) -> Match | str:
    """A :class:`Match` when ``op`` is a reduction nest this schedule takes, else a string
    saying why not (for explain output and tests)."""
    if op.name != "loop.parallel":
        return f"{op.name} is not a loop.parallel"
    parent = op.parent_op
    if parent is None or parent.name != "func.func":
        return "not at the top level of a function"
    body = _body(op)
    ops = list(body.ops)[:-1]  # without the yield
    reds = [o for o in ops if o.name == "loop.for" and o.results]
    if len(reds) != 1:
        return f"the body has {len(reds)} loop.for with carried values, not one"
    red = reds[0]
    at = ops.index(red)
    for o in ops[:at]:
        if not _side_effect_free(o, allow_regions=False):
            return f"the prologue has {o.name}, which is not side-effect free"
    for o in ops[at + 1:]:
        if o.regions:
            return f"the epilogue has {o.name} with a region (thread 0 would run it alone)"
    levels = _chain(red)
    if any(lv.attr("ordered") for lv in levels):
        return ("the reduction is ordered (a windowed pool's sum keeps its window order, as the "
                "reference and onnxruntime add it): threads would reassociate it")
    inner = levels[-1]
    block = _body(inner)
    for o in list(block.ops)[:-1]:
        if not _side_effect_free(o, allow_regions=True):
            return f"the reduction body has {o.name}, which is not side-effect free"
    combiners = []
    for y, c in zip(block.last_op.operands, block.args[1:]):
        comb = _combiner(y, c)
        if comb is None:
            return (f"carried value #{len(combiners)} is not combined by exactly one of "
                    + ", ".join(COMBINERS))
        if not isinstance(c.type, ScalarType) or c.type.name in ("i1", "bf16"):
            return f"carried value #{len(combiners)} has type {c.type}"
        combiners.append(comb)
    trip = 1
    for lv in levels:
        trip *= _trip(*_for_range(lv))
    points = 1
    for r in _par_ranges(op):
        points *= _trip(*r)
    if points == 0 or trip == 0:
        return "the nest is empty"
    if trip < min_trip:
        return f"the reduction has {trip} iterations, under {min_trip}"
    if trip * len(combiners) < min_work:
        return f"{trip} iterations x {len(combiners)} carried values is under {min_work}"
    if points >= max_points:
        return f"{points} points fill the GPU one thread each (at least {max_points})"
    return Match(op, red, tuple(levels), tuple(combiners), trip, points)


def block_size(trip: int, points: int, target: Target, partial_bytes: int = 4) -> int:
    """Threads per block for ``points`` reductions of ``trip`` iterations each keeping
    ``partial_bytes`` of partials per thread in shared memory, on ``target`` (see the module
    docstring)."""
    want = max(1, -(-trip // ITERS_PER_THREAD))
    b = 1 << (want - 1).bit_length()
    top = MAX_BLOCK_FEW if points < target.sms else MAX_BLOCK
    return max(MIN_BLOCK, min(fit_block(top, target, partial_bytes), b))


def fit_block(block: int, target: Target, partial_bytes: int = 4) -> int:
    """``block`` halved until it is at most the target's threads per block and its partials
    (``partial_bytes`` a thread) fit the target's static shared memory per block; not under
    :data:`MIN_BLOCK`."""
    block = min(block, target.max_threads_per_block)
    while block > MIN_BLOCK and block * partial_bytes > target.shared_per_block_static:
        block //= 2
    return block


class _Emitter:
    """Index arithmetic, with constants made once per launch at ``top`` (the start of its
    body)."""

    def __init__(self, top: Builder):
        self.top = top
        self.consts: dict = {}

    def const(self, value, t: ScalarType = INDEX) -> Value:
        key = (t, repr(value))
        if key not in self.consts:
            self.consts[key] = self.top.create(
                "arith.constant", [], {"value": constant_attr(value, t), "type": t}).result
        return self.consts[key]

    def op(self, b: Builder, name: str, *args, **attrs) -> Value:
        return b.create(name, list(args), attrs or None).result

    def affine(self, b: Builder, x: Value, scale: int, offset: int) -> Value:
        """``offset + x * scale`` without the no-op parts."""
        if scale != 1:
            x = self.op(b, "arith.mul", x, self.const(scale))
        if offset:
            x = self.op(b, "arith.add", x, self.const(offset))
        return x

    def digits(self, b: Builder, lin: Value, ranges: list) -> list[Value]:
        """The induction variables of a row-major nest of ``ranges`` ((lo, hi, step) each) at
        linear iteration ``lin`` (known to be in range)."""
        trips = [_trip(*r) for r in ranges]
        out = []
        inner = int(np.prod(trips, dtype=np.int64))
        for d, ((lo, _, step), n) in enumerate(zip(ranges, trips)):
            inner //= n
            if n == 1:
                out.append(self.const(lo))
                continue
            q = lin if inner == 1 else self.op(b, "arith.div", lin, self.const(inner))
            if d > 0:  # the outermost digit needs no wrap: lin < prod(trips)
                qq = self.op(b, "arith.div", q, self.const(n))
                q = self.op(b, "arith.sub", q, self.op(b, "arith.mul", qq, self.const(n)))
            out.append(self.affine(b, q, step, lo))
        return out


def _clone_iteration(b: Builder, m: Match, ivs: list[Value], mapping: dict,
                     carried: list[Value]) -> list[Value]:
    """Clone one iteration of the collapsed chain at ``b``: each level's side-effect-free ops
    with its induction variable ``ivs[l]``, then the innermost body with its carried values bound
    to ``carried``; returns the values it would yield (``comb(carried_i, v_i)``)."""
    mapping = dict(mapping)
    for lv, iv in zip(m.levels, ivs):
        block = _body(lv)
        mapping[block.args[0]] = iv
        if lv is m.levels[-1]:
            for c, v in zip(block.args[1:], carried):
                mapping[c] = v
            for o in list(block.ops)[:-1]:
                b.insert(o.clone(mapping))
            return [mapping.get(y, y) for y in block.last_op.operands]
        for o in block.ops:
            if o.name != "loop.for" and o.name != "loop.yield":
                b.insert(o.clone(mapping))
    raise AssertionError("unreachable: the chain ends in its innermost level")


def build(m: Match, b: Builder, target: Target, block: int | None = None) -> Operation:
    """Insert the launch for match ``m`` at ``b`` (before the nest) for ``target``; returns it.
    ``block`` overrides :func:`block_size` (a power of two of at least 32: the tree halves
    it; halved where the target cannot hold it, :func:`fit_block`)."""
    par, red = m.par, m.red
    types = [v.type for v in red.results]
    partial_bytes = sum(t.np_dtype.itemsize for t in types)
    bsz = fit_block(block, target, partial_bytes) if block else \
        block_size(m.trip, m.points, target, partial_bytes)
    if bsz < MIN_BLOCK or bsz & (bsz - 1):
        raise CompileError(f"{par.where}: reduction block size {bsz} is not a power of two "
                           f">= {MIN_BLOCK}")
    launch, lb = launch_op(b, (m.points, 1, 1), (bsz, 1, 1), NAME, loc=par.loc)
    sh = [shared(lb, (bsz,), t) for t in types]
    bid, tid = block_id(lb, 0), thread_id(lb, 0)
    e = _Emitter(Builder.before_op(bid.op))  # constants first: they dominate every use

    # the point this block computes, then the prologue, run by every thread alike
    mapping: dict = {}
    pbody = _body(par)
    for a, iv in zip(pbody.args, e.digits(lb, bid, _par_ranges(par))):
        mapping[a] = iv
    pops = list(pbody.ops)[:-1]
    at = pops.index(red)
    for o in pops[:at]:
        lb.insert(o.clone(mapping))
    ranges = [_for_range(lv) for lv in m.levels]
    ident = [e.const(identity(c, t), t) for c, t in zip(m.combiners, types)]

    # full rounds: every thread in range, partials in registers
    rounds = m.trip // bsz
    partial = ident
    if rounds:
        loop, fb, j, acc = for_loop(lb, 0, rounds * bsz, bsz, inits=ident)
        k = e.op(fb, "arith.add", j, tid)
        ys = _clone_iteration(fb, m, e.digits(fb, k, ranges), mapping, acc)
        fb.create("loop.yield", ys)
        partial = list(loop.results)
    for v, s in zip(partial, sh):
        lb.create("loop.store", [v, s, tid])

    # the tail: threads t < N % B run iteration rounds * B + t into their own slot
    rem = m.trip % bsz
    if rem:
        _, ib = if_op(lb, e.op(lb, "arith.cmp", tid, e.const(rem), predicate="lt"))
        k = e.affine(ib, tid, 1, rounds * bsz)
        mine = [ib.create("loop.load", [s, tid]).result for s in sh]
        ys = _clone_iteration(ib, m, e.digits(ib, k, ranges), mapping, mine)
        for y, s in zip(ys, sh):
            ib.create("loop.store", [y, s, tid])

    # the tree: one barrier per step, outside the guard; every carried value in one pass
    stride = bsz // 2
    while stride >= 1:
        barrier(lb)
        _, ib = if_op(lb, e.op(lb, "arith.cmp", tid, e.const(stride), predicate="lt"))
        other = e.op(ib, "arith.add", tid, e.const(stride))
        for comb, s in zip(m.combiners, sh):
            x = ib.create("loop.load", [s, tid]).result
            y = ib.create("loop.load", [s, other]).result
            ib.create("loop.store", [e.op(ib, comb, x, y), s, tid])
        stride //= 2

    # thread 0: the combined values (with the original initial values), then the epilogue;
    # thread 0 wrote sh[0] itself in the last step, so no barrier is needed before reading it
    _, ib = if_op(lb, e.op(lb, "arith.cmp", tid, e.const(0), predicate="eq"))
    for r, s, comb, init in zip(red.results, sh, m.combiners, red.operands):
        v = ib.create("loop.load", [s, e.const(0)]).result
        if not _is_constant(init, identity(comb, r.type)):
            v = e.op(ib, comb, mapping.get(init, init), v)
        mapping[r] = v
    for o in pops[at + 1:]:
        ib.insert(o.clone(mapping))
    return launch


def _is_constant(v: Value, value) -> bool:
    op = getattr(v, "op", None)
    if op is None or op.name != "arith.constant":
        return False
    c = op.attributes["value"]
    try:
        return float(c) == float(value) and math.copysign(1, float(c)) == math.copysign(1, value)
    except (TypeError, ValueError):
        return False


def _option(options, name: str, default: int) -> int:
    return int(getattr(options, name, default) if options is not None else default)


def schedule(op: Operation, options=None) -> Operation | None:
    """The map-to-gpu entry point: insert a ``reduction`` launch before ``op`` and return it,
    or return None when ``op`` is not a reduction nest worth splitting (:func:`analyze`).
    map-to-gpu's ``reduction-block-size`` (0: :func:`block_size` decides) sets the threads
    per block."""
    m = analyze(op, _option(options, "reduction_min_trip", MIN_TRIP),
                _option(options, "reduction_min_work", MIN_WORK),
                _option(options, "reduction_max_points", MAX_POINTS))
    if isinstance(m, str):
        return None
    return build(m, Builder.before_op(op), target_of(options),
                 _option(options, "reduction_block_size", 0) or None)
