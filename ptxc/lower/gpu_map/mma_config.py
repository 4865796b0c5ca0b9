"""The mma schedule's tile configuration and its choice (:mod:`.mma` is the schedule,
:mod:`.mma_kernel` writes the kernel a :class:`Config` describes): the CTA tile, its warp
grid, K-tile depth, cp.async stages, split-K, the output tiles per CTA and the blocks each SM
should hold.

They live apart from the kernel builder because a tuner (bench/gemm.py --search, explore)
enumerates and compares configs without building anything, and because each choice here is a
static heuristic that autotuning will replace; the builder takes whatever config it is given.

**Tiles** (:func:`choose`): of the CTA tiles of :data:`TILES` that fit the target's shared
memory per block and still give at least one block per SM (the target's SM count), the one
with the least padded work (:func:`padded_work`), or the largest within :data:`PAD_SLACK` of
it; else the smallest, with **split-K** when even that leaves SMs idle (batch-1 layers: M x N
small, K long): ``splits`` CTAs per output tile each sum a range of K tiles into an f32 (or
i32) workspace and a second, pointwise kernel adds the splits in order (:mod:`.mma_kernel`).
K tiles are twice as deep from K of :data:`DEEP_K` base tiles (half the barriers). Shared
memory: :data:`STAGES` stages; 3 x 16 KiB at 128 x 128 x 32 f16 fill the 48 KiB static limit
exactly, and dynamic shared memory takes more (:func:`valid`: up to the target's per-block
limit; :func:`candidates` searches up to five stages).

**The target** sizes the choice: its SM count the grids (full waves, split-K, M tiles), its
shared memory per block the tiles (:func:`valid`) and per SM the blocks each SM should hold
(:func:`min_blocks`).

**Tuning options**: map-to-gpu's ``mma-tiles`` replaces :data:`TILES` and ``mma-stages`` the
stage count (:func:`parse_tiles`, :func:`choose`), for runs such as ``bench/resnet50_int8.py
--variant``. On ResNet-50 b32 8-warp tiles for every kernel (128x128 in 2x4 warps, 128x64 in
4x2) and four stages everywhere timed slower than these defaults (bench/history/2026-12-02.md),
so the defaults stay; eight warps pay only where :func:`eight_warps` says. Except where the A
gather copies 4 bytes at a time (an int8 conv on 4 channels: ResNet's stem, its 3-channel
image padded to 4): a stage then holds a quarter of the bytes a 16-byte copy would, and
:data:`SMALL_COPY_STAGES` (4) keep more of them in flight (:func:`default_stages`); the int8
stem ran faster with four, fp16's stem (8-byte copies) within noise, so it keeps three
(bench/history/2026-12-03.md, bench/kernel_variants.py).

**M tiles** (:attr:`Config.m_tiles`, :func:`with_m_tiles`; what the kernel does with them:
:mod:`.mma_kernel`): timed on ResNet-50 b32 they gave no gain (more output tiles per CTA raised
the registers, so fewer CTAs fit an SM, and the CTAs an SM already holds overlap one another's
loads and epilogues; bench/history/2026-12-03.md, re-timed in bench/history/2026-12-04.md), so
the default stays one tile per CTA (:func:`m_tiles`). It stays an option for a tuner.
"""

from __future__ import annotations

import attrs

from ...dialects.gpu import MAX_GRID_YZ
from ...ir.types import F16, F32, I8, I32
from ...target import Target
from . import mma_epilogue, mma_prefetch
from .contraction import Contraction, Operand, ctas

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
#: layer-4 convs at batch 32, M = 1568, ran faster in 128x128 tiles with 6% padding than in
#: 32x64 tiles with none; bench/RESULTS.md)
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
#: elements a thread copies of one operand per K tile where that operand takes the scalar copy
#: (a load, a select and a store each, the loads in flight in registers). AlexNet's 11 x 11
#: stride-4 NCHW conv (K = 363: neither operand in aligned chunks) in 32 x 64 tiles 64 deep
#: (32 and 64 elements a thread) took 255 registers and 44-136 bytes of spills on sm_90; in
#: 64 x 64 tiles (16 each) none. Such operands also take K tiles one mma deep (:func:`choose`):
#: with both, every light model's NCHW convs fit in 158-238 registers, int8 too (its 64-deep
#: tiles spilled at any size). :func:`valid` holds configs to it.
MAX_SCALAR_COPIES = 16


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


def scalar_operands(c: Contraction) -> list[Operand]:
    """The operands whose layout gives no cp.async (:func:`layout`): the scalar copy's."""
    return [x for x in (c.a, c.b) if not layout(c, x).vector]


