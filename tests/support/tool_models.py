"""Small ONNX models for the tool tests (bench, profile, compare, bisect): named nodes, seeded
random weights."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def cbr_model(channels: int = 8, size: int = 16, seed: int = 0) -> onnx.ModelProto:
    """x[1,3,S,S] -> Conv "conv1" -> BatchNormalization "bn1" -> Relu "relu1" -> Conv "conv2"
    -> Add "add1" (of a constant) -> Relu "relu2" -> GlobalAveragePool "gap" -> y[1,C,1,1]."""
    rng = np.random.default_rng(seed)
    c = channels

    def init(name, a):
        return numpy_helper.from_array(np.asarray(a, np.float32), name)
    inits = [init("w1", rng.standard_normal((c, 3, 3, 3)) * 0.3),
             init("b1", rng.standard_normal(c) * 0.1),
             init("scale", rng.uniform(0.5, 1.5, c)), init("shift", rng.standard_normal(c) * 0.1),
             init("mean", rng.standard_normal(c) * 0.1), init("var", rng.uniform(0.5, 1.5, c)),
             init("w2", rng.standard_normal((c, c, 3, 3)) * 0.2),
             init("k", rng.standard_normal((1, c, 1, 1)) * 0.1)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["t1"], "conv1", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["t1", "scale", "shift", "mean", "var"],
                              ["t2"], "bn1"),
             helper.make_node("Relu", ["t2"], ["t3"], "relu1"),
             helper.make_node("Conv", ["t3", "w2"], ["t4"], "conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["t4", "k"], ["t5"], "add1"),
             helper.make_node("Relu", ["t5"], ["t6"], "relu2"),
             helper.make_node("GlobalAveragePool", ["t6"], ["y"], "gap")]
    graph = helper.make_graph(
        nodes, "cbr", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 1, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def save(model: onnx.ModelProto, path) -> str:
    onnx.save(model, str(path))
    return str(path)
