"""The mma schedule's epilogues: how the accumulators reach the nest's point program.

The tensor core leaves a warp's ``WM x WN`` results in the mma fragment layout: lane ``l`` holds
rows ``l/4`` and ``l/4 + 8`` and columns ``2 (l%4)``, ``2 (l%4) + 1`` of each 16x8 tile. Two
ways to run the point program (start value + sum, bias, residual, activation, cast, store) on
them, chosen by :attr:`mma.Config.epilogue`:

``fragment`` (the default; mma.py ``_Builder._epilogue``): straight from the registers, one
point per accumulator element. A warp's store instruction then touches 8 rows x 4 two-element
runs: 8 sectors for 64 (f16) or 32 (int8) useful bytes, and a fused residual load the same.

``staged`` (this module): per 8-row slab of the warp tile (one half of a 16-row mma tile), the
warp writes the slab's accumulators into a warp-private region of shared memory and reads them
back **row-major**: 16 consecutive lanes (:data:`ROW_LANES`) span one row of the warp tile,
lane ``l`` taking its ``v = WN / 16`` consecutive columns ``v (l % 16) ..`` of rows
``l / 16 + 2k``. A store instruction of the point program then touches two output rows of
``WN`` consecutive columns each (2 x 128 B lines for f16 at WN = 64) where the fragment layout
touches 8 rows (8 lines), the same for a fused residual's loads; and each lane's ``v``
consecutive elements are what one vector store would take (not yet, see below)::

    before (fragment)                          after (staged), v = WN / 16
    for mi, ni, i:                             sE = gpu.shared [warps][8][WN + 8]  (f32 / i32)
      m = m0 + mi*16 + l/4 + 8*(i/2)           for slab in 0 .. WM/8 (mi = slab/2, h = slab%2):
      n = n0 + ni*8 + 2*(l%4) + i%2              for ni, i in (2h, 2h+1):
      if m < M and n < N:                          sE[w][l/4][ni*8 + 2*(l%4) + i%2] = acc[mi][ni][i]
        point(m, n, acc[mi][ni][i])              gpu.warp_barrier
                                                 for r in l/16, l/16 + 2, l/16 + 4, l/16 + 6:
                                                   for col in v (l % 16) + (0 .. v-1):
                                                     m, n = m0 + 8*slab + r, n0 + col
                                                     if m < M and n < N:
                                                       point(m, n, sE[w][r][col])
                                                 gpu.warp_barrier (before the next slab's writes)

Decisions:

* 16 lanes per row, not 32 (nor one column per lane): each lane then has 4 rows per slab, 32
  over a 64-row warp tile (the fragment layout: 8), each with the point program's row index
  arithmetic (an NHWC conv's ``m -> (n, p, q)`` and output address), which ptxas hoists and
  keeps live. 64 rows per lane (one or two columns per lane at WN = 64 or 32) ran out of
  registers: 144 bytes of spills in each 128x64 ResNet-50 layer-3 3x3 conv at batch 32 (whose
  output goes into the next conv's zero-padded input: 255 registers against the fragment
  epilogue's 168) and up to 1100 bytes in the 128x128x32 layer-1 1x1 convs; 16 lanes: none.
* a separate ``gpu.shared`` region, not the pipeline's stages: shared buffers are typed (f16 /
  i8 stages, f32 / i32 accumulators) and the dialect has no aliasing view of another element
  type. It costs ``warps x 8 x (WN + 8) x 4`` bytes: 9 KiB at 4 warps of 64 x 64.
  :func:`mma.shared_bytes` counts it (a total over 48 KiB goes to dynamic shared memory as any
  other, loop_to_llvm) and :func:`mma.valid` keeps it under the limit.
* 8-row slabs, not 16: the 128x128x64 tile's 96 KiB of stages plus 8-row staging (105 KiB)
  still lets two CTAs share an sm_90 SM (228 KiB, 1 KiB reserved per CTA); 16-row staging (18 KiB)
  would not. The price: two warp barriers per slab (``WM / 8`` slabs), none after the last.
* rows padded by 8 words (row stride = 8 or 24 mod 32 banks for every WN % 16 == 0): a half
  warp's fragment writes of an element pair, ``(g, t) -> g (WN + 8) + 2t + {0, 1}``, hit 32
  distinct banks when the pair goes as one 64-bit store (LLVM pairs them); the read-back's
  ``v`` consecutive words per lane go as vector loads (LLVM), two rows of a warp: no two lanes
  of one phase in one bank.
* the region is warp-private, so the synchronization is the warp's (``gpu.warp_barrier``,
  ``__syncwarp``), outside every guard: a warp goes through its slabs without waiting for the
  block's other warps, whose epilogues (residual loads, stores) then overlap. Until session 10
  it was the block barrier (the dialect had no warp barrier): 16 ``bar.sync`` in a 64-row
  warp tile's epilogue, each holding every warp to the slowest.
* split-K stores its partials through the same staged order (the workspace ``[split][batch]
  [M][N]`` is row-major in n too): coalesced workspace stores as well.
* the point program's loads stay in the slab that uses them. Tried (2026-12-02): making a
  fused residual's loads one slab ahead, before the barriers that otherwise keep them below:
  on the H200, ResNet-50 b32's conv3 + residual kernels took 523 us against 507 in int8 and
  566 against 564 in fp16: no gain, so it is not done. What did pay, for the short-K kernels
  with many waves, is copying the whole residual tile into shared memory before the main
  loop (mma_prefetch.py, chosen per kernel there); the point program then reads it from
  shared memory, in either epilogue.
* the guards ``m < M``, ``n < N`` stay per element, as in the fragment epilogue.
* WN whose rows 16 lanes do not tile (48; over 64 at most 4096 accumulators per warp, e.g.
  32 x 128): element ``lane + 32 it`` of the slab, one column per lane (``mma.TILES`` has
  neither; forced or tuner configs only).

A lane's ``v`` consecutive elements go as one vector store where LLVM's load/store vectorizer
can prove the alignment (ResNet-50's int8 1x1 convs at WN = 32: ``st.global.v2.b8``, 2 bytes).

**Wide runs** (``staged-wide``, session 17: each lane a run of up to 8 columns of a row, one
vector store): timed slower in session 20 (ResNet-50 b32 graph int8 0.780 -> 0.799 ms, fp16
1.137 -> 1.173, the int8 stem 60.9 -> 67.9 us) and removed in session 21 (commit 08bfc9f has it).
"""

