"""``math.roundeven`` and ``math.fma`` (ptxc/dialects/math.py), the exact scalar ops that
quantization's requantization is built from.

* The references (``np.rint``; :func:`ptxc.dialects.math.fma32`) against exact rational
  arithmetic (``fractions.Fraction``) on random and adversarial f32 values: ties, values that
  make the f64 sum of an fma land on an f32 midpoint (double rounding), large and small
  exponents, subnormals, overflow.
* The CPU JIT equals the interpreter bit for bit; the PTX has ``cvt.rni`` and ``fma.rn.f32``
  (no libdevice call) and assembles with ptxas.
"""

from fractions import Fraction

import numpy as np
import pytest

from ptxc.dialects.loop import parallel_loop, run_main
from ptxc.dialects.math import fma32
from ptxc.driver.cpu import CpuProgram
from ptxc.errors import VerifyError
from ptxc.ir.spec import lookup
from ptxc.ir.types import F16, F32, F64
from ptxc.ptx import assemble, ptxas_path
from ptxc.codegen import lower_to_ptx
from test_loop_dialect import buf, load, module, op, store
from test_round_tf32 import random_f32

needs_ptxas = pytest.mark.skipif(ptxas_path() is None,
                                 reason="ptxas (CUDA toolkit) is not installed on this machine")


def bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


# ---- an independent oracle: exact rationals, rounded to f32 ties to even ---------------------

def to_f32(v: Fraction) -> float:
    """The f32 nearest ``v`` (ties to even; past the overflow midpoint, infinity)."""
    if v == 0:
        return 0.0
    sign, a = (-1.0 if v < 0 else 1.0), abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()   # then 2**e <= a < 2**(e+1)
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    quantum = Fraction(2) ** (max(e, -126) - 23)
    n = round(a / quantum)                                     # Fraction rounds half to even
    r = n * quantum
    return sign * (float("inf") if r >= 2 ** 128 else float(r))


def exact_fma(a, b, c) -> np.ndarray:
    return np.array([to_f32(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))
                     for x, y, z in zip(a, b, c)], np.float32)


def finite_f32(n, seed, lo=-60, hi=60) -> np.ndarray:
    """Random f32 with exponents in [lo, hi) and random signs and mantissas."""
    rng = np.random.default_rng(seed)
    mant = rng.integers(0, 2 ** 23, n).astype(np.uint32)
    exp = rng.integers(lo + 127, hi + 127, n).astype(np.uint32)
    sign = rng.integers(0, 2, n).astype(np.uint32) << np.uint32(31)
    return (sign | (exp << np.uint32(23)) | mant).view(np.float32)


def double_rounding_cases(n, seed) -> tuple:
    """(a, b, c) with ``a b = +-h (1 - 2**-46)``, ``h`` half an ulp of ``c``: the exact
    ``a b + c`` lies just off an f32 midpoint of ``c`` (by far less than an f64 ulp), so the
    f64 sum lands on the midpoint, and rounding that again to f32 goes the wrong way whenever
    ``c``'s last mantissa bit is odd."""
    rng = np.random.default_rng(seed)
    cs = finite_f32(n, seed, -40, 40)
    h_exp = np.frexp(cs.astype(np.float64))[1] - 25               # h = ulp(c) / 2
    split = rng.integers(-20, 20, n)
    sign = np.where(rng.integers(0, 2, n) == 1, 1.0, -1.0)
    a = (sign * np.ldexp(1 + 2.0 ** -23, split)).astype(np.float32)
    b = np.ldexp(1 - 2.0 ** -23, h_exp - split).astype(np.float32)
    return a, b, cs


def test_roundeven_reference_is_round_half_even():
    x = np.concatenate([random_f32(4000, seed=3), finite_f32(4000, 4, -3, 26),
                        (np.arange(-64, 64) + 0.5).astype(np.float32),
                        np.float32([2 ** 23 - 0.5, 2 ** 23 + 1, 2 ** 24 + 2, 0.5 - 2 ** -25])])
    with np.errstate(invalid="ignore"):
        got = lookup("math.roundeven").fn(x)
    fin = np.isfinite(x)
    want = np.array([float(round(Fraction(float(v)))) for v in x[fin]], np.float32)
    assert np.array_equal(got[fin], want)
    assert np.array_equal(np.signbit(got[fin]), np.signbit(x[fin]))  # -0.3 -> -0.0
    assert np.array_equal(got[~fin & ~np.isnan(x)], x[~fin & ~np.isnan(x)])
    assert np.isnan(got[np.isnan(x)]).all()


def test_fma_reference_is_exact():
    rng = np.random.default_rng(5)
    n = 3000
    a, b, c = (finite_f32(n, s) for s in (1, 2, 3))
    # cancellation: c close to -a b
    c2 = (-(a.astype(np.float64) * b) * (1 + rng.standard_normal(n) * 2.0 ** -20)
          ).astype(np.float32)
    # results near the bottom (subnormal) and the top (overflow) of the range
    a3, b3 = finite_f32(n, 6, -75, -60), finite_f32(n, 7, -75, -60)
    c3 = finite_f32(n, 8, -126, -100) * np.float32(2.0 ** -23)   # subnormals too
    a4, b4, c4 = finite_f32(n, 9, 60, 64), finite_f32(n, 10, 60, 64), finite_f32(n, 11, 120, 128)
    da, db, dc = double_rounding_cases(n, 12)
    A = np.concatenate([a, a, a3, a4, da])
    B = np.concatenate([b, b, b3, b4, db])
    C = np.concatenate([c, c2, c3, c4, dc])
    got, want = fma32(A, B, C), exact_fma(A, B, C)
    assert np.array_equal(got, want), np.argwhere(got != want)[:5]
    # the adversarial set does defeat the naive f64 computation (it is a test of something)
    naive = (da.astype(np.float64) * db + dc).astype(np.float32)
    assert (naive != want[-n:]).sum() > n // 10


