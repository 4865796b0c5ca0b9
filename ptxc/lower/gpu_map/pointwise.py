"""The pointwise schedule: one thread per iteration point of a top-level nest.

The parallel dimensions of a ``loop.parallel`` are collapsed into one linear index
``lin = block_id.x * B + thread_id.x`` (row-major: the last dimension varies fastest across
neighbouring threads, so loads and stores of row-major buffers coalesce), guarded by
``loop.if (lin < points)`` where the grid overshoots, and delinearized with div/mod by constants
into iteration numbers and then induction values (``lower + t * step``). The body is cloned
with its induction variables remapped; an inner ``loop.for`` (a reduction the other schedules
did not take) runs sequentially in its thread. A ``loop.copy`` is the nest of a load and a store
over its shape. ``B`` is the pass's ``block_size`` (256), fewer -- a multiple of 32 -- for small
nests; ``grid = ceil(points / B)``. A nest whose threads each run a loop (a reduction left to
this schedule, such as a global average pool over 7 x 7 pixels with its producer's epilogue)
and that has fewer points than 256 per SM gets blocks small enough (a warp at least) that its
grid covers every SM of the target (map-to-gpu's, common.target_of): ResNet-50's pool at batch
32 had 8192 threads in 32 blocks of 256, a quarter of an H200's SMs, each thread summing 49 pixels of 8 channels (17-22 us). On the
cuda pipeline that pool now arrives with one point per output (lower-tensor-to-loop's
``jam-min-points``, tensor_to_loop/nest.py "Unroll-and-jam": a streaming reduction too small
to fill the GPU is not jammed), so it has 65536 threads in 256 blocks of 256.

A nest of one point (a ``loop.parallel`` without dimensions, a rank-0 copy) and a top-level
``loop.for`` run in a launch of a single thread (grid 1, block 1, no guard). A sequential
top-level ``loop.for`` reaching this schedule was taken by no other: the reduction schedule
normally maps the full reductions that tensor-to-loop writes as such loops; the fallback is
correct but uses one GPU thread, so its launch is named ``schedule = "sequential"`` for
``ptxc inspect`` to show.
"""

from __future__ import annotations

from ...dialects.loop import for_loop, if_op
from ...errors import CompileError
from ...ir.builder import Builder
from ...ir.core import Operation
from ...target import Target
from .common import (WARP, add, block_size, clone_body, cmp, const, delinearize, div, grid_size,
                     induction_values, launch_before, linear_thread_index, mul, parallel_space,
                     points, sub, target_of)


def schedule(op: Operation, options) -> Operation | None:
    """Map ``op`` (a top-level loop.parallel, loop.copy or loop.for) to a gpu.launch inserted
    before it; returns the launch (the pass erases ``op``). Takes every kernel."""
    max_block = int(getattr(options, "block_size", 256)) if options is not None else 256
    if op.name == "loop.parallel":
        lower, step, trips = parallel_space(op)
        body = op.regions[0].blocks[0]

        def emit(b, ivs):
            clone_body(body, b, dict(zip(body.args, ivs)))
        loops = any(o.name == "loop.for" for o in op.walk())
        if loops:
            max_block = _spread(points(trips), max_block, target_of(options))
        launch = _nest(op, trips, lower, step, emit, max_block, "pointwise")
        if loops:
            unroll_short_loops(launch)
        return launch
    if op.name == "loop.copy":
        src, dst = op.operands
        shape = list(src.type.shape)

        def emit(b, ivs):
            v = b.create("loop.load", [src, ivs]).result
            b.create("loop.store", [v, dst, ivs])
        return _nest(op, shape, [0] * len(shape), [1] * len(shape), emit, max_block, "pointwise")
    if op.name == "loop.for":
        if op.has_uses:
            raise CompileError(f"{op.where}: the results of a top-level loop.for are read by "
                               "other ops; a kernel cannot return values")

        def emit(b, ivs):
            b.insert(op.clone({}))
        return _nest(op, [], [], [], emit, max_block, "sequential")
    return None


#: a thread's loop is unrolled (``loop.for {unroll}``) where it runs at most this many
#: iterations and loads at most :data:`UNROLL_BYTES` over them all
UNROLL_TRIPS = 64
UNROLL_BYTES = 512


