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
grid covers every SM: ResNet-50's pool at batch 32 had 8192 threads in 32 blocks of 256, a
quarter of an H200's 132 SMs, each thread summing 49 pixels of 8 channels (17-22 us).

A nest of one point (a ``loop.parallel`` without dimensions, a rank-0 copy) and a top-level
``loop.for`` run in a launch of a single thread (grid 1, block 1, no guard). A sequential
top-level ``loop.for`` reaching this schedule was taken by no other: the reduction schedule
normally maps the full reductions that tensor-to-loop writes as such loops; the fallback is
correct but uses one GPU thread, so its launch is named ``schedule = "sequential"`` for
``ptxc inspect`` to show.
"""

from __future__ import annotations

from ...dialects.loop import if_op
from ...errors import CompileError
from ...ir.core import Operation
from .common import (WARP, block_size, clone_body, cmp, const, delinearize, grid_size,
                     induction_values, launch_before, linear_thread_index, parallel_space, points)


def schedule(op: Operation, options) -> Operation | None:
    """Map ``op`` (a top-level loop.parallel, loop.copy or loop.for) to a gpu.launch inserted
    before it; returns the launch (the pass erases ``op``). Takes every kernel."""
    max_block = int(getattr(options, "block_size", 256)) if options is not None else 256
    if op.name == "loop.parallel":
        lower, step, trips = parallel_space(op)
        body = op.regions[0].blocks[0]

        def emit(b, ivs):
            clone_body(body, b, dict(zip(body.args, ivs)))
        if any(o.name == "loop.for" for o in op.walk()):
            max_block = _spread(points(trips), max_block)
            launch = _nest(op, trips, lower, step, emit, max_block, "pointwise")
            unroll_short_loops(launch)
            return launch
        return _nest(op, trips, lower, step, emit, max_block, "pointwise")
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


#: the most iterations of a thread's innermost loop that are unrolled (``loop.for {unroll}``)
UNROLL_TRIPS = 8


def unroll_short_loops(launch: Operation) -> None:
    """Mark each innermost ``loop.for`` of ``launch`` that loads and runs at most
    :data:`UNROLL_TRIPS` iterations ``unroll`` (lowered straight-line). A thread that sums a
    7 x 7 pool window otherwise waits for each pixel's loads before it issues the next ones:
    49 memory latencies in a row (ResNet-50 b32's int8 global pool, 8 channels a thread, took
    20 us on the H200 for 16 MB). Unrolled, the 7 pixels of a row are in flight together; the
    carried values still combine in iteration order. Before/after (the inner loop)::

        %s = "loop.for"(%acc) ({ ... loop.load ... }) {lower = 0, upper = 7}
        %s = "loop.for"(%acc) ({ ... loop.load ... }) {lower = 0, unroll = true, upper = 7}
    """
    for o in launch.walk():
        if o.name != "loop.for" or o is launch:
            continue
        inner = [x for x in o.walk() if x is not o]
        trips = len(range(o.attr("lower"), o.attr("upper"), o.attr("step")))
        if (trips <= UNROLL_TRIPS and not any(x.name == "loop.for" for x in inner)
                and any(x.name == "loop.load" for x in inner)):
            o.attributes["unroll"] = True


def _spread(n: int, max_block: int) -> int:
    """The block size that gives ``n`` threads (each running a loop) a block on every SM: at
    most ``max_block``, at least a warp."""
    from .mma import SMS
    return max(WARP, min(max_block, n // SMS // WARP * WARP))


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
