"""The gpu dialect's tensor-core ops: warp-level matrix multiply-accumulate (``gpu.mma``), matrix
fragment loads from shared memory (``gpu.ldmatrix``) and asynchronous global->shared copies
(``gpu.cp_async`` with ``gpu.cp_async_commit`` / ``gpu.cp_async_wait``). They are PTX's
``mma.sync``, ``ldmatrix`` and ``cp.async``; loop_to_llvm emits them as the NVVM intrinsics
(ptxc/lower/llvm_tensorcore.py). The mma schedule (ptxc/lower/gpu_map/mma.py) builds kernels
from them::

    %a0..%a7 = "gpu.ldmatrix"(%sA, %row, %col) {num = 4, trans = false}
               : (buffer<2x128x40xf16>, index, index, index) -> (f16 x 8)
    %d0..%d3 = "gpu.mma"(%a0..%a7, %b0..%b3, %c0..%c3) {shape = "m16n8k16"}
               : (f16 x 8, f16 x 4, f32 x 4) -> (f32 x 4)

A fragment is a list of scalar SSA values per thread (PTX's registers, an f16 pair being two
f16 scalars here); accumulators are carried through ``loop.for`` like any other value.

Warp-level reference semantics (the lockstep interpreter, ptxc/dialects/gpu.py): a launch that
uses these ops has a one-dimensional block of a multiple of 32 threads, so warp ``w`` is threads
``32w .. 32w + 31`` along the block's x axis. Every operand value is broadcast to the launch's
six axes and the x-thread axis is split into (warps, 32 lanes); the op then gathers across the
lanes of each warp exactly as the hardware distributes fragments (PTX ISA, "Matrix Fragments for
mma.m16n8k16" etc.; ``groupID = lane >> 2``, ``threadID_in_group = lane % 4``). These ops must be
reached by all 32 lanes of a warp (``.sync.aligned``): under a ``loop.if`` mask that splits a
warp they are refused.

``gpu.cp_async`` in the interpreter reads its source when issued and writes its destination
only when its group completes: ``gpu.cp_async_commit`` closes the group of the copies issued
since the last commit, and ``gpu.cp_async_wait {pending = n}`` completes every committed group
but the newest ``n``. So a kernel that reads shared memory before waiting for the copy that
fills it reads stale (or, fresh, NaN) data in the interpreter too, as it may on the GPU: a
pipeline that commits or waits wrongly fails its tests without a GPU. (The barrier that must
also separate one thread's copy from another thread's read is not modelled: lockstep.)
"""

from __future__ import annotations

import numpy as np

from ..errors import CompileError
from ..ir.core import Operation, OpResult
from ..ir.spec import Attr, Operand, OpSpec, Result, fail
from ..ir.types import F16, F32, I1, I8, I32, INDEX, BufferType, ScalarType
from .gpu import _state, enclosing_launch
from .loop_memory import _check_bounds, per_block

WARP = 32


# ---- fragment layouts (PTX ISA) ----------------------------------------------------------------

def _lanes():
    lane = np.arange(WARP)
    return lane >> 2, lane & 3          # groupID, threadID_in_group


def _mma_layouts(shape: str):
    """For each fragment element of A (m x k), B (k x n) and C/D (m x n): the (row, col) it holds
    in each of the 32 lanes, as two int arrays of shape (elements, 32)."""
    g, t = _lanes()
    if shape == "m16n8k16":          # f16 operands: a 8, b 4, c 4
        ia, ib = np.arange(8)[:, None], np.arange(4)[:, None]
        a = (g + 8 * ((ia >> 1) & 1), t * 2 + (ia & 1) + 8 * (ia >> 2))
        b = (t * 2 + (ib & 1) + 8 * (ib >> 1), np.broadcast_to(g, (4, WARP)))
    elif shape == "m16n8k8":         # tf32 operands: a 4, b 2, c 4
        ia, ib = np.arange(4)[:, None], np.arange(2)[:, None]
        a = (g + 8 * (ia & 1), t + 4 * (ia >> 1))
        b = (t + 4 * ib, np.broadcast_to(g, (2, WARP)))
    elif shape == "m16n8k32":        # s8 operands: a 16, b 8, c 4
        ia, ib = np.arange(16)[:, None], np.arange(8)[:, None]
        a = (g + 8 * ((ia >> 2) & 1), t * 4 + (ia & 3) + 16 * (ia >> 3))
        b = (t * 4 + (ib & 3) + 16 * (ib >> 2), np.broadcast_to(g, (8, WARP)))
    else:
        raise ValueError(shape)
    ic = np.arange(4)[:, None]
    c = (g + 8 * (ic >> 1), t * 2 + (ic & 1))
    return [tuple(np.broadcast_to(x, np.broadcast(*p).shape) for x in p) for p in (a, b, c)]


