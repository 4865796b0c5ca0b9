"""The exact division by a constant scale and the f32 rounding that quantization lowers to
(ptxc/lower/graph_to_tensor/quant.py: ``_saturate``, ``_exact_quotient``).

* The quotient sequence ``q0 = x r; e = fma(-q0, c, x); q = fma(e, r, q0)`` the lowering
  builds (interpreted from the IR it emits) equals numpy's ``np.float32(x) / np.float32(c)``
  bit for bit wherever ``|x / c| >= 1/4`` (the docstring's claim), for millions of random x
  and hundreds of scales, adversarial ones included (mantissa all ones, powers of two, one ulp
  above 1, exponents from -100 to 100); the whole quantization (rounding, zero point,
  saturation) equals the graph reference for every x, NaN, infinities and huge values
  included. The slow test checks every f32 mantissa of x for adversarial scales.
* A lowered QuantizeLinear and an int8 residual conv: the tensor-stage interpreter and the cpu
  engine equal the graph reference; their requantization has no f64 and no f32 division left.
"""

import numpy as np
import pytest

from ptxc.dialects.graph.quant import quantize
from ptxc.ir.builder import Builder
from ptxc.ir.core import Block
from ptxc.ir.interpreter import Interpreter
from ptxc.ir.types import F32, F64, I8, ScalarType
from ptxc.lower.graph_to_tensor.common import c as const
from ptxc.lower.graph_to_tensor.common import op_
from ptxc.lower.graph_to_tensor.quant import _exact_quotient, _saturate
from test_math_rounding import bits, finite_f32

U8 = ScalarType("ui8")


# ---- the exact quotient ----------------------------------------------------------------------

def _body(c_value, build):
    """A scalar block ``x -> build(bb, arith.div(x, c))`` built by the lowering's own code."""
    block = Block([F32])
    bb = Builder.at_end(block)
    y = op_(bb, "arith.div", block.args[0], const(bb, float(c_value), F32))
    bb.create("graph.yield", [build(bb, y)], result_types=[])
    return block


def quotient(x, c_value):
    """The quotient as the lowered body computes it (interpreted)."""
    block = _body(c_value, _exact_quotient)
    assert [o.name for o in block.ops].count("arith.div") == 0, "the division was not replaced"
    (out,) = Interpreter().run_block(block, [np.asarray(x, np.float32)])
    return np.asarray(out)


def quantized(x, c_value, zp, el):
    block = _body(c_value, lambda bb, y: _saturate(bb, y, const(bb, zp, el), el))
    names = [o.name for o in block.ops]
    assert "arith.div" not in names and "math.roundeven" in names
    assert not any(r.type == F64 for o in block.ops for r in o.results)
    (out,) = Interpreter().run_block(block, [np.asarray(x, np.float32)])
    return np.asarray(out)


def adversarial_scales():
    ones = np.float32(2 - 2 ** -23)                  # mantissa all ones
    out = [np.float32(2.0 ** k) for k in range(-100, 101, 9)]
    out += [ones * np.float32(2.0 ** k) for k in range(-100, 100, 11)]
    out += [np.float32(1 + 2 ** -23) * np.float32(2.0 ** k) for k in (-99, -30, -7, 0, 9, 99)]
    out += [np.float32(v) for v in (3, 0.1, 1 / 3, 1 / 255, 0.027879247, 1.5 - 2 ** -23,
                                    -0.25, -(2 - 2 ** -23), 2 ** -100, 2 ** 100)]
    return out


def random_scales(n, seed):
    return list(finite_f32(n, seed, -100, 100))


def samples_for(c_value, n, rng):
    """x around every kind of quotient: random magnitudes up to 2**24 |c|, ties (k + 1/2) c and
    their f32 neighbours, and small quotients near 1/4."""
    cv = abs(float(c_value))
    mag = np.exp2(rng.uniform(-3, 24, n)) * cv
    x = (mag * rng.choice([-1, 1], n)).astype(np.float32)
    k = rng.integers(-300, 300, n) + 0.5
    ties = (k * cv).astype(np.float32)
    near = np.nextafter(ties, np.where(rng.integers(0, 2, n) == 1, np.inf, -np.inf)
                        ).astype(np.float32)
    quarter = (rng.uniform(0.2, 0.3, n) * cv).astype(np.float32)
    return np.concatenate([x, ties, near, quarter])


def check_quotient(x, c_value):
    with np.errstate(all="ignore"):
        want = np.float32(x) / np.float32(c_value)
    got = quotient(x, c_value)
    cv = abs(np.float32(c_value))
    inside = (np.abs(x) <= cv * np.float32(2 ** 22)) & (np.abs(want) >= 0.25)
    bad = np.flatnonzero(bits(got[inside]) != bits(want[inside]))
    assert bad.size == 0, (c_value, x[inside][bad[:4]], got[inside][bad[:4]])


