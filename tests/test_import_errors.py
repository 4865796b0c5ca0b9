"""Bad input gets a typed ptxc error that says what is wrong and where."""

import os

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ptxc
from ptxc.errors import BindingError, ModelError, ShapeInputError, UnsupportedOpError


def relu_model(dims=(2, 3), opset=17):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r0")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_truncated_file(tmp_path):
    data = relu_model().SerializeToString()
    p = tmp_path / "m.onnx"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match=str(p)):
        ptxc.import_onnx(str(p))


def test_random_bytes(tmp_path):
    p = tmp_path / "r.onnx"
    p.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ModelError, match="not a valid ONNX model"):
        ptxc.import_onnx(str(p))


def test_missing_file(tmp_path):
    with pytest.raises(ModelError, match="cannot read model"):
        ptxc.import_onnx(str(tmp_path / "nope.onnx"))


def test_checker_failure_is_model_error():
    m = relu_model()
    m.graph.node[0].input[0] = "undefined_tensor"
    with pytest.raises(ModelError, match="ONNX checker"):
        ptxc.import_onnx(m)


def test_every_unsupported_op_listed_at_once():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r0"),
             helper.make_node("Bernoulli", ["a"], ["b"], name="hm0"),  # random: out of scope
             helper.make_node("Bernoulli", ["b"], ["c"], name="hm1"),
             helper.make_node("Det", ["c"], ["y"], name="det0")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3]),
                                       helper.make_tensor_value_info("m", TensorProto.BOOL, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError) as e:
        ptxc.import_onnx(m)
    assert e.value.ops == {"Det": ["det0"], "Bernoulli": ["hm0", "hm1"]}
    assert "Bernoulli x2: 'hm0', 'hm1'" in str(e.value) and "Det x1" in str(e.value)


def test_unbound_symbolic_dim_is_named():
    m = relu_model(dims=("batch", 3))
    with pytest.raises(ModelError, match=r"input 'x': dimension 0 is symbolic \('batch'\)"):
        ptxc.import_onnx(m)
    module = ptxc.import_onnx(m, input_shapes={"x": (4, 3)})
    assert "tensor<4x3xf32>" in ptxc.print_ir(module)
    with pytest.raises(ModelError, match="model declares"):
        ptxc.import_onnx(m, input_shapes={"x": (4, 5)})
    with pytest.raises(ModelError, match="'z' is not an input"):
        ptxc.import_onnx(m, input_shapes={"z": (4, 3)})


def test_wrong_inputs_at_run_time():
    module = ptxc.import_onnx(relu_model())
    x = np.ones((2, 3), np.float32)
    with pytest.raises(BindingError, match="unknown input.*'X'"):
        ptxc.interpret(module, {"X": x})
    with pytest.raises(BindingError, match="shape \\[3, 2\\], expected \\[2, 3\\]"):
        ptxc.interpret(module, {"x": x.T.copy()})
    with pytest.raises(BindingError, match="dtype int64"):
        ptxc.interpret(module, {"x": x.astype(np.int64)})


def test_shape_input_at_run_time_names_the_input():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape0")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                                      helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ShapeInputError, match="reshape0.*constant_inputs") as e:
        ptxc.import_onnx(m)
    assert e.value.inputs == ("shape",)
    module = ptxc.import_onnx(m, constant_inputs={"shape": np.array([3, 2])})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(ptxc.interpret(module, {"x": x})["y"], x.reshape(3, 2))


def _external_model(tmp_path, location):
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    w.data_location = TensorProto.EXTERNAL
    del w.external_data[:]
    e = w.external_data.add()
    e.key, e.value = "location", location
    w.ClearField("raw_data")
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="a0")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    p = d / "m.onnx"
    p.write_bytes(m.SerializeToString())
    return p


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "sub/../../x.bin"])
def test_external_data_must_stay_inside_model_folder(tmp_path, location):
    p = _external_model(tmp_path, location)
    with pytest.raises(ModelError, match="external data"):
        ptxc.import_onnx(str(p))


def test_external_data_symlink_refused(tmp_path):
    (tmp_path / "outside.bin").write_bytes(np.ones((2, 3), np.float32).tobytes())
    p = _external_model(tmp_path, "w.bin")
    os.symlink(tmp_path / "outside.bin", p.parent / "w.bin")
    with pytest.raises(ModelError, match="symlink"):
        ptxc.import_onnx(str(p))


def test_external_data_inside_folder_loads(tmp_path):
    p = _external_model(tmp_path, "w.bin")
    (p.parent / "w.bin").write_bytes(np.full((2, 3), 2.0, np.float32).tobytes())
    module = ptxc.import_onnx(str(p))
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(ptxc.interpret(module, {"x": x})["y"], x + 2)


def test_old_opset_goes_through_version_converter():
    m = relu_model(opset=6)
    module = ptxc.import_onnx(m)
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(ptxc.interpret(module, {"x": x})["y"], np.maximum(x, 0))


def test_not_a_model_object():
    with pytest.raises(ModelError, match="expected an ONNX path"):
        ptxc.import_onnx(42)
