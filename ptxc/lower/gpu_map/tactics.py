"""map-to-gpu's candidate tactics for one kernel (:meth:`MapToGpu.candidates`): the default,
then the kernel under other values of the options of the schedule the heuristic gives it, and
under its real alternatives, as :class:`~ptxc.tactic.tactic.Tactic` values a tuner times.

    p = MapToGpu(target=Target.preset("sm_90"))
    p.candidates(op)          # [auto, mma{wgmma=on}, mma{mma-tiles=[128x64x2x2]}, ...]
    p.candidates(op, "fast")  # its first MAX_FAST: the default and the nearest changes

**Families.** The default mapping of the kernel (the pass as it is, alone in a module of its own:
ptxc/tune/kernels.py ``isolate``) names the heuristic's schedule; its family of candidates is
that schedule with its own knobs, each an :class:`Axis` of values ordered nearest the default
first; an alternative family is another way to take the kernel, one change away:

=================  ==========================================  ==================================
heuristic          its own axes                                alternative family
=================  ==========================================  ==================================
mma (mma.sync)     tile (:data:`MMA_TILES`), stages 2-4,        ``wgmma=on`` and its axes, where
                   epilogue, min-blocks 1-2, deep-K (where it   the target has wgmma and the
                   changes the K tile), m-tiles 2, 4            operands are K-major (sm_90)
mma (wgmma)        tile (wgmma.TILES, ``wgmma=on``), epilogue,  ``wgmma=off``: mma.sync and its
                   copies                                       axes
tiled              (none)                                       pointwise, block sizes
reduction          block size (:data:`REDUCTION_BLOCKS`)        pointwise, block sizes
pointwise          block size (:data:`BLOCK_SIZES`)             tiled with ``tiled-min-reduction
                                                                =0`` where the tiled schedule
                                                                declined a short reduction
=================  ==========================================  ==================================

**Order.** Every combination of a family's axes (each axis unchanged or one of its values) is a
candidate, ranked by the changes it makes (an alternative family's own choice counts one), then
by its distance from the default (a value's place in its axis: both neighbouring tiles and
stage counts are one away), then family and axis order. So the first ones are the default, the
alternative, and every single change to a neighbour: what ``fast`` keeps (:data:`MAX_FAST`).
``full`` keeps the first :data:`MAX_FULL` of the product.

**Pruning**, in that order (each candidate is mapped as a clone of the isolated kernel):

* an mma candidate whose plan (mma.plan: the tile, stages, epilogue, split-K, blocks per SM it
  decides) equals one kept already makes the same launches: dropped without building them;
* tiles padded to more than :data:`WASTE` times the work of the least padded tile of their
  list (a 128-wide tile of an N = 32 GEMM multiplies zeros in three quarters of it);
* a candidate whose schedule declines the kernel (a tile that does not fit the target's shared
  memory or its grid; mma_config.valid, wgmma.choose), that fails to build, or whose launches
  declare more shared memory than the target's ``shared_per_block``;
* a candidate whose mapped module prints as one kept already (a tile the heuristic chose
  anyway, a block size clipped to the same launch).

Deterministic: the same kernel and pass give the same list (no timing, no randomness).
"""

from __future__ import annotations

import itertools

import attrs

from ...dialects.func import func_body, functions
from ...dialects.gpu import shared_bytes
from ...errors import CompileError, TuningError
from ...ir.core import Operation
from ...ir.printer import print_ir
from ...tactic.kernels import isolate
from ...tactic.tactic import DEFAULT, Tactic
from ...tactic.tactic_map import NO_TACTICS
from . import contraction, mma, mma_config, mma_epilogue, tiled_nest, wgmma
from .common import KERNEL_OPS, pdl_enabled, target_of

