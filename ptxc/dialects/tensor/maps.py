"""Indexing maps of structured tensor ops, and the numpy machinery that reads and writes operands
through them.

A structured op iterates over ``n`` loop dimensions ``d0..d(n-1)`` with static ``bounds``. An
indexing map has one row per operand dimension; a row ``[c_0, ..., c_(n-1), k]`` gives that
dimension's index as ``sum_i c_i * d_i + k`` (docs/lowering.md). Maps are plain nested tuples of
ints, so they are attributes as they are::

    identity_map(2)               ((1, 0, 0), (0, 1, 0))          (d0, d1) -> (d0, d1)
    broadcast_map((3,), (2, 3))   ((0, 1, 0),)                    (d0, d1) -> (d1)
    broadcast_map((1, 3), (2, 3)) ((0, 0, 0), (0, 1, 0))          (d0, d1) -> (0, d1)
    broadcast_map((1, 3), (1, 3)) ((1, 0, 0), (0, 1, 0))          same shape: the identity

The interpreter evaluates a structured op over a :class:`Domain`: for each loop dimension a range
``[lo, lo + length)`` of its values. Arrays "in loop layout" have one axis per loop dimension (of
the domain's length, or 1 where the array does not depend on that dimension), so values computed
from different operands broadcast against each other. :func:`gather` reads an operand through a
map into loop layout as a strided view, whatever the map (an affine map of a strided array is a
strided array: a convolution's ``o * s + k * d`` window reads, diagonals and flips included), so
no read copies. :func:`scatter` writes loop-layout values through a map: through basic slicing
when each row names at most one loop dimension and no dimension twice (permutations,
broadcasts, strides, offsets, flips), numpy fancy indexing otherwise.
"""

from __future__ import annotations

import numpy as np

Map = tuple  # tuple[tuple[int, ...], ...]


# ---- building maps ------------------------------------------------------------------------------

def unit_row(n: int, dim: int | None, coeff: int = 1, offset: int = 0) -> tuple:
    """A row reading ``coeff * d_dim + offset`` (a constant row when ``dim`` is None)."""
    row = [0] * (n + 1)
    if dim is not None:
        row[dim] = coeff
    row[n] = offset
    return tuple(row)


def identity_map(n: int) -> Map:
    return tuple(unit_row(n, i) for i in range(n))


def projection_map(n: int, dims) -> Map:
    """``(d0..d(n-1)) -> (d_dims[0], d_dims[1], ...)``; a None entry is the constant 0."""
    return tuple(unit_row(n, d) for d in dims)


def broadcast_map(in_shape, out_shape) -> Map:
    """The map of an operand broadcast (numpy rules, right-aligned) to a loop nest over
    ``out_shape``: a size-1 dimension broadcast along a longer one reads index 0 (a constant
    row), others follow their loop (so an operand of the loop nest's shape gets the identity)."""
    n, r = len(out_shape), len(in_shape)
    if r > n:
        raise ValueError(f"cannot broadcast {list(in_shape)} to {list(out_shape)}")
    rows = []
    for j, d in enumerate(in_shape):
        dim = n - r + j
        if d == 1 and out_shape[dim] != 1:
            rows.append(unit_row(n, None))
        elif d == out_shape[dim]:
            rows.append(unit_row(n, dim))
        else:
            raise ValueError(f"cannot broadcast {list(in_shape)} to {list(out_shape)}")
    return tuple(rows)


def row_terms(row) -> list[tuple[int, int]]:
    """The (loop dim, coefficient) pairs of a row with a non-zero coefficient."""
    return [(i, c) for i, c in enumerate(row[:-1]) if c]


def dims_used(m: Map) -> set[int]:
    return {i for row in m for i, _ in row_terms(row)}


def row_range(row, bounds) -> tuple[int, int]:
    """The smallest and largest index a row reaches over the box ``bounds`` (all > 0)."""
    lo = hi = row[-1]
    for i, c in row_terms(row):
        span = c * (bounds[i] - 1)
        lo += min(0, span)
        hi += max(0, span)
    return lo, hi


def permutation_of(m: Map, n: int) -> list[int] | None:
    """When ``m`` is a permutation of the ``n`` loop dims (each row ``d_p`` with coefficient 1
    and offset 0, every dim once), the dim of each row; else None."""
    if len(m) != n:
        return None
    perm = []
    for row in m:
        t = row_terms(row)
        if len(t) != 1 or t[0][1] != 1 or row[-1] != 0:
            return None
        perm.append(t[0][0])
    return perm if sorted(perm) == list(range(n)) else None


