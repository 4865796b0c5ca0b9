"""What every map-to-gpu schedule needs: the kernels it maps, their iteration spaces, index
arithmetic on thread and block ids (as arith ops on ``index``), launch sizes, and cloning a nest's
body with its induction variables remapped.

Index arithmetic is written with ``arith.add/sub/mul/div`` and ``arith.cmp`` on ``index`` values
(``div`` truncates toward zero; every value here is non-negative, so it is floor division, and a
remainder is ``x - (x / n) * n``: the dialect has no ``rem``). Constants are created where they are
used (inside the launch), so a kernel reads no top-level scalar it did not already read.

Iteration *numbers* (``0 <= t < trip``) and induction *values* (``lower + t * step``) are kept
apart as in loop_to_llvm: schedules count points by number and hand bodies values.
"""

from __future__ import annotations

from ...dialects.gpu import MAX_GRID_X, MAX_THREADS, block_id, launch_op, thread_id
from ...errors import CompileError
from ...ir.builder import Builder
from ...ir.core import Block, Operation, Value
from ...ir.types import INDEX
from ...target import Target

#: the top-level ops that are kernels (loop_to_llvm's list): map-to-gpu replaces each
KERNEL_OPS = ("loop.parallel", "loop.for", "loop.copy")
#: threads of a warp: block sizes are multiples of it
WARP = 32


# ---- iteration spaces -------------------------------------------------------------------------

