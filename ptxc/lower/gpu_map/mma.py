"""The ``mma`` schedule of map-to-gpu: reduced-precision contractions (fp16, tf32 and int8
MatMul, Gemm, batched MatMul, convolution as an implicit GEMM) on tensor cores.

It takes what :func:`contraction.analyze` recognizes (a nest whose reduction multiplies f16 or
tf32 operands accumulating in f32, or int8 operands accumulating in i32) and writes one
``gpu.launch`` per nest in the shape of a CUTLASS-style GEMM, from the gpu dialect's
tensor-core ops (ptxc/dialects/gpu_tensorcore.py)::

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

Tile choice (a static heuristic; autotuning will replace it): of the CTA tiles of
:data:`TILES` that fit the target's shared memory per block and still give at least one block
per SM (the target's SM count), the one with the least padded work
(:func:`padded_work`), or the largest within 10% of it; else the smallest, with **split-K**
when even that leaves SMs idle (batch-1 layers: M x N small, K long): ``splits`` CTAs per
output tile each sum a range of K tiles into an f32 workspace ``[splits][batches][M][N]`` (a
``loop.alloc``, planned like any buffer), and a second, pointwise kernel adds the splits in
order and runs the point program. Shared memory: two
stages, each row's 16-byte chunks rotated by the row (:meth:`_Builder._swizzle`) so that the 8
rows an ldmatrix reads fall in distinct banks; 3 x 16 KiB at 128 x 128 x 32 f16 fill the 48 KiB
static limit exactly.

**The target** (map-to-gpu's ``target``, common.target_of): its SM count sizes the grids
(full waves, split-K, M tiles, epilogue tiles), its shared memory per block bounds the tiles
(:func:`valid`) and its shared memory per SM the blocks each SM should hold
(:func:`min_blocks`); the schedule takes a contraction only where the target has its mma.sync
kind (:data:`FEATURE`: sm_80 and later), else the tiled and pointwise schedules take it.

Numerics: the tensor core multiplies f16 (or tf32) operands exactly and accumulates in f32, in
another order than the nest; the start value is added after the sum (reassociated, as the tiled
schedule does). The interpreter runs the launch in lockstep and checks it against the nest.

**int8** (``s8``: ``mma.m16n8k32.row.col.s32.s8.s8.s32``) is the same schedule with 1-byte
elements: a 16-byte chunk holds 16 of them, K tiles are 64 (128 when K is long) elements deep
so that a tile row is the same 64 or 128 bytes as fp16's, and ``ldmatrix`` (b16, not
transposed) loads the fragments: an 8x8 b16 matrix is 8 rows of 16 int8, lane ``l`` receiving
row ``l / 4``'s bytes ``4 (l % 4) ..``, which is exactly the s8 fragment (four int8 of one row
per register; A row-major, B column-major, PTX ISA "Matrix Fragments for mma.m16n8k32"). So
both operands must be K-major (ldmatrix cannot transpose bytes): a K-contiguous operand is
copied by 16-byte cp.async, any other by the scalar copy. i32 sums are exact (they wrap as the
nest's do), so the mapped kernel is bit-exact with the nest, split-K included (i32 partials).

**Epilogue** (``Config.epilogue``, mma_epilogue.py): ``fragment`` (the pseudo-code above: the
point program straight from the fragment layout, one warp store touching 8 rows) or ``staged``
(map-to-gpu's default; per 8-row slab the warp's accumulators go through a warp-private shared region
and come back row-major, 16 lanes across a row: a warp instruction touches 2 output rows, not
8, loads of a fused residual included). Chosen for every mma kernel
by map-to-gpu's option ``mma-epilogue`` (pipeline text ``map-to-gpu{mma-epilogue=staged}``; a
compile takes it from the cuda loop pipeline, ``ptxc.compiler.TARGET_STAGE_PIPELINES``, as
``bench/resnet50_int8.py --epilogues`` does). Staged is the default since the H200 timed it
(ResNet-50 b32 fp16: 1.89 ms against 2.29, 2026-12-02); ``fragment`` stays where the staged
region does not fit the shared memory. The tile string (``ptxc inspect``; the bench's profile rows) ends in
``epilogue staged`` when staged.

**Epilogue tiles** (mma_prefetch.py): where the point program reads a tile of another tensor
(a fused residual) and the main loop is short against many waves of CTAs, that tile is copied
into shared memory by cp.async before the main loop, and the point program reads it there.

**M tiles** (``Config.m_tiles``, map-to-gpu's ``mma-m-tiles``): a CTA computes ``T``
consecutive output tiles along M in turn, its K tiles flattened over them (``i = t * KT +
kt``), so the copies that run ``S - 1`` K tiles ahead cross into the next output tile: while
the warps run tile ``t``'s epilogue, tile ``t + 1``'s operands (and its epilogue tiles, in
their own slot: mma_prefetch.slots) are already in flight. Without it a CTA loads, multiplies,
then runs its epilogue with nothing in flight, and short-K kernels (ResNet's 1x1 convs: one
or two K tiles) spend most of their time in one phase or the other::

    for t in 0 .. T:                           (grid.y = ceil(M tiles / T))
      for kt in 0 .. KT: i = t KT + kt
        wait(S - 2); barrier; copy K tile i + S - 1 (next output tile's when kt + S - 1 >= KT;
        its epilogue tiles with its K tile 0); commit; mma on stage i % S
      if first + t < M tiles: epilogue of tile first + t

Stages are cut to KT + 1 (one output tile ahead). A tile's slot of the epilogue tiles is
rewritten only after the barrier of the first K tile after its epilogue; the staged
epilogue's warp region likewise. :func:`with_m_tiles` keeps two CTAs per SM at least.
Timed on the H200 (ResNet-50 b32, session 13, bench/RESULTS.md): no gain, so the default
stays one tile per CTA (:func:`m_tiles`). int8 kernels' sum 1.240 ms at 1 tile, 1.253 at up
to 2, 1.282 at 4, 1.332 at 8; fp16 1.528, 1.584, 1.561, 1.642. The layer-1 conv3 + residual
kernels went 36.9 -> 38.4 (2) -> 49.2 us (4) in int8: their registers rose from 138 to 196
(3 CTAs per SM to 2), and the CTAs an SM already holds overlap one another's loads and
epilogues. It stays an option for a tuner (a few layer-2 kernels ran 2-3% faster at 3).

**Flat rows** (map-to-gpu's ``mma-flat-m``, on by default): the M dims in the output's
memory order (contraction.rows_in_memory_order) and the point program's accesses that are
linear in ``m`` with one index (:func:`m_linear_accesses`): ResNet-50 b32's int8 layer-1 conv3
+ residual kernel loses 236 of its 1993 epilogue instructions (64-bit row address arithmetic)
and 22 registers (138 -> 116), statically; Nsight Compute found these kernels bound by the
integer ALU pipe (session 13, bench/RESULTS.md). Timed on the H200 (2026-12-03, 7 interleaved
rounds): int8 conv3 + residual 32.4 -> 29.0 us, downsample 23.1 -> 21.3, conv1 21.9 -> 20.4;
the later layers within noise.

**Tuning options**: map-to-gpu's ``mma-tiles`` replaces :data:`TILES` and ``mma-stages`` the
stage count (:func:`parse_tiles`, :func:`choose`), for runs such as ``bench/resnet50_int8.py
--variant``. Measured (ResNet-50 b32, H200, 2026-12-02): 8-warp tiles (128x128 in 2x4 warps,
128x64 in 4x2) took int8 1.59 ms of kernels against 1.43 and fp16 1.99 against 1.83; four
stages int8 1.48 and fp16 1.88: the defaults stay. Except where the A gather copies 4 bytes at a
time (an int8 conv on 4 channels: ResNet's stem, its 3-channel image padded to 4): a stage then
holds a quarter of the bytes a 16-byte copy would, and :data:`SMALL_COPY_STAGES` (4) keep more
of them in flight (:func:`default_stages`). Measured on the H200 (session 17,
bench/kernel_variants.py, each kernel alone, median of 7): the int8 stem 75.1 -> 67.9 us with
four stages; fp16's stem (8-byte copies) 79.3 -> 78.2, within noise, so it keeps three.

**wgmma** (wgmma.py): on sm_90, a large fp16 GEMM whose operands are both K-major takes
Hopper's warpgroup instruction instead (``schedule`` dispatches to it first; map-to-gpu's
``wgmma`` option: auto, on, off).

Not yet: vectorized epilogue stores, a stream-K or atomic split-K without the second kernel,
wgmma for M/N-major operands and tf32. (int8 takes wgmma under ``auto`` since session 12:
wgmma.py's AUTO_KINDS.)
(More than three stages: dynamic shared memory has allowed them since 2026-12, and
:func:`candidates` searches up to five; the default stays three.)
"""