#: the most candidates ``fast`` and ``full`` return (the default included)
MAX_FAST = 8
MAX_FULL = 48
LEVELS = {"fast": MAX_FAST, "full": MAX_FULL}
#: a tile is no candidate where it pads the output to more than this times the least padded
#: tile's work
WASTE = 2
#: mma.sync CTA tiles (BM, BN, WARPS_M, WARPS_N): mma_config.TILES with the eight-warp 128 x 128
#: tile (mma_config.eight_warps) beside its four-warp form
MMA_TILES = (mma_config.TILES[:1] + ((128, 128, 4, 2),) + mma_config.TILES[1:])
MMA_STAGES = (2, 3, 4)
MMA_MIN_BLOCKS = (1, 2)
MMA_M_TILES = (2, 4)
#: pointwise threads per block (map-to-gpu's ``block-size``)
BLOCK_SIZES = (64, 128, 256, 512, 1024)
#: the reduction schedule's threads per block (``reduction-block-size``)
REDUCTION_BLOCKS = (32, 64, 128, 256, 512, 1024)


@attrs.frozen
class Axis:
    """One knob: ``values`` are ``(params, distance)`` pairs, nearest the default first, the
    default's own value left out (``params``: option fields to values)."""
    name: str
    values: tuple


@attrs.frozen
class Family:
    """A schedule and its axes; ``base`` the params every member sets, ``cost`` the changes
    ``base`` counts as (0: the heuristic's own schedule, 1: an alternative)."""
    schedule: str
    base: tuple = ()
    axes: tuple = ()
    cost: int = 0


@attrs.frozen
class _Mapped:
    text: str
    schedules: tuple      # the launches' ``schedule`` attributes
    blocks: tuple         # their ``block`` attributes
    shared: int           # the most shared bytes a launch declares


def candidates(pass_, op: Operation, level: str = "full") -> list[Tactic]:
    """The candidate tactics of top-level kernel ``op`` under map-to-gpu pass ``pass_`` (module
    docstring); a TuningError for an unknown ``level`` or an ``op`` that is no top-level
    kernel."""
    if level not in LEVELS:
        raise TuningError(f"candidates: level {level!r} is not one of {', '.join(LEVELS)}")
    parent = op.parent_op
    if op.name not in KERNEL_OPS or parent is None or parent.name != "func.func":
        raise TuningError(f"candidates: {op.where} is no top-level kernel of a function "
                          f"({', '.join(KERNEL_OPS)})")
    from . import _empty
    base = attrs.evolve(pass_, tactics=NO_TACTICS)
    module, _ = isolate(op)
    if _empty(_kernel(module)):
        return [DEFAULT]
    default = _map(module, DEFAULT, base)
    fams, c = _families(_kernel(module), base, default)
    cap = LEVELS[level]
    target = target_of(base)
    out, texts, plans = [DEFAULT], {default.text}, set()
    if c is not None and default.schedules[0] in ("mma", "wgmma"):
        plans.add(mma.plan(c, base))
    for t in _ranked(fams):
        if len(out) >= cap:
            break
        try:
            own = t.apply(base)
        except TuningError:
            continue
        if t.schedule == "mma" and c is not None:
            p = mma.plan(c, own)
            if p is None or p in plans:
                continue
            plans.add(p)
        m = _map(module, t, base)
        if m is None or m.text in texts or m.shared > target.shared_per_block:
            continue
        texts.add(m.text)
        out.append(t)
    return out


# ---- mapping one candidate --------------------------------------------------------------------

def _kernel(module: Operation) -> Operation:
    """The kernel of an isolated module (ptxc/tune/kernels.py: the last op before the return)."""
    (f,) = functions(module)
    return [o for o in func_body(f).ops if o.name in KERNEL_OPS][-1]


def _map(module: Operation, t: Tactic, base) -> _Mapped | None:
    """The isolated ``module`` mapped as ``t`` says (a clone; ``module`` stays as it is), or
    None where its schedule declines the kernel or the launch does not build."""
    from . import schedule_kernel
    clone = module.clone()
    kernel = _kernel(clone)
    try:
        launches = schedule_kernel(kernel, t, base)
    except (TuningError, CompileError):
        return None
    kernel.erase()
    if pdl_enabled(t.apply(base)):
        for launch in launches:
            launch.attributes["pdl"] = True
    return _Mapped(print_ir(clone), tuple(x.attributes["schedule"] for x in launches),
                   tuple(x.attributes["block"] for x in launches),
                   max((shared_bytes(x) for x in launches), default=0))


