"""llvm_scalar's MAGIC forms: conversions without a conversion instruction where the integer is
small (on sm_90 conversions issue at an eighth of an add's rate; an int8 layer's requantization
did several per output element). Each form, compiled by the CPU JIT (the same LLVM code as the
GPU's), equals the interpreter bit for bit over every input of its domain or a dense sample of
it; the PTX of each has no conversion instruction where the form applies and keeps one where it
does not.
"""

import numpy as np
import pytest

from ptxc.dialects.loop import parallel_loop, run_main
from ptxc.driver.cpu import CpuProgram
from ptxc.ir.types import F32, ScalarType
from ptxc.ptx import assemble, ptxas_path
from ptxc.codegen import lower_to_ptx
from ptxc.rewrite.pass_manager import PassManager
from test_loop_dialect import buf, load, module, op, store

SMALL = 2.0 ** 22


def _ptx(m) -> str:
    PassManager("map-to-gpu").run(m)
    ptx = lower_to_ptx(m).ptx
    if ptxas_path() is not None:
        assemble(ptx, "sm_90")
    return ptx


def _same(got, want):
    if want.dtype.kind == "f":
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan)
        got, want = got[~nan], want[~nan]
    assert np.array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def _clamp(p, v, lo, hi):
    v = op(p, "arith.max", v, op(p, "arith.constant", value=lo, type=F32))
    return op(p, "arith.min", v, op(p, "arith.constant", value=hi, type=F32))


@pytest.mark.parametrize("src", ["i8", "ui8", "i16", "ui16"])
def test_small_int_to_f32_every_value(src):
    t = ScalarType(src)
    info = np.iinfo(t.np_dtype)
    x = np.arange(info.min, info.max + 1).astype(t.np_dtype)

    def body(b, xb, yb):
        _, p, (i,) = parallel_loop(b, (0,), (x.size,))
        store(p, op(p, "arith.cast", load(p, xb, i), to=F32), yb, i)
    mk = lambda: module({"x": buf((x.size,), t), "y": buf((x.size,), F32)}, ["y"], body)  # noqa
    got = CpuProgram.from_module(mk())({"x": x})["y"]
    _same(got, run_main(mk(), {"x": x})["y"])
    assert np.array_equal(got, x.astype(np.float32))
    assert "cvt.rn.f32" not in _ptx(mk())


def _values(seed) -> np.ndarray:
    """Dense around the edges of the domain and the ties: every half-integer near 0, near
    +-2**22 and +-2**23, random magnitudes up to 2**30, and NaN/inf."""
    rng = np.random.default_rng(seed)
    near = np.arange(-300, 301) / 2.0
    edges = np.concatenate([e + np.arange(-64, 65) / 2.0 for e in (SMALL, -SMALL, 2.0 ** 23,
                                                                    -2.0 ** 23)])
    rand = rng.standard_normal(20000) * np.exp2(rng.uniform(-20, 30, 20000))
    special = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30]
    return np.concatenate([near, edges, rand, special]).astype(np.float32)


def test_roundeven_of_a_small_clamped_value():
    x = _values(1)

    def body(b, xb, yb):
        _, p, (i,) = parallel_loop(b, (0,), (x.size,))
        store(p, op(p, "math.roundeven", _clamp(p, load(p, xb, i), -SMALL, SMALL)), yb, i)
    mk = lambda: module({"x": buf((x.size,), F32), "y": buf((x.size,), F32)}, ["y"], body)  # noqa
    want = run_main(mk(), {"x": x})["y"]
    _same(CpuProgram.from_module(mk())({"x": x})["y"], want)
    ptx = _ptx(mk())
    assert "cvt.rni" not in ptx and "add.rn.f32" in ptx


@pytest.mark.parametrize("to, lo, hi, zp", [("i8", -128.0, 127.0, 0.0), ("i8", -128.0, 127.0, -3.0),
                                            ("ui8", 0.0, 255.0, 128.0),
                                            ("i16", -32768.0, 32767.0, 7.0),
                                            ("i32", -SMALL, SMALL, 0.0)])
def test_requantization_chain_without_conversions(to, lo, hi, zp):
    """quantize's f32 saturation (graph_to_tensor/quant.py _saturate): clamp, roundeven, add
    the zero point, clamp to the type's range, cast."""
    x = _values(2)
    t = ScalarType(to)

    def body(b, xb, yb):
        _, p, (i,) = parallel_loop(b, (0,), (x.size,))
        r = op(p, "math.roundeven", _clamp(p, load(p, xb, i), -SMALL, SMALL))
        r = op(p, "arith.add", r, op(p, "arith.constant", value=zp, type=F32))
        store(p, op(p, "arith.cast", _clamp(p, r, lo, hi), to=t), yb, i)
    mk = lambda: module({"x": buf((x.size,), F32), "y": buf((x.size,), t)}, ["y"], body)  # noqa
    with np.errstate(invalid="ignore"):
        want = run_main(mk(), {"x": x})["y"]
    got = CpuProgram.from_module(mk())({"x": x})["y"]
    # NaN to i32: numpy gives INT_MIN, every compiled cast 0 (llvm_scalar's docstring)
    keep = ~np.isnan(x) if t.bitwidth == 32 else np.ones(x.size, bool)
    assert np.array_equal(got[keep], want[keep])
    assert np.all(got[np.isnan(x)] == 0)
    ptx = _ptx(mk())
    assert "cvt.rni" not in ptx and "cvt.rzi" not in ptx