def substitute(m: Map, exprs) -> Map:
    """``m`` with each loop dim ``d_j`` replaced by the affine row ``exprs[j]`` (over new loop
    dims): the composition ``m o exprs``."""
    out = []
    n_new = len(exprs[0]) - 1 if exprs else None
    for row in m:
        if n_new is None:  # m reads no loop dims at all (a zero-dim loop nest)
            out.append(tuple(row))
            continue
        new = [0] * (n_new + 1)
        new[-1] = row[-1]
        for j, c in row_terms(row):
            for i, v in enumerate(exprs[j]):
                new[i] += c * v
        out.append(tuple(new))
    return tuple(out)


def with_constant_dims(m: Map, n_new: int) -> Map:
    """``m`` (over zero loop dims) as a map over ``n_new`` loop dims."""
    return tuple(unit_row(n_new, None, offset=row[-1]) for row in m)


# ---- evaluation domains ---------------------------------------------------------------------------

class Domain:
    """For each loop dim, the values ``lo, lo + 1, ..., lo + length - 1`` being evaluated."""

    __slots__ = ("lo", "length")

    def __init__(self, lo, length):
        self.lo = tuple(int(v) for v in lo)
        self.length = tuple(int(v) for v in length)

    @classmethod
    def full(cls, bounds) -> "Domain":
        return cls([0] * len(bounds), bounds)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.length

    def grid(self, dim: int) -> np.ndarray:
        """The values of loop dim ``dim``, in loop layout (int64)."""
        shape = [1] * len(self.lo)
        shape[dim] = self.length[dim]
        return np.arange(self.lo[dim], self.lo[dim] + self.length[dim],
                         dtype=np.int64).reshape(shape)


def _fast_rows(m: Map) -> bool:
    seen: set[int] = set()
    for row in m:
        t = row_terms(row)
        if len(t) > 1 or (t and t[0][0] in seen):
            return False
        seen.update(i for i, _ in t)
    return True


def _basic_index(m: Map, dom: Domain):
    """Basic (view) indices for a fast map, and the loop dim of each kept axis."""
    idx, axis_dims = [], []
    for row in m:
        t = row_terms(row)
        if not t:
            idx.append(int(row[-1]))
            continue
        i, c = t[0]
        start = c * dom.lo[i] + row[-1]
        stop = start + c * dom.length[i]
        idx.append(slice(start, stop if stop >= 0 else None, c))
        axis_dims.append(i)
    return tuple(idx), axis_dims


def _fancy_index(m: Map, dom: Domain):
    idx = []
    for row in m:
        v = np.asarray(row[-1], dtype=np.int64)
        for i, c in row_terms(row):
            v = v + c * dom.grid(i)
        idx.append(v)
    return tuple(idx)


def gather(a: np.ndarray, m: Map, dom: Domain) -> np.ndarray:
    """``a`` read through ``m`` over ``dom``, in loop layout: a read-only strided view, for any
    affine map (loop dim ``i`` steps ``sum_r c_ri * stride_r`` bytes; a dim the map does not
    read gets length 1). Raises IndexError when the map leaves ``a`` over ``dom``, so an
    unverified module cannot read outside the array."""
    n = len(dom.lo)
    if a.ndim == 0:
        return a.reshape((1,) * n)
    first, strides = [], [0] * n
    for r, (row, d) in enumerate(zip(m, a.shape)):
        terms = row_terms(row)
        f = row[-1] + sum(coeff * dom.lo[i] for i, coeff in terms)
        lo = hi = f
        for i, coeff in terms:
            span = coeff * (dom.length[i] - 1)
            lo, hi = lo + min(0, span), hi + max(0, span)
            strides[i] += coeff * a.strides[r]
        if lo < 0 or hi >= d:
            raise IndexError(f"indexing map row {list(row)} reaches [{lo}, {hi}] along dim {r} "
                             f"of size {d}")
        first.append(f)
    corner = a[tuple(slice(f, f + 1) for f in first)]  # a view at the first element read
    shape = tuple(dom.length[i] if strides[i] else 1 for i in range(n))
    return np.lib.stride_tricks.as_strided(corner, shape=shape,
                                           strides=tuple(s if s else 0 for s in strides),
                                           writeable=False)


def scatter(out: np.ndarray, m: Map, dom: Domain, value) -> None:
    """Write ``value`` (loop layout, broadcastable to ``dom.shape``) through ``m`` into ``out``.
    Loop dims that ``m`` does not read must have length 1 in ``dom``."""
    value = np.asarray(value)
    if _fast_rows(m):
        idx, axis_dims = _basic_index(m, dom)
        full = np.broadcast_to(value, dom.shape)
        kept = sorted(axis_dims)
        v = full.reshape([dom.length[i] for i in kept])
        v = v.transpose([kept.index(d) for d in axis_dims])
        out[idx] = v
        return
    idx = _fancy_index(m, dom)
    shape = np.broadcast_shapes(dom.shape, *[i.shape for i in idx])
    out[tuple(np.broadcast_to(i, shape) for i in idx)] = np.broadcast_to(value, shape)
