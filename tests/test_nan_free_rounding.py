"""The requantization's cast without its NaN select (llvm_bounds ``_finite_bound`` and
``ScalarEmitter._rounded_to_int``): where the value being rounded provably is never NaN (an
accumulator converted to f32 and scaled by constant weights) the MAGIC form drops ``select(isnan(x),
0, r)``; on sm_90 that is a ``setp.nan`` and a ``selp`` per output element. The bound analysis on
hand-built IR; the compiled chains (CPU JIT, the GPU's LLVM code) equal the interpreter over ties,
the saturation edges and huge magnitudes; a chain that can see NaN keeps the select; and in the
PTX of int8 layers no narrow store takes its bytes straight from an ``add.rn.f32`` (on an H200
that stored wrong bytes).
"""

import re

import numpy as np
import pytest

from ptxc.dialects.loop import parallel_loop, run_main
from ptxc.driver.cpu import CpuProgram
from ptxc.ir import DenseElements
from ptxc.ir.types import F16, F32, I32, ScalarType
from ptxc.lower.llvm_bounds import OFFSET_MAGIC, OFFSET_MAGIC_BITS, _finite_bound
from ptxc.ptx import assemble, ptxas_path
from ptxc.codegen import lower_to_ptx
from ptxc.rewrite.pass_manager import PassManager
from support.loop_ir import const as c, load, module, op, store
from test_magic_conversions import _ptx
from test_loop_dialect import buf

SMALL = 2.0 ** 22


def _global(b, name, w):
    return b.create("loop.global", [], {"name": name, "value": DenseElements(w)}).result


def _values_of(args, make):
    """The IR values ``make(builder, *buffers)`` returns (a dict), built inside a loop body."""
    out = {}

    def body(b, *bufs):
        _, p, (i,) = parallel_loop(b, (0,), (4,))
        out.update(make(b, p, i, *bufs))
    module(args, [], body, check=False)
    return out


# ---- the bound ---------------------------------------------------------------------------------

def test_bounds_of_constants_int_casts_and_weights():
    w = np.array([0.5, -3.0, 2.0, 0.25], np.float32)

    def make(b, p, i, x8, u8, acc):
        g = _global(b, "w", w)
        view = b.create("loop.view", [g], {"offset": 1, "shape": (2,), "strides": (2,)}).result
        a = op(p, "arith.cast", load(p, acc, i), to=F32)                      # |a| <= 2**31
        s = op(p, "arith.mul", a, load(p, g, i))                              # <= 3 * 2**31
        r = op(p, "math.roundeven", op(p, "arith.add", s, c(p, -0.5)))
        return {
            "const": op(p, "arith.add", op(p, "arith.mul", c(p, 3.0), c(p, -2.0)), c(p, 1.0)),
            "i8": op(p, "arith.cast", load(p, x8, i), to=F32),
            "ui8": op(p, "arith.cast", load(p, u8, i), to=F32),
            "acc": a, "scaled": s, "rounded": r,
            "view": load(p, view, i),
            "fma": op(p, "math.fma", a, c(p, 0.5), load(p, g, i)),
            "neg": op(p, "arith.neg", load(p, view, i)),
            "select": op(p, "arith.select", op(p, "arith.cmp", a, c(p, 0.0), predicate="lt"),
                         a, c(p, 7.0)),
            "clamp": op(p, "arith.min", op(p, "arith.max", s, c(p, -128.0)), c(p, 127.0)),
        }
    v = _values_of({"x8": buf((4,), "i8"), "u8": buf((4,), "ui8"), "acc": buf((4,), I32)}, make)
    bound = {k: _finite_bound(x) for k, x in v.items()}
    assert bound["const"] == pytest.approx(7.0) and bound["const"] >= 7.0
    assert bound["i8"] == 128.0 and bound["ui8"] == 256.0 and bound["acc"] == 2.0 ** 31
    assert bound["view"] == 3.0 and bound["neg"] == 3.0      # through the view to the global
    for k, exact in [("scaled", 3 * 2.0 ** 31), ("rounded", 3 * 2.0 ** 31 + 1.5),
                     ("fma", 2.0 ** 30 + 3), ("clamp", 3 * 2.0 ** 31)]:
        assert exact <= bound[k] <= exact * (1 + 1e-6), k      # a little room for rounding
    assert bound["select"] == 2.0 ** 31


