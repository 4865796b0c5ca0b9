"""``ptxc inspect`` explains its rows: when a layer has several kernels (here a padded conv: its
input's border fill, the copy of its interior, and the conv) a legend line under ``kernels:``
says what such rows are; a plan without repeated layers (one Relu) has none."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from ptxc.cli import main
from ptxc.plan.inspect import LEGEND


def _model(path, width, op):
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]) if op == "Conv" \
        else helper.make_node("Relu", ["x"], ["y"])
    channels = 4 if op == "Conv" else 3
    g = helper.make_graph([node], "c",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [1, 3, width, width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         [1, channels, width, width])],
                          [w] if op == "Conv" else [])
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
                     .SerializeToString())


def test_inspect_explains_rows_of_one_layer(tmp_path, capsys):
    for op, legend in (("Conv", True), ("Relu", False)):
        model, plan = tmp_path / f"{op}.onnx", tmp_path / f"{op}.plan"
        _model(model, 10, op)
        assert main(["compile", str(model), "--target", "cuda", "--arch", "sm_90",
                     "-o", str(plan)]) == 0
        capsys.readouterr()
        assert main(["inspect", str(plan)]) == 0
        lines = capsys.readouterr().out.splitlines()
        rows = [ln for ln in lines if ln.startswith("  kernel_")]
        layers = [ln.split("layer ")[1].split()[0] for ln in rows]
        assert (len(set(layers)) < len(layers)) == legend, rows
        assert (LEGEND in lines) == legend
        if legend:
            assert lines[lines.index(LEGEND) - 1].startswith("kernels: ")
            assert "unrolled by 8 or 4" in LEGEND and "split-K" in LEGEND
