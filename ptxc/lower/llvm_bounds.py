"""What the scalar emitter can prove about a value from the ops that compute it, and the MAGIC
numbers whose forms those proofs make exact (:mod:`ptxc.lower.llvm_scalar`'s docstring lists
the forms and why they pay).

Each proof lets one op take a cheaper form that gives the same bits:

* :func:`_range` (bounds carried through constants, clamps, ``math.roundeven``, sums and
  differences): the MAGIC forms' domain ``[-SMALL, SMALL]`` (:func:`_small`), and a float
  clamped inside i32's range that converts through ``fptosi.sat.i32`` (:func:`_clamped_to_i32`);
* :func:`_integral`: a float whose values are integers, cast to an int as
  ``bits(v + MAGIC) - MAGIC_BITS`` (with :func:`_rounded_plus_constant`, a rounding and a zero
  point in the same two adds);
* :func:`_int_bits` and :func:`_int_bound`: an int small enough to convert to f32 as
  ``float_bits(MAGIC_BITS + v) - MAGIC``;
* :func:`_finite_bound`: a float that is never NaN, whose cast needs no NaN select;
* :func:`_magic_exact_operand`: a multiplier ``m`` with which ``fma(MAGIC + i, m, -MAGIC * m)``
  is ``RN(i * m)`` (:func:`~ptxc.dialects.arith_magic.magic_exact`; fold-qdq's
  ``fma-multipliers`` rounds its multipliers so with
  :func:`~ptxc.dialects.arith_magic.round_to_magic_exact`);
* :func:`_tie_free_bound`: a ``max``/``min`` constant where ``llvm.maximum``/``minimum`` is
  numpy's result.

They read ptxc's IR only, not LLVM's, so they live apart from the emitter. MAGIC itself and
the multipliers exact with it are facts of f32 arithmetic that a graph pass uses too: they are
:mod:`ptxc.dialects.arith_magic`'s.
"""

from __future__ import annotations

import math

import numpy as np

from ..dialects.arith_magic import FINITE, MAGIC, MAGIC_BITS, magic_exact
from ..ir.core import Operation
from ..ir.types import I1, ScalarType


def _constant_value(v):
    op = getattr(v, "op", None)
    if op is None or op.name != "arith.constant":
        return None
    return op.attributes["value"]


def _constant_number(v) -> float | None:
    """``v``'s value when it is a numeric constant other than NaN (infinities included), else
    None."""
    x = _constant_value(v)
    if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x:
        return float(x)
    return None


#: the magnitude below which the MAGIC forms are exact
SMALL = 2.0 ** 22
#: MAGIC + 128, for a cast to 8 or 16 bits without its NaN select: even, so ``x + OFFSET_MAGIC``
#: still rounds ties to even, and ``z - OFFSET_MAGIC_BITS`` keeps a nonzero low byte where
#: ``z - MAGIC_BITS`` has none (:meth:`ScalarEmitter._rounded_to_int`); exact for x in
#: [-SMALL - 128, SMALL - 128]
OFFSET_MAGIC = MAGIC + 128
OFFSET_MAGIC_BITS = MAGIC_BITS + 128


def _range(v, depth: int = 8) -> tuple[float, float]:
    """``(lo, hi)``: every value of the float ``v`` but NaN lies in ``[lo, hi]`` (infinite
    where nothing bounds it). The bounds come from constants and pass through what is
    monotone: ``arith.max``/``min`` against a constant (a clamp), ``math.roundeven``, and sums
    and differences (rounding is monotone, so the computed ``x + y`` lies between the rounded
    sums of the bounds). Example: quantization's ``roundeven(min(max(q, -125.0), 130.0)) +
    -3.0`` lies in ``[-128, 127]``."""
    unknown = (-math.inf, math.inf)
    op = getattr(v, "op", None)
    if op is None or depth == 0 or not v.type.is_float:
        return unknown
    if op.name == "arith.constant":
        x = _constant_number(v)
        return unknown if x is None else (x, x)
    if op.name in ("arith.max", "arith.min"):
        for k in (0, 1):
            c = _constant_number(op.operands[1 - k])
            if c is not None:
                lo, hi = _range(op.operands[k], depth - 1)
                f = max if op.name == "arith.max" else min
                return f(lo, c), f(hi, c)
        return unknown
    if op.name == "math.roundeven":
        lo, hi = _range(op.operands[0], depth - 1)
        return float(np.rint(lo)), float(np.rint(hi))
    if op.name in ("arith.add", "arith.sub"):
        a, b = (_range(x, depth - 1) for x in op.operands)
        r = (a[0] + b[0], a[1] + b[1]) if op.name == "arith.add" else (a[0] - b[1], a[1] - b[0])
        return unknown if r[0] != r[0] or r[1] != r[1] else r
    return unknown


