"""Logic, shifts, non-strict comparisons, Mod, the trigonometric family, CastLike, Size and Range
(issue 11): interpreter and cpu against onnxruntime, cuda compiled with its PTX assembled."""

import numpy as np
import pytest
from onnx import helper, numpy_helper

import ptxc
from support.new_ops import check_model, graph_model
from support.one_node import rand

pytestmark = pytest.mark.slow  # each compiles for cpu and cuda (libdevice) and runs ptxas

RNG = np.random.default_rng(11)


def test_logic_and_comparisons():
    a, b = rand(3, 4, dtype="bool"), rand(4, dtype="bool")
    x, y = rand(3, 4), rand(3, 4)
    y[0, :2] = x[0, :2]  # ties for <= and >=
    nodes = [helper.make_node("And", ["a", "b"], ["and"]),
             helper.make_node("Or", ["a", "b"], ["or"]),
             helper.make_node("Xor", ["a", "b"], ["xor"]),
             helper.make_node("Not", ["xor"], ["not"]),
             helper.make_node("LessOrEqual", ["x", "y"], ["le"]),
             helper.make_node("GreaterOrEqual", ["x", "y"], ["ge"]),
             helper.make_node("And", ["le", "a"], ["le_and"])]
    feeds = {"a": a, "b": b, "x": x, "y": y}
    check_model(graph_model(nodes, feeds, ["and", "or", "xor", "not", "le", "ge", "le_and"]),
                feeds)


@pytest.mark.parametrize("dtype", ["uint8", "uint32", "int32", "int64"])
def test_bit_shift(dtype):
    bits = np.dtype(dtype).itemsize * 8
    x = RNG.integers(-100 if dtype[0] == "i" else 0, 200, size=(2, 8)).astype(dtype)
    n = np.array([0, 1, 3, bits - 1, 2, 5, 1, 0], dtype)
    nodes = [helper.make_node("BitShift", ["x", "n"], ["l"], direction="LEFT"),
             helper.make_node("BitShift", ["x", "n"], ["r"], direction="RIGHT")]
    feeds = {"x": x, "n": n}
    opset = 28 if dtype[0] == "i" else 21  # signed BitShift is opset 28 (onnx's reference)
    check_model(graph_model(nodes, feeds, ["l", "r"], opset=opset), feeds, cuda=dtype == "int64")


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "float32", "float64"])
def test_mod(dtype):
    if np.dtype(dtype).kind == "f":
        a = (rand(4, 6) * 10).astype(dtype)
        b = (rand(6) * 3).astype(dtype)
        fmods = [1]
    else:
        lo = -50 if dtype[0] == "i" else 0
        a = RNG.integers(lo, 50, size=(4, 6)).astype(dtype)
        b = RNG.integers(1, 9, size=(6,)).astype(dtype)
        if dtype[0] == "i":
            b = b * np.array([1, -1, 1, -1, 1, 1], dtype)
        fmods = [0, 1]
    nodes = [helper.make_node("Mod", ["a", "b"], [f"m{f}"], fmod=f) for f in fmods]
    feeds = {"a": a, "b": b}
    check_model(graph_model(nodes, feeds, [f"m{f}" for f in fmods]), feeds,
                cuda=dtype in ("int64", "float32"))


def test_mod_fmod0_float_is_numpy_mod():
    """ONNX asks fmod=1 for floats; ptxc computes numpy's mod for fmod=0 (onnxruntime refuses)."""
    a = (rand(5, 4) * 10).astype(np.float32)
    b = np.array([3.0, -3.0, 2.5, -0.5], np.float32)
    m = graph_model([helper.make_node("Mod", ["a", "b"], ["m"], fmod=0)], {"a": a, "b": b}, ["m"])
    feeds = {"a": a, "b": b}
    got_i = ptxc.interpret(ptxc.import_onnx(m), feeds)["m"]
    got_c = ptxc.compile(m, target="cpu").run(feeds)["m"]
    np.testing.assert_allclose(got_i, np.mod(a, b), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_c, np.mod(a, b), rtol=1e-6, atol=1e-6)


TRIG = ["Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh"]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_trigonometric_family(dtype):
    x = (RNG.uniform(-0.95, 0.95, size=(3, 7))).astype(dtype)
    big = (RNG.uniform(1.0, 4.0, size=(3, 7))).astype(dtype)
    nodes = [helper.make_node(op, ["big" if op == "Acosh" else "x"], [op.lower()]) for op in TRIG]
    feeds = {"x": x, "big": big}
    rtol = 2e-3 if dtype == "float16" else 1e-5
    check_model(graph_model(nodes, feeds, [op.lower() for op in TRIG]), feeds, rtol=rtol,
                atol=rtol, cuda=dtype == "float32")


