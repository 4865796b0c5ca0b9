"""The mma schedule's kernel builder: the ``gpu.launch`` of one reduced-precision contraction
(:func:`contraction.analyze`'s) for a given :class:`~.mma_config.Config`, in the shape of a
CUTLASS-style GEMM, from the gpu dialect's tensor-core ops (ptxc/dialects/gpu_tensorcore.py)::

    grid = (N / BN, M / BM, batches)   block = 32 * WARPS_M * WARPS_N threads
    sA = gpu.shared [S][BM][BK]        (K-major: rows of A, k contiguous; or [S][BK][BM])
    sB = gpu.shared [S][BN][BK]        (K-major; or N-major [S][BK][BN], read with .trans)
    copy K-tiles 0 .. S-2 into stages 0 .. S-2 (gpu.cp_async of 16 bytes, zero-filled past
        the edges; a scalar load/convert/store copy where the operand's layout gives no
        16-byte runs); commit each
    acc[WM/16][WN/8][4] = 0                                  (f32, s8: i32; carried)
    for kt in 0 .. K/BK:
        gpu.cp_async_wait(S - 2); gpu.barrier          tile kt has landed, stage kt-1 is free
        copy K-tile kt + S - 1 into stage (kt + S - 1) % S; commit
        for each k step of the tile (16 f16, 8 tf32, 32 s8):
            A fragments: gpu.ldmatrix x4 per 16 rows; B fragments: x4 per 16 columns
            acc[i][j] = gpu.mma(a[i], b[j], acc[i][j])
    for each accumulator element (m, n) the thread holds, where m < M and n < N:
        the nest's point program (start value + acc, then its epilogue: bias, residual,
        activation, cast, store) at the point's indices

Each stage's rows have their 16-byte chunks rotated by the row (:meth:`_Builder._swizzle`) so
that the 8 rows an ldmatrix reads fall in distinct banks. Under **split-K** each CTA sums its
range of K tiles into a workspace ``[splits][batches][M][N]`` (a ``loop.alloc``, planned like
any buffer), and a second, pointwise kernel adds the splits in order and runs the point
program (:meth:`_Builder._reduce_splits`).

**int8** (``s8``: ``mma.m16n8k32.row.col.s32.s8.s8.s32``) is the same kernel with 1-byte
elements: a 16-byte chunk holds 16 of them, K tiles are 64 (128 when K is long) elements deep
so that a tile row is the same 64 or 128 bytes as fp16's, and ``ldmatrix`` (b16, not
transposed) loads the fragments: an 8x8 b16 matrix is 8 rows of 16 int8, lane ``l`` receiving
row ``l / 4``'s bytes ``4 (l % 4) ..``, which is exactly the s8 fragment (four int8 of one row
per register; A row-major, B column-major, PTX ISA "Matrix Fragments for mma.m16n8k32"). So
both operands must be K-major (ldmatrix cannot transpose bytes): a K-contiguous operand is
copied by 16-byte cp.async, any other by the scalar copy. i32 sums are exact (they wrap as the
nest's do), so the kernel is bit-exact with the nest, split-K included (i32 partials).

**M tiles** (``Config.m_tiles``): a CTA computes ``T`` consecutive output tiles along M in
turn, its K tiles flattened over them (``i = t * KT + kt``), so the copies that run ``S - 1``
K tiles ahead cross into the next output tile: while the warps run tile ``t``'s epilogue, tile
``t + 1``'s operands (and its epilogue tiles, in their own slot: mma_prefetch.slots) are
already in flight::

    for t in 0 .. T:                           (grid.y = ceil(M tiles / T))
      for kt in 0 .. KT: i = t KT + kt
        wait(S - 2); barrier; copy K tile i + S - 1 (next output tile's when kt + S - 1 >= KT;
        its epilogue tiles with its K tile 0); commit; mma on stage i % S
      if first + t < M tiles: epilogue of tile first + t

A tile's slot of the epilogue tiles is rewritten only after the barrier of the first K tile
after its epilogue; the staged epilogue's warp region likewise.

**Flat rows** (map-to-gpu's ``mma-flat-m``): with the M dims in the output's memory order
(contraction.rows_in_memory_order), the point program's accesses that are linear in ``m`` with
one index (:func:`m_linear_accesses`) take ``coef x m + ...`` in place of the ``m -> (n, p,
q)`` delinearization and its 64-bit row address arithmetic: fewer epilogue instructions and
registers in kernels that Nsight Compute found bound by the integer ALU pipe, and faster
ResNet-50 int8 layer-1 kernels (bench/history/2026-12-03.md, bench/RESULTS.md).

The epilogues themselves are mma_epilogue.py's (``fragment``: :meth:`_Builder._epilogue`;
``staged``), the epilogue tiles mma_prefetch.py's.
"""