def trip(lower: int, upper: int, step: int = 1) -> int:
    """The number of iterations of ``range(lower, upper, step)`` (step > 0)."""
    return max(0, -(-(upper - lower) // step))


def parallel_space(op: Operation) -> tuple[list[int], list[int], list[int]]:
    """``(lower, step, trips)`` of a ``loop.parallel``, one entry per dimension."""
    lo, hi = list(op.attributes["lower"]), list(op.attributes["upper"])
    st = list(op.attr("step") or (1,) * len(lo))
    return lo, st, [trip(a, b, s) for a, b, s in zip(lo, hi, st)]


def points(trips) -> int:
    """The number of iteration points of a nest with ``trips`` (1 for no dimensions)."""
    n = 1
    for t in trips:
        n *= int(t)
    return n


def owning_loc(op: Operation) -> str:
    """How errors name a kernel: its op name and loc."""
    return op.where


# ---- index arithmetic --------------------------------------------------------------------------

def const(b: Builder, value: int, t=INDEX) -> Value:
    return b.create("arith.constant", [], {"value": int(value), "type": t}).result


def add(b: Builder, x: Value, y: Value | int) -> Value:
    if isinstance(y, int):
        if y == 0:
            return x
        y = const(b, y)
    return b.create("arith.add", [x, y]).result


def sub(b: Builder, x: Value, y: Value | int) -> Value:
    if isinstance(y, int):
        if y == 0:
            return x
        y = const(b, y)
    return b.create("arith.sub", [x, y]).result


def mul(b: Builder, x: Value, y: Value | int) -> Value:
    if isinstance(y, int):
        if y == 1:
            return x
        y = const(b, y)
    return b.create("arith.mul", [x, y]).result


def div(b: Builder, x: Value, y: Value | int) -> Value:
    if isinstance(y, int):
        if y == 1:
            return x
        y = const(b, y)
    return b.create("arith.div", [x, y]).result


def cmp(b: Builder, predicate: str, x: Value, y: Value | int) -> Value:
    if isinstance(y, int):
        y = const(b, y)
    return b.create("arith.cmp", [x, y], {"predicate": predicate}).result


def linear_thread_index(b: Builder, block: int, grid: int) -> Value:
    """``block_id.x * block + thread_id.x`` (just ``thread_id.x`` for a one-block grid)."""
    t = thread_id(b, 0)
    if grid == 1:
        return t
    return add(b, mul(b, block_id(b, 0), block), t)


def delinearize(b: Builder, lin: Value, trips) -> list[Value]:
    """Iteration numbers of the row-major point ``lin`` (``0 <= lin < points(trips)``): the last
    dimension varies fastest, so neighbouring threads touch neighbouring elements of row-major
    buffers (coalesced). One ``div`` per dimension; dimensions of one iteration are constant 0."""
    trips = [int(t) for t in trips]
    out: list[Value | None] = [None] * len(trips)
    rest = lin
    live = [d for d, t in enumerate(trips) if t != 1]
    for d in range(len(trips)):
        if trips[d] == 1:
            out[d] = const(b, 0)
    for pos, d in enumerate(reversed(live)):
        if pos == len(live) - 1:  # the outermost live dimension: lin < points, no remainder
            out[d] = rest
        else:
            n = const(b, trips[d])
            q = div(b, rest, n)
            out[d] = sub(b, rest, mul(b, q, n))
            rest = q
    return out


def induction_values(b: Builder, iters, lower, step) -> list[Value]:
    """``lower + t * step`` for each iteration number ``t``."""
    return [add(b, mul(b, t, int(s)), int(lo)) for t, lo, s in zip(iters, lower, step)]


# ---- launch sizes ------------------------------------------------------------------------------

def block_size(n_points: int, max_block: int = 256) -> int:
    """Threads per block for a one-thread-per-point nest: ``max_block``, or fewer (rounded up to
    a multiple of a warp) when the nest has fewer points."""
    if not 1 <= max_block <= MAX_THREADS:
        raise CompileError(f"map-to-gpu: block size {max_block} is not in [1, {MAX_THREADS}]")
    return max(1, min(max_block, -(-n_points // WARP) * WARP))


def grid_size(n_points: int, block: int, where: str = "") -> int:
    """Blocks of ``block`` threads covering ``n_points``; a CompileError past CUDA's grid.x limit
    (points beyond ``(2**31 - 1) * block`` would need grid.y; no model comes near)."""
    g = max(1, -(-n_points // block))
    if g > MAX_GRID_X:
        raise CompileError(f"{where}: {n_points} points need {g} blocks of {block}, more than "
                           f"grid.x allows ({MAX_GRID_X}); map-to-gpu does not split nests "
                           "this large over grid.y")
    return g


def launch_before(op: Operation, grid, block, schedule: str):
    """A ``gpu.launch`` inserted before ``op``, keeping its loc: ``(launch, body_builder)``."""
    return launch_op(Builder.before_op(op), grid, block, schedule, loc=op.loc)


# ---- bodies ------------------------------------------------------------------------------------

def clone_body(block: Block, b: Builder, mapping: dict) -> dict:
    """Clone the ops of ``block`` but its terminator at ``b``; ``mapping`` (old value -> new,
    e.g. induction variables -> new index values) is used and extended. Values defined outside
    ``block`` and not in ``mapping`` are read as they are (top-level buffers and scalars)."""
    for op in block.ops:
        if op is block.last_op and op.spec is not None and op.spec.has_trait("terminator"):
            break
        b.insert(op.clone(mapping))
    return mapping


# ---- the target ---------------------------------------------------------------------------------

def target_of(options) -> Target:
    """The machine map-to-gpu writes kernels for: ``options.target`` (map-to-gpu's ``target``,
    set by the compile spine) where set, else :meth:`Target.resolve` of its ``arch`` text option
    (empty: ``PTXC_CUDA_ARCH``, the GPU here, else the sm_90 preset). Every schedule reads the
    target through this; ``options`` may be None (the resolved default) or any object with
    those attributes."""
    target = getattr(options, "target", None)
    if target is not None:
        return target
    return Target.resolve(getattr(options, "arch", "") or None)


def pdl_enabled(options) -> bool:
    """Whether map-to-gpu marks its launches ``pdl`` (gpu.launch): its ``pdl`` option (default
    on) and a target with programmatic dependent launch (``griddepcontrol``: sm_90 and later)."""
    if not getattr(options, "pdl", True):
        return False
    return target_of(options).has("pdl")
