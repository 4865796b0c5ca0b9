"""Reference semantics of issue 40, on the interpreter, the cpu engine and (``-m gpu``) cuda:

* Resize (linear, cubic) of an input holding -inf and +inf: a tap whose weight is exactly zero
  contributes nothing, so an infinity outside the kernel's support never turns into
  ``0 * inf = NaN`` (the interpreter used a dense weight matrix and gave NaN rows);
* integer overflow wraps (two's complement) as ONNX's reference (numpy) does: Pow is an exact
  wrapping power (the compiled engine saturated), Add/Sub/Mul/Neg/Abs/Sum/CumSum and the
  integer reductions wrap.

onnxruntime is the independent reference where it is defined; where it is not (its tap window
includes a zero-weight tap at an infinity; its double ``pow`` past the type or past 2**53; its
integer reductions, which do not wrap) the test says so and checks against numpy or Python's
integers instead."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ptxc

ONNX_T = {np.dtype(np.int8): TensorProto.INT8, np.dtype(np.int16): TensorProto.INT16,
          np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int64): TensorProto.INT64,
          np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.uint64): TensorProto.UINT64,
          np.dtype(np.float32): TensorProto.FLOAT}


def _model(node, inputs, out_type, out_shape, inits=(), opset=18):
    g = helper.make_graph([node], "g",
                          [helper.make_tensor_value_info(n, ONNX_T[np.dtype(t)], s)
                           for n, t, s in inputs],
                          [helper.make_tensor_value_info("y", ONNX_T[np.dtype(out_type)],
                                                         out_shape)], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _ort(m, feeds):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)[0]


def _ptxc(m, feeds, target):
    if target == "interp":
        return ptxc.interpret(ptxc.import_onnx(m), feeds)["y"]
    return ptxc.compile(m, target=target).run(feeds)["y"]


# ---- Resize with infinities ----------------------------------------------------------------

def _inf_input():
    x = np.random.default_rng(0).standard_normal((1, 2, 6, 8)).astype(np.float32)
    x[0, 0, 2, 3] = -np.inf      # inside
    x[0, 0, 4, 6] = np.inf
    x[0, 1, 0, 0] = -np.inf      # a corner: edge-clamped taps
    x[0, 1, 5, 7] = np.inf
    return x


def _resize_model(mode, ctm, scales, **attrs):
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode,
                            coordinate_transformation_mode=ctm, **attrs)
    return _model(node, [("x", np.float32, [1, 2, 6, 8])], np.float32, [None] * 4,
                  [numpy_helper.from_array(np.array(scales, np.float32), "scales")])


RESIZE_CASES = [  # (mode, coordinate transformation, scales, attributes)
    ("cubic", "half_pixel", [1, 1, 2, 2], {}),                  # the case
    ("cubic", "pytorch_half_pixel", [1, 1, 1.5, 0.75], {}),
    ("cubic", "asymmetric", [1, 1, 2, 2], {}),                  # integral source coordinates
    ("cubic", "align_corners", [1, 1, 0.5, 0.5], {}),
    ("cubic", "half_pixel", [1, 1, 0.5, 0.5], {"antialias": 1}),
    ("cubic", "asymmetric", [1, 1, 1.5, 0.75], {"antialias": 1}),
    ("cubic", "half_pixel", [1, 1, 2, 2], {"exclude_outside": 1}),
    ("linear", "half_pixel", [1, 1, 2, 2], {}),
    ("linear", "align_corners", [1, 1, 2, 2], {}),
    ("linear", "pytorch_half_pixel", [1, 1, 1.5, 0.75], {"antialias": 1}),
]


def _check_resize_with_infinities(got, m, x):
    """``got`` against onnxruntime: equal (infinities with their sign) wherever onnxruntime
    is not NaN; where ``got`` is finite, equal to onnxruntime on the input with its
    infinities replaced by 0 (a finite result means every infinity had weight zero)."""
    want = _ort(m, {"x": x})
    assert got.shape == want.shape
    defined = ~np.isnan(want)
    np.testing.assert_array_equal(np.isposinf(got[defined]), np.isposinf(want[defined]))
    np.testing.assert_array_equal(np.isneginf(got[defined]), np.isneginf(want[defined]))
    fin = defined & np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5, atol=1e-5)
    zeroed = _ort(m, {"x": np.where(np.isinf(x), 0, x).astype(np.float32)})
    ok = np.isfinite(got)
    np.testing.assert_allclose(got[ok], zeroed[ok], rtol=1e-5, atol=1e-5)
    return want


@pytest.mark.parametrize("mode,ctm,scales,attrs", RESIZE_CASES)
@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_resize_with_infinities_matches_onnxruntime(mode, ctm, scales, attrs, target):
    x = _inf_input()
    m = _resize_model(mode, ctm, scales, **attrs)
    got = _ptxc(m, {"x": x}, target)
    want = _check_resize_with_infinities(got, m, x)
    assert np.isnan(got).sum() <= np.isnan(want).sum()
    if (mode, ctm, scales, attrs) == RESIZE_CASES[0]:
        # channel 0 (one -inf, one +inf apart): no NaN, and as many finite values as
        # onnxruntime's; the interpreter gave NaN wherever a row or column held an infinity
        assert not np.isnan(got[0, 0]).any()
        assert np.isfinite(got[0, 0]).sum() == np.isfinite(want[0, 0]).sum() > 80


def test_interpreter_and_cpu_agree_tap_for_tap():
    """The reference and the compiled engine sum the same taps in the same order: equal NaN and
    infinity patterns on every case, values to f32 rounding."""
    x = _inf_input()
    for mode, ctm, scales, attrs in RESIZE_CASES:
        m = _resize_model(mode, ctm, scales, **attrs)
        a, b = _ptxc(m, {"x": x}, "interp"), _ptxc(m, {"x": x}, "cpu")
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_array_equal(a[np.isinf(a)], b[np.isinf(a)])
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("mode,ctm,scales,attrs", RESIZE_CASES)
def test_resize_with_infinities_on_gpu(mode, ctm, scales, attrs):
    x = _inf_input()
    m = _resize_model(mode, ctm, scales, **attrs)
    got = _ptxc(m, {"x": x}, "cuda")
    _check_resize_with_infinities(got, m, x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(_ptxc(m, {"x": x}, "cpu")))


# ---- integer overflow ---------------------------------------------------------------------

def _wrap(v: int, dtype) -> int:
    """``v`` wrapped to ``dtype`` (two's complement for signed types)."""
    info = np.iinfo(dtype)
    span = 1 << info.bits
    return (v - int(info.min)) % span + int(info.min)


def _exact_pow(a: int, e: int, dtype) -> int:
    if e >= 0:
        return _wrap(pow(a, e), dtype)
    if a == 0:
        return int(np.iinfo(dtype).min) if np.dtype(dtype).kind == "i" else 0
    return 1 if a == 1 else ((-1) ** e if a == -1 else 0)


def _pow_feeds(dtype, exp_dtype, n=64, seed=0):
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    a[: n // 2] = rng.integers(-9 if info.min < 0 else 0, 10, n // 2)   # small bases
    a[:6] = [info.min, info.max, 0, 1, -1 if info.min < 0 else 2, 2]
    eh = min(np.iinfo(exp_dtype).max, 200)
    e = rng.integers(0, eh, n, dtype=exp_dtype, endpoint=True)
    e[8:n // 2] = rng.integers(0, 10, n // 2 - 8)   # small powers of the small bases
    e[:8] = [2, 3, 0, 1, 63, 64, 31, 32]
    if np.iinfo(exp_dtype).min < 0:
        e[-8:] = rng.integers(-5, 0, 8)
        a[-8:] = [0, 1, -1 if info.min < 0 else 3, 2, -1 if info.min < 0 else 5, 7, 0, 1]
    return a, e.astype(exp_dtype)


POW_TYPES = [(np.int64, np.int64), (np.int32, np.int32), (np.int64, np.int32),
             (np.int32, np.int64), (np.int8, np.int64), (np.uint8, np.uint8),
             (np.uint64, np.int64)]


@pytest.mark.parametrize("dtype,exp_dtype", POW_TYPES)
@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_integer_pow_is_exact_and_wraps(dtype, exp_dtype, target):
    a, e = _pow_feeds(dtype, exp_dtype)
    m = _model(helper.make_node("Pow", ["a", "e"], ["y"]),
               [("a", dtype, [a.size]), ("e", exp_dtype, [e.size])], dtype, [a.size])
    want = np.array([_exact_pow(int(x), int(k), dtype) for x, k in zip(a, e)], dtype)
    got = _ptxc(m, {"a": a, "e": e}, target)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    nonneg = e >= 0
    with np.errstate(over="ignore"):   # numpy's wrapping power (ONNX's reference)
        np.testing.assert_array_equal(
            want[nonneg], np.power(a[nonneg], e[nonneg].astype(np.uint64)).astype(dtype)
            if dtype in (np.uint8, np.uint64) else np.power(a[nonneg], e[nonneg]).astype(dtype))
    if np.dtype(dtype).kind == "i" and dtype != np.int8:
        # onnxruntime's (int)pow(double, double) is exact within 2**53 and the type
        lim = min(53, np.iinfo(dtype).bits - 1)
        exact = np.array([k >= 0 and (abs(int(x)) <= 1 or abs(int(x)) ** int(k) < 2 ** lim)
                          for x, k in zip(a, e)])
        assert exact.sum() > 20
        np.testing.assert_array_equal(_ort(m, {"a": a, "e": e})[exact], want[exact])


@pytest.mark.parametrize("k", [2, 3, 40])
@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_integer_pow_by_a_constant(k, target):
    """A constant exponent: 2 and 3 are multiplied out by onnxruntime too (wrapping, so it is
    the reference there); 40 overflows, where numpy's wrapping power is."""
    a = np.array([3, 7, -7, 2**40, 2**31 + 1, -(2**62), 5, 0], np.int64)
    m = _model(helper.make_node("Pow", ["a", "e"], ["y"]), [("a", np.int64, [8])], np.int64,
               [8], [numpy_helper.from_array(np.array(k, np.int64), "e")])
    got = _ptxc(m, {"a": a}, target)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, np.power(a, k))
    if k in (2, 3):
        np.testing.assert_array_equal(got, _ort(m, {"a": a}))


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_integer_base_with_a_float_exponent_takes_the_minimum_past_the_range(dtype, target):
    """trunc(pow(double, double)); NaN, inf and out-of-range give the type's minimum, as
    onnxruntime (the compiled engine used to saturate to the maximum)."""
    a = np.array([3, 7, -7, 2**30, 3, -8, 0, 2], dtype)
    e = np.array([19.0, 64.0, 33.0, 2.0, 2.0, 0.5, -1.0, 2.5], np.float32)
    m = _model(helper.make_node("Pow", ["a", "e"], ["y"]),
               [("a", dtype, [8]), ("e", np.float32, [8])], dtype, [8], opset=15)
    got = _ptxc(m, {"a": a, "e": e}, target)
    np.testing.assert_array_equal(got, _ort(m, {"a": a, "e": e}))
    lo = np.iinfo(dtype).min
    assert got[1] == lo and got[2] == lo and got[5] == lo and got[6] == lo and got[4] == 9


def _edge_operands(dtype, n=64, seed=1):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    a[:4] = [info.min, info.max, info.min, info.max]
    b[:4] = [info.min, info.max, info.max, info.min]
    return a, b


ELEMENTWISE = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_add_sub_mul_neg_abs_sum_wrap(dtype, target):
    a, b = _edge_operands(dtype)
    n = a.size
    with np.errstate(over="ignore"):
        for op, f in ELEMENTWISE.items():
            m = _model(helper.make_node(op, ["a", "b"], ["y"]),
                       [("a", dtype, [n]), ("b", dtype, [n])], dtype, [n])
            want = f(a, b)
            assert want.dtype == dtype
            got = _ptxc(m, {"a": a, "b": b}, target)
            np.testing.assert_array_equal(got, want, err_msg=op)
            np.testing.assert_array_equal(_ort(m, {"a": a, "b": b}), want, err_msg=op)
        wrapped = np.array([_wrap(int(x) + int(y) + int(x), dtype) for x, y in zip(a, b)],
                           dtype)
        m = _model(helper.make_node("Sum", ["a", "b", "a"], ["y"]),
                   [("a", dtype, [n]), ("b", dtype, [n])], dtype, [n])
        np.testing.assert_array_equal(_ptxc(m, {"a": a, "b": b}, target), wrapped)
        for op, want in (("Neg", -a), ("Abs", np.abs(a))):
            m = _model(helper.make_node(op, ["a"], ["y"]), [("a", dtype, [n])], dtype, [n])
            got = _ptxc(m, {"a": a}, target)
            np.testing.assert_array_equal(got, want, err_msg=op)
            assert got[0] == np.iinfo(dtype).min                  # -MIN and |MIN| wrap to MIN


REDUCTIONS = {"ReduceSum": lambda x, d: x.sum(1, dtype=d),
              "ReduceProd": lambda x, d: x.prod(1, dtype=d),
              "ReduceSumSquare": lambda x, d: (x * x).sum(1, dtype=d),
              "ReduceL1": lambda x, d: np.abs(x).sum(1, dtype=d)}


@pytest.mark.parametrize("op", list(REDUCTIONS))
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_integer_reductions_wrap(op, dtype, target):
    """Wrapping sums and products (numpy's, and Python's integers reduced modulo 2**bits).
    onnxruntime does not wrap these (it gives the type's maximum where the result overflows,
    and 0 for int64 [max] * 8 + [min] * 8, a sum of rounded doubles), so it is the reference
    only on the rows whose every partial result is small."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(2)
    x = np.stack([np.full(16, info.max // 3, dtype),                # overflows
                  np.array([info.max] * 8 + [info.min] * 8, dtype),  # partial sums overflow
                  rng.integers(info.min, info.max, 16, dtype=dtype),
                  np.full(16, 3, dtype),                             # 3**16: fits
                  rng.integers(-3, 4, 16).astype(dtype)])            # fits
    m = _model(helper.make_node(op, ["x", "axes"], ["y"], keepdims=0),
               [("x", dtype, [5, 16])], dtype, [5],
               [numpy_helper.from_array(np.array([1], np.int64), "axes")])
    with np.errstate(over="ignore"):
        want = REDUCTIONS[op](x, dtype)
    py = {"ReduceSum": sum, "ReduceProd": lambda r: int(np.prod([1] + r, dtype=object)),
          "ReduceSumSquare": lambda r: sum(v * v for v in r),
          "ReduceL1": lambda r: sum(abs(v) for v in r)}[op]
    exact = [py([int(v) for v in row]) for row in x]
    np.testing.assert_array_equal(want, np.array([_wrap(v, dtype) for v in exact], dtype))
    assert not info.min <= exact[0] <= info.max                        # the case is real
    got = _ptxc(m, {"x": x}, target)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(_ort(m, {"x": x})[3:], want[3:])


def test_cuda_pow_is_integer_code():
    """The cuda build of an int64 Pow multiplies integers (no double pow, no conversion from
    a float): the same square-and-multiply as the cpu, assembled by ptxas where present."""
    m = _model(helper.make_node("Pow", ["a", "e"], ["y"]),
               [("a", np.int64, [64]), ("e", np.int64, [64])], np.int64, [64])
    ptx = ptxc.compile(m, target="cuda", arch="sm_90").ptx
    assert "mul.lo.s64" in ptx
    assert "cvt.rzi" not in ptx and "cvt.rn.f64" not in ptx and "pow" not in ptx.lower()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,exp_dtype", POW_TYPES)
def test_integer_pow_on_gpu(dtype, exp_dtype):
    a, e = _pow_feeds(dtype, exp_dtype)
    m = _model(helper.make_node("Pow", ["a", "e"], ["y"]),
               [("a", dtype, [a.size]), ("e", exp_dtype, [e.size])], dtype, [a.size])
    want = np.array([_exact_pow(int(x), int(k), dtype) for x, k in zip(a, e)], dtype)
    np.testing.assert_array_equal(_ptxc(m, {"a": a, "e": e}, "cuda"), want)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_overflow_on_gpu(dtype):
    a, b = _edge_operands(dtype)
    n = a.size
    with np.errstate(over="ignore"):
        for op, f in ELEMENTWISE.items():
            m = _model(helper.make_node(op, ["a", "b"], ["y"]),
                       [("a", dtype, [n]), ("b", dtype, [n])], dtype, [n])
            np.testing.assert_array_equal(_ptxc(m, {"a": a, "b": b}, "cuda"), f(a, b))
        x = np.concatenate([a, b]).reshape(8, 16)
        for op, f in REDUCTIONS.items():
            m = _model(helper.make_node(op, ["x", "axes"], ["y"], keepdims=0),
                       [("x", dtype, [8, 16])], dtype, [8],
                       [numpy_helper.from_array(np.array([1], np.int64), "axes")])
            np.testing.assert_array_equal(_ptxc(m, {"x": x}, "cuda"), f(x, dtype), err_msg=op)