from __future__ import annotations

from ...dialects.gpu import barrier, block_id, shared, thread_id
from ...dialects.loop import for_loop, if_op, parallel_loop
from ...errors import CompileError
from ...ir.builder import Builder
from ...ir.core import Operation, OpResult, Value
from ...ir.types import BufferType
from ...target import Target
from . import mma_epilogue, mma_prefetch
from .common import add, cmp, const, delinearize, div, launch_before, mul, sub
from .contraction import Contraction, Operand, accumulator_bound, analyze
from .mma_config import (FEATURE, KIND, ROLLED_K_LOOP_BELOW_SM, TYPES, Config, Layout, _mn_dims,
                         layout)
from .tiled_nest import _root

#: the launches' schedule name (gpu.launch ``schedule``)
SCHEDULE = "mma"


def _zero(t):
    return 0.0 if t.is_float else 0


def _rem(b: Builder, x: Value, n: int) -> Value:
    return sub(b, x, mul(b, div(b, x, n), n))


def _min(b: Builder, x: Value, n: int) -> Value:
    return b.create("arith.min", [x, const(b, n)]).result


def _and(b: Builder, x: Value, y: Value) -> Value:
    return b.create("arith.and", [x, y]).result


def flat_view(top: Builder, buffer: Value) -> Value:
    """A 1-D view of ``buffer``'s root (made at ``top``, before a launch): cp.async addresses
    are element offsets into it (:func:`_linear`)."""
    root = _root(buffer)
    return top.create("loop.view", [root], {
        "offset": 0, "shape": (root.type.span,), "strides": (1,)}).result


def _index_values(b: Builder, c: Contraction, dims: list, lin: Value) -> dict:
    """{("p", d): index value} of the logical point number ``lin`` over ``dims`` (row-major)."""
    its = delinearize(b, lin, [c.extent(d) for d in dims])
    return {("p", d): add(b, t, c.lower(d)) for d, t in zip(dims, its)}


def _red_values(b: Builder, c: Contraction, k: Value) -> dict:
    """{("r", j): iv value} of the linear reduction index ``k`` (innermost loop fastest)."""
    its = delinearize(b, k, [r.trips for r in c.red])
    return {("r", j): add(b, mul(b, t, r.step), r.lower) for j, (t, r) in enumerate(zip(its, c.red))}


def _indices(b: Builder, x: Operand, syms: dict) -> list:
    out = []
    for row in x.rows:
        v = const(b, row.get(1, 0))
        for s, k in row.items():
            if s != 1:
                v = add(b, v, mul(b, syms[s], k))
        out.append(v)
    return out


def _linear(b: Builder, x: Operand, syms: dict) -> Value:
    """The element offset of ``x`` at ``syms`` from its root buffer's base."""
    v = const(b, x.offset())
    used = {s for row in x.rows for s in row if s != 1}
    for s in sorted(used, key=repr):
        k = x.coef(s)
        if k:
            v = add(b, v, mul(b, syms[s], k))
    return v