def test_castlike_size_range():
    x = rand(2, 3, 4)
    like = np.zeros((1,), np.int32)
    start = helper.make_tensor("start", 7, [], [2])
    limit = helper.make_tensor("limit", 7, [], [11])
    delta = helper.make_tensor("delta", 7, [], [3])
    nodes = [helper.make_node("CastLike", ["x", "like"], ["xi"]),
             helper.make_node("Size", ["x"], ["n"]),
             helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("Mul", ["r", "n"], ["rn"])]
    feeds = {"x": x * 5, "like": like}
    check_model(graph_model(nodes, feeds, ["xi", "n", "rn"], inits=[start, limit, delta]), feeds)


def test_range_float_and_runtime_inputs_are_shape_inputs():
    m = graph_model([helper.make_node("Range", ["s", "l", "d"], ["r"])],
                    {"s": np.array(1.5, np.float32), "l": np.array(-2.0, np.float32),
                     "d": np.array(-0.75, np.float32)}, ["r"])
    with pytest.raises(ptxc.PtxcError, match="compile time"):
        ptxc.import_onnx(m)
    consts = {"s": np.array(1.5, np.float32), "l": np.array(-2.0, np.float32),
              "d": np.array(-0.75, np.float32)}
    out = ptxc.compile(m, target="cpu", constant_inputs=consts).run({})["r"]
    np.testing.assert_allclose(out, np.arange(1.5, -2.0, -0.75, dtype=np.float32))


def test_float_to_narrow_int_cast_wraps_as_onnxruntime():
    """Issue 11: the compiled float->uint8 cast saturated where the interpreter and onnxruntime
    wrap; both now wrap (values within int64)."""
    x = np.array([300.0, -1.0, 255.9, 511.0, -129.5, 70000.0, 3.7, -3.7], np.float32)
    nodes = [helper.make_node("Cast", ["x"], ["u8"], to=2), helper.make_node("Cast", ["x"], ["i8"], to=3),
             helper.make_node("Cast", ["x"], ["i16"], to=5)]
    check_model(graph_model(nodes, {"x": x}, ["u8", "i8", "i16"]), {"x": x}, cuda=False)


def test_batch_normalization_negative_epsilon_is_refused():
    x = rand(1, 2, 3, 3)
    p = [numpy_helper.from_array(np.ones(2, np.float32), n) for n in ("s", "b", "m", "v")]
    m = graph_model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                                      epsilon=-1.0, name="bn")], {"x": x}, ["y"], inits=p)
    with pytest.raises(ptxc.ModelError, match="'bn'.*epsilon must be >= 0"):
        ptxc.import_onnx(m)


def test_composed_elementwise_ops():
    x = (rand(3, 5) * 3).astype(np.float32)
    x[0, :3] = [np.inf, -np.inf, np.nan]
    y = rand(3, 5) * 3
    nodes = [helper.make_node("IsNaN", ["x"], ["nan"]), helper.make_node("IsInf", ["x"], ["inf"]),
             helper.make_node("IsInf", ["x"], ["pinf"], detect_negative=0),
             helper.make_node("Softsign", ["y"], ["ss"]),
             helper.make_node("ThresholdedRelu", ["y"], ["tr"], alpha=0.5),
             helper.make_node("Shrink", ["y"], ["sh"], lambd=0.7, bias=0.2),
             helper.make_node("Celu", ["y"], ["ce"], alpha=1.5),
             helper.make_node("Mish", ["y"], ["mi"])]
    feeds = {"x": x, "y": y}
    check_model(graph_model(nodes, feeds, ["nan", "inf", "pinf", "ss", "tr", "sh", "ce", "mi"],
                            opset=22), feeds, rtol=1e-5, atol=1e-6)


def test_sign_and_round_half_to_even():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -0.51, 3.0, 0.0, np.inf, -7.2],
                 np.float32)
    xi = np.array([-3, 0, 4], np.int32)
    nodes = [helper.make_node("Round", ["x"], ["r"]), helper.make_node("Sign", ["x"], ["s"]),
             helper.make_node("Sign", ["xi"], ["si"])]
    feeds = {"x": x, "xi": xi}
    want = check_model(graph_model(nodes, feeds, ["r", "s", "si"]), feeds, cuda=False)
    np.testing.assert_array_equal(want["r"], np.round(x))