def _small(v) -> bool:
    """Every value of ``v`` is NaN or in [-SMALL, SMALL] (the MAGIC forms' domain)."""
    lo, hi = _range(v)
    return -SMALL <= lo and hi <= SMALL


def _rounded_plus_constant(v):
    """``(x, z)`` when ``v`` is ``math.roundeven(x) + z`` (or ``roundeven(x)``, z = 0) with an
    integer constant ``z`` and ``x`` in the MAGIC domain, else None: the cast of ``v`` to an
    int is then ``bits(x + MAGIC) - MAGIC_BITS + z`` (:meth:`ScalarEmitter._rounded_to_int`)."""
    op = getattr(v, "op", None)
    z = 0
    if op is not None and op.name in ("arith.add", "arith.sub"):
        x, c = op.operands
        zc = _constant_number(c)
        if zc is None and op.name == "arith.add":     # the constant first
            c, x = op.operands
            zc = _constant_number(c)
        if zc is None or not zc.is_integer() or abs(zc) > SMALL:
            return None
        z = int(zc) if op.name == "arith.add" else -int(zc)
        op = getattr(x, "op", None)
    if op is None or op.name != "math.roundeven" or not _small(op.operands[0]):
        return None
    return op.operands[0], z


def _int_bits(v, depth: int = 6) -> int:
    """An upper bound on the bits (sign included) of the integer ``v``: its type's width, or
    less where ``v`` is a widened narrow int, a constant, or a sum or difference of those (a
    dequantization's ``i32(x) - i32(zp)`` needs 10 bits)."""
    t = v.type
    op = getattr(v, "op", None)
    if op is None or depth == 0 or t.is_float:
        return t.bitwidth
    if op.name == "arith.cast" and not op.operands[0].type.is_float:
        s = op.operands[0].type
        narrow = s.bitwidth + (0 if s.is_signed else 1)
        return min(t.bitwidth, narrow) if s.bitwidth <= t.bitwidth else t.bitwidth
    if op.name == "arith.constant":
        x = op.attributes["value"]
        return int(x).bit_length() + 1 if isinstance(x, int) and not isinstance(x, bool) \
            else t.bitwidth
    if op.name in ("arith.add", "arith.sub"):
        return min(t.bitwidth, 1 + max(_int_bits(x, depth - 1) for x in op.operands))
    return t.bitwidth


def _small_int(v) -> bool:
    """The signed int ``v`` lies in ``[-2**22, 2**22)`` (:func:`_int_bound`), where
    ``float_bits(MAGIC_BITS + v) - MAGIC`` is its f32 exactly."""
    bound = _int_bound(v)
    return bound is not None and bound < 1 << 22


