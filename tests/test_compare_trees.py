"""bench/compare_trees.py: the compile half runs in a child process with a tree's own ptxc (the
timing half needs a GPU and runs on the device machine)."""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from support.bench_scripts import load

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def _model(path):
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 16))
                                .astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]),
                           helper.make_node("Relu", ["m"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_child_compile_in_a_tree_gives_a_plan_and_its_ptx_hash(tmp_path):
    ct = load("compare_trees")
    _model(str(tmp_path / "m.onnx"))
    np.save(tmp_path / "calib.npy", np.random.default_rng(1).standard_normal((2, 16))
            .astype(np.float32))
    rows = {}
    for precision in ("fp16", "int8"):
        job = {"onnx": str(tmp_path / "m.onnx"), "calib": str(tmp_path / "calib.npy"),
               "batch": 4, "precision": precision, "plan": str(tmp_path / f"{precision}.plan")}
        rows[precision] = ct._run_child(ROOT, "child_compile", [job])
        assert os.path.getsize(job["plan"]) > 0
        assert rows[precision]["arch"].startswith("sm_") and rows[precision]["compile_s"] > 0
    assert rows["fp16"]["ptx_sha"] != rows["int8"]["ptx_sha"]   # the hash is of the code
