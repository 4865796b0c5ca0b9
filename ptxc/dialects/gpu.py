"""The gpu dialect: a kernel launch over a grid of thread blocks, thread and block ids, block
barriers and per-block shared memory. It lives inside loop-dialect functions (the map-to-gpu pass,
ptxc/lower/gpu_map/, writes it; loop_to_llvm emits it for NVPTX)::

    "gpu.launch"() ({
      %sh = "gpu.shared"() : () -> buffer<256xf32>
      %b = "gpu.block_id"() {dim = 0} : () -> index
      %t = "gpu.thread_id"() {dim = 0} : () -> index
      ...loads, stores, loop.for, loop.if (%t < 128) ...
      "gpu.barrier"() : () -> ()
      "loop.yield"() : () -> ()
    }) {block = [256, 1, 1], grid = [40, 1, 1], schedule = "pointwise"} : () -> ()

Placement rules (checked by the verifier): ``gpu.launch`` only at the top level of a function,
with one region of one block without arguments ending in ``loop.yield``; ``gpu.block_id``,
``gpu.thread_id``, ``gpu.barrier`` and ``gpu.warp_barrier`` only inside a launch (at any
depth); ``gpu.shared`` only directly in a launch's body, with the default layout. Launch
dimensions: every entry >= 1, ``bx * by * bz <= 1024``, ``gy, gz <= 65535``, ``gx < 2**31``
(CUDA's limits).

Reference semantics (the interpreter; so check-numerics and CPU tests work): a launch runs its
body ONCE, in lockstep, vectorized over every thread of every block. Like ``loop.parallel`` it
adds index axes in front of the enclosing ones: six of them, ``[gx, gy, gz, bx, by, bz]``; block
id ``d`` varies along axis ``d`` and thread id ``d`` along axis ``3 + d``. A ``gpu.shared``
buffer holds one copy per block; the interpreter value of the op is an array of the declared
shape (the type check wants that) registered in ``interp.gpu_shared`` with its per-block
storage, and ``loop.load``/``loop.store``/``loop.view`` pick the copy by the linear block id
``bx + gx * (by + gy * bz)`` (``interp.gpu_block``; ptxc/dialects/loop_memory.py, ``per_block``).
Fresh shared memory is NaN (floats) or zero: its contents are undefined. ``loop.if`` masks lanes
(``interp.loop_mask``).

``gpu.barrier`` (and ``gpu.warp_barrier``) is a no-op in lockstep: every op already completes
for all threads before the next begins, which is one legal schedule of a race-free kernel. Races
are NOT detected (a kernel whose threads read what others write without a barrier between may
pass here and fail on a GPU). What is checked: a barrier reached under a mask must be reached by
all threads of a block or by none (``__syncthreads`` in divergent code is undefined behaviour).
"""

from __future__ import annotations

import numpy as np

from ..errors import CompileError
from ..ir.builder import Builder
from ..ir.core import Block, Operation, Region
from ..ir.spec import Attr, OpSpec, fail
from ..ir.types import INDEX, BufferType
from .loop import _check_body
from .loop_memory import allocate

#: CUDA's launch limits
MAX_THREADS = 1024
MAX_GRID_X = 2 ** 31 - 1
MAX_GRID_YZ = 65535
#: index axes a launch adds in the interpreter: grid x, y, z, then block x, y, z
LAUNCH_AXES = 6


def enclosing_launch(op: Operation) -> Operation | None:
    """The ``gpu.launch`` that ``op`` is nested in (at any depth), or None."""
    p = op.parent_op
    while p is not None:
        if p.name == "gpu.launch":
            return p
        p = p.parent_op
    return None


