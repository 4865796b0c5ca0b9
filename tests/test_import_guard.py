"""Import isolation (issue 13): a malformed model never takes the process down, and a
ModelProto's external data never leaves its folder.

Regression cases: a Split with 2 outputs and ``num_outputs=1`` aborted the process inside
``onnx.shape_inference`` (SIGABRT; the checker accepts it); ``LayerNormalization`` with
``axis=2**31``; ``import_onnx(onnx.load(p, load_external_data=False))`` read external data
through a symlinked directory relative to the current directory."""

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ptxc
from ptxc.errors import ModelError
from ptxc.frontend import onnx_guard
from test_import_errors import _external_model


def split_model(num_outputs=1, outputs=2):
    outs = [f"o{k}" for k in range(outputs)]
    n = helper.make_node("Split", ["x"], outs, axis=0, num_outputs=num_outputs, name="sp")
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 2))],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, (2, 2))
                           for o in outs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def layernorm_model(axis):
    n = helper.make_node("LayerNormalization", ["x", "s"], ["y"], axis=axis, name="ln")
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 2)),
                                     helper.make_tensor_value_info("s", TensorProto.FLOAT, (2,))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (4, 2))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_the_split_model_really_crashes_onnx():
    """The premise: onnx's shape inference aborts the process on it (in a child here)."""
    code = ("import onnx,sys; m=onnx.ModelProto(); m.ParseFromString(sys.stdin.buffer.read()); "
            "onnx.shape_inference.infer_shapes(m, strict_mode=True)")
    r = subprocess.run([sys.executable, "-c", code], input=split_model().SerializeToString(),
                       capture_output=True, timeout=120)
    assert r.returncode < 0  # killed by a signal


@pytest.mark.parametrize("model,match", [
    (split_model(1, 2), "num_outputs=1 but the node has 2 outputs"),
    (split_model(0, 1), "num_outputs=0"),
    (layernorm_model(2**31), "axis=2147483648 is beyond any tensor rank"),
    (layernorm_model(-2**40), "beyond any tensor rank"),
])
def test_known_crashers_are_refused_before_shape_inference(model, match):
    with pytest.raises(ModelError, match=match) as e:
        ptxc.import_onnx(model)
    assert "'sp'" in str(e.value) or "'ln'" in str(e.value)


def test_valid_split_and_layernorm_still_import():
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    out = ptxc.interpret(ptxc.import_onnx(split_model(2, 2)), {"x": x})
    np.testing.assert_array_equal(out["o1"], x[2:])
    ptxc.import_onnx(layernorm_model(-1))


def test_isolated_inference_turns_a_crash_into_a_model_error(monkeypatch):
    monkeypatch.setattr(onnx_guard, "validate_for_inference", lambda m, s: None)
    with pytest.raises(ModelError, match="crashed \\(signal"):
        ptxc.import_onnx(split_model(), isolate=True)


def test_isolated_inference_gives_the_same_module(monkeypatch):
    m = split_model(2, 2)
    want = ptxc.print_ir(ptxc.import_onnx(m))
    assert ptxc.print_ir(ptxc.import_onnx(m, isolate=True)) == want
    monkeypatch.setenv("PTXC_ISOLATE_IMPORT", "1")
    assert ptxc.print_ir(ptxc.import_onnx(m)) == want
    bad = layernorm_model(-1)
    bad.graph.node[0].input[0] = "nope"
    with pytest.raises(ModelError, match="ONNX checker"):
        ptxc.import_onnx(bad, isolate=True)


# ---- external data of a ModelProto -------------------------------------------------------------

def test_modelproto_with_external_data_needs_base_dir(tmp_path, monkeypatch):
    p = _external_model(tmp_path, "w.bin")
    (p.parent / "w.bin").write_bytes(np.full((2, 3), 2.0, np.float32).tobytes())
    proto = onnx.load(str(p), load_external_data=False)
    monkeypatch.chdir(p.parent)  # where the location would resolve without a folder
    with pytest.raises(ModelError, match="base_dir"):
        ptxc.import_onnx(proto)
    with pytest.raises(ModelError, match="base_dir"):
        ptxc.import_onnx(proto.SerializeToString())
    module = ptxc.import_onnx(proto, base_dir=p.parent)
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(ptxc.interpret(module, {"x": x})["y"], x + 2)
    assert proto.graph.initializer[0].data_location == TensorProto.EXTERNAL  # not filled in


def test_modelproto_external_data_under_a_symlinked_folder_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "w.bin").write_bytes(np.ones((2, 3), np.float32).tobytes())
    p = _external_model(tmp_path, "sub/w.bin")
    os.symlink(outside, p.parent / "sub")
    proto = onnx.load(str(p), load_external_data=False)
    with pytest.raises(ModelError, match="symlink|leaves"):
        ptxc.import_onnx(proto, base_dir=p.parent)
    with pytest.raises(ModelError, match="symlink|leaves"):
        ptxc.import_onnx(str(p))


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd"])
def test_modelproto_external_data_outside_the_folder_is_refused(tmp_path, location):
    p = _external_model(tmp_path, location)
    proto = onnx.load(str(p), load_external_data=False)
    with pytest.raises(ModelError, match="external data"):
        ptxc.import_onnx(proto, base_dir=p.parent)
