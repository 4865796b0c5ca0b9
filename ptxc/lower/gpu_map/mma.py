"""The ``mma`` schedule of map-to-gpu: reduced-precision contractions (fp16, tf32 and int8
MatMul, Gemm, batched MatMul, convolution as an implicit GEMM) on tensor cores.

It takes what :func:`contraction.analyze` recognizes (a nest whose reduction multiplies f16 or
tf32 operands accumulating in f32, or int8 operands accumulating in i32) and writes one
``gpu.launch`` per nest in the shape of a CUTLASS-style GEMM. Three modules make it:

* :mod:`.mma_config`: the tile configuration and its choice (tiles, stages, split-K, M tiles,
  blocks per SM), a static heuristic that a tuner can replace;
* :mod:`.mma_kernel`: the kernel builder (the main loop's pseudo-code, int8, M tiles, flat
  rows), with mma_epilogue.py's epilogues and mma_prefetch.py's epilogue tiles;
* this module: the schedule's entry, :func:`schedule`, which reads map-to-gpu's options,
  picks wgmma or mma.sync, chooses the config and builds the launch.

**The target** (map-to-gpu's ``target``, common.target_of): its SM count sizes the grids, its
shared memory the tiles and blocks per SM (:mod:`.mma_config`); the schedule takes a
contraction only where the target has its mma.sync kind (:data:`~.mma_config.FEATURE`: sm_80
and later), else the tiled and pointwise schedules take it.

Numerics: the tensor core multiplies f16 (or tf32) operands exactly and accumulates in f32, in
another order than the nest; the start value is added after the sum (reassociated, as the tiled
schedule does). The interpreter runs the launch in lockstep and checks it against the nest.
int8's i32 sums are exact, so its kernel is bit-exact with the nest.

**Epilogue** (``Config.epilogue``, mma_epilogue.py): ``fragment`` (the point program straight
from the fragment layout, one warp store touching 8 rows) or ``staged`` (map-to-gpu's default;
per 8-row slab the warp's accumulators go through a warp-private shared region and come back
row-major, 16 lanes across a row: a warp instruction touches 2 output rows, not 8, loads of a
fused residual included). Chosen for every mma kernel by map-to-gpu's option ``mma-epilogue``
(pipeline text ``map-to-gpu{mma-epilogue=staged}``; a compile takes it from the cuda loop
pipeline, ``ptxc.compiler.TARGET_STAGE_PIPELINES``, as ``bench/resnet50_int8.py --epilogues``
does). Staged is the default because it timed faster on ResNet-50 b32 fp16
(bench/history/2026-12-02.md); ``fragment`` stays where the staged region does not fit the
shared memory. The tile string (``ptxc inspect``; the bench's profile rows) ends in ``epilogue
staged`` when staged.

**Epilogue tiles** (mma_prefetch.py): where the point program reads a tile of another tensor
(a fused residual) and the main loop is short against many waves of CTAs, that tile is copied
into shared memory by cp.async before the main loop, and the point program reads it there.

**wgmma** (wgmma.py): on sm_90, a large fp16 or int8 GEMM whose operands are both K-major
takes Hopper's warpgroup instruction instead (``schedule`` dispatches to it first; map-to-gpu's
``wgmma`` option: auto, on, off; wgmma.py's AUTO_KINDS).

Not yet: vectorized epilogue stores, a stream-K or atomic split-K without the second kernel,
wgmma for M/N-major operands and tf32.
"""

from __future__ import annotations

import attrs

from ...ir.core import Operation
from . import mma_epilogue, wgmma
from .common import pdl_enabled, target_of
from .contraction import analyze, rows_in_memory_order
from .mma_config import (DEEP_K, FEATURE, choose, default_stages, m_tiles, min_blocks,
                         parse_tiles, valid, with_m_tiles)
from .mma_kernel import _Builder