def test_what_might_be_nan_or_inf_has_no_bound():
    def make(b, p, i, x, acc, h):
        a = op(p, "arith.cast", load(p, acc, i), to=F32)
        arg = load(p, x, i)
        inf_w = _global(b, "inf_w", np.array([1.0, np.inf, 2.0, 3.0], np.float32))
        nan_w = _global(b, "nan_w", np.array([1.0, 2.0, np.nan, 3.0], np.float32))
        return {
            "argument": arg,
            # a clamp does not remove NaN: max.NaN/min.NaN propagate it
            "clamped_argument": op(p, "arith.min", op(p, "arith.max", arg, c(p, -128.0)),
                                   c(p, 127.0)),
            "argument_times_bounded": op(p, "arith.mul", a, arg),
            "inf_constant": op(p, "arith.add", a, c(p, float("inf"))),
            "nan_constant": op(p, "arith.max", a, c(p, float("nan"))),
            "too_big_for_f32": c(p, 1e39),
            "inf_weight": op(p, "arith.mul", a, load(p, inf_w, i)),
            "nan_weight": op(p, "arith.mul", a, load(p, nan_w, i)),
            "overflow": op(p, "arith.mul", op(p, "arith.mul", a, c(p, 1e30)), c(p, 1e10)),
            "division": op(p, "arith.div", a, c(p, 3.0)),             # no rule: unknown
            "select_of_argument": op(p, "arith.select", op(p, "arith.cmp", a, c(p, 0.0),
                                                           predicate="lt"), a, arg),
            "f16": op(p, "arith.cast", load(p, acc, i), to=F16),
            "int": load(p, acc, i),
        }
    v = _values_of({"x": buf((4,)), "acc": buf((4,), I32), "h": buf((4,), F16)}, make)
    for k, x in v.items():
        assert _finite_bound(x) is None, k


def test_depth_limit_and_shared_operands():
    """A long chain past the depth is unknown; a chain reusing a value twice at every step
    (2**40 paths) is still bounded quickly."""
    def make(b, p, i, acc):
        x = op(p, "arith.cast", load(p, acc, i), to=F32)
        long = x
        for _ in range(20):
            long = op(p, "arith.neg", long)
        shared = c(p, 1.0)
        for _ in range(40):
            shared = op(p, "arith.max", shared, shared)
        return {"x": x, "long": long, "shared": shared}
    v = _values_of({"acc": buf((4,), I32)}, make)
    assert _finite_bound(v["x"]) == 2.0 ** 31
    assert _finite_bound(v["long"]) is None
    assert _finite_bound(v["long"], depth=32) == 2.0 ** 31
    assert _finite_bound(v["shared"], depth=64) == 1.0


# ---- compiled chains ------------------------------------------------------------------------

def test_offset_magic_rounds_ties_to_even_over_its_domain():
    """``bits(x + OFFSET_MAGIC) - OFFSET_MAGIC_BITS`` is ``rint(x)`` for every half-integer
    near 0 and near both ends of [-2**22 - 128, 2**22 - 128], and no further."""
    m = np.float32(OFFSET_MAGIC)
    assert int(m.view(np.uint32)) == OFFSET_MAGIC_BITS == 0x4B400080 and OFFSET_MAGIC % 2 == 0
    lo, hi = -SMALL - 128, SMALL - 128
    x = np.concatenate([np.arange(-600, 601) / 2.0] + [e + np.arange(-64, 1) / 4.0 * s
                                                         for e, s in ((hi, 1), (lo, -1))])
    x = x.astype(np.float32)
    got = (x + m).view(np.int32).astype(np.int64) - OFFSET_MAGIC_BITS
    np.testing.assert_array_equal(got, np.rint(x.astype(np.float64)))
    past = np.float32(hi + 2)
    assert int((past + m).view(np.int32)) - OFFSET_MAGIC_BITS != np.rint(past)



