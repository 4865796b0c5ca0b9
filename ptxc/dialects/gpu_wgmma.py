"""The gpu dialect's warpgroup tensor-core ops (Hopper, sm_90a): ``gpu.wgmma`` and its
``gpu.wgmma_fence`` / ``gpu.wgmma_commit`` / ``gpu.wgmma_wait``. They are PTX's
``wgmma.mma_async.sync.aligned.m64nNk16.f32.f16.f16`` (or ``.m64nNk32.s32.s8.s8``: i8 tiles
of 128-element rows, i32 accumulators in the same layout, exact sums that wrap as i32),
``wgmma.fence``, ``wgmma.commit_group`` and ``wgmma.wait_group``; loop_to_llvm emits them as
inline PTX (ptxc/lower/llvm_wgmma.py: LLVM 22 has no intrinsic for the multiply) and the wgmma
schedule (ptxc/lower/gpu_map/wgmma.py) builds kernels from them::

    %sA = "gpu.shared"() {align = 1024} : () -> buffer<4x128x64xf16>
    "gpu.wgmma_fence"() : () -> ()
    %d0..%d63 = "gpu.wgmma"(%sA, %s, %m, %k, %sB, %s, %z, %k, %c0..%c63) {shape = "m64n128k16"}
    "gpu.wgmma_commit"() : () -> ()
    %e0..%e63 = "gpu.wgmma_wait"(%d0..%d63) {pending = 0}

**Operands in shared memory.** A (64 x 16) and B (N x 16, i.e. B^T: n rows, k contiguous) are
both *K-major* tiles of a ``gpu.shared`` f16 buffer whose rows are 64 elements (128 bytes), in
the **128-byte swizzle** that the instruction's descriptors name (PTX ISA, "Matrix Descriptor
Format", "Shared Memory Matrix Layout": swizzle mode 1): with ``r`` the buffer row (its byte
offset / 128), logical 16-byte chunk ``c`` of row ``r`` is stored at chunk ``c ^ (r % 8)``. The
hardware applies the xor to address bits 4-6 with bits 7-9, so the buffer must start at a
multiple of 1024 bytes (``gpu.shared {align = 1024}``, checked by the verifier) and a tile's
first row must be a multiple of 8 (checked when it runs). The indices name the tile's first
element (its row and its first k, a multiple of 16 below 64); the op reads rows ``row ..
row + 63`` (A) or ``row .. row + N - 1`` (B), columns ``k .. k + 15``, through the swizzle.

**Accumulators** (PTX ISA, "Register Fragments and Shared Memory Matrix Layouts", wgmma
``.m64nNk16`` D): thread ``t`` of the warpgroup (128 threads: warp ``w = t / 32``, lane ``l``)
holds ``N / 2`` f32 values; value ``i`` is row ``16 w + l / 4 + 8 ((i / 2) % 2)``, column
``8 (i / 4) + 2 (l % 4) + i % 2`` of the 64 x N tile (the mma.sync m16n8 C pattern, one per
warp, repeated over N / 8 column blocks).

**Asynchrony.** The multiply runs asynchronously: its results may not be read before a
``gpu.wgmma_wait`` that covers its group. So the wait takes the accumulators and returns them
(on the GPU: inline asm whose outputs are tied to its inputs, as Triton does, so LLVM cannot
move a read of them above it; docs/design.md's December facts), and the verifier refuses any use of
a ``gpu.wgmma`` result other than as the accumulator of the next ``gpu.wgmma`` or an operand of
``gpu.wgmma_wait``. The lockstep interpreter computes the product when the op is issued (the
shared tiles it reads must then not change before the wait: until then a ``gpu.cp_async`` into
them is refused as the race it is on the GPU) and checks the protocol: a ``gpu.wgmma`` needs a
``gpu.wgmma_fence`` since the last wait (the accumulator registers were written), and a wait
refuses wgmmas that were never committed. These ops must be reached by every thread of a
warpgroup (a block of ``128 k`` threads; ``.sync.aligned``), and their operands must be the
same across it.
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import CompileError
from ..ir.core import Operation, OpResult
from ..ir.spec import Attr, Operand, OpSpec, Result, fail
from ..ir.types import F16, F32, I8, I32, INDEX, BufferType
from .gpu import _state
from .gpu_tensorcore import InLaunchMarker, _in_launch, async_reads, flat_indices

WARPGROUP = 128
#: bytes per swizzled row (the 128-byte swizzle) and of the pattern's period (8 rows)
ROW_BYTES, SWIZZLE_PERIOD = 128, 1024
ROW = ROW_BYTES // 2            # f16 elements per row: the K extent of a tile
K = 16                          # k per instruction (f16)
#: k per instruction -> (operand element, accumulator, PTX types): ``.m64nNk16.f32.f16.f16``
#: and ``.m64nNk32.s32.s8.s8`` (32 bytes of k either way: the same descriptor steps)
KINDS = {16: (F16, F32, "f32.f16.f16"), 32: (I8, I32, "s32.s8.s8")}
_SHAPE = re.compile(r"^m64n(\d+)k(16|32)$")


def shape_nk(shape) -> tuple[int, int] | None:
    """(N, k) of ``"m64nNk16"`` (f16) or ``"m64nNk32"`` (s8) when wgmma has it (N in 8 ..
    256, a multiple of 8), else None."""
    m = _SHAPE.match(shape or "")
    n = int(m.group(1)) if m else 0
    return (n, int(m.group(2))) if 8 <= n <= 256 and n % 8 == 0 else None


def shape_n(shape) -> int | None:
    """N of a wgmma shape (:func:`shape_nk`), else None."""
    nk = shape_nk(shape)
    return nk[0] if nk else None


def accumulator_layout(n: int):
    """(rows, cols): int arrays of shape (N / 2, 128): the element of the 64 x ``n`` D tile that
    accumulator ``i`` of warpgroup thread ``t`` holds (module docstring)."""
    t = np.arange(WARPGROUP)
    w, lane = t // 32, t % 32
    i = np.arange(n // 2)[:, None]
    rows = 16 * w + lane // 4 + 8 * ((i // 2) % 2)
    cols = 8 * (i // 4) + 2 * (lane % 4) + i % 2
    return rows, cols


def swizzled_column(row, col, per_chunk: int = 8):
    """The stored column of logical element ``col`` of buffer row ``row`` (128-byte swizzle:
    the 16-byte chunk ``col / per_chunk`` xor ``row % 8``; ``per_chunk`` elements per 16 bytes:
    8 f16, 16 int8). Numpy or Python ints."""
    return ((col // per_chunk) ^ (row % 8)) * per_chunk + col % per_chunk


def _shared_root(op, v):
    if not (isinstance(v, OpResult) and v.owner.name == "gpu.shared"):
        fail(op, "reads a gpu.shared buffer only (no view: the descriptor needs its base)")
    return v.owner


# ---- interpreter state --------------------------------------------------------------------------

def _wgmma_state(op: Operation, interp) -> dict:
    """The running launch's wgmma protocol state: fenced since the last wait, wgmmas issued
    since the last commit (and the shared regions they read), committed groups not yet waited
    for (``inflight``: each group's regions, oldest first)."""
    state = _state(op, interp)
    if not hasattr(state, "wgmma"):
        state.wgmma = {"fenced": False, "uncommitted": 0,
                       "open": [], "inflight": []}   # the shared regions each group reads
    return state.wgmma


def _groups(op: Operation, interp):
    """(launch shape, warpgroups per block); refuses blocks that are not 1-D multiples of 128
    and masks that split a warpgroup."""
    state = _state(op, interp)
    bx, by, bz = state.block
    if by != 1 or bz != 1 or bx % WARPGROUP:
        raise CompileError(f"{op.where}: warpgroup ops need a block of [128k, 1, 1] threads, "
                           f"the launch has {list(state.block)}")
    full = state.grid + state.block
    mask = getattr(interp, "loop_mask", None)
    if mask is not None:
        m = np.broadcast_to(np.asarray(mask, bool), full)
        w = m.reshape(full[:3] + (bx // WARPGROUP, WARPGROUP) + full[4:])
        if (w.any(axis=4) != w.all(axis=4)).any():
            raise CompileError(f"{op.where}: reached by some threads of a warpgroup and not "
                               "others (.sync.aligned needs the whole warpgroup)")
    return full, bx // WARPGROUP


def _uniform(op, x, full, groups, what):
    """``x`` broadcast over the launch, one value per (block, warpgroup): (gx, gy, gz, groups)."""
    x = np.broadcast_to(np.asarray(x), full).reshape(full[:3] + (groups, WARPGROUP))
    if (x != x[..., :1]).any():
        raise CompileError(f"{op.where}: {what} differs across the threads of a warpgroup")
    return x[..., 0]


# ---- ops ----------------------------------------------------------------------------------------

class Wgmma(OpSpec):
    """``D = A x B^T + C`` on one warpgroup (PTX ``wgmma.mma_async.sync.aligned.m64nNk16.f32
    .f16.f16`` with both operands' descriptors, K-major, 128-byte swizzle; module docstring).
    Operands: A's ``gpu.shared`` buffer and the indices of its tile's first element, B's the
    same (its N rows), then the ``N / 2`` f32 accumulators of each thread; results: D."""

    name = "gpu.wgmma"
    operands = ("a", Operand("a_indices", variadic=True), "b",
                Operand("b_indices", variadic=True), Operand("c", variadic=True))
    results = (Result("d", variadic=True),)
    attributes = {"shape": Attr("str", required=True)}

    def _nk(self, op) -> tuple[int, int]:
        nk = shape_nk(op.attributes.get("shape"))
        if nk is None:
            fail(op, f"shape must be m64nNk16 (f16) or m64nNk32 (s8) with N in 8 .. 256 a "
                 f"multiple of 8, is {op.attributes.get('shape')!r}")
        return nk

    def _n(self, op) -> int:
        return self._nk(op)[0]

    def infer_types(self, op):
        n, k = self._nk(op)
        return [KINDS[k][1]] * (n // 2)

    def verify(self, op):
        _in_launch(op)
        n, k = self._nk(op)
        el, acc_t, _ = KINDS[k]
        row = ROW_BYTES // (el.bitwidth // 8)
        g = self.groups(op)
        for name, rows in (("a", 64), ("b", n)):
            buf = g[name]
            t = buf.type
            if not isinstance(t, BufferType) or t.element != el:
                fail(op, f"{name} must be an {el} buffer (k{k}), is {t}")
            if t.rank < 2 or t.shape[-1] != row:
                fail(op, f"{name}'s rows must be {row} {el} (128 bytes: the 128-byte swizzle), "
                     f"is {t}")
            if t.shape[-2] < rows:
                fail(op, f"{name} has {t.shape[-2]} rows, the tile needs {rows}")
            shared = _shared_root(op, buf)
            if shared.attr("align") < SWIZZLE_PERIOD:
                fail(op, f"{name}'s gpu.shared must be aligned to {SWIZZLE_PERIOD} bytes (the "
                     f"swizzle's period), is {shared.attr('align')}")
            idx = g[f"{name}_indices"]
            if len(idx) != t.rank or any(v.type != INDEX for v in idx):
                fail(op, f"{name}_indices must be {t.rank} index values")
        c = g["c"]
        if len(c) != n // 2 or any(v.type != acc_t for v in c):
            fail(op, f"{op.attributes['shape']} takes {n // 2} {acc_t} accumulators, has "
                 f"{len(c)} ({sorted({str(v.type) for v in c})})")
        for r in op.results:   # asynchronous: only the next wgmma or the wait may read them
            for use in r.uses:
                user = use.op
                if user.name == "gpu.wgmma_wait" or (
                        user.name == "gpu.wgmma"
                        and use.index >= len(user.operands) - len(self.groups(user)["c"])):
                    continue
                fail(op, f"result read by {user.name} before a gpu.wgmma_wait (it is "
                     "asynchronous: pass it through the wait)")

    def reference(self, op, args, interp):
        n, kinst = self._nk(op)
        el = KINDS[kinst][0]
        per_chunk = 16 // (el.bitwidth // 8)
        row = ROW_BYTES // (el.bitwidth // 8)
        full, groups = _groups(op, interp)
        st = _wgmma_state(op, interp)
        if not st["fenced"]:
            raise CompileError(f"{op.where}: no gpu.wgmma_fence since the accumulators were "
                               "last written (PTX needs wgmma.fence before it)")
        st["uncommitted"] += 1
        g = self.groups(op, args)
        blk = _uniform(op, interp.gpu_block, full, groups, "the block")
        mats = []
        for name, rows in (("a", 64), ("b", n)):
            buf = self.groups(op)[name]
            t = buf.type
            storage = _storage(op, interp, g[name])
            idx = [_uniform(op, i, full, groups, f"{name}_indices").astype(np.int64)
                   for i in g[f"{name}_indices"]]
            k0 = idx[-1]
            if ((k0 % kinst) != 0).any() or (k0 < 0).any() or (k0 + kinst > row).any():
                raise CompileError(f"{op.where}: {name}'s first k must be a multiple of "
                                   f"{kinst} below {row}")
            lead = sum(i * s for i, s in zip(idx[:-1], t.strides[:-1])) + t.offset
            first_row = lead // row                      # the buffer row of the tile's row 0
            if (first_row % 8).any():
                raise CompileError(f"{op.where}: {name}'s tile starts at a buffer row that is "
                                   "not a multiple of 8 (the swizzle's period)")
            r = np.arange(rows)[:, None]
            kk = np.arange(kinst)[None, :]
            row_lin = first_row[..., None, None] + r                  # (..., rows, 1)
            col = swizzled_column(row_lin, k0[..., None, None] + kk, per_chunk)  # (..., rows, k)
            rows_idx = idx[-2][..., None, None] + r
            if (rows_idx >= t.shape[-2]).any() or (rows_idx < 0).any():
                raise CompileError(f"{op.where}: {name}'s tile runs past its buffer's rows")
            pick = [np.broadcast_to(i[..., None, None], col.shape) for i in idx[:-2]]
            b_ = np.broadcast_to(blk[..., None, None], col.shape)
            where = (b_, *pick, np.broadcast_to(rows_idx, col.shape), col)
            got = storage[where]
            mats.append(got.astype(np.float64 if el == F16 else np.int64))
            region = (storage, np.unique(flat_indices(storage, where)),
                      f"a gpu.wgmma ({op.where})")
            st["open"].append(region)
            async_reads(op, interp).append(region)
        A, B = mats                                       # (gx, gy, gz, groups, 64|n, 16)
        rows, cols = accumulator_layout(n)
        C = np.zeros(full[:3] + (groups, 64, n), A.dtype)
        out_shape = full[:3] + (groups, WARPGROUP)
        for i, v in enumerate(g["c"]):
            v = np.broadcast_to(np.asarray(v), full).reshape(out_shape)
            C[..., rows[i], cols[i]] = v
        # f16 products are exact in f64, the sum rounded to f32 once (as gpu.mma's); s8 sums
        # are exact in i64 and wrap to i32 (as the instruction's .s32 without .satfinite)
        D = np.matmul(A, np.swapaxes(B, -1, -2)) + C
        D = D.astype(np.float32) if el == F16 else (D & 0xFFFFFFFF).astype(np.uint32).view(
            np.int32)
        return [np.ascontiguousarray(D[..., rows[i], cols[i]]).reshape(full)
                for i in range(n // 2)]


def _storage(op, interp, view):
    from .loop_memory import per_block
    storage = per_block(interp, view)
    if storage is None:
        raise CompileError(f"{op.where}: reads a buffer that is not gpu.shared")
    return storage


class WgmmaFence(InLaunchMarker):
    """PTX ``wgmma.fence.sync.aligned``: orders the warpgroup's register and shared-memory
    accesses before the ``gpu.wgmma`` that follow (needed before the first, and after the
    accumulators were written by anything else, a previous wgmma included)."""

    name = "gpu.wgmma_fence"

    def reference(self, op, args, interp):
        _groups(op, interp)
        _wgmma_state(op, interp)["fenced"] = True
        return []


class WgmmaCommit(InLaunchMarker):
    """PTX ``wgmma.commit_group.sync.aligned``: the ``gpu.wgmma`` issued since the last commit
    form one group."""

    name = "gpu.wgmma_commit"

    def reference(self, op, args, interp):
        _groups(op, interp)
        st = _wgmma_state(op, interp)
        if st["uncommitted"]:
            st["uncommitted"] = 0
            st["inflight"].append(st["open"])
            st["open"] = []
        return []


class WgmmaWait(OpSpec):
    """PTX ``wgmma.wait_group.sync.aligned pending``: wait until at most ``pending`` committed
    groups are in flight. It takes the accumulators the waited wgmmas write and returns them:
    only its results may be read (module docstring). On i32 accumulators it may carry
    ``bound``, as ``loop.load`` does: ``|value| <= bound`` for every value it returns (the wgmma
    schedule's contraction.accumulator_bound, which bounds every partial sum too), so the
    epilogue converts them to f32 without ``cvt`` (llvm_scalar); the interpreter checks it."""

    name = "gpu.wgmma_wait"
    operands = (Operand("values", variadic=True),)
    results = (Result("out", variadic=True),)
    attributes = {"pending": Attr("int", required=True),
                  "bound": Attr("int", doc="|value| <= bound, proved by the op's maker")}

    def infer_types(self, op):
        return [v.type for v in op.operands]

    def verify(self, op):
        _in_launch(op)
        if not 0 <= op.attributes["pending"] <= 7:
            fail(op, f"pending must be in [0, 7], is {op.attributes['pending']}")
        if len({v.type for v in op.operands}) > 1 or any(
                v.type not in (F32, I32) for v in op.operands):
            fail(op, "values must be f32 or i32 accumulators, all of one type")
        bound = op.attributes.get("bound")
        if bound is not None and (bound < 0 or op.operands[0].type != I32):
            fail(op, f"bound must be >= 0 and on i32 accumulators, is {bound!r}")

    def reference(self, op, args, interp):
        _groups(op, interp)
        st = _wgmma_state(op, interp)
        if st["uncommitted"]:
            raise CompileError(f"{op.where}: waits for gpu.wgmma never committed "
                               "(gpu.wgmma_commit first)")
        held = async_reads(op, interp)
        while len(st["inflight"]) > op.attributes["pending"]:   # these groups' reads are done
            done = {id(r) for r in st["inflight"].pop(0)}
            held[:] = [r for r in held if id(r) not in done]
        st["fenced"] = False
        bound = op.attributes.get("bound")
        for a in args if bound is not None else ():
            worst = int(np.max(np.abs(np.asarray(a, np.int64)))) if np.size(a) else 0
            if worst > bound:
                raise CompileError(f"{op.where}: an accumulator is {worst}, over the wait's "
                                   f"bound {bound}")
        return list(args)


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (Wgmma, WgmmaFence, WgmmaCommit, WgmmaWait)