@attrs.frozen
class Plan:
    """What :func:`schedule` decided for one contraction under map-to-gpu's options, before
    anything is built: the wgmma tile (``wgmma``; else the mma.sync ``cfg``), ``flat_m``
    (mma-flat-m), ``early`` (pdl-early-weights under PDL), ``index32`` and the mma.sync
    kernel's ``min_blocks``. Equal plans build equal launches (:func:`build` reads nothing
    else), so a tuner compares options by their plans without building kernels
    (gpu_map/tactics.py)."""
    wgmma: object = None          # wgmma.Config | None
    cfg: object = None            # mma_config.Config | None (when wgmma is None)
    flat_m: bool = False
    early: bool = False
    index32: bool = False
    min_blocks: int = 1


def plan(c, options=None) -> Plan | None:
    """The :class:`Plan` for contraction ``c`` (:func:`contraction.analyze`'s) under map-to-gpu's
    ``options``, or None where the mma schedule declines it (:func:`schedule`)."""
    target = target_of(options)
    if not target.has(FEATURE[c.kind]):
        return None
    wcfg = wgmma.choose(c, options)
    early = getattr(options, "pdl_early_weights", True) and pdl_enabled(options)
    index32 = getattr(options, "index32", INDEX32)
    if wcfg is not None:
        return Plan(wgmma=wcfg, early=early, index32=index32)
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
    blocks = getattr(options, "mma_min_blocks", 0) or min_blocks(
        rows_in_memory_order(c) if flat_m else c, cfg, target)
    return Plan(cfg=cfg, flat_m=flat_m, early=early, index32=index32, min_blocks=blocks)


def build(c, p: Plan, target) -> Operation:
    """The launch of contraction ``c`` under plan ``p`` for ``target``, inserted before its nest
    (which the caller erases)."""
    if p.wgmma is not None:
        launch = wgmma.build(c, p.wgmma, target, p.early)
        if p.index32:
            launch.attributes["index_bits"] = 32
        return launch
    if p.flat_m:
        c = rows_in_memory_order(c)
    builder = _Builder(c, p.cfg, target, p.flat_m, p.early)
    launch = builder.build()
    if p.index32 and not builder.flat_access:   # (index32's docstring: why not flat rows)
        launch.attributes["index_bits"] = 32
    if p.min_blocks > 1:
        launch.attributes["min_blocks"] = p.min_blocks
    return launch


def schedule(op: Operation, options=None) -> Operation | None:
    """Insert the mma launch for ``op`` and return it, or None when ``op`` is not a
    reduced-precision contraction (fp32 nests go to the tiled schedule: fp32 stays fp32, and
    so do the i32-shift form's integer nests of int8 layers that have no int8 form).
    ``options.mma_epilogue`` (map-to-gpu's ``mma-epilogue``) picks :attr:`Config.epilogue`
    (kept ``fragment`` where the staged region would not fit the shared memory).
    A large fp16 GEMM on sm_90 takes the wgmma form instead (wgmma.py; options ``wgmma``,
    ``arch``). None too where the target (common.target_of) has no mma.sync of the kind
    (below sm_80): the tiled and pointwise schedules take the nest. The decision is
    :func:`plan`'s, the launch :func:`build`'s."""
    c = analyze(op)
    if c is None:
        return None
    p = plan(c, options)
    if p is None:
        return None
    return build(c, p, target_of(options))


#: map-to-gpu's ``index32`` default: mma and wgmma launches ask for 32-bit index arithmetic
#: (gpu.launch ``index_bits``; loop_to_llvm grants it where every buffer is small enough).
#: Not an mma launch with flat-row accesses (``mma-flat-m``): its flat row offsets, one
#: 64-bit base per row shared by its stores, took more SASS in 32 bits and spilled in
#: ResNet-50 b32 int8 (ptxas). With it ResNet-50 b32's static SASS shrinks (int8 by 7%, fp16
#: by 12%) and its int8 / fp16 throughput ratio rose (bench/history/2026-12-04.md).
INDEX32 = True
