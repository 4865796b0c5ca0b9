"""Data movement at the loop level: filling a place with a scalar, filling the border of a
padded buffer, copying between places.

A fill is one ``loop.parallel`` over the place's dims of extent > 1 (row-major order, so stores
are contiguous) storing one scalar. A pad's border is the padded box minus its interior, as at
most two slabs per padded dim (dims before it restricted to the interior, dims after it whole),
so the interior (where the source is, written by its producer or copied) is never written twice.
The slabs are filled by ONE nest (one kernel on a GPU, where four launches for a 2-D pad cost
more than the stores): its dims are the unpadded dims and one dim ``t`` that counts the border
cells of the padded dims, slab after slab; each cell's coordinates are decoded from ``t`` with
constant divisors. For a 1x1-padded 4x4 plane (NHWC: dims H, W padded, N and C kept)::

    before: 4 nests    loop.parallel (c) over h in [0,1),  w in [0,6)  -> store 0
                       loop.parallel (c) over h in [5,6),  w in [0,6)  -> store 0
                       loop.parallel (h in [1,5), c) over w in [0,1)   -> store 0
                       loop.parallel (h in [1,5), c) over w in [5,6)   -> store 0
    after:  1 nest     loop.parallel (t in [0,20), c):
                         slab = (t >= 6) + (t >= 12) + (t >= 16)
                         h, w = per-slab decode of t - offset[slab] -> store 0

Where the innermost dim is kept, contiguous and a multiple of a run of 16 bytes (else 8 or 4),
the nest steps over it by the run and each point stores the run's elements one after another
(a 1x1-padded NHWC int8 tensor of 64 channels: 4 points per border pixel, not 64), so that a
GPU thread writes one 16-byte vector (LLVM merges the adjacent stores) and the fill launches a
sixteenth of the threads. ResNet-50's 3x3 convs read 16 such borders; storing one int8 or f16
per thread, each fill took as long as a maxpool over the whole tensor
(bench/history/2026-12-03.md).

A copy is ``loop.copy`` between two places of one shape.
"""

from __future__ import annotations

import numpy as np

from ...dialects.loop import parallel_loop
from ...ir.builder import Builder
from ...ir.types import INDEX
from .nest import RUN_BYTES
from .scope import Scope, const