def scalar_copies(c: Contraction, cfg: Config) -> int:
    """The most elements a thread copies by the scalar copy of one operand per K tile."""
    return max(((cfg.bm if x is c.a else cfg.bn) * cfg.bk // cfg.threads
                for x in scalar_operands(c)), default=0)


def valid(c: Contraction, cfg: Config, target: Target) -> bool:
    """Whether ``cfg`` builds a launchable kernel on ``target``: whole mma tiles per warp (16 x
    16: B's fragments come two n8 tiles per ldmatrix), at most the target's threads per block,
    at most its shared memory per block (opt-in: loop_to_llvm puts what is over the 48 KiB
    static limit in the dynamic shared memory; 227 KiB on sm_90, 163 on sm_80, 99 on sm_86 and
    sm_89), copies that split evenly over the threads, at most 128 f32 accumulators per thread
    (a 64 x 64 warp tile; more spills), at least two warps, at most :data:`MAX_SCALAR_COPIES`
    scalar-copied elements of an operand per thread and K tile."""
    v = KIND[c.kind][3]
    if cfg.bm % cfg.warps_m or cfg.bn % cfg.warps_n or cfg.wm % 16 or cfg.wn % 16:
        return False
    if cfg.wm * cfg.wn > MAX_WARP_TILE or cfg.threads < 64:
        return False
    if (cfg.threads > target.max_threads_per_block or cfg.stages < 2
            or shared_bytes(c, cfg, target) > target.shared_per_block):
        return False
    if cfg.epilogue not in mma_epilogue.EPILOGUES or scalar_copies(c, cfg) > MAX_SCALAR_COPIES:
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
    None when the grid would not fit. (Choosing among the tiles within PAD_SLACK the one whose
    grid fills whole waves, an ``mma-wave-tiles`` option, timed slower and was removed
    (bench/history/2026-12-04.md): the largest tile it is.)"""
    bk = KIND[c.kind][2]
    if c.batches > MAX_GRID_YZ:
        return None
    if scalar_operands(c):   # one mma's k deep: half the scalar copies (MAX_SCALAR_COPIES)
        bk = KIND[c.kind][1]
    elif c.K >= deep_k * bk:   # 64-deep K tiles: half the barriers (closer to cuBLAS at
        bk *= 2                # 4096^3: bench/RESULTS.md)
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
    ResNet-50 b32 kernel by kernel against four warps, eight were faster for the int8 and
    fp16 conv3 kernels with two to eight base-depth K tiles; slower with one K tile (the int8
    layer-1 conv3, whose four-warp kernel fits four CTAs per SM in 116-124 registers) and
    with deep K tiles (bench/history/2026-12-03.md)."""
    if ((cfg.bm, cfg.bn, cfg.warps_m, cfg.warps_n) != (128, 128, 2, 2) or cfg.splits > 1
            or cfg.bk != KIND[c.kind][2] or -(-c.K // cfg.bk) < EIGHT_WARPS_MIN_K_TILES):
        return cfg
    out = attrs.evolve(cfg, warps_m=4)
    return out if valid(c, out, target) else cfg


def m_tiles(c: Contraction, cfg: Config) -> int:
    """Output tiles per CTA (module docstring, "M tiles") where map-to-gpu's ``mma-m-tiles``
    does not say: 1 (more timed slower: module docstring, "M tiles")."""
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
    them in 168 without spills. Not where an operand takes the scalar copy (its loads hold
    registers: :data:`MAX_SCALAR_COPIES`; AlexNet's NCHW conv1 spilled 4-476 bytes at 168
    registers, none at 216-230). Nor where A is copied in chunks under 16 bytes (twice the
    cp.asyncs, each with its address) into tiles with edges (guarded rows or columns): ZFNet's
    stem (M = 11881, N = 96 in 128 x 64 tiles, 8-byte copies) spilled 28 bytes at 168
    registers and none in 196 without the hint; ResNet-50's stem, the same copies in whole
    tiles, fits. Not the 64 x 64 warp tiles: at 168 registers they spilled
    (and 3 for every kernel, map-to-gpu's ``mma-min-blocks=3``, slowed the 128x128x128
    ones: bench/history/2026-12-03.md). An eight-warp CTA of such warp tiles
    (:func:`eight_warps`) takes 2: ptxas fits it in 128 registers."""
    acc = cfg.wm * cfg.wn // 32
    edges = c.M % cfg.bm or c.N % cfg.bn
    if (acc <= THREE_BLOCKS_MAX_ACC and not scalar_operands(c)
            and not (edges and layout(c, c.a).chunk < 16)):
        blocks = 3 if cfg.threads <= 128 else 2   # eight warps (eight_warps): 128 registers
        if (blocks * (shared_bytes(c, cfg, target) + BLOCK_RESERVED_SHARED)
                <= target.shared_per_sm and blocks * cfg.threads <= target.max_threads_per_sm):
            return blocks
    return 1