SCALES = np.array([0.5, 0.25, 1 / 3, 1.5e-3, 7.5, 1e6, -0.5, 2.0 ** -20], np.float32)
BIASES = np.array([0.0, 0.5, -0.25, 37.0, -100.5, 0.0, 1e3, 0.75], np.float32)


def _accumulators(seed=0) -> np.ndarray:
    """Every int in [-1100, 1100] (x.5 ties under the 0.5 and 0.25 scales, the -128/127 edges
    under most), the edges of i32 and random values over its whole range."""
    rng = np.random.default_rng(seed)
    return np.concatenate([np.arange(-1100, 1101), [2 ** 31 - 1, -2 ** 31, 2 ** 24 + 1],
                           rng.integers(-2 ** 31, 2 ** 31, 3000)]).astype(np.int32)


def _requantize(form, t, zp, lo, hi):
    """``cast(acc * scale + bias)`` to ``t`` with the quantization's saturation: "known_zp"
    (quant.py ``_saturate`` with a known zero point, ``cast(roundeven(clamp(y, lo - zp, hi -
    zp)) + zp)``), "clamp_last" (``cast(clamp(roundeven(clamp(y, +-2**22)) + zp, lo, hi))``)."""
    def body(b, accb, yb):
        sb, bb = _global(b, "scale", SCALES), _global(b, "bias", BIASES)
        _, p, (i, j) = parallel_loop(b, (0, 0), accb.type.shape)
        y = op(p, "arith.mul", op(p, "arith.cast", load(p, accb, i, j), to=F32), load(p, sb, j))
        y = op(p, "arith.add", y, load(p, bb, j))
        if form == "known_zp":
            r = op(p, "math.roundeven", _clamp(p, y, lo - zp, hi - zp))
            if zp:
                r = op(p, "arith.add", r, c(p, float(zp)))
        else:
            r = op(p, "math.roundeven", _clamp(p, y, -SMALL, SMALL))
            r = _clamp(p, op(p, "arith.add", r, c(p, float(zp))), lo, hi)
        store(p, op(p, "arith.cast", r, to=t), yb, i, j)
    return body


def _clamp(p, v, lo, hi):
    return op(p, "arith.min", op(p, "arith.max", v, c(p, float(lo))), c(p, float(hi)))


@pytest.mark.parametrize("form, to, zp", [
    ("known_zp", "i8", 0), ("known_zp", "i8", -3), ("known_zp", "ui8", 128),
    ("known_zp", "ui8", 0), ("known_zp", "i16", 0), ("known_zp", "i16", 300),
    ("clamp_last", "i8", 0), ("clamp_last", "i8", 5), ("clamp_last", "ui8", 128),
    ("clamp_last", "i16", 0), ("clamp_last", "i32", 0)])
def test_bounded_requantization_without_the_nan_select(form, to, zp):
    t = ScalarType(to)
    if to == "i32":
        lo, hi = -SMALL, SMALL
    else:
        info = np.iinfo(t.np_dtype)
        lo, hi = float(info.min), float(info.max)
    acc = np.repeat(_accumulators()[:, None], SCALES.size, 1)
    mk = lambda: module({"acc": buf(acc.shape, I32), "y": buf(acc.shape, t)}, ["y"],  # noqa
                        _requantize(form, t, zp, lo, hi))
    got = CpuProgram.from_module(mk())({"acc": acc})["y"]
    want = run_main(mk(), {"acc": acc})["y"]
    np.testing.assert_array_equal(got, want)
    y = acc.astype(np.float32) * SCALES + BIASES                       # numpy, in f32
    direct = np.clip(np.rint(np.clip(y, -SMALL, SMALL)).astype(np.float64) + zp, lo, hi)
    np.testing.assert_array_equal(got, direct.astype(t.np_dtype))
    assert np.any(got == lo) and np.any(got == hi)                     # both edges reached
    ptx = _ptx(mk())
    assert "setp.nan" not in ptx and "cvt.rni" not in ptx and "cvt.rzi" not in ptx
    for store, producer in _byte_producers(ptx):
        assert not (producer.startswith("add") and producer.endswith("f32")), store