def run_length(place, dims) -> int:
    """Elements per fill point along ``place``'s innermost dim when that dim is one of ``dims``
    (the nest's), contiguous and a multiple of a run of :data:`RUN_BYTES`; else 1."""
    layout = place.layout
    last = len(place.shape) - 1
    if last < 0 or last not in dims or layout.strides[last] != 1:
        return 1
    el = max(1, layout.element.bitwidth // 8)
    for run_bytes in RUN_BYTES:
        n = run_bytes // el
        if n > 1 and place.shape[last] % n == 0 and layout.offset % n == 0 and all(
                s % n == 0 for s in layout.strides[:last]):
            return n
    return 1


def fill_box(lw, place, lower, upper, value, loc=None) -> None:
    """Store a scalar at every index of the box ``[lower, upper)`` of ``place``. ``value`` is a
    Python number or a callable ``(scope) -> Value`` (a scalar computed inside the nest)."""
    if any(hi <= lo for lo, hi in zip(lower, upper)):
        return
    dims = [d for d, (lo, hi) in enumerate(zip(lower, upper)) if hi - lo > 1]
    loop, pb, ivs = parallel_loop(Builder.at_end(lw.body), [lower[d] for d in dims],
                                  [upper[d] for d in dims], loc=loc)
    lw.anchor = loop
    try:
        scope = Scope(pb)
        el = place.layout.element
        v = value(scope) if callable(value) else const(scope, value, el)
        idx = []
        for d, lo in enumerate(lower):
            if d in dims:
                idx.append(ivs[dims.index(d)])
            else:
                idx.append(const(scope, lo, INDEX))
        pb.create("loop.store", [v, lw.buffer(place), idx])
    finally:
        lw.anchor = None


def fill(lw, place, value, loc=None) -> None:
    """Store a scalar at every element of ``place``."""
    fill_box(lw, place, [0] * len(place.shape), list(place.shape), value, loc)


def border_slabs(shape, low, inner_shape, skip=()) -> list:
    """The border of a padded box as disjoint boxes ``(lower, upper)``: per padded dim, the slab
    below the interior and the one above it (dims before it restricted to the interior, dims
    after it whole); empty slabs left out. The slabs of the dims in ``skip`` are left out too
    (written by someone else: the producer of a pad along the innermost dim)."""
    rank = len(shape)
    slabs = []
    for d in range(rank):
        if d in skip:
            continue
        lower = [low[k] if k < d else 0 for k in range(rank)]
        upper = [low[k] + inner_shape[k] if k < d else shape[k] for k in range(rank)]
        below, above = list(upper), list(lower)
        below[d], above[d] = low[d], low[d] + inner_shape[d]
        for lo, hi in ((lower, below), (above, upper)):
            if all(h > l for l, h in zip(lo, hi)):
                slabs.append((list(lo), list(hi)))
    return slabs


def fill_border(lw, place, low, inner_shape, value, loc=None, skip=()) -> None:
    """Fill ``place`` (a padded tensor) everywhere except the interior box starting at ``low``
    of ``inner_shape``: one nest over all the border slabs (see the module docstring). The
    slabs of the dims in ``skip`` are not filled (:func:`border_slabs`)."""
    shape = list(place.shape)
    slabs = border_slabs(shape, low, inner_shape, skip)
    if len(slabs) <= 1:
        for lo, hi in slabs:
            fill_box(lw, place, lo, hi, value, loc)
        return
    padded = [d for d in range(len(shape)) if inner_shape[d] != shape[d] and d not in skip]
    kept = [d for d in range(len(shape)) if d not in padded]
    # the slabs agree on every kept dim (whole), so a nest dim per kept dim of extent > 1, and t
    # where the first padded dim is
    sizes = [int(np.prod([hi[d] - lo[d] for d in padded])) for lo, hi in slabs]
    offsets = [int(x) for x in np.cumsum([0] + sizes[:-1])]
    nest_dims = [d for d in kept if shape[d] > 1]
    at = sum(1 for d in nest_dims if d < padded[0])
    lower = [0] * (len(nest_dims) + 1)
    upper = [shape[d] for d in nest_dims]
    upper.insert(at, sum(sizes))
    run = run_length(place, nest_dims)   # elements per point along the innermost dim
    step = [1] * len(lower)
    step[-1] = run
    loop, pb, ivs = parallel_loop(Builder.at_end(lw.body), lower, upper, step, loc=loc)
    lw.anchor = loop
    try:
        scope = Scope(pb)
        b = scope.b
        t = ivs[at]
        c = lambda v: const(scope, v, INDEX)  # noqa: E731
        # which slab t is in, as a select chain from the last slab down
        in_slab = [b.create("arith.cmp", [t, c(o)], {"predicate": "ge"}).result
                   for o in offsets[1:]]
        coords = {}
        for d in padded:
            pick = None
            for k, (lo, hi) in enumerate(slabs):
                # d's coordinate if t is in slab k: row-major over the padded dims of the slab
                inner = int(np.prod([hi[e] - lo[e] for e in padded if e > d]))
                local = t if offsets[k] == 0 else b.create("arith.sub", [t, c(offsets[k])]).result
                v = local if inner == 1 else b.create("arith.div", [local, c(inner)]).result
                if d != padded[0]:
                    v = b.create("arith.rem", [v, c(hi[d] - lo[d])]).result
                if lo[d]:
                    v = b.create("arith.add", [v, c(lo[d])]).result
                pick = v if pick is None else b.create("arith.select",
                                                       [in_slab[k - 1], v, pick]).result
            coords[d] = pick
        el = place.layout.element
        v = value(scope) if callable(value) else const(scope, value, el)
        idx = []
        for d in range(len(shape)):
            if d in coords:
                idx.append(coords[d])
            elif d in nest_dims:
                idx.append(ivs[nest_dims.index(d) + (1 if nest_dims.index(d) >= at else 0)])
            else:
                idx.append(c(0))
        base = idx[-1]
        for j in range(run):   # the run: adjacent elements, one store each
            if j:
                idx[-1] = b.create("arith.add", [base, c(j)]).result
            pb.create("loop.store", [v, lw.buffer(place), list(idx)])
    finally:
        lw.anchor = None


def copy(lw, src, dst, loc=None) -> None:
    """``loop.copy`` of place ``src`` into place ``dst`` (nothing when they are the same)."""
    if src == dst or not dst.layout.size:
        return
    squeezed = tuple(d for d in dst.shape if d != 1)
    if squeezed != dst.shape:  # unit dims dropped: the runtime splits the first dim on threads
        s2, d2 = src.reshaped(squeezed), dst.reshaped(squeezed)
        if s2 is not None and d2 is not None:
            src, dst = s2, d2
    lw.top_insert_op("loop.copy", [lw.buffer(src), lw.buffer(dst)], loc=loc)