from __future__ import annotations

from ...dialects.gpu import shared, warp_barrier
from .common import add, div, mul, sub

#: map-to-gpu's default (timed on the H200: MapToGpu's docstring)
DEFAULT_EPILOGUE = "staged"
#: the values of :attr:`mma.Config.epilogue`
EPILOGUES = ("fragment", "staged")
#: the epilogues through the shared staging region
STAGED = ("staged",)
#: words of padding per staged row (bank conflicts, module docstring)
PAD = 8
#: rows per slab: one half of a 16-row mma tile (a lane's fragment elements 0, 1 or 2, 3)
ROWS = 8
#: lanes across one row of a warp tile in the read-back: each takes WN / 16 consecutive columns
#: (module docstring: fewer columns per lane, more rows per lane, spilled)
ROW_LANES = 16


def staging_shape(cfg) -> tuple:
    """The staged epilogue's shared region: [warps][ROWS][WN + PAD] accumulators."""
    return (cfg.warps_m * cfg.warps_n, ROWS, cfg.wn + PAD)


def staging_bytes(cfg, acc_bytes: int = 4) -> int:
    """Shared bytes the epilogue of ``cfg`` adds to the pipeline's (0 for ``fragment``)."""
    if cfg.epilogue not in STAGED:
        return 0
    w, r, n = staging_shape(cfg)
    return w * r * n * acc_bytes


def allocate(bld, b) -> None:
    """The staging region of mma ``_Builder`` ``bld`` (``bld.staging``), in the launch body
    ``b`` before its loops (``gpu.shared`` lives at the launch's top level)."""
    bld.staging = shared(b, staging_shape(bld.cfg), bld.acc_t)


def staged(bld, b, acc: list, warp_rows: int | None = None) -> None:
    """The staged epilogue of mma ``_Builder`` ``bld`` at ``b`` (module docstring), through
    its region (:func:`allocate`); ``acc`` is the main loop's accumulators, ``[mi][ni][4]``
    flattened, of a warp tile of ``warp_rows`` (default ``cfg.wm``) x ``cfg.wn`` at
    (``bld.wm0``, ``bld.wn0``) of the CTA's tile (the wgmma form: 16 x BN per warp)."""
    c, cfg = bld.c, bld.cfg
    lane, warp = bld.lane, bld.warp
    mi_n, ni_n, wn = (warp_rows or cfg.wm) // 16, cfg.wn // 8, cfg.wn
    sE = bld.staging
    g = div(b, lane, 4)
    t2 = mul(b, sub(b, lane, mul(b, g, 4)), 2)
    m_warp = add(b, bld.base[id(c.a)], bld.wm0)
    n_warp = add(b, bld.base[id(c.b)], bld.wn0)
    # the lane's elements of a slab: vec consecutive columns of rows lane / (WN / vec) + k *
    # (32 vec / WN) where WN / vec lanes divide a warp (every tile of mma.TILES); else (WN = 48)
    # element e = lane + 32 it of the slab, a warp instruction spanning two rows
    vec = max(1, wn // ROW_LANES)
    lanes_per_row = wn // vec
    even = wn % vec == 0 and 32 % lanes_per_row == 0
    if even:
        q = div(b, lane, lanes_per_row)
        c0 = mul(b, sub(b, lane, mul(b, q, lanes_per_row)), vec)
        cols = [add(b, c0, v) for v in range(vec)]
        rows = [add(b, q, k * (32 // lanes_per_row)) for k in range(ROWS * lanes_per_row // 32)]
    for slab in range(2 * mi_n):     # rows 8 slab .. 8 slab + 7 of the warp tile
        mi, h = divmod(slab, 2)
        if slab:
            warp_barrier(b)    # every lane of the warp has read the previous slab
        for ni in range(ni_n):
            col = add(b, t2, ni * 8)
            for i in (2 * h, 2 * h + 1):   # fragment elements 0, 1: row g; 2, 3: row g + 8
                v = acc[(mi * ni_n + ni) * 4 + i]
                b.create("loop.store", [v, sE, [warp, g, add(b, col, i & 1)]])
        warp_barrier(b)        # the warp's slab is written
        m_slab = add(b, m_warp, slab * ROWS)
        if even:
            for r in rows:
                m = add(b, m_slab, r)
                for col in cols:
                    _read(bld, b, sE, r, col, m, add(b, n_warp, col))
        else:
            for it in range(ROWS * wn // 32):
                e = add(b, lane, 32 * it)
                r = div(b, e, wn)
                col = sub(b, e, mul(b, r, wn))
                _read(bld, b, sE, r, col, add(b, m_slab, r), add(b, n_warp, col))


def _read(bld, b, sE, r, col, m, n) -> None:
    """Element (r, col) of the lane's warp's slab, at output (m, n): guarded, the point program
    (or split-K's workspace store)."""
    bound = bld.acc_bound
    attrs = {} if bound is None else {"bound": bound}
    bld._guarded_point(b, m, n,
                       lambda eb: eb.create("loop.load", [sE, [bld.warp, r, col]], attrs).result)