def _int_bound(v, depth: int = 6) -> int | None:
    """An upper bound on ``|v|`` for the signed integer ``v`` of at most 32 bits, or None:
    what :func:`_int_bits` knows, and besides a load's ``bound`` (the mma schedule's
    accumulator sums: contraction.accumulator_bound), a load of ``loop.global`` integers
    (their largest magnitude), sums and differences added up. Example (an int8 layer's
    requantization, ResNet-50's layer-1 conv3)::

        %acc = loop.load %staged[...] {bound = 1040384}
        %b = loop.load @bias[%n]                   max |bias| (weights) = 9000, say
        %s = arith.add %b, %acc                    |%s| <= 1049384 < 2**22: small
    """
    t = v.type
    op = getattr(v, "op", None)
    if not isinstance(t, ScalarType) or t.is_float or t == I1 or t.bitwidth > 32 or \
            not t.is_signed:
        return None
    if op is not None and depth > 0:
        if op.name == "loop.load":
            bound = op.attributes.get("bound")
            if bound is not None:
                return bound
            root = _root(op.operands[0])
            if getattr(root, "op", None) is not None and root.op.name == "loop.global":
                a = np.asarray(root.op.attributes["value"].array)
                if a.size and not np.issubdtype(a.dtype, np.floating):
                    return int(np.max(np.abs(a.astype(np.int64))))
        if op.name == "gpu.wgmma_wait" and op.attributes.get("bound") is not None:
            return op.attributes["bound"]
        if op.name == "loop.for":    # a carried value: its initial value and what is yielded
            body = op.regions[0].blocks[0]
            yielded = body.last_op.operands[v.index]
            parts = [_int_bound(x, depth - 1) for x in (op.operands[v.index], yielded)]
            if all(p is not None for p in parts):
                return max(parts)
        if op.name in ("arith.add", "arith.sub"):
            parts = [_int_bound(x, depth - 1) for x in op.operands]
            if all(p is not None for p in parts):
                return sum(parts)
    bits = _int_bits(v, depth)
    return (1 << (bits - 1)) if bits < t.bitwidth else None


def _integral(v, depth: int = 8) -> bool:
    """Every value of ``v`` is an integer (or NaN): a ``math.roundeven``, an int cast to a
    float, an integer constant, or sums and clamps of those (a quantization's zero point
    added to a rounded value)."""
    op = getattr(v, "op", None)
    if op is None or depth == 0:
        return False
    if op.name == "math.roundeven":
        return True
    if op.name == "arith.cast":
        return not op.operands[0].type.is_float
    if op.name == "arith.constant":
        x = op.attributes["value"]
        return isinstance(x, (int, float)) and not isinstance(x, bool) and float(x).is_integer()
    if op.name in ("arith.add", "arith.sub", "arith.min", "arith.max"):
        return all(_integral(x, depth - 1) for x in op.operands)
    return False


#: a bound's worst growth through one rounding (an f32 rounds by at most 2**-24 relative)
_ROUNDING = 1 + 2.0 ** -23


def _root(buffer):
    """The buffer a chain of ``loop.view``s looks into."""
    while getattr(buffer, "op", None) is not None and buffer.op.name == "loop.view":
        buffer = buffer.op.operands[0]
    return buffer


def _global_bound(op: Operation, cache: dict) -> float | None:
    """max |w| over a ``loop.global``'s constant data, None if any element is NaN or inf;
    ``cache`` keeps one scan per op (weights can be large)."""
    if op not in cache:
        a = op.attributes["value"].array
        with np.errstate(all="ignore"):
            m = float(np.max(np.abs(a.astype(np.float64)))) if a.size else math.inf
        cache[op] = m if m < FINITE else None
    return cache[op]


#: op -> how its operands' bounds bound its result (before the rounding's growth)
_BOUND_RULES = {
    "arith.mul": lambda a, b: a * b * _ROUNDING,
    "arith.add": lambda a, b: (a + b) * _ROUNDING,
    "arith.sub": lambda a, b: (a + b) * _ROUNDING,
    "math.fma": lambda a, b, c: (a * b + c) * _ROUNDING,
    "arith.max": max,
    "arith.min": max,
    "arith.neg": lambda a: a,
    "math.abs": lambda a: a,
    "math.roundeven": lambda a: a + 1,
    "math.floor": lambda a: a + 1,
    "math.ceil": lambda a: a + 1,
}


