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
