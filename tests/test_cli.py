"""The ptxc command: explore a model at the graph stage, per-pass dumps, errors as one line; the
cuda target's compile/inspect/explore without a GPU (its run is a one-line error there)."""

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
    assert main(["explore", "light:squeezenet", "--print-ir-after-all", "--dump-dir", str(d),
                 "--dump-constants"]) == 0
    out = capsys.readouterr().out
    assert "IR Dump After" in out
    files = sorted(os.listdir(d))
    assert files[0].startswith("00-") and len(files) >= 2
    text = (d / files[-1]).read_text()
    assert ptxc.print_ir(ptxc.parse_ir(text)) == text


def test_explore_stage_of_another_target_is_a_clear_error(capsys):
    assert main(["explore", "light:squeezenet", "--stage", "ptx", "--target", "cpu"]) == 2
    assert "stage 'ptx' is the cuda target's" in capsys.readouterr().err


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
    assert main(["compile", str(model), "--target", "tpu"]) == 2
    assert "unknown target 'tpu'" in capsys.readouterr().err
    bad = tmp_path / "bad.plan"
    bad.write_bytes(b"PTXCPLAN" + b"\x00" * 10)
    assert main(["inspect", str(bad)]) == 2
    assert "ptxc: error:" in capsys.readouterr().err


