"""The ``wgmma`` form of the mma schedule: fp16 GEMMs on Hopper's warpgroup tensor-core
instruction (``wgmma.mma_async``, sm_90a), for the large ones where mma.sync stops at about
half of cuBLAS (the hand-written bench/wgmma_gemm.py came much closer with the same
instruction route, and this schedule writes that kernel from the IR; bench/RESULTS.md).

**int8**: the same kernel with ``wgmma .m64nNk32.s32.s8.s8``: a K tile is one
128-byte row of 128 int8 (the same swizzle and descriptors, 16 elements per chunk), four k32
wgmmas per tile as f16's four k16, i32 accumulators in the same D layout, bit-exact with the
nest in the lockstep interpreter. ``auto`` takes it under the same rule as f16
(:data:`AUTO_KINDS`; bench/history/2026-12-03.md).

It takes what the mma schedule takes (:func:`contraction.analyze`: a MatMul, Gemm or batched
MatMul nest of f16 operands accumulating in f32, or s8 in i32) when both operands are
**K-major** with 16-byte runs (:func:`mma_config.layout` ``Layout(kmajor=True, vector=True)``: A [M, K]
and a weight stored [N, K], as ptxc stores a Gemm's or a transposed MatMul's), and writes::

    grid = (N / BN, M / BM, batches)    block = BM / 64 warpgroups (BM = 128: 256 threads)
    sA = gpu.shared [S][BM][64] f16 {align = 1024}      both in the 128-byte swizzle: row r's
    sB = gpu.shared [S][BN][64] f16 {align = 1024}      16-byte chunk c at chunk c ^ (r % 8)
    copy K-tiles 0 .. S-2 into stages 0 .. S-2 (gpu.cp_async of 16 bytes to the swizzled
        chunk, zero-filled past M, N and K); commit each
    acc[BN / 2] = 0                                     (f32, per thread; carried)
    for kt in 0 .. K / 64:
        gpu.cp_async_wait(S - 2); gpu.barrier           tile kt has landed, stage kt-1 is free
        gpu.wgmma_fence
        for kk in 0 .. 3:                               k 16 kk .. 16 kk + 15 of the tile
            acc = gpu.wgmma(sA[kt % S][64 wg][16 kk], sB[kt % S][0][16 kk], acc)  m64nBNk16
        gpu.wgmma_commit; acc = gpu.wgmma_wait(acc) {pending = 0}
        copy K-tile kt + S - 1 into stage (kt + S - 1) % S; commit
    for each accumulator i of the thread (warp w of its warpgroup wg, lane l):
        m = BM by + 64 wg + 16 w + l / 4 + 8 ((i / 2) % 2),  n = BN bx + 8 (i / 4) + 2 (l % 4) + i % 2
        where m < M and n < N: the nest's point program (start + acc, bias, activation, cast,
        store), as the mma schedule's fragment epilogue (:meth:`mma_kernel._Builder._guarded_point`)

**Epilogue** (:attr:`Config.epilogue`, map-to-gpu's ``wgmma-epilogue``): ``fragment`` runs
the point program per accumulator where the D layout puts it (above): a warp's store
instruction touches 8 rows x 4 lanes' element pairs, 8 sectors for 32 useful bytes in int8.
``staged`` hands each warp's accumulators to the mma schedule's staged epilogue
(mma_epilogue.py): in the D layout warp ``w`` of warpgroup ``wg`` holds rows ``64 wg + 16 w``
.. ``+ 15`` and all BN columns exactly as an mma.sync warp tile of 16 x BN holds its
fragments, so the same code writes them to a warp-private region row by row and reads them
back row-major, 16 lanes across a row (int8 at BN = 64: 4 consecutive bytes a lane, two rows
of 64 bytes per store instruction)::

    sE = gpu.shared [BM / 16][8][BN + 8]      (f32 / i32: 18 KiB at 128 x 64)
    after the K loop: wm0 = 16 warp, wn0 = 0; mma_epilogue.staged(acc, warp_rows = 16)

Its region must not cost a CTA per SM: :func:`with_epilogue` gives up a stage (not under 3)
where the region would (128 x 64 at 4 stages: 96 + 18 KiB, two CTAs need 230 of an sm_90
SM's 228 KiB; at 3 stages 90 KiB), and keeps ``fragment`` where nothing fits. A tile alone on its
SM keeps its stages, so 128 x 256 (192 KiB at 4 stages, 66 more staged) stays ``fragment``:
losing a stage to the staged region made the large int8 GEMM slower than the fragment form
at 4 stages (bench/history/2026-12-04.md).

Staged is the default because coalesced stores made ResNet-50's wgmma kernels (128 x 64,
128 x 128, 64 x 64) and the whole CUDA graph faster in int8 and fp16
(bench/history/2026-12-04.md).

This is bench/wgmma_gemm.py's kernel (its descriptors, swizzle, fence/commit/wait and
accumulator layout, checked exact on a Hopper GPU) with the compiler's edges: guards and zero-fill
for any M, N and K % 8 == 0, batches, and the fused epilogue. The ops are the gpu dialect's
(ptxc/dialects/gpu_wgmma.py: the interpreter reads the shared tiles through the swizzle the
descriptors name and hands each thread its accumulators in wgmma's layout, so the mapped kernel
is checked against the nest on the CPU); their PTX is ptxc/lower/llvm_wgmma.py's.

**When** (:func:`choose`): map-to-gpu's option ``wgmma`` (``auto``, the default; ``on``;
``off``) and the target (common.target_of: map-to-gpu's ``target``, else its ``arch``). Never
on a target without the ``wgmma`` feature, i.e. other than sm_90 / sm_90a (wgmma is Hopper's;
the PTX is then built for sm_90a, which runs on sm_90 devices only:
:func:`ptxc.codegen.lower_to_ptx`). ``auto``, over the tiles of
:data:`TILES` (or map-to-gpu's ``wgmma-tiles``) in order, leaving out those whose BN is at
least twice N (half their columns would be padding) and those K is too shallow for
(:data:`MIN_K_TILES`, per kind: f16 BN 64 and 128 from 8 K tiles, s8 from 2; BN 256 from 32;
in f16 a 64-wide tile spanning N from 1): the first whose grid gives :data:`WAVES` CTAs per SM
(the target's SM count), else the one with the most CTAs if that covers the SMs, else none.
128 x 256 first (the faster of the two on a large GEMM at 4 stages, bench/wgmma_gemm.py),
then 128 x 128, 128 x 64, 64 x 128, 64 x 64. Shallower or smaller GEMMs keep mma.sync, whose
split-K fills the GPU and which wins on f16's short-K 1x1 convs. ``on``: every contraction it
can take, whatever its size (tests; the first tile whose grid covers the SMs, else the last of
``wgmma-tiles`` when given, else BM 128 and the smallest BN of 64, 128, 256 that covers N). A
64-row tile is one warpgroup of 128 threads.

The rule comes from a sweep of ResNet-50 with every K-major GEMM forced onto each tile in
turn, int8 and fp16, per kernel (bench/history/2026-12-03.md). Two waves, not one: a GEMM of
196 CTAs (layer 2's 3x3 convs at 128 x 128) was slower than at 128 x 64 (392 CTAs), and the
64-row tiles sped up layer 3's 3x3 convs, since more CTAs hide each one's latency. The width
rule: a tile twice as wide as N (fp16's layer-1 3x3 conv, N = 64, at 128 x 128) wastes half
its columns and was slower than 128 x 64. The depths were re-timed with the staged epilogue
(:data:`MIN_K_TILES`, bench/history/2026-12-04.md).
The tile string (``ptxc inspect``, the kernel table) reads ``f16 wgmma 128x256x64 stages 4``.

Decisions:

* 4 stages: 192 KiB of dynamic shared memory at BN = 256 (one CTA per SM); a little faster
  than 3 (bench/wgmma_gemm.py, bench/history/2026-12-02.md).
* the copies of tile kt + S - 1 go between the commit and the wait (overlapping the
  multiply; ``wgmma-copies=overlap``, the default): they fill stage (kt - 1) % S, whose wgmmas
  both warpgroups waited for before this iteration's barrier, not stage kt % S, which the
  wgmmas in flight read (the interpreter refuses a copy into a tile an unwaited wgmma reads).
  Slightly faster on ResNet-50 in int8 and fp16 than ``after-wait``, the prototype's order
  (bench/history/2026-12-03.md).
* the staged epilogue by default ("Epilogue" above); ``fragment`` where its
  region does not fit, and by map-to-gpu's ``wgmma-epilogue=fragment``.

Open question for the GPU: the copies are ``cp.async`` (generic proxy) and wgmma reads shared
memory through the async proxy; the PTX ISA asks for a ``fence.proxy.async`` between such
writes and the reads. The prototype (no proxy fence: cp.async wait, barrier, wgmma.fence) was
exact on a Hopper GPU, and so is this kernel with the same sequence: tests/gpu/test_cuda_wgmma.py
(512^3, 4096^3, edges) and the 4096^3 bench row passed (bench/history/2026-12-02.md).
compute-sanitizer's racecheck has not run on it yet.

Not yet: an M/N-major operand (wgmma's transposed-B descriptors; such GEMMs stay on mma.sync,
e.g. a MatMul of two activations b [K, N]), TMA and a producer warpgroup with mbarriers
(what reaches 74-92% of cuBLAS in published Hopper GEMMs), split-K, tf32,
and convolutions whose rows are not 16-byte K-major runs (NCHW; an NHWC conv over a padded
input is an affine K-major contraction and takes it: ResNet-50's layer-1/2 3x3 convs in fp16).
"""