def test_quotient_equals_numpy_division_for_hundreds_of_scales():
    rng = np.random.default_rng(20)
    scales = adversarial_scales() + random_scales(300, 21)
    total = 0
    for cv in scales:
        x = samples_for(cv, 2500, rng)
        check_quotient(x, cv)
        total += x.size
    assert len(scales) > 300 and total > 3_000_000


def test_quantization_equals_the_graph_reference_for_every_x():
    rng = np.random.default_rng(22)
    specials = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 1e-45, -1e-45,
                           1.2e-38, 2 ** 30, -(2 ** 30)])
    for i, cv in enumerate(adversarial_scales() + random_scales(60, 23)):
        el = (I8, U8)[i % 2]
        zp = int(rng.integers(-128, 128)) if el == I8 else int(rng.integers(0, 256))
        x = np.concatenate([samples_for(cv, 2000, rng), specials,
                            finite_f32(2000, i, -126, 128)])
        with np.errstate(invalid="ignore"):   # NaN to an integer: numpy warns
            want = quantize(x, np.float32(cv), np.asarray(zp, el.np_dtype), el)
            got = quantized(x, cv, zp, el)
        assert got.dtype == want.dtype and np.array_equal(got, want), (cv, zp, el)


def test_divisor_out_of_range_keeps_the_division():
    for cv in (2.0 ** -110, 2.0 ** 110, 0.0):
        block = _body(np.float32(cv), _exact_quotient)
        assert "arith.div" in [o.name for o in block.ops]


@pytest.mark.slow
def test_quotient_exhaustive_over_x_mantissas():
    """Every f32 mantissa of x (the quotient's rounding depends on the mantissas only, away
    from underflow and overflow), in two binades, for adversarial scales."""
    mant = (np.arange(2 ** 23, dtype=np.uint32) | np.uint32(127 << 23)).view(np.float32)
    for cv in (np.float32(2 - 2 ** -23), np.float32(1 + 2 ** -23), np.float32(3),
               np.float32(0.1), np.float32(1.5 - 2 ** -23), np.float32(0.027879247),
               np.float32(2 - 2 ** -23) * np.float32(2.0 ** -90)):
        for shift in (0.0, 7.0):
            x = mant * np.float32(2.0 ** shift) * np.float32(2.0 ** np.frexp(float(cv))[1])
            check_quotient(x.astype(np.float32), cv)


# ---- whole lowerings ----------------------------------------------------------------------------

def _requant_ops(m):
    """Every (op name, operand types) in ``m``, and whether any value is f64."""
    names, f64 = set(), False
    for o in m.walk():
        for r in o.results:
            f64 |= r.type == F64
        names.add((o.name, tuple(str(v.type) for v in o.operands)))
    return names, f64


def test_lowered_quantize_linear_interpreter_and_cpu_engine():
    import ptxc
    from support.one_node import make_model
    from ptxc.compiler import as_module, run_stages
    rng = np.random.default_rng(30)
    for cv, zp in ((np.float32(0.027879247), np.int8(3)), (np.float32(2 - 2 ** -23), np.int8(0)),
                   (np.float32(1 / 255), np.uint8(128))):
        x = np.concatenate([samples_for(cv, 100_000, rng), finite_f32(50_000, 31, -40, 40),
                            np.float32([np.inf, -np.inf, 0.0, 3e38])])
        m = make_model("QuantizeLinear", [("x", x), "s", "z"], {"s": np.asarray(cv),
                                                                "z": np.asarray(zp)}, opset=13)
        want = quantize(x, cv, zp, ScalarType("i8" if zp.dtype == np.int8 else "ui8"))
        t = as_module(m)
        run_stages(t, "tensor")
        names, f64 = _requant_ops(t)
        assert not f64 and ("arith.div", ("f32", "f32")) not in names
        assert ("math.fma", ("f32", "f32", "f32")) in names
        got_t = ptxc.interpret(t, {"x": x})
        got_c = ptxc.compile(m, target="cpu").run({"x": x})
        for got in (got_t, got_c):
            assert np.array_equal(next(iter(got.values())), want)


def test_int8_residual_conv_requantizes_without_f64_or_division():
    import ptxc
    from support.int8_ir import conv_model, inputs_for, loop_module
    model = conv_model(2, 16, 6, 6, 32, 3, 3, pad=1, residual=True)
    feeds = inputs_for(model)
    want = ptxc.interpret(ptxc.import_onnx(model), feeds)
    got = ptxc.compile(model, target="cpu").run(feeds)
    for k in want:
        assert np.array_equal(got[k], want[k])
    m = loop_module(model, layout="nhwc", target="cuda")
    names, f64 = _requant_ops(m)
    assert not f64 and ("arith.div", ("f32", "f32")) not in names
    assert ("math.roundeven", ("f32",)) in names