from __future__ import annotations

import math

import attrs

from ...dialects.gpu import MAX_GRID_YZ, barrier, block_id, shared, thread_id
from ...dialects.loop import for_loop, if_op, parallel_loop
from ...ir.builder import Builder
from ...ir.core import Operation, OpResult, Value
from ...ir.types import F16, F32, I8, I32, BufferType
from . import mma_epilogue, mma_prefetch
from ...errors import CompileError
from ...target import Target
from .common import (add, cmp, const, delinearize, div, launch_before, mul, pdl_enabled, sub,
                     target_of)
from .contraction import (Contraction, Operand, accumulator_bound, analyze, ctas,
                          rows_in_memory_order)
from .tiled import _root

SCHEDULE = "mma"
#: shared bytes the driver reserves for itself in every resident block, on every arch with
#: mma.sync here (sm_80 and later; CUDA C Programming Guide, "Compute Capabilities": 1 KB of
#: each block's shared memory is reserved for system use): an SM's shared memory holds
#: ``shared_per_sm // (block bytes + this)`` blocks
BLOCK_RESERVED_SHARED = 1024
MAX_WARP_TILE = 64 * 64       # accumulator elements per warp: 128 f32 registers per thread
MIN_SPLIT_TILES = 4           # split-K: K tiles each split sums at least
DEEP_K = 8                    # K of at least 8 base tiles: K tiles twice as deep
MAX_SPLITS = 16
#: a larger tile is kept while its padded work is within this factor of the least padded tile's
#: (a few percent of padding costs less than a smaller tile's lower efficiency: ResNet-50's
#: layer-4 convs at batch 32, M = 1568, ran 18 us in 128x128 tiles (6% padding) and 26 us in
#: 32x64 tiles (none) on the H200)
PAD_SLACK = 1.1
#: (BM, BN, WARPS_M, WARPS_N), largest first
TILES = ((128, 128, 2, 2), (128, 64, 2, 2), (64, 128, 2, 2), (64, 64, 2, 2), (32, 64, 1, 2))
STAGES = 3
#: cp.async stages where the A operand's copies are 4 bytes (:func:`default_stages`)
SMALL_COPY_STAGES = 4
#: kind -> (mma shape, mma k, BK, elements per 16 bytes)
KIND = {"f16": ("m16n8k16", 16, 32, 8), "tf32": ("m16n8k8", 8, 16, 4),
        "s8": ("m16n8k32", 32, 64, 16)}