#: shape -> (m, n, k, operand element, accumulator element, |a|, |b|, |c|)
MMA_SHAPES = {
    "m16n8k16": (16, 8, 16, F16, F32, 8, 4, 4),
    "m16n8k8": (16, 8, 8, F32, F32, 4, 2, 4),        # tf32 operands held in f32 registers
    "m16n8k32": (16, 8, 32, I8, I32, 16, 8, 4),
}


def _tf32_truncate(x: np.ndarray) -> np.ndarray:
    """What the tensor core reads of an f32 register in a .tf32 mma: its top 19 bits."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return bits.view(np.float32)


# ---- lane bookkeeping ---------------------------------------------------------------------------

def _warp_shape(op: Operation, interp):
    """(full launch shape, warps per block); refuses blocks that are not 1-D multiples of 32."""
    state = _state(op, interp)
    bx, by, bz = state.block
    if by != 1 or bz != 1 or bx % WARP:
        raise CompileError(f"{op.where}: warp-level ops need a block of [32k, 1, 1] threads, "
                           f"the launch has {list(state.block)}")
    return state.grid + state.block, bx // WARP


def _check_uniform(op: Operation, interp, full) -> None:
    mask = getattr(interp, "loop_mask", None)
    if mask is None:
        return
    m = np.broadcast_to(np.asarray(mask, bool), full)
    w = m.reshape(full[:3] + (full[3] // WARP, WARP) + full[4:])
    if (w.any(axis=4) != w.all(axis=4)).any():
        raise CompileError(f"{op.where}: reached by some lanes of a warp and not others "
                           "(.sync.aligned needs the whole warp)")


def _to_lanes(x, full, warps):
    """``x`` broadcast to the launch shape, as (gx, gy, gz, warps, 32) (block y, z are 1)."""
    x = np.broadcast_to(np.asarray(x), full)
    return x.reshape(full[:3] + (warps, WARP))


def _from_lanes(x, full):
    return np.ascontiguousarray(x).reshape(full)


def _in_launch(op: Operation) -> None:
    if enclosing_launch(op) is None:
        fail(op, "must be inside a gpu.launch")


# ---- ops ----------------------------------------------------------------------------------------

class Mma(OpSpec):
    """``D = A x B + C`` on one warp's fragments (PTX ``mma.sync.aligned.<shape>.row.col``).
    ``shape``: ``m16n8k16`` (f16 operands, f32 accumulators), ``m16n8k8`` (tf32 operands held in
    f32 values: the tensor core reads their top 19 bits; round them first with
    ``arith.round_tf32`` for round-to-nearest), ``m16n8k32`` (i8 operands, i32 accumulators).
    Operands are the A, B and C fragments in PTX's register order; results the D fragment."""

    name = "gpu.mma"
    operands = (Operand("a", variadic=True), Operand("b", variadic=True),
                Operand("c", variadic=True))
    results = (Result("d", variadic=True),)
    attributes = {"shape": Attr("str", required=True)}

    def _spec(self, op):
        shape = op.attributes.get("shape")
        if shape not in MMA_SHAPES:
            fail(op, f"shape must be one of {', '.join(MMA_SHAPES)}, is {shape!r}")
        return MMA_SHAPES[shape]

    def infer_types(self, op):
        *_, acc, _, _, nc = self._spec(op)
        return [acc] * nc

    def verify(self, op):
        _in_launch(op)
        _, _, _, el, acc, na, nb, nc = self._spec(op)
        g = self.groups(op)
        for name, want, t in (("a", na, el), ("b", nb, el), ("c", nc, acc)):
            vals = g[name]
            if len(vals) != want:
                fail(op, f"{op.attributes['shape']} takes {want} {name} values, has {len(vals)}")
            if any(v.type != t for v in vals):
                fail(op, f"{name} values must be {t}, are {sorted({str(v.type) for v in vals})}")

    def reference(self, op, args, interp):
        m, n, k, el, acc, na, nb, nc = MMA_SHAPES[op.attributes["shape"]]
        full, warps = _warp_shape(op, interp)
        _check_uniform(op, interp, full)
        g = self.groups(op, args)
        la, lb, lc = _mma_layouts(op.attributes["shape"])
        lead = full[:3] + (warps,)
        work = np.float64 if acc.is_float else np.int64
        A = np.zeros(lead + (m, k), work)
        B = np.zeros(lead + (k, n), work)
        C = np.zeros(lead + (m, n), work)
        for mat, vals, (rows, cols) in ((A, g["a"], la), (B, g["b"], lb), (C, g["c"], lc)):
            for i, v in enumerate(vals):
                v = _to_lanes(v, full, warps)
                if el == F32 and mat is not C:
                    v = _tf32_truncate(v)
                mat[..., rows[i], cols[i]] = v
        if acc.is_float:  # products of f16/tf32 values are exact in f64; round the sum once
            D = (np.matmul(A, B) + C).astype(np.float32)
        else:             # i32 accumulation wraps
            D = (np.matmul(A, B) + C).astype(np.int64).astype(np.int32)
        rows, cols = lc
        return [_from_lanes(D[..., rows[i], cols[i]], full) for i in range(nc)]


