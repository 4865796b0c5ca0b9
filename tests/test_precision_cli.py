"""The precision options on the command line and in plans: ``--fp16``, ``--tf32``,
``--precision P``, ``--precision-override NODE=fp32`` on compile, run and explore."""

import numpy as np
import pytest

import ptxc
from ptxc.cli import main

from test_precision import convnet


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "conv.onnx"
    path.write_bytes(convnet().to_onnx().SerializeToString())
    return str(path)


def test_explore_shows_the_precision_at_every_stage(model, capsys):
    assert main(["explore", model, "--fp16", "--stage", "graph", "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "xf16>" in out and '"graph.fused_conv"' in out
    assert main(["explore", model, "--tf32", "--stage", "loop"]) == 0
    assert "arith.round_tf32" in capsys.readouterr().out
    assert main(["explore", model, "--stage", "graph", "--no-report"]) == 0
    assert "f16" not in capsys.readouterr().out
    text = ptxc.explore(model, stage="tensor", precision="fp16")
    assert "xf16>" in text


@pytest.mark.slow
def test_compile_run_with_overrides_and_the_plan_records_them(model, tmp_path, capsys):
    plan = tmp_path / "m.plan"
    assert main(["compile", model, "--target", "cpu", "--fp16", "--precision-override",
                 "conv2=fp32", "-o", str(plan)]) == 0
    capsys.readouterr()
    eng = ptxc.load(str(plan))
    assert eng.precision == "fp16" and eng.precision_overrides == {"conv2": "fp32"}
    x = np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype(np.float32)
    ref = ptxc.compile(model, target="cpu").run({"x": x})["y"]
    got = eng.run({"x": x})["y"]
    assert np.abs(got - ref).max() <= 2e-2 * np.abs(ref).max()
    assert main(["run", model, "--target", "cpu", "--precision", "tf32"]) == 0
    assert "latency:" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--precision-override", "conv2"], "expected NODE=fp32"),
    (["--fp16", "--precision-override", "nope=fp32"], "names no node"),
    (["--precision", "fp8"], "unknown precision 'fp8'"),
    (["--fp16", "--tf32"], "conflicting precisions ['fp16', 'tf32']"),
])
def test_bad_precision_options_are_one_line_errors(model, capsys, argv, message):
    assert main(["compile", model, "--target", "cpu"] + argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ptxc: error:") and message in err and len(err.splitlines()) == 1