#: kind -> (element type in shared memory and fragments, accumulator type)
TYPES = {"f16": (F16, F32), "tf32": (F32, F32), "s8": (I8, I32)}
#: kind -> the target feature (ptxc.target.FEATURES) its mma.sync needs
FEATURE = {"f16": "mma_f16", "tf32": "mma_tf32", "s8": "mma_s8"}
#: on targets below this arch the K loop is kept rolled (``loop.for {rolled}``: PTX's nounroll
#: pragma). ptxas for sm_80 to sm_89 unrolls a main loop whose trip count it knows, and the
#: unrolled kernel outgrows its registers: SqueezeNet's last conv (32 x 64 tiles, 8 K tiles of
#: 64) took 255 registers and 52 bytes of spills on sm_86, 120 and none rolled; sm_90's ptxas
#: keeps that loop rolled by itself (120 registers), so sm_90's PTX stays as it was. A rolled
#: main loop is also what CUTLASS's mainloops are (their trip count is a runtime value).
ROLLED_K_LOOP_BELOW_SM = 90


@attrs.frozen
class Layout:
    """How an operand's tile sits in shared memory and how it gets there: ``kmajor`` (rows of
    the M or N side, k contiguous) or not (rows of k); ``vector``: cp.asyncs of ``chunk``
    bytes (16; 8 or 4 where k runs contiguous only 8 or 4 bytes at a time: a convolution whose
    input has 4 channels, ResNet's 3-channel image padded: 8 bytes of f16, 4 of int8)."""
    kmajor: bool
    vector: bool
    chunk: int = 16