class _Builder:
    """Writes the launch of one contraction (the module docstring's pseudo-code)."""

    def __init__(self, c: Contraction, cfg: Config, target: Target, flat_m: bool = False,
                 early_weights: bool = False):
        if not target.has(FEATURE[c.kind]):
            raise CompileError(f"{c.nest.op.where}: the {c.kind} tensor-core kernel needs "
                               f"{FEATURE[c.kind]}, which target {target.arch} "
                               f"({target.name or 'no name'}) does not have")
        self.c, self.cfg, self.target = c, cfg, target
        #: the constant operands (weights), whose first stages are copied before the launch's
        #: gpu.grid_wait (:meth:`_prologue`): a pdl launch reads them during the previous
        #: kernel's tail
        self.early = [x for x in (c.a, c.b) if _constant(x)] if early_weights else []
        self.shape, self.ks, _, self.vec = KIND[c.kind]
        self.bk = cfg.bk
        self.el, self.acc_t = TYPES[c.kind]
        self.kt = -(-c.K // cfg.bk)                    # K tiles in all
        self.kts = -(-self.kt // cfg.splits)           # K tiles per split
        self.lay = {id(c.a): layout(c, c.a), id(c.b): layout(c, c.b)}
        self.tiles = {}     # point-program loads read from shared tiles (mma_prefetch.py)
        self.slot = None    # the current output tile's slot in them (M tiles: mma_prefetch.slots)
        self.flat_m = flat_m          # point-program accesses linear in m go flat (m_linear_accesses)
        self.flat_access = {}
        #: |sum| <= this for every accumulator (s8: contraction.accumulator_bound), or None;
        #: the staged epilogue's loads of the sums carry it (loop.load's ``bound``)
        self.acc_bound = accumulator_bound(c)

    # -- shared tiles
    def _tile_shape(self, x: Operand) -> tuple:
        rows = self.cfg.bm if x is self.c.a else self.cfg.bn
        if self.lay[id(x)].kmajor:
            return (self.cfg.stages, rows, self.bk)
        return (self.cfg.stages, self.bk, rows)

    def _swizzle(self, b: Builder, x: Operand, row: Value, col: Value) -> Value:
        """The stored column of element ``col`` of tile row ``row``: its 16-byte chunk rotated
        by ``row / (rows per 128-byte line)`` within the row, so that the 8 rows an ldmatrix
        reads (or a warp's cp.asyncs write) at one logical chunk fall in 8 distinct 16-byte
        slots of the 32 banks. (A rotation: the index arithmetic has no xor.)"""
        row_len = self._tile_shape(x)[2]
        chunks = row_len // self.vec
        if chunks == 1:
            return col
        per_line = max(1, 128 // (row_len * (self.el.bitwidth // 8)))
        chunk = div(b, col, self.vec)
        rot = _rem(b, add(b, chunk, div(b, row, per_line)), chunks)
        return add(b, mul(b, rot, self.vec), _rem(b, col, self.vec))

    def build(self) -> Operation:
        c, cfg = self.c, self.cfg
        T = cfg.m_tiles
        m_tiles = -(-c.M // cfg.bm)
        grid = (-(-c.N // cfg.bn), -(-m_tiles // T), c.batches * cfg.splits)
        top = Builder.before_op(c.nest.op)
        self.ws = None
        if cfg.splits > 1:     # partial sums, reduced by a second kernel (_reduce_splits)
            self.ws = top.create("loop.alloc", [], result_types=[BufferType(
                (cfg.splits, c.batches, c.M, c.N), self.acc_t)]).result
        self.flat = {}
        for x in (c.a, c.b):   # cp.async addresses: element offsets into a flat view
            if self.lay[id(x)].vector:
                self.flat[id(x)] = flat_view(top, x.buffer)
        tiles = [(t, flat_view(top, t.operand.buffer)) for t in mma_prefetch.chosen(c, cfg, self.target)]
        tiled = {id(t.op) for t, _ in tiles}
        self.flat_access = {id(o): (flat_view(top, x.buffer), x) for o, x in
                            m_linear_accesses(c) if id(o) not in tiled} if self.flat_m else {}
        launch, b = launch_before(c.nest.op, grid, (cfg.threads, 1, 1), SCHEDULE)
        launch.attributes["tile"] = cfg.describe(c.kind)
        self.s = {id(x): shared(b, self._tile_shape(x), self.el) for x in (c.a, c.b)}
        tid = thread_id(b, 0)
        self.tid = tid
        self.warp = warp = div(b, tid, 32)
        self.lane = sub(b, tid, mul(b, warp, 32))
        wmi = div(b, warp, cfg.warps_n)
        wni = sub(b, warp, mul(b, wmi, cfg.warps_n))
        self.wm0 = mul(b, wmi, cfg.wm)
        self.wn0 = mul(b, wni, cfg.wn)
        self.base = {id(c.b): mul(b, block_id(b, 0), cfg.bn)}
        first = block_id(b, 1) if T == 1 else mul(b, block_id(b, 1), T)   # the CTA's first M tile
        bz = block_id(b, 2)
        self.batch_lin = div(b, bz, cfg.splits)
        self.split = _rem(b, bz, cfg.splits) if cfg.splits > 1 else None
        self.batch = _index_values(b, c, c.batch, self.batch_lin) if c.batch else {}
        kt0 = mul(b, self.split, self.kts) if self.split is not None else None
        # the epilogue's tiles (a residual) go with the copies of their output tile's K tile 0
        self.tiles = mma_prefetch.allocate(self, b, tiles)
        if cfg.epilogue in mma_epilogue.STAGED:
            mma_epilogue.allocate(self, b)
        n_slots = mma_prefetch.slots(c, cfg)
        steps = T * self.kts     # the CTA's K tiles, output tile after output tile

        def copy(cb: Builder, i: Value, operands=(c.a, c.b), tiles: bool = True) -> None:
            """Copies of the CTA's K tile ``i`` (flattened over its output tiles) of
            ``operands``, and with ``tiles`` the epilogue's tiles of its output tile."""
            if T == 1:
                t, kt = None, i
            elif self.kts == 1:
                t, kt = i, None
            else:
                t = div(cb, i, self.kts)
                kt = sub(cb, i, mul(cb, t, self.kts))
            m0 = mul(cb, first if t is None else add(cb, first, t), cfg.bm)
            if self.tiles and tiles:
                slot = None if n_slots == 1 else _rem(cb, t, n_slots)
                if kt is None:
                    mma_prefetch.issue(self, cb, self.tiles, m0, slot)
                else:
                    _, tb = if_op(cb, cmp(cb, "eq", kt, 0))
                    mma_prefetch.issue(self, tb, self.tiles, m0, slot)
            kt = const(cb, 0) if kt is None else kt
            self._copy(cb, _rem(cb, i, cfg.stages), add(cb, kt0, kt) if kt0 is not None else kt,
                       m0, operands)

        self._prologue(b, steps, copy)
        zero = b.create("arith.constant", [], {"value": _zero(self.acc_t),
                                               "type": self.acc_t}).result
        mi_n, ni_n = cfg.wm // 16, cfg.wn // 8
        if T == 1:
            tb, t = b, None
        else:
            _, tb, t, _ = for_loop(b, 0, T, 1)
        self.base[id(c.a)] = mul(tb, first if t is None else add(tb, first, t), cfg.bm)
        self.slot = None if n_slots == 1 else _rem(tb, t, n_slots)
        loop, fb, kt, carried = for_loop(tb, 0, self.kts, 1, inits=[zero] * (mi_n * ni_n * 4))
        if self.target.sm < ROLLED_K_LOOP_BELOW_SM:
            loop.attributes["rolled"] = True
        i = kt if t is None else add(fb, mul(fb, t, self.kts), kt)
        fb.create("gpu.cp_async_wait", [], {"pending": cfg.stages - 2})
        barrier(fb)
        nxt = add(fb, i, cfg.stages - 1)
        _, ib = if_op(fb, cmp(fb, "lt", nxt, steps))
        copy(ib, nxt)
        fb.create("gpu.cp_async_commit", [])
        stage = _rem(fb, i, cfg.stages)
        acc = list(carried)
        for kk in range(self.bk // self.ks):
            acc = self._step(fb, stage, kk * self.ks, acc)
        fb.create("loop.yield", acc)
        eb = tb
        if m_tiles % T:   # the last CTA's tiles past M: no epilogue (their copies were empty)
            _, eb = if_op(tb, cmp(tb, "lt", add(tb, first, t), m_tiles))
        if cfg.epilogue in mma_epilogue.STAGED:
            mma_epilogue.staged(self, eb, list(loop.results))
        else:
            self._epilogue(eb, list(loop.results))
        if self.ws is not None:
            self._reduce_splits()
        return launch

    def _prologue(self, b: Builder, steps: int, copy) -> None:
        """The copies of the first S - 1 K tiles, one commit group each (empty past the last
        tile, so that the main loop's wait(S - 2) always means "tile i"). Where
        :attr:`early`, the constant operand's copies of all of them come first, then the
        launch's ``gpu.grid_wait``, then the rest: the weights are read while the kernel
        before still runs (a pdl launch, gpu.launch's docstring), the activations after it
        completed. They join the first commit group, which the main loop waits for first::

            cp.async B tile 0, B tile 1;  griddepcontrol.wait
            cp.async A tile 0;  commit;  cp.async A tile 1;  commit
        """
        cfg = self.cfg
        late = [x for x in (self.c.a, self.c.b) if not any(x is e for e in self.early)]
        if self.early:
            for s in range(min(cfg.stages - 1, steps)):
                copy(b, const(b, s), self.early, False)
            b.create("gpu.grid_wait", [])
        for s in range(cfg.stages - 1):
            if s < steps:
                copy(b, const(b, s), late)
            b.create("gpu.cp_async_commit", [])

    # -- global -> shared
    def _copy(self, b: Builder, stage: Value, kt: Value, m0: Value | None = None,
              operands=None) -> None:
        """K tile ``kt`` of ``operands`` (default both) into ``stage``; A's rows from ``m0``
        (default: the CTA's output tile, ``self.base``)."""
        for x in operands or (self.c.a, self.c.b):
            lay = self.lay[id(x)]
            base = m0 if x is self.c.a and m0 is not None else self.base[id(x)]
            if lay.vector:
                self._copy_vector(b, x, lay, stage, kt, base)
            else:
                self._copy_scalar(b, x, stage, kt, base)

    def _operand_syms(self, b, x: Operand, mn: Value, k: Value) -> dict:
        syms = dict(self.batch)
        syms.update(_index_values(b, self.c, _mn_dims(self.c, x), mn))
        syms.update(_red_values(b, self.c, k))
        return syms

    def _extent(self, x: Operand) -> int:
        return self.c.M if x is self.c.a else self.c.N

    def _copy_vector(self, b, x: Operand, lay: Layout, stage, kt, base: Value) -> None:
        c, cfg = self.c, self.cfg
        v = self.vec * lay.chunk // 16      # elements per cp.async
        rows = cfg.bm if x is c.a else cfg.bn
        mn_total = self._extent(x)
        if lay.kmajor:
            per, total = self.bk // v, rows * self.bk // v
        else:
            per, total = rows // v, self.bk * rows // v
        for it in range(-(-total // cfg.threads)):
            ch = add(b, self.tid, it * cfg.threads)
            live = cmp(b, "lt", ch, total) if (it + 1) * cfg.threads > total else None
            ch = _min(b, ch, total - 1) if live is not None else ch
            hi, lo = div(b, ch, per), mul(b, _rem(b, ch, per), v)
            r, col = (hi, lo)
            if lay.kmajor:   # hi: the M/N row, lo: the k offset
                mn, k = add(b, base, hi), add(b, mul(b, kt, self.bk), lo)
                mn_c, k_c = _min(b, mn, mn_total - 1), _min(b, k, c.K - v)
            else:            # hi: the k row, lo: the M/N offset
                mn, k = add(b, base, lo), add(b, mul(b, kt, self.bk), hi)
                mn_c, k_c = _min(b, mn, mn_total - v), _min(b, k, c.K - 1)
            pred = _and(b, cmp(b, "lt", mn, mn_total), cmp(b, "lt", k, c.K))
            if live is not None:
                pred = _and(b, pred, live)
            lin = _linear(b, x, self._operand_syms(b, x, mn_c, k_c))
            col = self._swizzle(b, x, r, col)
            b.create("gpu.cp_async", [self.flat[id(x)], [lin], self.s[id(x)], [stage, r, col],
                                      pred], {"bytes": lay.chunk})

    def _copy_scalar(self, b, x: Operand, stage, kt, base: Value) -> None:
        """Element by element, k fastest across threads when k is the operand's contiguous
        direction, else M/N fastest; zero past the edges; stored K-major."""
        c, cfg = self.c, self.cfg
        rows = cfg.bm if x is c.a else cfg.bn
        mn_total = self._extent(x)
        total = rows * self.bk
        k_fast = x.coef(("r", len(c.red) - 1)) == 1 or not _mn_dims(c, x)
        zero = b.create("arith.constant", [], {"value": _zero(self.el), "type": self.el}).result
        fast = self.bk if k_fast else rows     # elements along the fast direction
        # threads covering whole lines of it keep their place along it in every pass: one k (or
        # row) and its index arithmetic per thread, not per element (AlexNet's NCHW conv1 spilled)
        step = cfg.threads // fast if cfg.threads % fast == 0 else 0
        along, across = (_rem(b, self.tid, fast), div(b, self.tid, fast)) if step else (0, 0)
        for it in range(-(-total // cfg.threads)):
            if step:
                lo, hi = along, add(b, across, it * step)
            else:
                e = add(b, self.tid, it * cfg.threads)
                lo, hi = _rem(b, e, fast), div(b, e, fast)
            row, kk = (hi, lo) if k_fast else (lo, hi)
            mn, k = add(b, base, row), add(b, mul(b, kt, self.bk), kk)
            pred = _and(b, cmp(b, "lt", mn, mn_total), cmp(b, "lt", k, c.K))
            idx = _indices(b, x, self._operand_syms(b, x, _min(b, mn, mn_total - 1),
                                                    _min(b, k, c.K - 1)))
            v = b.create("loop.load", [x.buffer, idx]).result
            v = b.create("arith.select", [pred, v, zero]).result
            b.create("loop.store", [v, self.s[id(x)], [stage, row, self._swizzle(b, x, row, kk)]])

    # -- fragments and mma
    def _frag(self, b, x: Operand, stage, k0: int, mn0: Value, pair: int) -> list:
        """ldmatrix.x4 of a 16 (M/N) x ks (k) block at (mn0, k0): A's fragment, or two n8
        tiles of B (``pair``), per module docstring's layouts."""
        lane = self.lane
        q, r = div(b, lane, 8), _rem(b, lane, 8)
        cu = 16 // (self.el.bitwidth // 8)      # elements per 16-byte row chunk
        lay = self.lay[id(x)]
        is_a = x is self.c.a
        if lay.kmajor:
            if is_a:   # matrices: (rows 0-7 | 8-15) x (k 0 | k cu)
                row = add(b, add(b, mn0, r), mul(b, _rem(b, q, 2), 8))
                col = add(b, mul(b, div(b, q, 2), cu), k0)
            else:      # (n 0-7: k 0 | k cu), (n 8-15: k 0 | k cu)
                row = add(b, add(b, mn0, r), mul(b, div(b, q, 2), 8))
                col = add(b, mul(b, _rem(b, q, 2), cu), k0)
            trans = False
        else:          # stored [k][mn], transposed on load (f16)
            if is_a:
                row = add(b, add(b, r, mul(b, div(b, q, 2), 8)), k0)
                col = add(b, mn0, mul(b, _rem(b, q, 2), 8))
            else:
                row = add(b, add(b, r, mul(b, _rem(b, q, 2), 8)), k0)
                col = add(b, mn0, mul(b, div(b, q, 2), 8))
            trans = True
        col = self._swizzle(b, x, row, col)
        vals = b.create("gpu.ldmatrix", [self.s[id(x)], [stage, row, col]],
                        {"num": 4, "trans": trans}).results
        if self.c.kind == "tf32":
            vals = [b.create("arith.round_tf32", [v]).result for v in vals]
        return list(vals)

    def _step(self, b, stage, k0: int, acc: list) -> list:
        cfg = self.cfg
        mi_n, ni_n = cfg.wm // 16, cfg.wn // 8
        a = [self._frag(b, self.c.a, stage, k0, add(b, self.wm0, mi * 16), 0)
             for mi in range(mi_n)]
        bf = []
        for nj in range(ni_n // 2):
            vals = self._frag(b, self.c.b, stage, k0, add(b, self.wn0, nj * 16), nj)
            half = len(vals) // 2
            bf += [vals[:half], vals[half:]]
        out = list(acc)
        for mi in range(mi_n):
            for ni in range(ni_n):
                at = (mi * ni_n + ni) * 4
                d = b.create("gpu.mma", [a[mi], bf[ni], out[at:at + 4]],
                             {"shape": self.shape}).results
                out[at:at + 4] = list(d)
        return out

    # -- the point program per accumulator element, from the fragments (mma_epilogue.py)
    def _epilogue(self, b: Builder, acc: list) -> None:
        c, cfg = self.c, self.cfg
        g = div(b, self.lane, 4)
        t = _rem(b, self.lane, 4)
        mi_n, ni_n = cfg.wm // 16, cfg.wn // 8
        m_base = add(b, add(b, self.base[id(c.a)], self.wm0), g)
        n_base = add(b, add(b, self.base[id(c.b)], self.wn0), mul(b, t, 2))
        for mi in range(mi_n):
            for ni in range(ni_n):
                for i in range(4):
                    m = add(b, m_base, mi * 16 + 8 * (i >= 2))
                    n = add(b, n_base, ni * 8 + (i & 1))
                    v = acc[(mi * ni_n + ni) * 4 + i]
                    self._guarded_point(b, m, n, lambda eb, v=v: v)

    def _guarded_point(self, b: Builder, m: Value, n: Value, value) -> None:
        """At output (``m``, ``n``), under ``m < M`` / ``n < N`` where the tile can overhang:
        the point program with the sum ``value(builder)`` (built inside the guard), or
        split-K's store of it into the workspace. Both epilogues end here."""
        c, cfg = self.c, self.cfg
        guards = []
        if c.M % cfg.bm:
            guards.append(cmp(b, "lt", m, c.M))
        if c.N % cfg.bn:
            guards.append(cmp(b, "lt", n, c.N))
        eb = b
        if guards:
            cond = guards[0] if len(guards) == 1 else _and(b, *guards)
            _, eb = if_op(b, cond)
        v = value(eb)
        if self.ws is not None:
            eb.create("loop.store", [v, self.ws, [self.split, self.batch_lin, m, n]])
        else:
            self._point(eb, dict(self.batch), m, n, v)

    def _point(self, b: Builder, syms: dict, m: Value, n: Value, total: Value) -> None:
        """The nest's point program at logical output (batch ``syms``, ``m``, ``n``) with the
        reduction's sum ``total``: start value + total, then the epilogue (stores included)."""
        c = self.c
        par = c.nest.op.regions[0].blocks[0].args
        syms.update(_index_values(b, c, c.m_dims, m))
        syms.update(_index_values(b, c, c.n_dims, n))
        mapping = {par[d]: syms[("p", d)] for d in range(len(par))}
        for o in c.init:
            b.insert(o.clone(mapping))
        start = mapping.get(c.start, c.start)
        mapping[c.result] = b.create("arith.add", [start, total]).result
        for o in c.epilogue:
            tile = self.tiles.get(id(o))
            flat = self.flat_access.get(id(o))
            if tile is not None:    # read from its shared tile (mma_prefetch.py)
                mapping[o.results[0]] = mma_prefetch.read(self, b, tile[0], m, n)
            elif flat is not None:  # one linear index in m (m_linear_accesses)
                view, x = flat
                lin = [_m_linear(b, c, x, syms, m)]
                if o.name == "loop.load":
                    mapping[o.results[0]] = b.create("loop.load", [view, lin]).result
                else:
                    b.create("loop.store", [mapping.get(o.operands[0], o.operands[0]), view, lin])
            else:
                b.insert(o.clone(mapping))

    def _reduce_splits(self) -> None:
        """The second kernel of split-K: a nest over (batch, m, n) summing the splits' partials
        in order, then the point program; mapped by the pointwise schedule."""
        from . import pointwise
        c, cfg = self.c, self.cfg
        top = Builder.before_op(c.nest.op)
        nest, pb, (bl, m, n) = parallel_loop(top, (0, 0, 0), (c.batches, c.M, c.N),
                                             loc=c.nest.op.loc)
        total = pb.create("loop.load", [self.ws, [const(pb, 0), bl, m, n]]).result
        for s in range(1, cfg.splits):
            v = pb.create("loop.load", [self.ws, [const(pb, s), bl, m, n]]).result
            total = pb.create("arith.add", [total, v]).result
        syms = _index_values(pb, c, c.batch, bl) if c.batch else {}
        self._point(pb, syms, m, n, total)
        pointwise.schedule(nest, None)
        nest.erase()


def _constant(x: Operand) -> bool:
    """Whether operand ``x`` reads a constant (a ``loop.global``: weights, never written)."""
    root = _root(x.buffer)
    return isinstance(root, OpResult) and root.owner.name == "loop.global"


def m_linear_accesses(c: Contraction) -> list:
    """``(op, Operand)`` of the point program's loads and stores whose buffer offset is linear in
    the logical row ``m``: affine in the parallel dims, reading every M dim, each M dim's
    coefficient the next one's times its extent (an NHWC tensor's n, p, q: ``m x C``). With
    more than one M dim, the mma epilogue's ``m -> (n, p, q)`` delinearization (``mul.hi``
    and 64-bit address arithmetic per row, then per element) is only needed by such accesses,
    and :func:`_m_linear` gives their offset as ``coef x m + ...`` instead: constant offsets
    between the rows and columns a lane touches. Example (ResNet's conv3 output
    ``buffer<32x56x56x256xi8>``, m dims n, p, q)::

        before: loop.store %y, %out[m / 3136, (m / 56) % 56, m % 56, c]
        after:  loop.store %y, %out_flat[256 m + c]"""
    from .tiled_nest import _affine
    if len(c.m_dims) < 2:
        return []
    nest = c.nest
    memo: dict = {}
    out = []
    for o in c.epilogue:
        if o.name not in ("loop.load", "loop.store"):
            continue
        buf = o.operands[0] if o.name == "loop.load" else o.operands[1]
        idx = o.operands[1:] if o.name == "loop.load" else o.operands[2:]
        rows = [_affine(i, nest.op, nest.loops, memo) for i in idx]
        if any(r is None or any(k != 1 and k[0] != "p" for k in r) for r in rows):
            continue
        x = Operand(buf, rows, buf.type.element)
        ms = c.m_dims
        coefs = [x.coef(("p", d)) for d in ms]
        if coefs[-1] and all(coefs[i] == c.extent(ms[i + 1]) * coefs[i + 1]
                             for i in range(len(ms) - 1)):
            out.append((o, x))
    return out


def _m_linear(b: Builder, c: Contraction, x: Operand, syms: dict, m: Value) -> Value:
    """The element offset of ``x`` (:func:`m_linear_accesses`) at row ``m`` and the other
    dims' values in ``syms``: its offset, the M dims' lower bounds, ``coef x m`` and the
    others' terms."""
    ms = set(c.m_dims)
    base = x.offset() + sum(x.coef(("p", d)) * c.lower(d) for d in ms)
    v = add(b, const(b, base), mul(b, m, x.coef(("p", c.m_dims[-1]))))
    used = {s for row in x.rows for s in row if s != 1 and s[1] not in ms}
    for s in sorted(used, key=repr):
        k = x.coef(s)
        if k:
            v = add(b, v, mul(b, syms[s], k))
    return v


def build(c: Contraction, cfg: Config, target: Target) -> Operation:
    """The launch of contraction ``c`` with tile config ``cfg`` for ``target`` (inserted before
    its nest, which the caller erases)."""
    return _Builder(c, cfg, target).build()


def build_all(module: Operation, cfg: Config, target: Target) -> int:
    """Build every contraction nest of ``module`` with tile config ``cfg`` for ``target``
    (erasing the nests): a tuner's way to try one config; map-to-gpu then maps the rest.
    Returns how many."""
    n = 0
    for op in list(module.walk()):
        c = analyze(op) if op.name == "loop.parallel" else None
        if c is not None:
            build(c, cfg, target)
            op.erase()
            n += 1
    return n