# ---- the families -----------------------------------------------------------------------------

def _families(kernel: Operation, base, default: _Mapped) -> tuple[list, object]:
    """The families of ``kernel`` (module docstring) and its contraction (None unless the mma
    schedule took it)."""
    target = target_of(base)
    own = default.schedules[0]
    if own in ("mma", "wgmma"):
        c = contraction.analyze(kernel)
        p = mma.plan(c, base)
        if p.wgmma is not None:
            off = attrs.evolve(base, wgmma="off")
            alt = mma.plan(c, off)
            fams = [Family("mma", (), _wgmma_axes(c, p.wgmma, base)),
                    Family("mma", (("wgmma", "off"),),
                           _mma_axes(c, alt, off) if alt is not None else (), 1)]
        else:
            fams = [Family("mma", (), _mma_axes(c, p, base))]
            if target.has("wgmma") and wgmma.takes(c):
                on = wgmma.choose(c, attrs.evolve(base, wgmma="on"))
                fams.append(Family("mma", (("wgmma", "on"),), _wgmma_axes(c, on, base), 1))
        return fams, c
    blocks = _axis("block-size", "block_size", BLOCK_SIZES, base.block_size)
    if own == "tiled":
        return [Family("tiled"), Family("pointwise", (), (blocks,), 1)], None
    if own == "reduction":
        return [Family("reduction", (), (_axis("reduction-block-size", "reduction_block_size",
                                                REDUCTION_BLOCKS, default.blocks[0][0]),)),
                Family("pointwise", (), (blocks,), 1)], None
    fams = [Family("pointwise", (), (blocks,))]
    nest = tiled_nest.analyze(kernel) if kernel.name == "loop.parallel" else None
    least = base.tiled_min_reduction
    if nest is not None and least and tiled_nest.reduction_points(nest) < least:
        fams.append(Family("tiled", (("tiled_min_reduction", 0),), (), 1))
    return fams, None


def _axis(name: str, field: str, values, current) -> Axis:
    """Power-of-two sizes, ``current`` left out, nearest first (distance: halvings)."""
    def dist(v):
        return abs(v.bit_length() - int(current).bit_length())
    vals = sorted((v for v in values if v != current), key=lambda v: (dist(v), v))
    return Axis(name, tuple((((field, v),), dist(v)) for v in vals))