def _finite_bound(v, depth: int = 16, cache: dict | None = None) -> float | None:
    """An upper bound on ``|v|`` for every value the f32/f64 ``v`` takes, or None when ``v``
    might be NaN or infinite. Finite values stay finite through +, -, *, fma, max/min, select
    and rounding as long as nothing overflows, so a bound below
    :data:`~ptxc.dialects.arith_magic.FINITE` (each rounding allowed to grow it by
    :data:`_ROUNDING`) proves ``v`` is never NaN. The bounds come from
    constants, ints converted to floats and loads of ``loop.global`` weights; a function
    argument, a buffer written at run time or any other op gives None. A clamp does not make a
    value finite: ``max``/``min`` propagate NaN, so both operands must be bounded. ``cache``
    (kept by the caller across calls) remembers weights' and values' bounds. Example (an int8
    layer's requantization)::

        %f = arith.cast %acc : i32 to f32          |%f| <= 2**31
        %s = arith.mul %f, (loop.load @scale)      |%s| <= 2**31 * max|scale|
        %m = arith.min (arith.max %s, -128.0), 127.0       bounded: never NaN
    """
    t = v.type
    op = getattr(v, "op", None)
    if op is None or depth == 0 or not isinstance(t, ScalarType) or t.name not in ("f32", "f64"):
        return None
    cache = {} if cache is None else cache
    seen = cache.get(v)
    if seen is not None and (seen[1] is not None or seen[0] >= depth):
        return seen[1]     # a bound holds at any depth; None only as deep as it was looked for
    name = op.name
    bound = None
    if name == "arith.constant":
        x = _constant_number(v)
        bound = None if x is None else abs(x)
    elif name == "arith.cast":
        s = op.operands[0].type
        if isinstance(s, ScalarType) and not s.is_float:
            bound = 2.0 ** (_int_bits(op.operands[0]) - 1) if s.is_signed else 2.0 ** s.bitwidth
    elif name == "loop.load":
        root = _root(op.operands[0])
        if getattr(root, "op", None) is not None and root.op.name == "loop.global":
            bound = _global_bound(root.op, cache)
    elif name in _BOUND_RULES or name == "arith.select":
        args = [_finite_bound(x, depth - 1, cache) for x in (
            op.operands[1:] if name == "arith.select" else op.operands)]
        if all(a is not None for a in args):
            bound = max(args) if name == "arith.select" else _BOUND_RULES[name](*args)
    bound = bound if bound is not None and bound < FINITE else None
    cache[v] = (depth, bound)
    return bound


def _magic_exact_operand(v, cache: dict) -> bool:
    """``v`` is an f32 constant, or a load of a ``loop.global`` (weights: a per-channel
    requantization multiplier), whose every value is :func:`magic_exact`; ``cache`` (global op
    -> answer) keeps one scan per global."""
    x = _constant_number(v)
    if x is not None:
        return magic_exact(x)
    op = getattr(v, "op", None)
    if op is None or op.name != "loop.load" or v.type.name != "f32":
        return False
    root = _root(op.operands[0])
    if getattr(root, "op", None) is None or root.op.name != "loop.global":
        return False
    if root.op not in cache:
        cache[root.op] = magic_exact(root.op.attributes["value"].array)
    return cache[root.op]


def _tie_free_bound(name: str, v) -> bool:
    """``v``, the second operand of an f32/f64 ``max``/``min`` (``name``), is a constant whose
    NaN-propagating ``llvm.maximum``/``minimum`` is numpy's result exactly: not NaN, and either
    not zero (no +0/-0 tie) or the zero that numpy's f32/f64 loops return on a tie anyway (their
    second operand) and LLVM's ordering (-0 < +0) picks too: ``max(x, +0.0)`` (a relu) and
    ``min(x, -0.0)``."""
    x = _constant_number(v)
    if x is None:
        return False
    if x != 0:
        return True
    positive = math.copysign(1.0, x) > 0
    return positive if name == "max" else not positive


def _clamped_to_i32(v) -> bool:
    """``v`` is bounded inside i32's range (:func:`_range`), as
    quantization's saturation writes it. Example::

        %m = arith.min (arith.max %s, -128.0), 127.0;  %q = arith.cast %m to i8
        general cast: cvt.rzi.s64.f32 and a truncation;  this one: cvt.rzi.s32.f32
    """
    lo, hi = _range(v)
    return -2.0 ** 31 <= lo and hi <= 2.0 ** 31 - 128