def test_cuda_compile_inspect_explore_run_without_a_gpu(tmp_path, capsys, monkeypatch):
    from numba import cuda
    monkeypatch.setattr(cuda, "is_available", lambda: False)  # "no GPU", on any machine
    plan = tmp_path / "squeezenet.plan"
    assert main(["compile", "light:squeezenet", "--target", "cuda", "--arch", "sm_90",
                 "--no-cuda-graph", "-o", str(plan)]) == 0
    out = capsys.readouterr().out
    assert "<Engine cuda" in out and "ptx: sm_90" in out and "CUDA graph off" in out
    assert "device memory at the first run" in out and f"plan written to {plan}" in out
    assert main(["inspect", str(plan)]) == 0
    out = capsys.readouterr().out
    assert "target: cuda (sm_90)" in out and "'cuda_graph': False" in out
    assert "  kernel_0  layer " in out and " grid " in out and " block " in out
    assert " schedule " in out and "blobs ptx: 1" in out
    assert main(["run", str(plan)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ptxc: error: target cuda needs a GPU") and "Traceback" not in err
    assert main(["explore", "light:squeezenet", "--stage", "loop", "--target", "cuda",
                 "--no-report"]) == 0
    assert '"gpu.launch"' in capsys.readouterr().out
    assert main(["explore", "light:squeezenet", "--stage", "ptx", "--arch", "sm_80",
                 "--no-report"]) == 0
    out = capsys.readouterr().out
    assert ".target sm_80" in out and ".entry kernel_0(" in out
    assert main(["compile", "light:squeezenet", "--target", "cpu", "--arch", "sm_90"]) == 2
    assert "--arch and --no-cuda-graph are for --target cuda" in capsys.readouterr().err
    # the default target, auto: cpu without a GPU, cuda when --arch asks for it
    assert main(["compile", "light:squeezenet"]) == 0
    assert "<Engine cpu" in capsys.readouterr().out
    assert main(["compile", "light:squeezenet", "--arch", "sm_90"]) == 0
    assert "<Engine cuda" in capsys.readouterr().out


def test_cli_version_verbose_and_passing_check_numerics(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"ptxc {ptxc.__version__}"
    assert main(["-v", "explore", "light:squeezenet", "--check-numerics", "--no-report"]) == 0
    cap = capsys.readouterr()
    assert "// check-numerics: passed:" in cap.out
    assert "ptxc: ptxc.compiler: graph stage" not in cap.err  # explore does not compile


def test_cli_verbose_logs_compile_stages(tmp_path, capsys):
    from support.tool_models import cbr_model, save
    model = save(cbr_model(), tmp_path / "m.onnx")
    assert main(["-v", "compile", model, "--target", "cpu"]) == 0
    err = capsys.readouterr().err
    assert "ptxc: ptxc.compiler: graph stage (graph-opt) ..." in err
    assert "ptxc: ptxc.compiler: compiled in" in err
    assert main(["-q", "compile", model, "--target", "cpu"]) == 0
    assert capsys.readouterr().err == ""


def test_cli_early_one_line_file_errors(tmp_path, capsys):
    model = "light:squeezenet"
    assert main(["compile", model, "-o", str(tmp_path / "nodir" / "x.plan")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nodir" in err and "does not exist" in err
    assert main(["explore", model, "--dump-dir", "/proc/x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'/proc/x'" in err
    assert main(["run", model, "--input", f"data_0={tmp_path / 'missing.npy'}"]) == 2
    err = capsys.readouterr().err
    assert "missing.npy" in err and "does not exist" in err
    assert main(["run", str(tmp_path / "nope.onnx")]) == 2
    assert "nope.onnx" in capsys.readouterr().err


def test_cli_plan_refuses_compile_options(tmp_path, capsys):
    from support.small_nets import conv_relu_pool
    plan = tmp_path / "s.plan"
    ptxc.compile(conv_relu_pool(), target="cpu").save(plan)
    assert main(["run", str(plan), "--target", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "--target does not apply to a plan file" in err and "already compiled" in err
    assert main(["bench", str(plan), "--input-shape", "x=1x3x10x10", "--iterations", "1"]) == 2
    assert "--input-shape does not apply" in capsys.readouterr().err
    assert main(["bench", str(plan), "--iterations", "2", "--warmup", "0"]) == 0
    assert "2 timed runs" in capsys.readouterr().out
    # every compile-only shared option is refused, --calib too (it was ignored before)
    assert main(["run", str(plan), "--calib", str(tmp_path), "--layout", "nhwc"]) == 2
    assert "--layout, --calib do not apply" in capsys.readouterr().err


def test_cli_common_options_are_declared_once():
    """compile, run, bench and compare take the shared compile options from one table: the same
    flags with the same defaults and help on each (explore and bisect take a subset)."""
    from ptxc.cli import build_parser
    from ptxc.cli_options import GROUPS, OPTIONS
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices
    for cmd in ("compile", "run", "bench", "compare", "explore", "bisect"):
        actions = {a.dest: a for a in sub[cmd]._actions}
        shared = [d for d in GROUPS["compile"] if d in actions]
        assert shared, cmd
        for d in shared:
            o = OPTIONS[d]
            assert actions[d].option_strings == list(o.flags), (cmd, d)
            if cmd not in ("explore", "bisect"):    # their own --target default and help
                assert actions[d].default == o.default and actions[d].help == o.kwargs["help"]
        if cmd in ("compile", "run", "bench", "compare"):
            assert set(GROUPS["compile"]) <= set(actions), cmd


def test_cli_ctrl_c_exits_130_with_one_line(capsys, monkeypatch):
    import ptxc.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "_cmd_ops", interrupted)
    assert main(["ops"]) == 130
    assert capsys.readouterr().err == "ptxc: interrupted\n"


def test_progress_lines_only_on_a_terminal():
    import io
    import logging
    from support.small_nets import conv_relu_pool
    from ptxc.cli import setup_logging

    class Tty(io.StringIO):
        def isatty(self):
            return True
    tty, pipe = Tty(), io.StringIO()
    assert setup_logging(False, False, pipe) is None          # not a terminal: nothing
    assert setup_logging(False, True, tty) is None            # --quiet: nothing
    h = setup_logging(False, False, tty)
    try:
        ptxc.compile(conv_relu_pool(), target="cpu")
    finally:
        logging.getLogger("ptxc").removeHandler(h)
        logging.getLogger("ptxc").setLevel(h.previous_level)
    lines = tty.getvalue().splitlines()
    assert "ptxc: graph stage (graph-opt) ..." in lines
    assert any(line.startswith("ptxc: loop stage done in") for line in lines)
    assert lines[-1].startswith("ptxc: compiled in")