def _padded(m: int, n: int, bm: int, bn: int) -> int:
    return -(-m // bm) * bm * -(-n // bn) * bn


def _lean(tiles, c) -> list:
    """The tiles (``(BM, BN, ...)``) padded to at most :data:`WASTE` times the least padded's
    work."""
    least = min(_padded(c.M, c.N, t[0], t[1]) for t in tiles)
    return [t for t in tiles if _padded(c.M, c.N, t[0], t[1]) <= WASTE * least]


def _near(tiles, current) -> tuple:
    """``(tile, distance)`` for the tiles other than ``current``, nearest in list order first."""
    at = tiles.index(current) if current in tiles else 0
    pairs = [(t, abs(i - at)) for i, t in enumerate(tiles) if t != current]
    return tuple(sorted(pairs, key=lambda p: (p[1], tiles.index(p[0]))))


def _mma_axes(c, p, base) -> tuple:
    """The mma.sync axes of contraction ``c`` around plan ``p`` (module docstring)."""
    cfg = p.cfg
    lean = set(_lean(MMA_TILES, c))
    tiles = Axis("tile", tuple(
        ((("mma_tiles", ("x".join(map(str, t)),)),), d)
        for t, d in _near(MMA_TILES, (cfg.bm, cfg.bn, cfg.warps_m, cfg.warps_n)) if t in lean))
    stages = Axis("stages", tuple(
        ((("mma_stages", s),), abs(s - cfg.stages))
        for s in sorted((s for s in MMA_STAGES if s != cfg.stages),
                        key=lambda s: (abs(s - cfg.stages), s))))
    epilogue = Axis("epilogue", tuple(((("mma_epilogue", e),), 1)
                                      for e in mma_epilogue.EPILOGUES if e != base.mma_epilogue))
    blocks = Axis("min-blocks", tuple(
        ((("mma_min_blocks", b),), abs(b - p.min_blocks))
        for b in sorted((b for b in MMA_MIN_BLOCKS if b != p.min_blocks),
                        key=lambda b: (abs(b - p.min_blocks), b))))
    axes = [tiles, stages, epilogue, blocks]
    flip = _deep_k_flip(c, base)
    if flip:
        axes.append(Axis("deep-k", (((("mma_deep_k", flip),), 1),)))
    if -(-c.M // cfg.bm) >= 2 and cfg.splits == 1:
        axes.append(Axis("m-tiles", tuple(((("mma_m_tiles", n),), i + 1)
                                          for i, n in enumerate(MMA_M_TILES))))
    return tuple(a for a in axes if a.values)


def _deep_k_flip(c, base) -> int:
    """The ``mma-deep-k`` that flips the K-tile depth the pass gives ``c`` (twice as deep from
    mma_deep_k base tiles, mma_config.choose), or 0 where none does: deep tiles where the
    default's are shallow need two base tiles of K at least; shallow ones where the default's
    are deep need K under 64 base tiles (the option's most)."""
    if mma_config.scalar_operands(c):
        return 0
    bk = mma_config.KIND[c.kind][2]
    tiles = c.K // bk
    if c.K >= (base.mma_deep_k or mma_config.DEEP_K) * bk:
        return tiles + 1 if tiles + 1 <= 64 else 0
    return tiles if tiles >= 2 else 0


def _wgmma_axes(c, cfg, base) -> tuple:
    """The wgmma axes of contraction ``c`` around tile ``cfg`` (None: the ``on`` rule found
    none): each tile forced (``wgmma=on`` with that tile alone), the epilogue, the copies."""
    current = (cfg.bm, cfg.bn) if cfg is not None else None
    lean = set(_lean(wgmma.TILES, c))
    tiles = Axis("wgmma-tile", tuple(
        ((("wgmma", "on"), ("wgmma_tiles", (f"{t[0]}x{t[1]}",))), d)
        for t, d in _near(wgmma.TILES, current) if t in lean))
    epilogue = Axis("wgmma-epilogue", tuple(((("wgmma_epilogue", e),), 1)
                                            for e in wgmma.EPILOGUES if e != base.wgmma_epilogue))
    copies = Axis("wgmma-copies", tuple(((("wgmma_copies", k),), 1)
                                        for k in wgmma.COPIES if k != base.wgmma_copies))
    return tuple(a for a in (tiles, epilogue, copies) if a.values)


# ---- ranking ----------------------------------------------------------------------------------

def _ranked(fams) -> list[Tactic]:
    """Every combination of each family's axes as a Tactic, ranked (module docstring, "Order")."""
    ranked = []
    for fi, fam in enumerate(fams):
        choices = [range(len(axis.values) + 1) for axis in fam.axes]
        for combo in itertools.product(*choices):
            params = dict(fam.base)
            dist, axes = 0, []
            for ai, (axis, vi) in enumerate(zip(fam.axes, combo)):
                if vi:
                    values, d = axis.values[vi - 1]
                    params.update(values)
                    dist += d
                    axes.append(ai)
            # ties: the earlier axes' changes first (tiles before stages ...), then values
            key = (fam.cost + len(axes), dist, fi, tuple(axes), tuple(v for v in combo if v))
            ranked.append((key, Tactic(fam.schedule, params)))
    ranked.sort(key=lambda r: r[0])
    return [t for _, t in ranked]