def check_dims(grid, block) -> str | None:
    """Why ``grid``/``block`` (three ints each) break CUDA's launch limits; None when they fit."""
    grid, block = tuple(grid), tuple(block)
    if len(grid) != 3 or len(block) != 3:
        return f"grid and block need three entries each, are {list(grid)} and {list(block)}"
    if any(int(d) < 1 for d in grid + block):
        return f"grid {list(grid)} and block {list(block)} entries must be >= 1"
    if block[0] * block[1] * block[2] > MAX_THREADS:
        return f"block {list(block)} has {block[0] * block[1] * block[2]} threads, over " \
               f"{MAX_THREADS}"
    if grid[0] > MAX_GRID_X:
        return f"grid x = {grid[0]} is over {MAX_GRID_X}"
    if grid[1] > MAX_GRID_YZ or grid[2] > MAX_GRID_YZ:
        return f"grid {list(grid)}: y and z must be at most {MAX_GRID_YZ}"
    return None


class _LaunchState:
    """What a running launch gives the ops in its body (the interpreter's ``gpu_launch``)."""

    def __init__(self, grid, block):
        self.grid, self.block = tuple(grid), tuple(block)
        self.block_ids, self.thread_ids = [], []
        for d in range(3):
            shape = [1] * LAUNCH_AXES
            shape[d] = self.grid[d]
            self.block_ids.append(np.arange(self.grid[d], dtype=np.int64).reshape(shape))
            shape = [1] * LAUNCH_AXES
            shape[3 + d] = self.block[d]
            self.thread_ids.append(np.arange(self.block[d], dtype=np.int64).reshape(shape))
        gx, gy, _ = self.grid
        bx, by, bz = self.block_ids
        self.linear_block = bx + gx * (by + gy * bz)
        self.blocks = int(np.prod(self.grid))


def _state(op: Operation, interp) -> _LaunchState:
    s = getattr(interp, "gpu_launch", None)
    if s is None:
        raise CompileError(f"{op.where}: runs outside a gpu.launch")
    return s


class Launch(OpSpec):
    """A kernel: its body runs once per thread of ``grid`` blocks of ``block`` threads.
    ``schedule`` names the map-to-gpu schedule that built it and ``tile`` (optional) its
    parameters, e.g. ``"f16 128x128x64 warps 2x2 stages 3"`` (for explore and inspect).
    ``min_blocks`` (optional): blocks each SM must be able to hold at once, a register budget
    for the backend (NVPTX ``minctasm``). ``pdl`` (optional, sm_90+): programmatic dependent
    launch: the kernel waits for the grids before it (``griddepcontrol.wait``) before it touches
    memory, so the runtime may launch it while the previous kernel still runs (its launch and
    CTA placement then overlap that kernel's tail); map-to-gpu's ``pdl`` sets it.
    ``index_bits`` (optional, 32 or 64; default 64): the width ``index`` may lower to. 32 asks
    for 32-bit index arithmetic, which the backend grants only where it cannot overflow
    (:func:`ptxc.lower.loop_to_llvm.launch_index_bits`: every buffer small enough); the mma
    schedules ask (their tile arithmetic is then half the integer instructions). The
    interpreter's semantics do not depend on it. ``tactic`` and ``tuning_key`` (optional): the
    tuned tactic that built the launch (ptxc/tune/tactic.py, its text) and its kernel's key
    (ptxc/tune/kernels.py); map-to-gpu sets them where its ``tactics`` chose a non-default
    tactic for the kernel."""

    name = "gpu.launch"
    operands = ()
    results = ()
    attributes = {"grid": Attr("ints", required=True), "block": Attr("ints", required=True),
                  "schedule": Attr("str", required=True), "tile": Attr("str"),
                  "min_blocks": Attr("int"), "pdl": Attr("bool"), "index_bits": Attr("int"),
                  "tactic": Attr("str"), "tuning_key": Attr("str")}
    regions = 1

    def infer_types(self, op):
        return []

    def verify(self, op):
        parent = op.parent_op
        if parent is None or parent.name != "func.func":
            fail(op, "must be at the top level of a function, not inside "
                 + (parent.name if parent is not None else "nothing"))
        why = check_dims(op.attributes["grid"], op.attributes["block"])
        if why:
            fail(op, why)
        if op.attributes.get("index_bits", 64) not in (32, 64):
            fail(op, f"index_bits must be 32 or 64, is {op.attributes['index_bits']}")
        _check_body(op, [], [])

    def reference(self, op, args, interp):
        state = _LaunchState(op.attributes["grid"], op.attributes["block"])
        saved = (getattr(interp, "gpu_launch", None), getattr(interp, "gpu_shared", None),
                 getattr(interp, "gpu_block", None), getattr(interp, "loop_mask", None),
                 getattr(interp, "loop_vector_rank", 0))
        interp.gpu_launch, interp.gpu_shared = state, {}
        interp.gpu_block, interp.loop_mask = state.linear_block, None
        interp.loop_vector_rank = saved[4] + LAUNCH_AXES
        try:
            interp.run_block(op.regions[0].blocks[0], [])
        finally:
            (interp.gpu_launch, interp.gpu_shared, interp.gpu_block, interp.loop_mask,
             interp.loop_vector_rank) = saved
        return []