def unroll_short_loops(launch: Operation) -> None:
    """Unroll the loops a thread of ``launch`` runs where their loads are few enough to be in
    flight together: a perfect nest of two loops (a pool's rows and columns) is first collapsed
    into one loop (:func:`collapse`) where that one passes, else each innermost loop that loads
    and passes is unrolled alone. Passing: at most :data:`UNROLL_TRIPS` iterations and
    :data:`UNROLL_BYTES` loaded over them. A thread summing a 7 x 7 pool window otherwise waits
    for each pixel's loads before it issues the next: 49 memory latencies in a row (ResNet-50
    b32's int8 global pool took 20 us on the H200 for 16 MB; 13 with its rows unrolled).
    Unrolled, the loads are in flight together (llvm_kernel's unrolled lowering emits them
    first); the carried values still combine in iteration order. Before/after::

        %s = "loop.for"(%acc) ({ %t = "loop.for"(..) ({ ... loop.load ... }) {upper = 7} ... })
             {upper = 7}
        %s = "loop.for"(%acc) ({ ... loop.load ... }) {unroll = true, upper = 49}
    """
    for o in list(launch.walk()):
        if o.name != "loop.for" or o.parent_op is None or o.parent_op.name == "loop.for":
            continue   # outermost loops of a thread only; their inner ones below
        _unroll(o)


def _unroll(loop: Operation) -> None:
    inner = _perfect_inner(loop)
    if inner is not None and _fits(_trips(loop) * _trips(inner), _bytes_loaded(inner)):
        collapse(loop, inner).attributes["unroll"] = True
        return
    for o in loop.walk():
        if (o.name == "loop.for" and not any(x.name == "loop.for" for x in o.walk() if x is not o)
                and _fits(_trips(o), _bytes_loaded(o))):
            o.attributes["unroll"] = True


def _trips(loop: Operation) -> int:
    return len(range(loop.attr("lower"), loop.attr("upper"), loop.attr("step")))


def _bytes_loaded(loop: Operation) -> int:
    """Bytes one iteration of ``loop``'s body loads (its own loop.loads, not inner loops')."""
    return sum(max(1, o.results[0].type.bitwidth // 8) for o in loop.regions[0].blocks[0].ops
               if o.name == "loop.load")


def _fits(trips: int, per_iteration: int) -> bool:
    return per_iteration > 0 and trips <= UNROLL_TRIPS and trips * per_iteration <= UNROLL_BYTES


def _perfect_inner(loop: Operation) -> Operation | None:
    """The inner loop when ``loop``'s body is only that loop, carrying ``loop``'s values in and
    yielding its results, with no loop inside it; else None."""
    ops = list(loop.regions[0].blocks[0].ops)
    if len(ops) != 2 or ops[0].name != "loop.for":
        return None
    inner, y = ops
    args = list(loop.regions[0].blocks[0].args[1:])
    if list(inner.operands) != args or list(y.operands) != list(inner.results):
        return None
    if any(x.name == "loop.for" for x in inner.walk() if x is not inner):
        return None
    return inner


def collapse(outer: Operation, inner: Operation) -> Operation:
    """Replace the perfect nest ``outer``/``inner`` (:func:`_perfect_inner`) by one loop over
    the product of their trips, row-major (so the carried values combine in the same order),
    whose induction values are decoded by constant div/rem; returns the new loop."""
    n = _trips(inner)
    loop, b, t, carried = for_loop(Builder.before_op(outer), 0, _trips(outer) * n,
                                   inits=list(outer.operands), loc=outer.loc)
    if outer.attr("ordered") or inner.attr("ordered"):
        loop.attributes["ordered"] = True

    def iv(k, lp):   # lp's induction value at its iteration number k
        v = k
        if lp.attr("step") != 1:
            v = mul(b, v, lp.attr("step"))
        return add(b, v, lp.attr("lower")) if lp.attr("lower") else v
    i = div(b, t, n)
    j = sub(b, t, mul(b, i, n))
    body = inner.regions[0].blocks[0]
    mapping = {outer.regions[0].blocks[0].args[0]: iv(i, outer), body.args[0]: iv(j, inner)}
    mapping.update(zip(body.args[1:], carried))
    clone_body(body, b, mapping)
    b.create("loop.yield", [mapping.get(v, v) for v in body.last_op.operands])
    outer.replace_all_uses_with(list(loop.results))
    outer.erase()
    return loop


def _spread(n: int, max_block: int, target: Target) -> int:
    """The block size that gives ``n`` threads (each running a loop) a block on every SM of
    ``target``: at most ``max_block``, at least a warp."""
    return max(WARP, min(max_block, n // target.sms // WARP * WARP))


def _nest(op: Operation, trips, lower, step, emit, max_block: int, name: str) -> Operation:
    """A launch with one thread per point of the iteration space ``trips``; ``emit(b, ivs)``
    writes one point's work given its induction values."""
    n = points(trips)
    if n == 1:  # a single point: one thread, no ids, no guard
        launch, b = launch_before(op, (1, 1, 1), (1, 1, 1), name)
        emit(b, [const(b, lo) for lo in lower])
        return launch
    block = block_size(n, max_block)
    grid = grid_size(n, block, op.where)
    launch, b = launch_before(op, (grid, 1, 1), (block, 1, 1), name)
    lin = linear_thread_index(b, block, grid)
    if grid * block != n:
        _, b = if_op(b, cmp(b, "lt", lin, n))
    emit(b, induction_values(b, delinearize(b, lin, trips), lower, step))
    return launch
