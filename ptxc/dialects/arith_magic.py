"""The f32 number ``MAGIC = 1.5 * 2**23`` and the multipliers it scales integers by exactly: facts
of f32 arithmetic (round to nearest, ties to even) that a graph rewrite and the scalar emitter
agree on.

* ``x + MAGIC``, for an f32 ``|x| <= 2**22``, is ``x`` rounded to an integer plus MAGIC,
  exactly, and its bits are ``MAGIC_BITS`` plus that integer (the emitter's conversions between
  small ints and f32 without a conversion instruction, :mod:`ptxc.lower.llvm_scalar`);
* a multiplier ``m`` is :func:`magic_exact` when ``fma(MAGIC + i, m, -MAGIC * m)`` is
  ``RN(i * m)`` for every integer ``|i| <= 2**22``: one fma converts and scales;
  :func:`round_to_magic_exact` moves a multiplier to that grid (at most 2 ulps).

fold-qdq rounds an int8 layer's requantization multipliers with :func:`round_to_magic_exact`
(its ``fma-multipliers`` option), and the emitter takes the fma form for the multipliers that
:func:`magic_exact` accepts (:mod:`ptxc.lower.llvm_bounds`), so the two stages share these
definitions here, below both. Example::

    round_to_magic_exact(np.float32(0.7880036))    # 0x3F49BA9B, significand odd
    -> 0.7880037                                   # 0x3F49BA9C: magic_exact
"""

from __future__ import annotations

import numpy as np

#: 1.5 * 2**23: for an f32 |x| <= 2**22, ``x + MAGIC`` is x rounded to an integer (ties to
#: even) plus MAGIC, exactly, and its bits are ``MAGIC_BITS`` plus that integer
MAGIC = 12582912.0
MAGIC_BITS = 0x4B400000
#: a bound below which an f32 (or f64) result cannot have rounded to inf (FLT_MAX is 3.4e38)
FINITE = 3e38


def magic_exact(m) -> bool:
    """Every value of the f32 array (or number) ``m`` is positive and finite, and ``MAGIC * m``
    is an f32 exactly (``m``'s 24-bit significand, times 3, fits 24 bits: its two lowest bits
    are zero, or one where ``3 * significand < 2**25``), and stays a normal number: then
    ``fma(MAGIC + i, m, -MAGIC * m)`` is ``RN(i * m)`` for every integer ``|i| <= 2**22``
    (:meth:`ptxc.lower.llvm_scalar.ScalarEmitter._scaled_small_int`)."""
    a = np.asarray(m, np.float32).astype(np.float64).reshape(-1)
    if not a.size or not np.all(np.isfinite(a)) or not np.all(a > 0):
        return False
    p = a * MAGIC                     # exact in f64 (24 + 2 bits)
    q = p.astype(np.float32).astype(np.float64)
    return bool(np.all(q == p) and np.all(p >= np.finfo(np.float32).tiny)
                and np.all(p < FINITE))


def round_to_magic_exact(m: np.ndarray) -> np.ndarray:
    """``m`` (f32) with each positive, normal value's significand rounded to a multiple of 4
    (to nearest, ties to even; at most 2 ulps, a relative 2.4e-7), so that it is
    :func:`magic_exact`; other values (zero, negative, subnormal, inf, NaN) unchanged. An int8
    layer's requantization multiplier rounded so is the fma form's (fold-qdq's
    ``fma-multipliers``: the scales are ptxc's own choice there). Values too large for
    ``MAGIC * m`` to be finite stay as they are. Example: 0.7880036 (0x3F49BA9B, significand
    odd) -> 0.7880037 (0x3F49BA9C)."""
    a = np.array(m, np.float32, copy=True)
    flat = a.reshape(-1)
    ok = np.isfinite(flat) & (flat >= np.finfo(np.float32).tiny) & (flat < FINITE / MAGIC)
    bits = flat.view(np.uint32)
    low = bits & 3
    up = (low == 3) | ((low == 2) & ((bits & 4) != 0))         # nearest multiple of 4, ties even
    rounded = (bits & ~np.uint32(3)) + np.where(up, np.uint32(4), np.uint32(0))
    bits[ok] = rounded[ok]
    return a