class _Id(OpSpec):
    operands = ()
    results = ("id",)
    attributes = {"dim": Attr("int", required=True)}
    traits = {"pure"}

    def infer_types(self, op):
        return [INDEX]

    def verify(self, op):
        if op.attributes["dim"] not in (0, 1, 2):
            fail(op, f"dim must be 0, 1 or 2, is {op.attributes['dim']}")
        if enclosing_launch(op) is None:
            fail(op, "must be inside a gpu.launch")


class BlockId(_Id):
    """The block's index along grid dimension ``dim`` (``blockIdx.x/y/z``)."""

    name = "gpu.block_id"

    def reference(self, op, args, interp):
        return [_state(op, interp).block_ids[op.attributes["dim"]]]


class ThreadId(_Id):
    """The thread's index in its block along ``dim`` (``threadIdx.x/y/z``)."""

    name = "gpu.thread_id"

    def reference(self, op, args, interp):
        return [_state(op, interp).thread_ids[op.attributes["dim"]]]


class GridWait(OpSpec):
    """Programmatic dependent launch's wait (``griddepcontrol.wait``): the grids launched before
    this one have completed and their memory is visible after it. In a ``pdl`` launch whose
    body has none, the kernel waits first thing (loop_to_llvm); a schedule places one itself
    to read constants (weights) before it, overlapping the previous kernel's tail. At most one
    per launch, directly in its body. A no-op in the interpreter (one grid at a time)."""

    name = "gpu.grid_wait"
    operands = ()
    results = ()

    def infer_types(self, op):
        return []

    def verify(self, op):
        launch = enclosing_launch(op)
        if launch is None or op.parent_op is not launch:
            fail(op, "must be directly in a gpu.launch's body")

    def reference(self, op, args, interp):
        _state(op, interp)
        return []


class Barrier(OpSpec):
    """``__syncthreads()``: every thread of the block waits here until all have arrived; memory
    written before it (shared or global) is visible to the block after it. Block-uniform control
    flow only."""

    name = "gpu.barrier"
    operands = ()
    results = ()

    def infer_types(self, op):
        return []

    def verify(self, op):
        if enclosing_launch(op) is None:
            fail(op, "must be inside a gpu.launch")

    def reference(self, op, args, interp):
        _state(op, interp)
        mask = getattr(interp, "loop_mask", None)
        if mask is not None:
            m = np.asarray(mask, bool)
            m = m.reshape((1,) * max(0, LAUNCH_AXES - m.ndim) + m.shape)
            threads = (-3, -2, -1)
            if (m.any(axis=threads) != m.all(axis=threads)).any():
                raise CompileError(f"{op.where}: reached by some threads of a block and not "
                                   "others (a barrier in divergent control flow)")
        return []


class WarpBarrier(Barrier):
    """``__syncwarp()`` (``bar.warp.sync 0xffffffff``): the 32 lanes of each warp wait here
    until all have arrived; memory a lane wrote before it (shared or global) is visible to the
    warp's other lanes after it. For data private to a warp (the mma schedule's staged
    epilogue: each warp's slab in its own shared region), where a block barrier would make
    every warp wait for the slowest. The launch's blocks must be whole warps (every lane of
    the mask present); checked in lockstep as ``gpu.barrier`` is (reached by all threads of a
    block or none: stricter than the warp needs, and what the schedules that use it do)."""

    name = "gpu.warp_barrier"

    def verify(self, op):
        super().verify(op)
        block = enclosing_launch(op).attributes.get("block")
        if block is not None and int(np.prod(block)) % 32:
            fail(op, f"the launch's blocks of {list(block)} threads are not whole warps")