def test_a_wide_range_to_a_narrow_int_keeps_the_select():
    """``cast(roundeven(clamp(y, +-2**22)))`` to i16 (wrapping) with no zero point: the offset
    magic's domain ends at 2**22 - 128, so the bounded value keeps the select (and the MAGIC
    form); still exact."""
    t = ScalarType("i16")
    acc = np.repeat(_accumulators(1)[:, None], SCALES.size, 1)

    def body(b, accb, yb):
        sb = _global(b, "scale", SCALES)
        _, p, (i, j) = parallel_loop(b, (0, 0), acc.shape)
        y = op(p, "arith.mul", op(p, "arith.cast", load(p, accb, i, j), to=F32), load(p, sb, j))
        store(p, op(p, "arith.cast", op(p, "math.roundeven", _clamp(p, y, -SMALL, SMALL)),
                    to=t), yb, i, j)
    mk = lambda: module({"acc": buf(acc.shape, I32), "y": buf(acc.shape, t)}, ["y"], body)  # noqa
    got = CpuProgram.from_module(mk())({"acc": acc})["y"]
    np.testing.assert_array_equal(got, run_main(mk(), {"acc": acc})["y"])
    assert "setp.nan" in _ptx(mk())


def test_an_input_that_can_be_nan_keeps_the_select():
    """A function argument scaled by a constant: NaN still gives 0 (inf saturates)."""
    x = np.concatenate([np.arange(-600, 601) / 2.0, [np.nan, np.inf, -np.inf, -np.nan, 1e30]])
    x = np.repeat(x.astype(np.float32)[:, None], SCALES.size, 1)
    t = ScalarType("i8")

    def body(b, xb, yb):
        sb = _global(b, "scale", SCALES)
        _, p, (i, j) = parallel_loop(b, (0, 0), x.shape)
        y = op(p, "arith.mul", load(p, xb, i, j), load(p, sb, j))
        store(p, op(p, "arith.cast", op(p, "math.roundeven", _clamp(p, y, -128, 127)), to=t),
              yb, i, j)
    mk = lambda: module({"x": buf(x.shape), "y": buf(x.shape, t)}, ["y"], body)  # noqa
    got = CpuProgram.from_module(mk())({"x": x})["y"]
    with np.errstate(invalid="ignore"):
        want = run_main(mk(), {"x": x})["y"]
    np.testing.assert_array_equal(got, want)
    assert np.all(got[np.isnan(x)] == 0) and np.any(np.isnan(x))
    assert "setp.nan" in _ptx(mk())


# ---- int8 layers' PTX ------------------------------------------------------------------------

def _kernels(ptx: str) -> dict:
    return {m.group(1): m.group(2) for m in re.finditer(r"\.entry (\w+)\((.*?)\n\}", ptx, re.S)}


#: instructions that only move or re-type an integer register (ptxas may make them nothing)
_MOVES = re.compile(r"mov\.|cvt\.[su](8|16|32|64)\.[su](8|16|32|64)$")