def test_a_value_not_known_integral_keeps_its_conversion():
    """A clamped value that is not integral truncates toward zero: the cast stays a cvt.rzi."""
    x = _values(3)

    def body(b, xb, yb):
        _, p, (i,) = parallel_loop(b, (0,), (x.size,))
        store(p, op(p, "arith.cast", _clamp(p, load(p, xb, i), -128.0, 127.0),
                    to=ScalarType("i8")), yb, i)
    mk = lambda: module({"x": buf((x.size,), F32), "y": buf((x.size,), ScalarType("i8"))},  # noqa
                        ["y"], body)
    _same(CpuProgram.from_module(mk())({"x": x})["y"], run_main(mk(), {"x": x})["y"])
    assert "cvt.rzi.s32.f32" in _ptx(mk())


@pytest.mark.parametrize("src, zp", [("i8", -5), ("ui8", 128), ("i16", 300)])
def test_dequantization_difference_to_f32_every_value(src, zp):
    """dequantize's ``f32(i32(x) - i32(zp))``: the difference needs at most 18 bits, so its
    conversion is the MAGIC form too; every x."""
    t, i32 = ScalarType(src), ScalarType("i32")
    info = np.iinfo(t.np_dtype)
    x = np.arange(info.min, info.max + 1).astype(t.np_dtype)

    def body(b, xb, yb):
        _, p, (i,) = parallel_loop(b, (0,), (x.size,))
        d = op(p, "arith.sub", op(p, "arith.cast", load(p, xb, i), to=i32),
               op(p, "arith.constant", value=zp, type=i32))
        store(p, op(p, "arith.cast", d, to=F32), yb, i)
    mk = lambda: module({"x": buf((x.size,), t), "y": buf((x.size,), F32)}, ["y"], body)  # noqa
    got = CpuProgram.from_module(mk())({"x": x})["y"]
    assert np.array_equal(got, (x.astype(np.int64) - zp).astype(np.float32))
    _same(got, run_main(mk(), {"x": x})["y"])
    assert "cvt.rn.f32" not in _ptx(mk())


def test_a_wide_int_keeps_its_conversion():
    x = np.array([0, 1, -1, 2 ** 30, -(2 ** 31), 2 ** 31 - 1, 12345678], np.int32)
    i32 = ScalarType("i32")

    def body(b, xb, yb):
        _, p, (i,) = parallel_loop(b, (0,), (x.size,))
        store(p, op(p, "arith.cast", load(p, xb, i), to=F32), yb, i)
    mk = lambda: module({"x": buf((x.size,), i32), "y": buf((x.size,), F32)}, ["y"], body)  # noqa
    assert np.array_equal(CpuProgram.from_module(mk())({"x": x})["y"], x.astype(np.float32))
    assert "cvt.rn.f32.s32" in _ptx(mk())


@pytest.mark.parametrize("to, zp", [("i8", 0), ("i8", -3), ("i8", 127), ("ui8", 128), ("ui8", 0),
                                    ("i16", 300)])
def test_saturation_before_rounding(to, zp):
    """quantize's f32 saturation with a known zero point (graph_to_tensor/quant.py _saturate):
    ``cast(roundeven(clamp(x, lo - zp, hi - zp)) + zp)`` equals numpy's ``clip(rint(x) + zp,
    lo, hi)`` and compiles to one f32 add and one integer add: no conversion, no copysign."""
    x = _values(4)
    t = ScalarType(to)
    info = np.iinfo(t.np_dtype)

    def body(b, xb, yb):
        _, p, (i,) = parallel_loop(b, (0,), (x.size,))
        r = op(p, "math.roundeven", _clamp(p, load(p, xb, i), float(info.min - zp),
                                           float(info.max - zp)))
        if zp:
            r = op(p, "arith.add", r, op(p, "arith.constant", value=float(zp), type=F32))
        store(p, op(p, "arith.cast", r, to=t), yb, i)
    mk = lambda: module({"x": buf((x.size,), F32), "y": buf((x.size,), t)}, ["y"], body)  # noqa
    got = CpuProgram.from_module(mk())({"x": x})["y"]
    with np.errstate(invalid="ignore"):
        _same(got, run_main(mk(), {"x": x})["y"])
        ok = ~np.isnan(x)
        want = np.clip(np.rint(x[ok].astype(np.float64)) + zp, info.min, info.max)
    assert np.array_equal(got[ok], want.astype(t.np_dtype))
    assert np.all(got[~ok] == 0)
    ptx = _ptx(mk())
    assert "cvt.rni" not in ptx and "cvt.rzi" not in ptx and "copysign" not in ptx
