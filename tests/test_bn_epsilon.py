"""BatchNorm folding with an epsilon that matters.

With ONNX's default epsilon (1e-5) and variances near 1, ``sqrt(var)`` and ``sqrt(var + eps)``
differ by about 5e-6 relative: forgetting epsilon in the fold hides under float32 tolerances.
Here epsilon is 0.5 (and 1.0) and the variances are 0.01-0.1, so it changes the scale by a
factor of 2.5-7, and the means are far from zero, so the shift ``beta - mean * s`` matters too.
Each model is checked against onnxruntime after fold-batchnorm alone, after the whole graph-opt
pipeline, and compiled for the CPU; each test first asserts that epsilon moves the reference
output by much more than the tolerance, so it cannot pass by accident.
"""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ptxc
from ptxc.rewrite import PassManager

RNG = np.random.default_rng(7)
F = np.float32


def bn_params(c):
    return {"scale": RNG.uniform(0.5, 1.5, c).astype(F), "beta": RNG.standard_normal(c).astype(F),
            "mean": (2.0 * RNG.standard_normal(c)).astype(F),
            "var": RNG.uniform(0.01, 0.1, c).astype(F)}


def model_of(nodes, x_shape, consts):
    vi = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    m = helper.make_model(helper.make_graph(nodes, "g", vi, out, inits),
                          opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return onnx.shape_inference.infer_shapes(m)


def bn_node(src, eps):
    return helper.make_node("BatchNormalization", [src, "scale", "beta", "mean", "var"], ["y"],
                            epsilon=eps)


def onnxruntime_y(model, x):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def check(make, x, eps, rtol=1e-4):
    """``make(eps)`` builds the model; it must match onnxruntime everywhere, and ``eps`` must
    matter to the reference."""
    model = make(eps)
    want = onnxruntime_y(model, x)
    atol = rtol * float(np.abs(want).max())
    without = onnxruntime_y(make(0.0), x)
    assert np.abs(without - want).max() > 100 * atol, "epsilon does not matter here"
    for label, passes in (("fold-batchnorm", "fold-batchnorm"), ("graph-opt", "graph-opt")):
        module = ptxc.import_onnx(model)
        PassManager(passes).run(module)
        np.testing.assert_allclose(ptxc.interpret(module, {"x": x})["y"], want, rtol=rtol,
                                   atol=atol, err_msg=f"after {label}")
    np.testing.assert_allclose(ptxc.compile(model, target="cpu").run({"x": x})["y"], want,
                               rtol=rtol, atol=atol, err_msg="cpu target")


@pytest.mark.parametrize("eps", [0.5, 1.0])
def test_conv_bn_folds_with_epsilon(eps):
    x = RNG.standard_normal((1, 3, 6, 6)).astype(F)
    consts = {"w": (0.3 * RNG.standard_normal((4, 3, 3, 3))).astype(F),
              "b": RNG.standard_normal(4).astype(F), **bn_params(4)}
    check(lambda e: model_of([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1] * 4),
                              bn_node("c", e)], x.shape, consts), x, eps)


def test_gemm_bn_folds_with_epsilon():
    x = RNG.standard_normal((3, 5)).astype(F)
    consts = {"w": RNG.standard_normal((5, 6)).astype(F), **bn_params(6)}
    check(lambda e: model_of([helper.make_node("Gemm", ["x", "w"], ["c"]), bn_node("c", e)],
                             x.shape, consts), x, 0.5)


def test_a_batch_norm_that_folds_nowhere_keeps_epsilon():
    """After a pool there is no layer to fold into: the BN becomes ``x * s + t``."""
    x = RNG.standard_normal((1, 4, 6, 6)).astype(F)
    check(lambda e: model_of([helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2],
                                               strides=[2, 2]), bn_node("p", e)],
                             x.shape, bn_params(4)), x, 0.5)


def test_a_recognized_layer_norm_keeps_the_models_epsilon():
    """A LayerNorm written out (mean, sub, pow, mean, add eps, sqrt, div) with eps 0.5 over rows
    of variance ~0.1: recognize-patterns must carry 0.5 into the one op it makes."""
    x = (0.3 * RNG.standard_normal((3, 8))).astype(F)
    net = ptxc.Network("ln")
    t = net.add_input("x", x.shape)
    mean = net.add_reduce(t, "mean", axes=[1])
    d = net.add_elementwise(t, mean, "sub")
    var = net.add_reduce(net.add_elementwise(d, F(2.0), "pow"), "mean", axes=[1])
    sd = net.add_unary(net.add_elementwise(var, F(0.5), "add"), "sqrt")
    net.mark_output(net.add_elementwise(d, sd, "div"), "y")
    module = net.to_module()
    PassManager("recognize-patterns").run(module)
    assert [op.name for op in module.walk() if op.name == "graph.layer_normalization"]
    x64 = x.astype(np.float64)
    c = x64 - x64.mean(axis=1, keepdims=True)
    want = c / np.sqrt((c ** 2).mean(axis=1, keepdims=True) + 0.5)
    assert np.abs(want - c / np.sqrt((c ** 2).mean(axis=1, keepdims=True) + 1e-5)).max() > 0.1
    np.testing.assert_allclose(ptxc.interpret(module, {"x": x})["y"], want, rtol=1e-5,
                               atol=1e-6)