@attrs.frozen
class Config:
    bm: int
    bn: int
    warps_m: int
    warps_n: int
    bk: int
    stages: int = STAGES
    splits: int = 1           # split-K: CTAs per output tile, each summing a K range
    epilogue: str = "fragment"  # or "staged": mma_epilogue.py
    m_tiles: int = 1          # output tiles per CTA, along M: the next one's copies run
                              # during this one's epilogue (module docstring, "M tiles")
    epilogue_tiles: bool = True   # the point program's tile loads via shared memory where
                                  # they pay (mma_prefetch.chosen); False: none

    @property
    def wm(self) -> int:
        return self.bm // self.warps_m

    @property
    def wn(self) -> int:
        return self.bn // self.warps_n

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    def describe(self, kind: str) -> str:
        """For explore and inspect: ``f16 128x128x64 warps 2x2 stages 3 [split-K 4]
        [epilogue staged]``."""
        return (f"{kind} {self.bm}x{self.bn}x{self.bk} warps {self.warps_m}x{self.warps_n} "
                f"stages {self.stages}" + (f" split-K {self.splits}" if self.splits > 1 else "")
                + (f" epilogue {self.epilogue}" if self.epilogue != "fragment" else "")
                + (f" m-tiles {self.m_tiles}" if self.m_tiles > 1 else ""))


def _mn_dims(c: Contraction, x: Operand) -> list:
    return c.m_dims if x is c.a else c.n_dims


def layout(c: Contraction, x: Operand) -> Layout:
    """K-major cp.async when k runs contiguous in aligned chunks of 16 bytes (else 8, else 4);
    else M/N-major cp.async (f16: ldmatrix can transpose 16-bit elements) when the operand's
    innermost M/N dim does; else a scalar copy into K-major tiles (s8 too: ldmatrix transposes
    16-bit elements only)."""
    v = KIND[c.kind][3]
    inner = ("r", len(c.red) - 1)
    syms = [("p", d) for d in _mn_dims(c, x) + c.batch] + [("r", j) for j in range(len(c.red))]

    def aligned(except_sym, v=v) -> bool:
        return x.offset() % v == 0 and all(x.coef(s) % v == 0 for s in syms if s != except_sym)

    last = c.red[-1]
    for chunk in (16, 8, 4):   # bytes per cp.async: 16, else 8 or 4 (v // 2, v // 4 elements)
        e = v * chunk // 16
        if x.coef(inner) == 1 and last.step == 1 and last.trips % e == 0 and aligned(inner, e):
            return Layout(True, True, chunk)
    dims = _mn_dims(c, x)
    if c.kind == "f16" and dims:
        d = dims[-1]
        sym = ("p", d)
        if x.coef(sym) == 1 and c.extent(d) % v == 0 and c.lower(d) % v == 0 and aligned(sym):
            return Layout(False, True)
    return Layout(True, False)


