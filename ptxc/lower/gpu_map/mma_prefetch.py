"""Epilogue tiles: the mma schedule copies what the point program reads per output point (a
fused residual) into shared memory while the main loop runs.

A residual block's last conv (``y = relu(conv(x) + r)``) reads one element of ``r`` per output
point in its epilogue. Read there, each load is a global load whose latency the epilogue waits
out slab after slab (mma_epilogue.py), with the row index arithmetic of every row a lane
touches live across the epilogue. The H200 timed ResNet-50's int8 conv3 + Add + Relu kernels
at 2-3 warps per scheduler, their warps stalled on the residual's bytes (ncu source sampling,
2026-12-02: PRMT of the loaded word 16-18% of the samples) and on row address arithmetic.

So, before the main loop's first copies, the CTA issues its ``BM x BN`` tile of every such load
as 16-byte ``gpu.cp_async``\\ s (zero-filled past ``M`` and ``N``) into a ``gpu.shared`` buffer,
one commit group of its own; the loop's first ``cp_async_wait`` + barrier (tile 0 landed) then
also covers it, and the point program reads ``sR[m - m0][n - n0]`` from shared memory::

    before: %r = loop.load %res[%b, %h, %w, %c]            (a global load per output point)
    after:  sR = gpu.shared [BM][BN]                         (in the launch, before the loop)
            gpu.cp_async %flat[lin(m0 + i, n0 + j)] -> sR[i][j]   16 bytes, each (i, j) chunk
            gpu.cp_async_commit
            ... main loop ...
            %r = loop.load sR[m - m0, n - n0]

What qualifies (:func:`tile_loads`): a ``loop.load`` of the point program whose indices are
affine in the nest's parallel dims only, reading at least one M dim and the (single) N dim,
with the N dim contiguous (coefficient 1) and every other coefficient and the offset multiples
of 16 bytes, N too; a buffer the nest does not store to. Per-channel loads (a bias, the int8
multiplier: N only) stay as they are: LLVM hoists them out of the rows. Split-K's partial sums
run the point program in a second kernel, so there is none there.

When it pays (:func:`worth_it`, :func:`chosen`), measured on the H200 in ResNet-50 at batch
32 (2026-12-02, every conv3 + Add + Relu with its residual tiled against none): the layer-1
kernels (K = 64: one int8 K tile or two f16 ones; 1568 CTAs) went int8 43.1 / 44.4 -> 35.5 us
and f16 48.6 / 47.7 -> 43.6 / 42.8; the layers 2-4 ones (K = 128-512, 208-392 CTAs: under two
waves) went 3-20% slower (int8 layer 3: 16.9 -> 18.5 us), their main loops already covering
the loads and the tile group delaying K tile 0; and f32 residuals (64 KiB tiles: one CTA per
SM) up to 73% slower. So: at most two K tiles, at least 8 waves' worth of CTAs, elements of
at most 2 bytes. Issued instead with the LAST K tile's copies of a longer loop (session 14,
where two CTAs per SM still fit), the int8 layer-3 conv3 kernels still ran slower: 15.7-15.9
-> 16.7-17.2 us against no tiles (``map-to-gpu{mma-epilogue-tiles=false}``, same run), so
long loops take none.

Costs ``BM x BN`` elements of shared memory per tile load (int8 128 x 128: 16 KiB; f16: 32 KiB),
counted by :func:`mma.shared_bytes`, so a config that would not fit is not chosen. No padding:
the staged epilogue's two half-warps read two rows of the tile, which for a 128-byte int8 row
fall in the same banks (a 2-way conflict on one shared load per 4 outputs); f16 and f32 reads
split by half-warps already.
"""

from __future__ import annotations

import attrs

from ...dialects.gpu import shared
from ...ir.builder import Builder
from ...ir.core import Operation, Value
from .common import add, cmp, div, mul, sub
from ...target import Target
from .contraction import Contraction, Operand, ctas
from .tiled import _affine, _root

#: bytes per cp.async of a tile copy
CHUNK = 16
#: when the tiles pay (:func:`worth_it`; measured on the H200, module docstring)
MAX_K_TILES = 2
MIN_WAVES = 8
MAX_ELEMENT_BYTES = 2


@attrs.frozen
class TileLoad:
    """One point-program load that reads a ``BM x BN`` tile per CTA: the ``loop.load`` and its
    buffer indices as an :class:`Operand` (affine rows over ``("p", d)``)."""
    op: Operation
    operand: Operand

    @property
    def element_bytes(self) -> int:
        return self.operand.element.bitwidth // 8


def tile_loads(c: Contraction) -> list[TileLoad]:
    """The point program's loads to copy into shared memory (module docstring)."""
    nest = c.nest
    if len(c.n_dims) != 1:
        return []
    stored = {id(_root(o.operands[1])) for o in nest.prologue + nest.epilogue
              if o.name == "loop.store"}
    out = []
    memo: dict = {}
    for o in c.epilogue:
        if o.name != "loop.load" or id(_root(o.operands[0])) in stored:
            continue
        rows = [_affine(i, nest.op, nest.loops, memo) for i in o.operands[1:]]
        if any(r is None or any(k != 1 and k[0] != "p" for k in r) for r in rows):
            continue
        x = Operand(o.operands[0], rows, o.operands[0].type.element)
        if _fits(c, x):
            out.append(TileLoad(o, x))
    return out