from __future__ import annotations

import attrs

from ...dialects.gpu import MAX_GRID_YZ, barrier, block_id, shared, thread_id
from ...dialects.gpu_wgmma import ROW_BYTES, SWIZZLE_PERIOD, WARPGROUP
from ...dialects.loop import for_loop, if_op
from ...ir.builder import Builder
from ...errors import CompileError
from ...ir.core import Operation, Value
from ...target import Target
from . import mma_config, mma_epilogue, mma_kernel
from .common import add, cmp, const, div, launch_before, mul, sub, target_of
from .contraction import Contraction, ctas

SCHEDULE = "wgmma"
BM, BK = 128, 64              # two warpgroups of 64 rows; one 128-byte swizzled row of K (f16)
#: contraction kind -> (k per wgmma, K-tile depth in elements: one 128-byte row)
KINDS = {"f16": (16, 64), "s8": (32, 128)}
STAGES = 4
#: (BM, BN) tiles, largest first, as ``auto`` tries them (module docstring, "When");
#: map-to-gpu's ``wgmma-tiles`` replaces it (:func:`parse_tiles`)
TILES = ((128, 256), (128, 128), (128, 64), (64, 128), (64, 64))
#: ``auto`` takes the first tile whose grid gives this many CTAs per SM (module docstring)
WAVES = 2
#: the row counts a tile can have: whole warpgroups of 64 rows, at most two
BMS = (64, 128)
#: the column counts a tile can have
BNS = (64, 128, 256)
#: map-to-gpu's ``wgmma`` option
MODES = ("auto", "on", "off")
DEFAULT_MODE = "auto"
#: map-to-gpu's ``wgmma-copies``: where the K loop issues the next tile's copies, ``overlap``
#: (the default: between the commit and the wait, so the copies' address arithmetic runs while
#: the tensor core multiplies) or ``after-wait`` (the hand-written prototype's order)
COPIES = ("overlap", "after-wait")
#: map-to-gpu's ``wgmma-epilogue`` (module docstring, "Epilogue")
EPILOGUES = ("fragment", "staged")
DEFAULT_EPILOGUE = "staged"
#: ``auto`` takes a BN only for K at least this deep: a short K leaves the pipeline (one wait
#: per 64-deep K tile) no time to fill. In ResNet-50 fp16 the 1x1 convs with K <= 512 were
#: slower in 128 x 256 wgmma tiles than in the staged mma.sync kernel, 128 x 128 tiles were
#: faster from K = 512, and BN = 256 paid only on the deepest GEMMs
#: (bench/history/2026-12-02.md)
MIN_K = {256: 2048, 128: 512, 64: 512}
#: per kind, per BN: the K tiles (128 bytes of k each, rounded up) ``auto`` asks for
#: (:func:`_deep_enough`). f16 is MIN_K in tiles (BN = 64 as BN = 128). s8 takes BN 64 and
#: 128 from two tiles (K > 128) since its wgmma kernels have the staged epilogue: there the
#: int8 1x1 convs of K = 256 .. 512 and the space-to-depth stem (K = 256) ran faster than on
#: mma.sync, where f16's 128 x 128 tiles at K = 256 ran slower. K of one tile stays on
#: mma.sync (slower in wgmma); BN = 256 keeps f16's depth in both kinds (s8 at a short K was
#: much slower). Timed per kernel in ResNet-50 with ``wgmma-min-k-tiles``
#: (bench/history/2026-12-04.md).
MIN_K_TILES = {"f16": {bn: k // BK for bn, k in MIN_K.items()},
               "s8": {256: MIN_K[256] // BK, 128: 2, 64: 2}}
#: BN = 64 where the tile spans N (N <= 64: each row of A read by one CTA) from K of this many
#: tiles instead, per kind (s8: its MIN_K_TILES). With the fragment epilogue f16's 1x1 convs
#: of K = 256 were faster on mma.sync (bench/history/2026-12-03.md); with the staged epilogue
#: wgmma 128 x 64 was faster for f16's layer-1 1x1 convs from K = 64, int8's of K = 64 not
#: (bench/history/2026-12-04.md)
NARROW_MIN_K_TILES = {"f16": 1, "s8": MIN_K_TILES["s8"][64]}
#: the kinds ``auto`` gives the wgmma form (map-to-gpu's ``wgmma-kinds`` replaces it). s8:
#: ResNet-50's int8 3x3 convs of layers 2-4 and its layer-3/4 1x1 convs of K >= 1024 ran
#: faster than on int8 mma.sync (bench/history/2026-12-03.md)
AUTO_KINDS = ("f16", "s8")


@attrs.frozen
class Config:
    """A wgmma tile: ``bm`` x ``bn`` x ``bk``, one consumer warpgroup per 64 rows (two at the
    default BM = 128, one at 64), ``stages`` cp.async stages. The attributes the mma builder
    reads (warps, splits, epilogue) follow."""
    bn: int
    stages: int = STAGES
    bk: int = BK              # elements: 64 f16 or 128 s8 (one 128-byte row)
    bm: int = BM              # 128 or 64
    #: issue the next tile's copies between the commit and the wait (overlapping this tile's
    #: multiplies), not after the wait: map-to-gpu's ``wgmma-copies`` (:data:`COPIES`)
    overlap: bool = True
    #: ``fragment`` (the point program straight from wgmma's D layout) or ``staged`` (each
    #: warp's 16 x BN accumulators through shared memory, mma_epilogue.py): map-to-gpu's
    #: ``wgmma-epilogue`` (:data:`EPILOGUES`; module docstring, "Epilogue")
    epilogue: str = "fragment"

    warps_n = 1
    wm = 64                   # rows per warpgroup (the builder's "warp tile")
    splits = 1
    #: rows of one warp's accumulators (wgmma's D layout: warp w of a warpgroup holds rows
    #: 16 w .. 16 w + 15 of its 64, all BN columns, as an mma.sync warp tile of 16 x BN)
    epilogue_wm = 16

    @property
    def warps_m(self) -> int:
        return self.bm // 16

    @property
    def wn(self) -> int:
        return self.bn

    @property
    def threads(self) -> int:
        return self.bm // 64 * WARPGROUP

    def describe(self, kind: str) -> str:
        return (f"{kind} wgmma {self.bm}x{self.bn}x{self.bk} stages {self.stages}"
                + ("" if self.overlap else " after-wait")
                + (f" epilogue {self.epilogue}" if self.epilogue != "fragment" else ""))


def parse_tiles(items) -> tuple:
    """map-to-gpu's ``wgmma-tiles``: ``("128x256", "64x128")`` -> ((128, 256), (64, 128)), tried
    in order by ``auto`` (empty: :data:`TILES`). BM is 64 or 128 (:data:`BMS`), BN 64, 128 or
    256 (:data:`BNS`: what ``on`` builds too). Raises ValueError on anything else."""
    if not items:
        return TILES
    tiles = []
    for item in items:
        parts = item.strip().split("x")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise ValueError(f"wgmma-tiles: {item!r} is not BMxBN (e.g. 64x128)")
        bm, bn = (int(p) for p in parts)
        if bm not in BMS or bn not in BNS:
            raise ValueError(f"wgmma-tiles: {item!r}: BM must be one of {BMS}, BN one of {BNS}")
        tiles.append((bm, bn))
    return tuple(tiles)


def shared_bytes(cfg: Config) -> int:
    return cfg.stages * (cfg.bm + cfg.bn) * ROW_BYTES + mma_epilogue.staging_bytes(cfg)


def blocks_per_sm(cfg: Config, target: Target) -> int:
    """CTAs of ``cfg`` the shared memory of one SM of ``target`` holds (each also takes the
    :data:`mma_config.BLOCK_RESERVED_SHARED` the driver reserves)."""
    return target.shared_per_sm // (shared_bytes(cfg) + mma_config.BLOCK_RESERVED_SHARED)


def with_epilogue(cfg: Config, epilogue: str, target: Target) -> Config:
    """``cfg`` with ``epilogue`` (module docstring, "Epilogue"): the staged region must not cost
    a CTA per SM, so a staged tile that would hold fewer than the fragment one gives up one
    stage (not under 3) where that restores them; a tile alone on its SM gives up none (no
    other CTA hides its pipeline); ``cfg`` itself (fragment) where nothing fits."""
    if epilogue == cfg.epilogue:
        return cfg
    want = blocks_per_sm(cfg, target)
    lowest = cfg.stages if want < 2 else min(cfg.stages, 3)
    for stages in range(cfg.stages, lowest - 1, -1):
        out = attrs.evolve(cfg, epilogue=epilogue, stages=stages)
        if shared_bytes(out) <= target.shared_per_block and blocks_per_sm(out, target) >= want:
            return out
    return cfg


def takes(c: Contraction) -> bool:
    """Whether the wgmma form can compute ``c`` at all: f16 or s8, both operands K-major with
    16-byte runs (the swizzled K-major tiles; module docstring), a grid that fits."""
    kmajor = mma_config.Layout(kmajor=True, vector=True)
    return (c.kind in KINDS and c.batches <= MAX_GRID_YZ
            and all(mma_config.layout(c, x) == kmajor for x in (c.a, c.b)))


def choose(c: Contraction, options=None) -> Config | None:
    """The wgmma tile for ``c`` under map-to-gpu's ``options`` (``wgmma``, the target:
    common.target_of), or None when the mma.sync form should take it (module docstring,
    "When")."""
    mode = getattr(options, "wgmma", DEFAULT_MODE)
    kinds = getattr(options, "wgmma_kinds", ()) or AUTO_KINDS
    if mode == "off" or not takes(c) or (mode == "auto" and c.kind not in kinds):
        return None
    target = target_of(options)
    if not target.has("wgmma"):
        return None
    bk = KINDS[c.kind][1]
    overlap = getattr(options, "wgmma_copies", COPIES[0]) == "overlap"
    given = getattr(options, "wgmma_tiles", ())
    tiles = parse_tiles(given)
    min_k = getattr(options, "wgmma_min_k_tiles", 0)
    cfg = (_auto_tile(c, tiles, bk, target, min_k) if mode != "on"
           else _on_tile(c, tiles, bk, target))
    if cfg is None:
        if mode != "on":
            return None
        if given:   # the smallest tile given
            cfg = Config(tiles[-1][1], bk=bk, bm=tiles[-1][0])
        else:
            cfg = Config(next(bn for bn in BNS if bn >= c.N or bn == 256), bk=bk)
    cfg = attrs.evolve(cfg, overlap=overlap)
    if shared_bytes(cfg) > target.shared_per_block:
        return None
    return with_epilogue(cfg, getattr(options, "wgmma_epilogue", DEFAULT_EPILOGUE), target)


def _auto_tile(c: Contraction, tiles: tuple, bk: int, target: Target,
               min_k: int = 0) -> Config | None:
    """``auto``'s tile (module docstring, "When"): of the tiles K is deep enough for and that
    are less than twice as wide as N, the first with WAVES CTAs per SM, else the one with the
    most CTAs where they cover the SMs, else None. ``min_k`` (map-to-gpu's
    ``wgmma-min-k-tiles``; 0: :func:`_deep_enough`): K tiles every tile needs instead."""
    fits = [(bm, bn) for bm, bn in tiles
            if (c.K > (min_k - 1) * bk if min_k else _deep_enough(c, bn, bk))
            and (bn <= 64 or bn < 2 * c.N)]
    full = [t for t in fits if ctas(c, *t) >= WAVES * target.sms]
    if full:
        bm, bn = full[0]
    else:
        most = max(fits, key=lambda t: ctas(c, *t), default=None)
        if most is None or ctas(c, *most) < target.sms:
            return None
        bm, bn = most
    return Config(bn, bk=bk, bm=bm)


def _deep_enough(c: Contraction, bn: int, bk: int) -> bool:
    """Whether K fills the pipeline of BN-wide tiles (:data:`MIN_K_TILES` of the kind, or
    :data:`NARROW_MIN_K_TILES` for a 64-wide tile that spans N). ``bk`` elements are 128
    bytes."""
    tiles = -(-c.K // bk)
    if bn == 64 and c.N <= 64 and tiles >= NARROW_MIN_K_TILES[c.kind]:
        return True
    return tiles >= MIN_K_TILES[c.kind][bn]


def _on_tile(c: Contraction, tiles: tuple, bk: int, target: Target) -> Config | None:
    """``on``'s tile: the first whose grid covers the target's SMs, whatever K, else None."""
    return next((Config(bn, bk=bk, bm=bm) for bm, bn in tiles
                 if ctas(c, bm, bn) >= target.sms), None)


class _Builder(mma_kernel._Builder):
    """Writes the launch of one contraction in the wgmma form (module docstring). Reuses the
    mma builder's copies (with the xor swizzle of :meth:`_swizzle`) and its point program."""

    def _swizzle(self, b: Builder, x, row: Value, col: Value) -> Value:
        """The stored column of element ``col`` of tile row ``row``: the 128-byte swizzle the
        descriptors name (gpu_wgmma.swizzled_column). A stage is a multiple of 8 rows of 128
        bytes, so the tile row and the buffer row agree mod 8."""
        v = self.vec                       # elements per 16-byte chunk: 8 f16, 16 s8
        chunk = div(b, col, v)
        low = b.create("arith.bit_and", [row, const(b, 7)]).result
        sw = b.create("arith.bit_xor", [chunk, low]).result
        return add(b, mul(b, sw, v), sub(b, col, mul(b, chunk, v)))

    def build(self) -> Operation:
        c, cfg = self.c, self.cfg
        grid = (-(-c.N // cfg.bn), -(-c.M // cfg.bm), c.batches)
        top = Builder.before_op(c.nest.op)
        self.ws = None
        self.flat = {}
        for x in (c.a, c.b):   # cp.async addresses: element offsets into a flat view
            self.flat[id(x)] = mma_kernel.flat_view(top, x.buffer)
        launch, b = launch_before(c.nest.op, grid, (cfg.threads, 1, 1), SCHEDULE)
        launch.attributes["tile"] = cfg.describe(c.kind)
        self.s = {id(x): shared(b, self._tile_shape(x), self.el, align=SWIZZLE_PERIOD)
                  for x in (c.a, c.b)}
        if cfg.epilogue in mma_epilogue.STAGED:
            mma_epilogue.allocate(self, b)
        self.tid = tid = thread_id(b, 0)
        self.warp = div(b, tid, 32)
        self.lane = sub(b, tid, mul(b, self.warp, 32))
        wg = div(b, tid, WARPGROUP)
        self.wm0 = mul(b, wg, 64)
        self.base = {id(c.a): mul(b, block_id(b, 1), cfg.bm),
                     id(c.b): mul(b, block_id(b, 0), cfg.bn)}
        self.batch_lin = block_id(b, 2)
        self.split = None
        self.batch = mma_kernel._index_values(b, c, c.batch, self.batch_lin) if c.batch else {}
        self._prologue(b, self.kts, lambda cb, s, operands, tiles=True:
                       self._copy(cb, s, s, None, operands))
        zero = b.create("arith.constant", [], {"value": mma_kernel._zero(self.acc_t),
                                               "type": self.acc_t}).result
        loop, fb, kt, carried = for_loop(b, 0, self.kts, 1, inits=[zero] * (cfg.bn // 2))
        fb.create("gpu.cp_async_wait", [], {"pending": cfg.stages - 2})
        barrier(fb)
        stage = mma_kernel._rem(fb, kt, cfg.stages)
        zero_i = const(fb, 0)
        fb.create("gpu.wgmma_fence", [])
        acc = list(carried)
        kinst = KINDS[c.kind][0]
        for kk in range(cfg.bk // kinst):
            k0 = const(fb, kinst * kk)
            acc = list(fb.create("gpu.wgmma", [
                self.s[id(c.a)], [stage, self.wm0, k0], self.s[id(c.b)], [stage, zero_i, k0],
                acc], {"shape": f"m64n{cfg.bn}k{kinst}"}).results)
        fb.create("gpu.wgmma_commit", [])
        wait = {"pending": 0}
        if self.acc_bound is not None:
            wait["bound"] = self.acc_bound
        if not cfg.overlap:
            acc = list(fb.create("gpu.wgmma_wait", [acc], wait).results)
        # tile kt + S - 1 goes to stage (kt - 1) % S: tile kt - 1's wgmmas, its last readers,
        # were waited for in iteration kt - 1 by both warpgroups before this one's barrier
        nxt = add(fb, kt, cfg.stages - 1)
        _, ib = if_op(fb, cmp(fb, "lt", nxt, self.kts))
        self._copy(ib, mma_kernel._rem(ib, nxt, cfg.stages), nxt)
        fb.create("gpu.cp_async_commit", [])
        if cfg.overlap:
            acc = list(fb.create("gpu.wgmma_wait", [acc], wait).results)
        fb.create("loop.yield", acc)
        if cfg.epilogue in mma_epilogue.STAGED:
            # each warp's 16 x BN accumulators are an mma.sync warp tile's fragments
            self.wm0, self.wn0 = mul(b, self.warp, cfg.epilogue_wm), const(b, 0)
            mma_epilogue.staged(self, b, list(loop.results), warp_rows=cfg.epilogue_wm)
        else:
            self._wgmma_epilogue(b, wg, list(loop.results))
        return launch

    def _wgmma_epilogue(self, b: Builder, wg: Value, acc: list) -> None:
        """The point program per accumulator, at the element wgmma's D layout gives it
        (gpu_wgmma.accumulator_layout)."""
        c = self.c
        w = sub(b, self.warp, mul(b, wg, 4))            # the warp within its warpgroup
        g = div(b, self.lane, 4)
        t2 = mul(b, sub(b, self.lane, mul(b, g, 4)), 2)
        m_base = add(b, add(b, add(b, self.base[id(c.a)], self.wm0), mul(b, w, 16)), g)
        n_base = add(b, self.base[id(c.b)], t2)
        for i, v in enumerate(acc):
            m = add(b, m_base, 8 * ((i // 2) % 2))
            n = add(b, n_base, 8 * (i // 4) + i % 2)
            self._guarded_point(b, m, n, lambda eb, v=v: v)


def build(c: Contraction, cfg: Config, target: Target,
          early_weights: bool = False) -> Operation:
    """The wgmma launch of ``c`` with tile ``cfg`` for ``target`` (inserted before its nest,
    which the caller erases); ``early_weights``: mma_kernel._Builder's."""
    if not target.has("wgmma"):
        raise CompileError(f"{c.nest.op.where}: a wgmma kernel needs an sm_90 target, the "
                           f"target is {target.arch}")
    return _Builder(c, cfg, target, early_weights=early_weights).build()