def _ldmatrix_per(el: ScalarType) -> int:
    """Elements of ``el`` each lane receives per 8x8 b16 matrix (4 bytes' worth)."""
    return 4 // (el.bitwidth // 8)


class LdMatrix(OpSpec):
    """PTX ``ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16``: the warp loads ``num`` 8x8
    matrices of 16-bit elements (rows of 16 bytes) from a ``gpu.shared`` buffer. Lane ``l``
    gives the address (``indices``, the last one the row's first column) of row ``l % 8`` of
    matrix ``l / 8``; it receives, for each matrix ``q``, the 4 bytes at row ``l / 4``, bytes
    ``4 * (l % 4) ..`` (``trans``: the transposed matrix; 16-bit elements only). For an element
    type of other width the rows are still 16 bytes (8 f16, 4 f32: a tf32 fragment, 16 i8).
    Results: ``num * 4 / sizeof(element)`` values, matrix by matrix."""

    name = "gpu.ldmatrix"
    operands = ("buffer", Operand("indices", variadic=True))
    results = (Result("values", variadic=True),)
    attributes = {"num": Attr("int", required=True), "trans": Attr("bool", default=False)}

    def infer_types(self, op):
        t = op.operands[0].type
        if not isinstance(t, BufferType):
            fail(op, f"operand must be a buffer, is {t}")
        if t.element.bitwidth not in (8, 16, 32):
            fail(op, f"elements must be 8, 16 or 32 bits wide, are {t.element}")
        return [t.element] * (op.attributes.get("num", 0) * _ldmatrix_per(t.element))

    def verify(self, op):
        _in_launch(op)
        t = op.operands[0].type
        if op.attributes["num"] not in (1, 2, 4):
            fail(op, f"num must be 1, 2 or 4, is {op.attributes['num']}")
        if op.attr("trans") and t.element.bitwidth != 16:
            fail(op, f"trans needs 16-bit elements, has {t.element}")
        if len(op.operands) - 1 != t.rank:
            fail(op, f"{t} needs {t.rank} indices, has {len(op.operands) - 1}")
        src = op.operands[0]
        while isinstance(src, OpResult) and src.owner.name == "loop.view":
            src = src.owner.operands[0]
        if not (isinstance(src, OpResult) and src.owner.name == "gpu.shared"):
            fail(op, "reads a gpu.shared buffer only")

    def reference(self, op, args, interp):
        buf, *idx = args
        t = op.operands[0].type
        full, warps = _warp_shape(op, interp)
        _check_uniform(op, interp, full)
        storage = per_block(interp, buf)
        if storage is None:
            raise CompileError(f"{op.where}: reads a buffer that is not gpu.shared")
        per = _ldmatrix_per(t.element)
        num = op.attributes["num"]
        lane = np.arange(WARP)
        lanes = [_to_lanes(i, full, warps) for i in idx]
        blk = _to_lanes(interp.gpu_block, full, warps)
        lin = sum(i * s for i, s in zip(lanes, t.strides)) + t.offset
        if np.any((lin[..., :8 * num] * (t.element.bitwidth // 8)) % 16):
            raise CompileError(f"{op.where}: a row address is not 16-byte aligned")
        out = []
        for q in range(op.attributes["num"]):
            for e in range(per):
                if op.attr("trans"):   # lane l: row 2*(l%4)+e, column l/4 of matrix q
                    src = q * 8 + 2 * (lane % 4) + e
                    col = lane // 4
                else:                  # lane l: row l/4, columns (l%4)*per + e of matrix q
                    src = q * 8 + lane // 4
                    col = (lane % 4) * per + e
                pick = [i[..., src] for i in lanes]
                pick[-1] = pick[-1] + col
                _check_bounds(op, t, pick)
                out.append(_from_lanes(storage[(blk, *pick)], full))
        return out


class CpAsync(OpSpec):
    """PTX ``cp.async``: copy ``bytes`` (4, 8 or 16) of consecutive elements along the last
    dim from a global buffer at ``src_indices`` to a ``gpu.shared`` buffer at ``dst_indices``;
    where ``pred`` is false, zeros are written and nothing is read (``src-size = 0``, so the
    source address need not be valid). Both addresses must be aligned to ``bytes``. The copy is
    asynchronous: its data may be read only after ``gpu.cp_async_wait`` and a barrier."""

    name = "gpu.cp_async"
    operands = ("source", Operand("src_indices", variadic=True), "dest",
                Operand("dst_indices", variadic=True), "pred")
    results = ()
    attributes = {"bytes": Attr("int", required=True)}

    def infer_types(self, op):
        return []

    def verify(self, op):
        _in_launch(op)
        g = self.groups(op)
        s, d = g["source"].type, g["dest"].type
        if not isinstance(s, BufferType) or not isinstance(d, BufferType):
            fail(op, "source and dest must be buffers")
        if s.element != d.element:
            fail(op, f"copies {s.element} into {d.element}")
        n = op.attributes["bytes"]
        if n not in (4, 8, 16) or n % (s.element.bitwidth // 8):
            fail(op, f"bytes must be 4, 8 or 16 (whole elements), is {n}")
        for name, t in (("src_indices", s), ("dst_indices", d)):
            if len(g[name]) != t.rank or any(v.type != INDEX for v in g[name]):
                fail(op, f"{name} must be {t.rank} index values")
        if g["pred"].type != I1:
            fail(op, f"pred must be i1, is {g['pred'].type}")

    def reference(self, op, args, interp):
        g = self.groups(op, args)
        st, dt = op.operands[0].type, self.groups(op)["dest"].type
        n = op.attributes["bytes"] // (st.element.bitwidth // 8)
        storage = per_block(interp, g["dest"])
        if storage is None:
            raise CompileError(f"{op.where}: dest is not a gpu.shared buffer")
        full = _state(op, interp).grid + _state(op, interp).block
        live = np.asarray(True) if getattr(interp, "loop_mask", None) is None \
            else np.asarray(interp.loop_mask, bool)
        pred = np.broadcast_to(np.asarray(g["pred"], bool) & live, full)
        src = [np.broadcast_to(np.asarray(i), full) for i in g["src_indices"]]
        dst = [np.broadcast_to(np.asarray(i), full) for i in g["dst_indices"]]
        blk = np.broadcast_to(np.asarray(interp.gpu_block), full)
        copy, zero = pred, live & ~pred
        for k, (bt, idx) in enumerate(((st, src), (dt, dst))):
            lin = sum(i * s for i, s in zip(idx, bt.strides)) + bt.offset
            sel = copy if k == 0 else (copy | zero)
            if np.any(((lin * (bt.element.bitwidth // 8)) % op.attributes["bytes"])[sel]):
                raise CompileError(f"{op.where}: a {'source' if k == 0 else 'dest'} address "
                                   f"is not {op.attributes['bytes']}-byte aligned")
        writes = []   # (where, values): read now, written when the copy's group completes
        for e in range(n):
            s_i = [i[copy] for i in src[:-1]] + [src[-1][copy] + e]
            d_i = [i[copy] for i in dst[:-1]] + [dst[-1][copy] + e]
            _check_bounds(op, st, s_i)
            _check_bounds(op, dt, d_i)
            writes.append(((blk[copy], *d_i), np.array(g["source"][tuple(s_i)])))
            z_i = [i[zero] for i in dst[:-1]] + [dst[-1][zero] + e]
            _check_bounds(op, dt, z_i)
            writes.append(((blk[zero], *z_i), 0))
        for where, _ in writes:
            _check_not_held(op, interp, storage, where)
        _pipeline(op, interp)["current"].append((storage, writes))
        return []


def _pipeline(op: Operation, interp) -> dict:
    """The running launch's cp.async state: copies issued since the last commit (``current``)
    and committed groups not yet waited for (``groups``, oldest first)."""
    state = _state(op, interp)
    if not hasattr(state, "cp_async"):
        state.cp_async = {"current": [], "groups": []}
    return state.cp_async


def async_reads(op: Operation, interp) -> list:
    """The running launch's shared-memory regions that an issued, not yet waited-for
    asynchronous read holds (gpu_wgmma's multiplies): ``[(storage, flat indices, what)]``. A
    copy into one of them before the read's wait is a race on the GPU (the tensor core may read
    the new bytes): :func:`_check_not_held` refuses it."""
    state = _state(op, interp)
    if not hasattr(state, "async_reads"):
        state.async_reads = []
    return state.async_reads


def flat_indices(storage: np.ndarray, where) -> np.ndarray:
    """The flat element numbers of ``storage[where]`` (a tuple of index arrays)."""
    return np.ravel_multi_index(tuple(np.asarray(w).ravel() for w in np.broadcast_arrays(*where)),
                                storage.shape)


def _check_not_held(op: Operation, interp, storage, where) -> None:
    held = getattr(_state(op, interp), "async_reads", None)
    if not held:
        return
    flat = None
    for st, idx, what in held:
        if st is not storage:
            continue
        if flat is None:
            flat = flat_indices(storage, where)
        if np.isin(flat, idx).any():
            raise CompileError(f"{op.where}: writes shared memory that {what} still reads "
                               "(not waited for): a race on the GPU")


def _complete(group) -> None:
    for storage, writes in group:
        for where, values in writes:
            storage[where] = values


class InLaunchMarker(OpSpec):
    """An op with no operands or results that orders a launch's work (a cp.async group's
    commit or wait, wgmma's fence, commit and wait): valid only inside a gpu.launch."""
    operands = ()
    results = ()

    def infer_types(self, op):
        return []

    def verify(self, op):
        _in_launch(op)


class _Group(InLaunchMarker):
    def reference(self, op, args, interp):
        _state(op, interp)
        return []


class CpAsyncCommit(_Group):
    """PTX ``cp.async.commit_group``: the thread's cp.asyncs issued since the last commit form
    one group."""

    name = "gpu.cp_async_commit"

    def reference(self, op, args, interp):
        pipe = _pipeline(op, interp)
        pipe["groups"].append(pipe["current"])
        pipe["current"] = []
        return []


class CpAsyncWait(_Group):
    """PTX ``cp.async.wait_group pending``: wait until at most ``pending`` of the thread's
    committed groups are still in flight (0: all done)."""

    name = "gpu.cp_async_wait"
    attributes = {"pending": Attr("int", required=True)}

    def verify(self, op):
        super().verify(op)
        if not 0 <= op.attributes["pending"] <= 7:
            fail(op, f"pending must be in [0, 7], is {op.attributes['pending']}")

    def reference(self, op, args, interp):
        groups = _pipeline(op, interp)["groups"]
        while len(groups) > op.attributes["pending"]:
            _complete(groups.pop(0))
        return []


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (Mma, LdMatrix, CpAsync, CpAsyncCommit, CpAsyncWait)
