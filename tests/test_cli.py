"""The ptxc command: explore a model at the graph stage, per-pass dumps, errors as one line."""

import os
import subprocess
import sys

import pytest

import ptxc
from ptxc.cli import main


def test_explore_light_model(capsys):
    assert main(["explore", "light:squeezenet", "--stage", "graph"]) == 0
    out = capsys.readouterr().out
    assert '"graph.fused_conv"' in out and "__elided__" in out
    # the op-count report comes first, as comments, so the text still parses
    assert out.startswith("// op") and "graph.relu" in out.split("// total")[0]


def test_explore_explain_names_fusions_and_near_misses(capsys):
    assert main(["explore", "light:inception_v1", "--explain", "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "[fuse-epilogues] FuseEpilogue at" in out and ": fired" in out
    assert "not fused: graph.concat has no scalar form" in out
    assert "// op" not in out


def test_explore_print_after_all_and_dump_dir(tmp_path, capsys):
    d = tmp_path / "dumps"
    assert main(["explore", "light:squeezenet", "--print-ir-after-all", "--dump-dir", str(d)]) == 0
    out = capsys.readouterr().out
    assert "IR Dump After" in out
    files = sorted(os.listdir(d))
    assert files[0].startswith("00-") and len(files) >= 2
    text = (d / files[-1]).read_text()
    assert ptxc.print_ir(ptxc.parse_ir(text)) == text


def test_explore_later_stage_is_a_clear_error(capsys):
    assert main(["explore", "light:squeezenet", "--stage", "ptx"]) == 2
    assert "not built yet" in capsys.readouterr().err


def test_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01garbage")
    assert main(["explore", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ptxc: error:") and "Traceback" not in err
    assert main(["explore", "light:nonexistent"]) == 2
    assert "resnet50" in capsys.readouterr().err


def test_ops_lists_supported(capsys):
    assert main(["ops"]) == 0
    assert capsys.readouterr().out.split() == list(ptxc.SUPPORTED_OPS)


@pytest.mark.slow
def test_console_entry_point_runs():
    r = subprocess.run([sys.executable, "-m", "ptxc", "explore", "light:squeezenet",
                        "--passes", ""], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert '"graph.concat"' in r.stdout


def test_compile_run_inspect_cpu(tmp_path, capsys):
    plan = tmp_path / "sq.plan"
    assert main(["compile", "light:squeezenet", "--target", "cpu", "-o", str(plan)]) == 0
    out = capsys.readouterr().out
    assert "<Engine cpu (data_0: tensor<1x3x224x224xf32>)" in out
    assert "memory: arena" in out and "lower bound" in out and plan.exists()
    assert main(["inspect", str(plan)]) == 0
    out = capsys.readouterr().out
    assert "target: cpu" in out and "input  data_0: float32[1x3x224x224]" in out
    assert "kernels:" in out and "memory plan: arena" in out
    outdir = tmp_path / "out"
    assert main(["run", str(plan), "--save-outputs", str(outdir)]) == 0
    out = capsys.readouterr().out
    assert "softmaxout_1: float32[1, 1000, 1, 1]" in out and "latency:" in out
    import numpy as np
    y = np.load(outdir / "softmaxout_1.npy")
    np.testing.assert_allclose(y.sum(), 1.0, rtol=1e-5)


def test_run_with_input_file_and_errors(tmp_path, capsys):
    import numpy as np
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = tmp_path / "relu.onnx"
    model.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
                      .SerializeToString())
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(model), "--input", f"x={tmp_path / 'x.npy'}",
                 "--save-outputs", str(tmp_path)]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), np.maximum(x, 0))
    capsys.readouterr()
    assert main(["run", str(model), "--input", f"z={tmp_path / 'x.npy'}"]) == 2
    assert "not inputs" in capsys.readouterr().err
    assert main(["compile", str(model), "--target", "cuda"]) == 2
    assert "not built yet" in capsys.readouterr().err
    bad = tmp_path / "bad.plan"
    bad.write_bytes(b"PTXCPLAN" + b"\x00" * 10)
    assert main(["inspect", str(bad)]) == 2
    assert "ptxc: error:" in capsys.readouterr().err