def shared_bytes(c: Contraction, cfg: Config, target: Target) -> int:
    """Shared bytes of ``cfg``'s kernel on ``target``: the stages, the staged epilogue's
    region and the epilogue tiles (whether those pay depends on the target's SM count)."""
    el = TYPES[c.kind][0].bitwidth // 8
    return (cfg.stages * (cfg.bm + cfg.bn) * cfg.bk * el + mma_epilogue.staging_bytes(cfg)
            + mma_prefetch.tile_bytes(c, cfg, target))


def valid(c: Contraction, cfg: Config, target: Target) -> bool:
    """Whether ``cfg`` builds a launchable kernel on ``target``: whole mma tiles per warp (16 x
    16: B's fragments come two n8 tiles per ldmatrix), at most the target's threads per block,
    at most its shared memory per block (opt-in: loop_to_llvm puts what is over the 48 KiB
    static limit in the dynamic shared memory; 227 KiB on sm_90, 163 on sm_80, 99 on sm_86 and
    sm_89), copies that split evenly over the threads, at most 128 f32 accumulators per thread
    (a 64 x 64 warp tile; more spills), at least two warps."""
    v = KIND[c.kind][3]
    if cfg.bm % cfg.warps_m or cfg.bn % cfg.warps_n or cfg.wm % 16 or cfg.wn % 16:
        return False
    if cfg.wm * cfg.wn > MAX_WARP_TILE or cfg.threads < 64:
        return False
    if (cfg.threads > target.max_threads_per_block or cfg.stages < 2
            or shared_bytes(c, cfg, target) > target.shared_per_block):
        return False
    if cfg.epilogue not in mma_epilogue.EPILOGUES:
        return False
    return all((rows * cfg.bk // v) % cfg.threads == 0 and (rows * cfg.bk) % cfg.threads == 0
               for rows in (cfg.bm, cfg.bn))


def candidates(c: Contraction, target: Target) -> list[Config]:
    """Every config valid on ``target`` over a small space of tiles, warp grids, K-tile depths
    and stage counts: what a tuner searches (bench/gemm.py --search times them on the GPU)."""
    import itertools
    base = KIND[c.kind][2]
    space = itertools.product((base, 2 * base), (32, 64, 128, 256), (32, 64, 128, 256),
                              (1, 2, 4), (1, 2, 4), (2, 3, 4, 5))
    return [cfg for bk, bm, bn, wm, wn, st in space
            if valid(c, cfg := Config(bm, bn, wm, wn, bk, st), target)]


def default_stages(c: Contraction) -> int:
    """cp.async stages where map-to-gpu's ``mma-stages`` does not say: :data:`SMALL_COPY_STAGES`
    where the A operand is copied 4 bytes at a time (module docstring, "Tuning options"), else
    :data:`STAGES`."""
    a = layout(c, c.a)
    return SMALL_COPY_STAGES if a.vector and a.chunk == 4 else STAGES


def padded_work(c: Contraction, cfg: Config) -> int:
    """The M x N points ``cfg``'s grid computes, edges rounded up to whole tiles. A tile wider
    than the output wastes the difference: ResNet-50's 64-channel convs (N = 64) in 128 x 128
    tiles multiply zeros in half of every tile, where 128 x 64 tiles give the same number of
    CTAs and no waste."""
    return -(-c.M // cfg.bm) * cfg.bm * -(-c.N // cfg.bn) * cfg.bn


def parse_tiles(items) -> tuple:
    """map-to-gpu's ``mma-tiles``: ``("128x128x2x4", "128x64x2x2")`` -> ((128, 128, 2, 4), (128,
    64, 2, 2)): CTA tiles BM x BN with WARPS_M x WARPS_N warps, largest first, replacing
    :data:`TILES` (empty: TILES). Raises ValueError on anything else."""
    if not items:
        return TILES
    tiles = []
    for item in items:
        parts = item.strip().split("x")
        if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"mma-tiles: {item!r} is not BMxBNxWARPS_MxWARPS_N (e.g. 128x128x2x2)")
        tiles.append(tuple(int(p) for p in parts))
    return tuple(tiles)


def choose(c: Contraction, target: Target, tiles: tuple = TILES, stages: int = STAGES,
           deep_k: int = DEEP_K) -> Config | None:
    """The tile of ``tiles`` (:data:`TILES`; module docstring) for ``target`` with ``stages``
    cp.async stages, K tiles twice as deep from K of ``deep_k`` base tiles (:data:`DEEP_K`), or
    None when the grid would not fit. (Choosing among the tiles within PAD_SLACK the one whose grid fills
    whole waves, session 19's ``mma-wave-tiles``, timed slower in session 20 and was removed
    in session 21: the largest tile it is.)"""
    bk = KIND[c.kind][2]
    if c.batches > MAX_GRID_YZ:
        return None
    if c.K >= deep_k * bk:   # 64-deep K tiles: half the barriers (measured 0.45x -> 0.49x of
        bk *= 2              # cuBLAS at 4096^3 on an H200: bench/RESULTS.md)
    fits = [cfg for cfg in (Config(bm, bn, wm, wn, bk, stages) for bm, bn, wm, wn in tiles)
            if valid(c, cfg, target)]
    if not fits:
        return None
    full = [cfg for cfg in fits if ctas(c, cfg.bm, cfg.bn) >= target.sms]
    if full:   # the largest tile (TILES' order) within PAD_SLACK of the least padded work
        least = min(padded_work(c, cfg) for cfg in full)
        near = [eight_warps(c, cfg, target) if tiles is TILES else cfg for cfg in full
                if padded_work(c, cfg) <= PAD_SLACK * least]
        return near[0]
    cfg = fits[-1]
    blocks = ctas(c, cfg.bm, cfg.bn)
    kt = -(-c.K // bk)
    # too few tiles to fill the GPU: split K over more CTAs, each summing >= 4 K tiles
    splits = max(1, min(-(-target.sms // blocks), kt // MIN_SPLIT_TILES, MAX_SPLITS))
    if splits > 1 and c.batches * splits <= MAX_GRID_YZ:
        cfg = attrs.evolve(cfg, splits=splits)
    return cfg


#: K tiles from which a 128 x 128 tile of base-depth K tiles takes eight warps (:func:`eight_warps`)
EIGHT_WARPS_MIN_K_TILES = 2


def eight_warps(c: Contraction, cfg: Config, target: Target) -> Config:
    """``cfg`` with 4 x 2 warps (32 x 64 warp tiles: 64 accumulators a thread, two CTAs per SM
    in 128 registers, :func:`min_blocks`) where it is a 128 x 128 x 2 x 2 tile of base-depth K
    tiles (not :data:`DEEP_K`'s) with at least :data:`EIGHT_WARPS_MIN_K_TILES` of them; else
    ``cfg``. ptxas gives the four-warp kernel 198-240 registers once its K loop has two tiles
    or more: two CTAs, eight warps per SM, each thread with 128 outputs of epilogue. Timed on
    the H200 (ResNet-50 b32, session 15), kernel by kernel against four warps: int8 layer-3
    conv3 + residual (K = 256) 16.5-17.6 -> 14.2-15.0 us, layer-2 conv3 (K = 128) 20.1-20.4
    -> 19.2-19.6; fp16 layer-2 conv3 (K = 128, 4 tiles) 26.9-28.4 -> 24.2-24.7, layer-1 conv3
    (K = 64, 2 tiles) 38.6-41.5 -> 37.2-40.5. Not with one K tile (the int8 layer-1 conv3,
    whose four-warp kernel fits four CTAs per SM in 116-124 registers: 28.8 -> 32.4 us) nor
    with deep K tiles (fp16 layer-3 conv3 17.3-18.5 -> 21.7-22.6, int8 layer-4 conv3 12.2-15.4
    -> 16.1-19.3)."""
    if ((cfg.bm, cfg.bn, cfg.warps_m, cfg.warps_n) != (128, 128, 2, 2) or cfg.splits > 1
            or cfg.bk != KIND[c.kind][2] or -(-c.K // cfg.bk) < EIGHT_WARPS_MIN_K_TILES):
        return cfg
    out = attrs.evolve(cfg, warps_m=4)
    return out if valid(c, out, target) else cfg


# ---- building ------------------------------------------------------------------------------------

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
        for it in range(-(-total // cfg.threads)):
            e = add(b, self.tid, it * cfg.threads)
            if k_fast:
                row, kk = div(b, e, self.bk), _rem(b, e, self.bk)
            else:
                kk, row = div(b, e, rows), _rem(b, e, rows)
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
    from .tiled import _affine
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


def schedule(op: Operation, options=None) -> Operation | None:
    """Insert the mma launch for ``op`` and return it, or None when ``op`` is not a
    reduced-precision contraction (fp32 nests go to the tiled schedule: fp32 stays fp32, and
    so do the i32-shift form's integer nests of int8 layers that have no int8 form).
    ``options.mma_epilogue`` (map-to-gpu's ``mma-epilogue``) picks :attr:`Config.epilogue`
    (kept ``fragment`` where the staged region would not fit the shared memory).
    A large fp16 GEMM on sm_90 takes the wgmma form instead (wgmma.py; options ``wgmma``,
    ``arch``). None too where the target (common.target_of) has no mma.sync of the kind
    (below sm_80): the tiled and pointwise schedules take the nest."""
    c = analyze(op)
    if c is None:
        return None
    target = target_of(options)
    if not target.has(FEATURE[c.kind]):
        return None
    from . import wgmma   # wgmma.py builds on this module
    wcfg = wgmma.choose(c, options)
    early = getattr(options, "pdl_early_weights", True) and pdl_enabled(options)
    index32 = getattr(options, "index32", INDEX32)
    if wcfg is not None:
        launch = wgmma.build(c, wcfg, target, early)
        if index32:
            launch.attributes["index_bits"] = 32
        return launch
    epilogue = getattr(options, "mma_epilogue", mma_epilogue.DEFAULT_EPILOGUE)
    cfg = choose(c, target, parse_tiles(getattr(options, "mma_tiles", ())),
                 getattr(options, "mma_stages", 0) or default_stages(c),
                 getattr(options, "mma_deep_k", 0) or DEEP_K)
    if cfg is None:
        return None
    if epilogue != cfg.epilogue and valid(c, staged := attrs.evolve(cfg, epilogue=epilogue),
                                          target):
        cfg = staged
    if not getattr(options, "mma_epilogue_tiles", True):
        cfg = attrs.evolve(cfg, epilogue_tiles=False)
    cfg = with_m_tiles(c, cfg, getattr(options, "mma_m_tiles", 0) or m_tiles(c, cfg), target)
    flat_m = getattr(options, "mma_flat_m", True)
    if flat_m:
        c = rows_in_memory_order(c)
    builder = _Builder(c, cfg, target, flat_m, early)
    launch = builder.build()
    if index32 and not builder.flat_access:   # (index32's docstring: why not flat rows)
        launch.attributes["index_bits"] = 32
    blocks = getattr(options, "mma_min_blocks", 0) or min_blocks(c, cfg, target)
    if blocks > 1:
        launch.attributes["min_blocks"] = blocks
    return launch


#: map-to-gpu's ``index32`` default: mma and wgmma launches ask for 32-bit index arithmetic
#: (gpu.launch ``index_bits``; loop_to_llvm grants it where every buffer is small enough).
#: Not an mma launch with flat-row accesses (``mma-flat-m``): its flat row offsets, one
#: 64-bit base per row shared by its stores, took 4% more SASS in 32 bits and spilled in
#: ResNet-50 b32 int8 (ptxas, session 19). Static SASS of ResNet-50 b32 with it: int8 -7.4%,
#: fp16 -12.4%; on the H200 (session 18) int8 / fp16 throughput 1.489x -> 1.507x.
INDEX32 = True


def m_tiles(c: Contraction, cfg: Config) -> int:
    """Output tiles per CTA (module docstring, "M tiles") where map-to-gpu's ``mma-m-tiles``
    does not say: 1 (more timed slower on the H200, session 13)."""
    return 1


#: M tiles never leave fewer CTAs than this many per SM (:func:`with_m_tiles`)
M_TILES_MIN_CTAS = 2


def with_m_tiles(c: Contraction, cfg: Config, tiles: int, target: Target) -> Config:
    """``cfg`` computing up to ``tiles`` output tiles per CTA: fewer where the grid would drop
    under :data:`M_TILES_MIN_CTAS` CTAs per SM of ``target`` (a CTA's tiles run one after the other, so
    fewer CTAs than the SMs hold leave SMs idle), its stages cut to the K tiles + 1 (the
    copies then run one output tile ahead: more would only take shared memory for more
    epilogue tile slots); ``cfg`` itself under split-K, or where that would not be valid."""
    m_tiles = -(-c.M // cfg.bm)
    per_m = ctas(c, cfg.bm, cfg.bn) // m_tiles      # CTAs per row of M tiles
    tiles = min(tiles, m_tiles)
    while tiles > 1 and -(-m_tiles // tiles) * per_m < M_TILES_MIN_CTAS * target.sms:
        tiles -= 1
    if tiles <= 1 or cfg.splits > 1:
        return cfg
    kts = -(-c.K // cfg.bk)
    out = attrs.evolve(cfg, m_tiles=tiles, stages=max(2, min(cfg.stages, kts + 1)))
    return out if valid(c, out, target) else cfg


#: accumulator registers per thread up to which ptxas fits a CTA in 65536 / (3 x its threads)
#: registers without spilling (a 64 x 32 warp tile: 64; the 64 x 64 ones spilled 144-480 bytes)
THREE_BLOCKS_MAX_ACC = 64


def min_blocks(c: Contraction, cfg: Config, target: Target) -> int:
    """How many blocks of ``cfg`` each SM of ``target`` should hold at once (``minctasm``:
    ptxas then fits their registers; 1 leaves it to ptxas). 3 where a thread holds at most
    :data:`THREE_BLOCKS_MAX_ACC` accumulators and 3 CTAs' shared memory (each with
    :data:`BLOCK_RESERVED_SHARED`) and threads fit an SM of the target: ptxas
    otherwise gave ResNet-50 b32's 128x64 kernels with several K tiles 218-222 registers
    (2 CTAs per SM: its layer-1 conv1, 784 CTAs, ran in 3 waves; the stem in 12), and fits
    them in 168 without spills. Not the 64 x 64 warp tiles: at 168 registers they spilled
    (and 3 for every kernel, map-to-gpu's ``mma-min-blocks=3``, slowed the 128x128x128
    ones 22 -> 37 us on the H200, session 12). An eight-warp CTA of such warp tiles
    (:func:`eight_warps`) takes 2: ptxas fits it in 128 registers."""
    acc = cfg.wm * cfg.wn // 32
    if acc <= THREE_BLOCKS_MAX_ACC:
        blocks = 3 if cfg.threads <= 128 else 2   # eight warps (eight_warps): 128 registers
        if (blocks * (shared_bytes(c, cfg, target) + BLOCK_RESERVED_SHARED)
                <= target.shared_per_sm and blocks * cfg.threads <= target.max_threads_per_sm):
            return blocks
    return 1