class Shared(OpSpec):
    """Per-block scratch memory of the result type (default layout), undefined at the start of
    the launch; one copy per block, shared by its threads. ``align`` (bytes, a power of two of
    at least 16; default 16): where the buffer starts. The wgmma schedule asks for 1024: the
    hardware applies a 128-byte swizzle to address bits, so a swizzled tile must start at a
    multiple of the swizzle's 1024-byte period (ptxc/dialects/gpu_wgmma.py)."""

    name = "gpu.shared"
    operands = ()
    results = ("buffer",)
    attributes = {"align": Attr("int", default=16)}

    def verify(self, op):
        t = op.results[0].type
        if not isinstance(t, BufferType):
            fail(op, f"result must be a buffer, is {t}")
        if not t.is_default_layout:
            fail(op, f"result must have the default layout, is {t}")
        align = op.attr("align")
        if align < 16 or align & (align - 1):
            fail(op, f"align must be a power of two of at least 16, is {align}")
        parent = op.parent_op
        if parent is None or parent.name != "gpu.launch":
            fail(op, "must be directly in the body of a gpu.launch, not inside "
                 + (parent.name if parent is not None else "nothing"))

    def reference(self, op, args, interp):
        state = _state(op, interp)
        t = op.results[0].type
        storage = allocate(BufferType((state.blocks,) + t.shape, t.element))
        view = storage[0]
        interp.gpu_shared[id(view)] = (view, storage)
        return [view]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (Launch, BlockId, ThreadId, GridWait, Barrier, WarpBarrier, Shared)


def shared_bytes(launch: Operation) -> int:
    """Bytes of shared memory a launch declares (the sum of its gpu.shared buffers, each
    starting at a multiple of its ``align``)."""
    total = 0
    for op in launch.regions[0].blocks[0].ops:
        if op.name == "gpu.shared":
            t = op.results[0].type
            align = op.attr("align")
            total = -(-total // align) * align + t.size * t.element.np_dtype.itemsize
    return total


# ---- building -------------------------------------------------------------------------------

def launch_op(b: Builder, grid, block, schedule: str, loc: str | None = None):
    """Insert a ``gpu.launch`` at ``b``; returns ``(op, body_builder)``. The body already ends
    with ``loop.yield``; ``body_builder`` inserts before it. Launch limits are checked here
    (CompileError naming ``loc``) so a schedule cannot build an unlaunchable kernel."""
    grid, block = tuple(int(d) for d in grid), tuple(int(d) for d in block)
    why = check_dims(grid, block)
    if why:
        raise CompileError(f"gpu.launch" + (f" (node {loc!r})" if loc else "") + f": {why}")
    body = Block([])
    op = b.create("gpu.launch", [], {"grid": grid, "block": block, "schedule": schedule},
                  regions=[Region([body])], loc=loc)
    y = Builder.at_end(body).create("loop.yield", [])
    return op, Builder.before_op(y)


def block_id(b: Builder, dim: int = 0):
    return b.create("gpu.block_id", [], {"dim": dim}).result


def thread_id(b: Builder, dim: int = 0):
    return b.create("gpu.thread_id", [], {"dim": dim}).result


def barrier(b: Builder) -> Operation:
    return b.create("gpu.barrier", [])


def warp_barrier(b: Builder) -> Operation:
    return b.create("gpu.warp_barrier", [])


def shared(b: Builder, shape, element, align: int = 16) -> object:
    """A ``gpu.shared`` buffer of ``shape`` and ``element`` (b must insert into a launch body),
    starting at a multiple of ``align`` bytes."""
    attrs = {"align": align} if align != 16 else None
    return b.create("gpu.shared", [], attrs, result_types=[BufferType(shape, element)]).result