def test_fma_is_f32_only():
    def body(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), (4,))
        v = load(p, x, i)
        store(p, op(p, "math.fma", v, v, v), y, i)
    with pytest.raises(VerifyError, match="math.fma.*must be f32"):
        module({"x": buf((4,), F64), "y": buf((4,), F64)}, ["y"], body)


def _program(n, el):
    def body(b, x, y, z, r, f):
        _, p, (i,) = parallel_loop(b, (0,), (n,))
        xv = load(p, x, i)
        store(p, op(p, "math.roundeven", xv), r, i)
        if el == F32:
            store(p, op(p, "math.fma", xv, load(p, y, i), load(p, z, i)), f, i)
        else:
            store(p, xv, f, i)
    return module({"x": buf((n,), el), "y": buf((n,), el), "z": buf((n,), el),
                   "r": buf((n,), el), "f": buf((n,), el)}, ["r", "f"], body)


@pytest.mark.parametrize("el", [F32, F64, F16], ids=str)
def test_cpu_jit_equals_the_interpreter(el):
    if el == F32:
        da, db, dc = double_rounding_cases(2000, 13)
        r = random_f32(2000, seed=1)
        x = np.concatenate([r, da])
        y = np.concatenate([finite_f32(r.size, 14), db])
        z = np.concatenate([finite_f32(r.size, 15), dc])
    else:
        x = (finite_f32(4000, 16, -3, 12) if el == F16 else finite_f32(4000, 16, -3, 60)
             ).astype(el.np_dtype)
        x[:8] = np.array([0.5, 1.5, 2.5, -0.5, -2.5, np.inf, -np.inf, np.nan]).astype(x.dtype)
        y = z = x
    m = _program(x.size, el)
    feeds = {"x": x, "y": y, "z": z}
    want = run_main(m, feeds)
    got = CpuProgram.from_module(m)(feeds)
    for k in ("r", "f"):
        w, g = want[k], got[k]
        nan = np.isnan(w)
        assert np.array_equal(np.isnan(g), nan), k
        assert np.array_equal(g[~nan].view(f"u{g.itemsize}"), w[~nan].view(f"u{w.itemsize}")), k


@needs_ptxas
def test_ptx_rounds_and_fuses_in_one_instruction_each():
    from ptxc.rewrite.pass_manager import PassManager
    for el, want in ((F32, ("cvt.rni.f32.f32", "fma.rn.f32")), (F64, ("cvt.rni.f64.f64",)),
                     (F16, ("cvt.rni.f16.f16",))):  # LLVM folds the f32 detour
        m = _program(1000, el)
        PassManager("map-to-gpu").run(m)
        p = lower_to_ptx(m)
        for w in want:
            assert w in p.ptx, (el, w)
        assert "__nv_" not in p.ptx
        assemble(p.ptx, "sm_90")


# ---- a clamped float converts through i32 (llvm_bounds._clamped_to_i32) ----------------------

def _clamp_cast_program(n, lo, hi, to, src=F32):
    def body(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), (n,))
        v = op(p, "arith.max", load(p, x, i), op(p, "arith.constant", value=lo, type=src))
        v = op(p, "arith.min", v, op(p, "arith.constant", value=hi, type=src))
        store(p, op(p, "arith.cast", v, to=to), y, i)
    return module({"x": buf((n,), src), "y": buf((n,), to)}, ["y"], body)


@pytest.mark.parametrize("lo, hi, to, src", [
    (-128.0, 127.0, "i8", F32), (0.0, 255.0, "ui8", F32), (-2.0 ** 31, 2.0 ** 31 - 128, "i32", F32),
    (-300.0, 300.0, "i8", F32),            # in i32's range, beyond i8's: wraps as the general cast
    (-128.0, 127.0, "i8", F64), (-1e10, 1e10, "i32", F32)])   # the last: the general cast
def test_clamped_cast_jit_equals_interpreter_and_skips_the_64_bit_conversion(lo, hi, to, src):
    from ptxc.ir.types import ScalarType
    from ptxc.rewrite.pass_manager import PassManager
    to = ScalarType(to)
    x = np.concatenate([finite_f32(3000, 40, -3, 40), np.float32(
        [np.nan, np.inf, -np.inf, 0.5, -0.5, 127.5, -128.5, 255.9, 2.0 ** 31, -2.0 ** 31])]
    ).astype(src.np_dtype)
    m = _clamp_cast_program(x.size, lo, hi, to, src)
    with np.errstate(invalid="ignore"):
        want = run_main(m, {"x": x})["y"]
    got = CpuProgram.from_module(m)({"x": x})["y"]
    # NaN, and values beyond i32, to i32: numpy gives INT_MIN (x86's cvttss2si), the compiled
    # general cast 0 and wraps; a known difference of the general cast, left out here
    keep = (np.abs(x) < 2.0 ** 31) if to.bitwidth == 32 else np.ones(x.size, bool)
    assert np.array_equal(got[keep], want[keep])
    if ptxas_path() is None:
        return
    PassManager("map-to-gpu").run(m)
    ptx = lower_to_ptx(m).ptx
    s = "f32" if src == F32 else "f64"
    general = hi > 2.0 ** 31
    assert (f"cvt.rzi.s64.{s}" in ptx) == general and (f"cvt.rzi.s32.{s}" in ptx) != general
    assemble(ptx, "sm_90")
