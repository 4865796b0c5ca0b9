"""The Network builder: the same graph dialect as the importer, shapes known as layers are added,
bad layers named at once, and numerics equal to onnxruntime on its ONNX export."""

import numpy as np
import pytest

import ptxc
from support.light_models import onnxruntime_outputs
from ptxc.errors import ModelError


def tiny_net(rng):
    net = ptxc.Network("tiny")
    x = net.add_input("x", (2, 3, 8, 8))
    y = net.add_conv(x, rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
                     rng.standard_normal(4).astype(np.float32), padding=1, name="conv1")
    assert y.shape == (2, 4, 8, 8)
    y = net.add_batch_norm(y, *[rng.uniform(0.5, 1.5, 4).astype(np.float32) for _ in range(4)])
    y = net.add_activation(y, "relu", name="relu1")
    p = net.add_pooling(y, "max", kernel=2)
    assert p.shape == (2, 4, 4, 4)
    g = net.add_global_pooling(p, "average")
    f = net.add_flatten(g)
    out = net.add_fully_connected(f, rng.standard_normal((5, 4)).astype(np.float32),
                                  np.zeros(5, np.float32))
    out = net.add_softmax(out, axis=-1)
    net.mark_output(out, "prob")
    return net


def test_network_matches_import_of_its_onnx_export():
    net = tiny_net(np.random.default_rng(0))
    a = ptxc.print_ir(net.to_module())
    b = ptxc.print_ir(ptxc.import_onnx(net.to_onnx()))
    assert a == b
    assert '"graph.conv"' in a and 'loc("conv1")' in a and 'result_names = ["prob"]' in a


def test_network_numerics_vs_onnxruntime():
    rng = np.random.default_rng(1)
    net = tiny_net(rng)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    got = ptxc.interpret(net.to_module(), {"x": x})["prob"]
    ref = onnxruntime_outputs(net.to_onnx(), {"x": x})["prob"]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)


def test_onnx_export_has_the_lowest_ir_version_its_opset_needs():
    """Not this onnx package's newest IR version: an older onnxruntime (the H200 machine's reads
    IR 13 at most, onnx 1.23 writes 14) must open what ptxc exports."""
    import onnx
    model = tiny_net(np.random.default_rng(0)).to_onnx()
    onnx.checker.check_model(model)
    (opset,) = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    assert model.ir_version == 10 if opset >= 21 else model.ir_version <= 10
    assert model.ir_version < onnx.IR_VERSION


def test_bad_layer_fails_at_once_naming_it():
    net = ptxc.Network("bad")
    x = net.add_input("x", (1, 3, 8, 8))
    with pytest.raises(ModelError, match="conv_bad"):
        net.add_conv(x, np.ones((4, 5, 3, 3), np.float32), name="conv_bad")
    with pytest.raises(ModelError, match="unknown activation 'swishy'"):
        net.add_activation(x, "swishy")
    with pytest.raises(ModelError, match="already used"):
        net.add_input("x", (1,))
    with pytest.raises(ModelError, match="no outputs"):
        net.to_module()


def test_add_layer_reaches_any_supported_op():
    net = ptxc.Network()
    x = net.add_input("x", (2, 6))
    a, b = net.add_layer("Split", [x, np.array([2, 4], np.int64)], num_outputs=2, axis=1)
    assert a.shape == (2, 2) and b.shape == (2, 4)
    net.mark_output(net.add_layer("Concat", [b, a], axis=1)[0], "y")
    x0 = np.arange(12, dtype=np.float32).reshape(2, 6)
    y = ptxc.interpret(net.to_module(), {"x": x0})["y"]
    np.testing.assert_array_equal(y, np.concatenate([x0[:, 2:], x0[:, :2]], axis=1))
