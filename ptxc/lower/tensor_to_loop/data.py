"""Data movement at the loop level: filling a place with a scalar, filling the border of a
padded buffer, copying between places.

A fill is one ``loop.parallel`` over the place's dims of extent > 1 (row-major order, so stores
are contiguous) storing one scalar. A pad's border is the padded box minus its interior, as at
most two slabs per dim (dims before it restricted to the interior, dims after it whole), each a
fill over a box with lower bounds, so the interior (where the source is, written by its producer
or copied) is never written twice. A copy is ``loop.copy`` between two places of one shape.
"""

from __future__ import annotations

from ...dialects.loop import parallel_loop
from ...ir.builder import Builder
from ...ir.types import INDEX
from .nest import Scope, const


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


def fill_border(lw, place, low, inner_shape, value, loc=None) -> None:
    """Fill ``place`` (a padded tensor) everywhere except the interior box starting at ``low``
    of ``inner_shape``."""
    shape = place.shape
    rank = len(shape)
    for d in range(rank):
        lower, upper = [], []
        for k in range(rank):
            if k < d:
                lower.append(low[k])
                upper.append(low[k] + inner_shape[k])
            else:
                lower.append(0)
                upper.append(shape[k])
        lo_slab_upper = list(upper)
        lo_slab_upper[d] = low[d]
        fill_box(lw, place, lower, lo_slab_upper, value, loc)
        hi_slab_lower = list(lower)
        hi_slab_lower[d] = low[d] + inner_shape[d]
        fill_box(lw, place, hi_slab_lower, upper, value, loc)


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
