"""The float ops that a QDQ model keeps between a DequantizeLinear and a QuantizeLinear round as
onnxruntime's CPU kernels do, bit for bit, so the int8 values after the Q are onnxruntime's:
BatchNormalization is ``x * s + t`` with ``s = (1 / sqrt(var + eps)) * scale`` and
``t = B - mean * s`` in float32 (ptxc.dialects.graph.norm.bn_scale_shift), on the op's
reference, its lowering and its decomposition by graph-opt alike; an AveragePool sums each
window position by position in row-major order, then divides by the count. One ulp off, a
value rounds to the other integer now and then, and in a deep QDQ network those flips spread
(ResNet-50 quantized by onnxruntime moved by up to one logit step before these matched)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ptxc
from ptxc.rewrite.pass_manager import PassManager

RNG = np.random.default_rng(11)


def _model(node, inits, shape, out_shape):
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _ort(m, x):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def _all_paths(m, x, cpu=True):
    """ptxc's result through the imported op's reference, graph-opt then the interpreter, and
    the cpu engine."""
    raw = ptxc.import_onnx(m)
    opt = ptxc.import_onnx(m)
    PassManager("graph-opt").run(opt)
    out = {"reference": ptxc.interpret(raw, {"x": x})["y"],
           "graph-opt": ptxc.interpret(opt, {"x": x})["y"]}
    if cpu:
        out["cpu"] = ptxc.compile(m, target="cpu").run({"x": x})["y"]
    return out


def _bn(c=64):
    inits = {"s": RNG.uniform(0.5, 1.5, c), "b": RNG.standard_normal(c) * 0.1,
             "m": RNG.standard_normal(c) * 0.1, "v": RNG.uniform(0.5, 1.5, c)}
    inits = {k: v.astype(np.float32) for k, v in inits.items()}
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                            epsilon=1e-5)
    shape = [1, c, 14, 14]
    return _model(node, inits, shape, shape), shape


def test_batch_norm_equals_onnxruntime_bit_for_bit():
    m, shape = _bn()
    x = (RNG.standard_normal(shape) * 20).astype(np.float32)
    want = _ort(m, x)
    for path, got in _all_paths(m, x).items():
        assert np.array_equal(got, want), (path, int((got != want).sum()))


@pytest.mark.parametrize("kernel,strides,pads", [([7, 7], [1, 1], [0, 0, 0, 0]),
                                                 ([3, 3], [2, 2], [0, 0, 0, 0]),
                                                 ([3, 3], [2, 2], [1, 1, 1, 1])])
def test_average_pool_equals_onnxruntime_bit_for_bit(kernel, strides, pads):
    shape = [1, 256, 7, 7]
    out = [1, 256] + [(7 + pads[i] + pads[i + 2] - kernel[i]) // strides[i] + 1
                      for i in range(2)]
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=kernel, strides=strides,
                            pads=pads)
    m = _model(node, {}, shape, out)
    x = (np.abs(RNG.standard_normal(shape)) * 50).astype(np.float32)
    want = _ort(m, x)
    for path, got in _all_paths(m, x).items():
        assert np.array_equal(got, want), (path, int((got != want).sum()))