def _byte_producers(body: str):
    """(store, producer) for every 8- and 16-bit global store (vector ones too) and every
    instruction that computes a register it stores, looking through moves and integer
    re-typings (``cvt.u16.u32``, ``mov.b32 {%rs1, %rs2}, %r3``)."""
    writers = {}
    for line in body.splitlines():
        m = re.match(r"^\t(?:@!?%p\d+ )?([\w.]+)\s+(\{[^}]*\}|%\w+),?(.*);", line)
        if m:
            for reg in re.findall(r"%\w+", m.group(2)):
                writers.setdefault(reg, []).append((m.group(1), re.findall(r"%\w+", m.group(3))))

    def producers(reg, seen):
        for opcode, sources in writers.get(reg, []):
            if _MOVES.match(opcode):
                for s in sources:
                    if s not in seen:
                        seen.add(s)
                        yield from producers(s, seen)
            else:
                yield opcode
    for m in re.finditer(r"st\.global\.(?:v\d\.)?[bsu](?:8|16)\s+\[[^\]]*\],\s*\{?([^;}]*)",
                         body):
        for reg in re.findall(r"%\w+", m.group(1)):
            for opcode in producers(reg, {reg}):
                yield m.group(0), opcode


def _int8_layer(case, zy, conv, gemm):
    """(ONNX model, unmapped loop module) of an int8 layer: ``conv_nhwc`` (a 3x3 conv of 16
    channels, ``conv``: N, H, W, K), ``gemm_residual`` (130 x 96 x 72 with a residual) or
    ``gemm`` (``gemm``: M, K, N); ``zy`` the output's zero point."""
    from support.int8_ir import conv_model, gemm_model, loop_module
    if case == "conv_nhwc":
        model = conv_model(C=16, R=3, S=3, pad=1, zx=-5, zy=zy, **conv)
        return model, loop_module(model, layout="nhwc", target="cuda")
    model = gemm_model(130, 96, 72, zx=7, residual=True, zy=zy) if case == "gemm_residual" \
        else gemm_model(*gemm, zy=zy)
    return model, loop_module(model)


@pytest.mark.parametrize("case", ["gemm", "gemm_residual", "conv_nhwc"])
@pytest.mark.parametrize("zy", [0, -3])
def test_int8_layer_epilogue_has_no_nan_test(case, zy):
    """The mma kernels of int8 layers (the requantization of an i32 accumulator by constant
    scales) have no ``setp.nan``; every byte stored has passed an integer instruction after the
    f32 add that rounds it (scalar stores: an ``xor``/``add`` of the zero point or of the offset
    magic's 0x80; packed ones a ``prmt`` and an ``xor``/``add``)."""
    _, m = _int8_layer(case, zy, conv=dict(N=1, H=8, W=8, K=32), gemm=(64, 64, 48))
    PassManager("map-to-gpu").run(m)
    p = lower_to_ptx(m, arch="sm_90")
    if ptxas_path() is not None:
        assemble(p.ptx, "sm_90")
    kernels = _kernels(p.ptx)
    mma = [k.name for k in p.table.kernels if k.schedule == "mma"]
    assert mma
    for name in mma:
        body = kernels[name]
        assert "add.rn.f32" in body and "setp.nan" not in body, name
        stores = list(_byte_producers(body))
        assert stores, name
        for store, producer in stores:
            assert not (producer.startswith("add") and producer.endswith("f32")), (name, store)


@pytest.mark.gpu
@pytest.mark.parametrize("epilogue", ["fragment", "staged"])
@pytest.mark.parametrize("case", ["gemm", "gemm_residual", "conv_nhwc"])
@pytest.mark.parametrize("zy", [0, -3])
def test_int8_layers_without_the_nan_test_on_gpu(case, zy, epilogue):
    """On the GPU (the H200 stored wrong bytes when a byte store took an f32 add's register
    straight: llvm_scalar's module docstring), the int8 layers whose NaN select is gone give
    the graph interpreter's int8 answer bit for bit, scalar and packed stores alike."""
    import ptxc
    from support.int8_ir import inputs_for
    from test_ptx import run_on_gpu
    model, m = _int8_layer(case, zy, conv=dict(N=2, H=9, W=9, K=40), gemm=(70, 64, 50))
    PassManager(f"map-to-gpu{{mma-epilogue={epilogue}}}").run(m)
    x = inputs_for(model)
    want = ptxc.interpret(ptxc.import_onnx(model), x)
    got = run_on_gpu(lower_to_ptx(m), x)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