def _fits(c: Contraction, x: Operand) -> bool:
    """A tile of ``x`` copies in 16-byte chunks: it reads an M dim and the N dim, N contiguous,
    every other step and the offset whole chunks."""
    el = x.element.bitwidth // 8
    if el == 0 or CHUNK % el:
        return False
    v = CHUNK // el
    (n,) = c.n_dims
    if x.coef(("p", n)) != 1 or c.N % v or c.lower(n) % v:
        return False
    if not any(x.reads(("p", d)) for d in c.m_dims):
        return False
    syms = [("p", d) for d in c.m_dims + c.batch]
    return x.offset() % v == 0 and all(x.coef(s) % v == 0 for s in syms)


def worth_it(c: Contraction, cfg, target: Target) -> bool:
    """Whether the tiles pay at ``cfg`` on ``target``: a main loop of at most
    :data:`MAX_K_TILES` K tiles (nothing to hide the epilogue's loads behind), at least
    :data:`MIN_WAVES` x the target's SM count CTAs (many waves: each CTA's epilogue wait is the
    kernel's time), and no split-K (module docstring's measurements)."""
    if cfg.splits > 1 or -(-c.K // cfg.bk) > MAX_K_TILES:
        return False
    return ctas(c, cfg.bm, cfg.bn) >= MIN_WAVES * target.sms


def chosen(c: Contraction, cfg, target: Target) -> list[TileLoad]:
    """The tile loads the mma kernel of ``c`` at ``cfg`` copies on ``target`` (elements of at
    most :data:`MAX_ELEMENT_BYTES`), or none where they do not pay (:func:`worth_it`)."""
    if not getattr(cfg, "epilogue_tiles", True) or not worth_it(c, cfg, target):
        return []
    return [t for t in tile_loads(c) if t.element_bytes <= MAX_ELEMENT_BYTES]


def slots(c: Contraction, cfg) -> int:
    """Tiles of each epilogue load in shared memory at once: 1, or where a CTA computes
    ``cfg.m_tiles`` output tiles (mma.py, "M tiles"), enough for the tiles whose copies run
    ahead of the epilogue that reads the oldest: the copies run ``stages - 1`` K tiles ahead,
    so ``ceil((stages - 1) / K tiles) + 1`` (K = one tile, 2 stages: 2). A tile's slot is
    rewritten only after the block barrier that follows its epilogue (mma.py)."""
    if cfg.m_tiles == 1:
        return 1
    kts = -(-c.K // cfg.bk)
    return -(-(cfg.stages - 1) // kts) + 1


def tile_bytes(c: Contraction, cfg, target: Target) -> int:
    """Shared bytes the epilogue tiles of ``c`` take at ``cfg`` on ``target``."""
    return slots(c, cfg) * sum(cfg.bm * cfg.bn * t.element_bytes
                               for t in chosen(c, cfg, target))


def allocate(bld, b: Builder, tiles: list) -> dict:
    """In the launch body ``b`` of mma ``_Builder`` ``bld``: the shared tiles of ``tiles``
    (``(TileLoad, flat view of its root buffer)``, :func:`chosen`, the views made before the
    launch), ``[slots x BM][BN]`` each. Returns {id(load op): (shared tile, TileLoad, view)}."""
    n = slots(bld.c, bld.cfg)
    return {id(t.op): (shared(b, (n * bld.cfg.bm, bld.cfg.bn), t.operand.element), t, flat)
            for t, flat in tiles}


def issue(bld, b: Builder, tiles: dict, m0: Value, slot) -> None:
    """The cp.asyncs of the output tile at M offset ``m0`` of every tile of ``tiles``
    (:func:`allocate`) into its slot ``slot`` (an index value, or None: the only slot). No
    commit: the caller's group (the K tile these copies go with) covers them."""
    from .mma import _index_values, _linear, _min, _and
    c, cfg = bld.c, bld.cfg
    for s, t, flat in tiles.values():
        x = t.operand
        v = CHUNK // t.element_bytes
        per = cfg.bn // v                      # chunks per tile row
        total = cfg.bm * per
        n0 = bld.base[id(c.b)]
        for it in range(-(-total // cfg.threads)):
            ch = add(b, bld.tid, it * cfg.threads)
            live = cmp(b, "lt", ch, total) if (it + 1) * cfg.threads > total else None
            if live is not None:
                ch = _min(b, ch, total - 1)
            row = div(b, ch, per)
            col = mul(b, sub(b, ch, mul(b, row, per)), v)
            m, n = add(b, m0, row), add(b, n0, col)
            pred = _and(b, cmp(b, "lt", m, c.M), cmp(b, "lt", n, c.N))
            if live is not None:
                pred = _and(b, pred, live)
            syms = dict(bld.batch)
            syms.update(_index_values(b, c, c.m_dims, _min(b, m, c.M - 1)))
            syms.update(_index_values(b, c, c.n_dims, _min(b, n, c.N - v)))
            srow = row if slot is None else add(b, mul(b, slot, cfg.bm), row)
            b.create("gpu.cp_async", [flat, [_linear(b, x, syms)], s, [srow, col], pred],
                     {"bytes": CHUNK})


def read(bld, b: Builder, tile: Value, m: Value, n: Value) -> Value:
    """The point program's value of a tile load at output (``m``, ``n``): its shared tile at
    ``(m - m0, n - n0)``, in the current output tile's slot (``bld.slot``; None: the only
    one)."""
    c = bld.c
    row = sub(b, m, bld.base[id(c.a)])
    if bld.slot is not None:
        row = add(b, mul(b, bld.slot, bld.cfg.bm), row)
    return b.create("loop.load", [tile, [row, sub(b, n, bld.base[id(c.b)])]]).result


__all__ = ["TileLoad", "tile_loads", "worth_it", "chosen", "slots", "tile_bytes", "allocate",
           "issue", "read"]
