"""The ONNX quantization ops (ptxc/dialects/graph/quant.py, frontend/convert/quant.py,
lower/graph_to_tensor/quant.py) against onnxruntime, element for element: the interpreter and
the compiled cpu path; PTX of the lowered ops assembles with ptxas."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ptxc
from support.one_node import make_model
from ptxc.errors import ModelError
from ptxc.ptx import assemble, ptxas_path

RNG = np.random.default_rng(7)


def _ort(model, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def _check(model, feeds, paths=("interpret", "cpu")):
    want = _ort(model, feeds)
    for path in paths:
        if path == "interpret":
            got = ptxc.interpret(ptxc.import_onnx(model), feeds)
        else:
            got = ptxc.compile(model, target="cpu").run(feeds)
        for g, w in zip(got.values(), want):
            g = np.asarray(g)
            assert g.dtype == w.dtype and g.shape == w.shape, path
            assert np.array_equal(g, w), (path, np.argwhere(g != w)[:5], g[g != w][:5],
                                          w[g != w][:5])


def _ties(shape, scale):
    """Values on and around the rounding ties of ``x / scale`` and past saturation."""
    k = RNG.integers(-600, 600, size=shape)
    return (k * 0.5 * scale + RNG.choice([0, 0, 1e-3, -1e-3], size=shape) * scale
            ).astype(np.float32)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_linear_matches_onnxruntime(dtype, per_axis):
    x = _ties((2, 3, 4, 5), 0.25)
    if per_axis:
        scale = np.array([0.25, 0.5, 0.125], np.float32)
        zp = np.array([0, 3, -2] if dtype == np.int8 else [128, 3, 250], dtype)
    else:
        scale, zp = np.array(0.25, np.float32), np.array(5 if dtype == np.int8 else 100, dtype)
    m = make_model("QuantizeLinear", [("x", x), "s", "z"], {"s": scale, "z": zp}, axis=1,
                   opset=13)
    _check(m, {"x": x})


def test_quantize_linear_random_scales_and_runtime_scale():
    x = (RNG.standard_normal((4, 64)) * 3).astype(np.float32)
    s = np.array(RNG.uniform(0.001, 0.1), np.float32)
    z = np.array(-7, np.int8)
    m = make_model("QuantizeLinear", [("x", x), ("s", s), ("z", z)], opset=19)
    _check(m, {"x": x, "s": s, "z": z})


def test_quantize_linear_default_uint8_and_output_dtype():
    x = _ties((3, 7), 0.1)
    m = make_model("QuantizeLinear", [("x", x), "s"], {"s": np.array(0.1, np.float32)},
                   opset=13)
    _check(m, {"x": x})
    m = make_model("QuantizeLinear", [("x", x), "s"], {"s": np.array(0.1, np.float32)},
                   opset=21, output_dtype=TensorProto.INT8)
    got = ptxc.interpret(ptxc.import_onnx(m), {"x": x})["y0"]
    want = np.clip(np.rint(x / np.float32(0.1)), -128, 127).astype(np.int8)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32])
@pytest.mark.parametrize("per_axis", [False, True])
def test_dequantize_linear_matches_onnxruntime(dtype, per_axis):
    info = np.iinfo(dtype) if dtype != np.int32 else np.iinfo(np.int16)
    x = RNG.integers(info.min, info.max + 1, size=(2, 4, 3)).astype(dtype)
    if per_axis:
        scale = RNG.uniform(0.01, 1, 4).astype(np.float32)
        zp = RNG.integers(info.min, info.max + 1, size=4).astype(dtype)
        if dtype == np.int32:
            zp[:] = 0
    else:
        scale = np.array(0.037, np.float32)
        zp = np.array(0 if dtype == np.int32 else 3, dtype)
    m = make_model("DequantizeLinear", [("x", x), "s", "z"], {"s": scale, "z": zp}, axis=1,
                   opset=13)
    _check(m, {"x": x})


def test_dynamic_quantize_linear_matches_onnxruntime():
    for x in [(RNG.standard_normal((3, 17)) * 4).astype(np.float32),
              np.abs(RNG.standard_normal((5, 5))).astype(np.float32) + 1.0,
              -np.abs(RNG.standard_normal((8,))).astype(np.float32) - 0.5]:
        m = make_model("DynamicQuantizeLinear", [("x", x)], n_out=3, opset=11)
        _check(m, {"x": x})


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_matmul_integer_matches_onnxruntime(dtype):
    lo, hi = (0, 256) if dtype == np.uint8 else (-128, 128)
    a = RNG.integers(lo, hi, size=(2, 5, 7)).astype(dtype)
    b = RNG.integers(lo, hi, size=(7, 6)).astype(dtype)
    az, bz = np.array(lo + 17, dtype), RNG.integers(lo, hi, size=6).astype(dtype)
    m = make_model("MatMulInteger", [("a", a), ("b", b), "az", "bz"], {"az": az, "bz": bz},
                   opset=10)
    _check(m, {"a": a, "b": b})


def test_conv_integer_matches_onnxruntime():
    x = RNG.integers(0, 256, size=(1, 4, 7, 6)).astype(np.uint8)
    w = RNG.integers(0, 256, size=(6, 2, 3, 3)).astype(np.uint8)
    m = make_model("ConvInteger", [("x", x), "w", "xz", "wz"],
                   {"w": w, "xz": np.array(120, np.uint8), "wz": np.array(130, np.uint8)},
                   opset=10, pads=[1, 0, 2, 1], strides=[2, 1], group=2)
    _check(m, {"x": x})


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_conv_matches_onnxruntime(per_channel, dtype):
    lo, hi = (0, 256) if dtype == np.uint8 else (-128, 128)
    x = RNG.integers(lo, hi, size=(2, 3, 9, 9)).astype(dtype)
    # uint8 x int8 w: onnxruntime's x86 kernels (vpmaddubsw) saturate pairs of products to
    # int16 when w uses all 8 bits, which is why quantize_static offers reduce_range; ptxc
    # computes the exact sum (== onnx's reference). 7-bit weights keep onnxruntime exact.
    wr = 64 if dtype == np.uint8 else 128
    w = RNG.integers(-wr, wr, size=(8, 3, 3, 3)).astype(np.int8)
    ws = (RNG.uniform(0.001, 0.01, 8) if per_channel else np.array(0.004)).astype(np.float32)
    wz = np.zeros(8 if per_channel else (), np.int8)
    bias = RNG.integers(-5000, 5000, size=8).astype(np.int32)
    consts = {"xs": np.array(0.02, np.float32), "xz": np.array(lo + 100, dtype), "w": w,
              "ws": ws, "wz": wz, "ys": np.array(0.05, np.float32),
              "yz": np.array(lo + 128 - 10, dtype), "b": bias}
    m = make_model("QLinearConv", [("x", x), "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                   consts, opset=10, pads=[1, 1, 1, 1], strides=[1, 2])
    _check(m, {"x": x})


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_matmul_matches_onnxruntime(dtype):
    lo, hi = (0, 256) if dtype == np.uint8 else (-128, 128)
    a = RNG.integers(lo, hi, size=(3, 4, 16)).astype(dtype)
    b = RNG.integers(lo, hi, size=(16, 5)).astype(dtype)
    consts = {"as": np.array(0.03, np.float32), "az": np.array(lo + 90, dtype), "b": b,
              "bs": np.array(0.011, np.float32), "bz": np.array(lo + 130, dtype),
              "ys": np.array(0.7, np.float32), "yz": np.array(lo + 120, dtype)}
    m = make_model("QLinearMatMul", [("a", a), "as", "az", "b", "bs", "bz", "ys", "yz"],
                   consts, opset=10)
    _check(m, {"a": a})


def test_refusals_name_the_node():
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    m = make_model("QuantizeLinear", [("x", x), "s", "z"],
                   {"s": np.ones(2, np.float32), "z": np.zeros(2, np.int8)}, opset=21,
                   axis=1, block_size=2)
    with pytest.raises(ModelError, match="quantizelinear_node.*blocked"):
        ptxc.import_onnx(m)
    m = make_model("QuantizeLinear", [("x", x), "s"], {"s": np.ones(3, np.float32)},
                   opset=13, axis=1)
    with pytest.raises(ModelError, match="quantizelinear_node.*per-axis scale"):
        ptxc.import_onnx(m)


@pytest.mark.slow
@pytest.mark.skipif(ptxas_path() is None, reason="ptxas is not installed on this machine")
def test_cuda_ptx_of_quant_ops_assembles():
    x = RNG.integers(0, 256, size=(1, 3, 8, 8)).astype(np.uint8)
    nodes = [
        helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "ys", "yz"], ["d"]),
        helper.make_node("QuantizeLinear", ["d", "ys", "yz"], ["y"]),
    ]
    from onnx import numpy_helper
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in {
        "xs": np.float32(0.02), "xz": np.uint8(128), "ys": np.float32(0.05),
        "yz": np.uint8(120), "ws": np.full(4, 0.01, np.float32), "wz": np.zeros(4, np.int8),
        "w": RNG.integers(-128, 128, size=(4, 3, 3, 3)).astype(np.int8)}.items()]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8,
                                                                     x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, (1, 4, 6, 6))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    # check_numerics interprets every pass on random inputs, map-to-gpu's lockstep launches too
    engine = ptxc.compile(m, target="cuda", arch="sm_90", check_numerics=True)
    report = assemble(engine.ptx, "sm_90")
    assert report is not None
    want = ptxc.interpret(ptxc.import_onnx(m), {"x": x})["y"]
    assert np.array_equal(ptxc.compile(m, target="cpu").run({"x": x})["y"], want)
