"""ptxc compare (against onnxruntime: per-output errors, pass/fail, exit status, layerwise) and
ptxc bisect (names the first wrong rewrite), on a model that matches and on one made wrong by a
deliberately wrong pattern or perturbed weights."""

import json

import attrs
import numpy as np
import pytest

import ptxc
import ptxc.driver.load
from ptxc.cli import main
from ptxc.rewrite.driver import apply_patterns_greedily
from ptxc.rewrite.pass_ import Pass, add_pass
from ptxc.rewrite.pattern import RewritePattern
from ptxc.tools.bisect import bisect_model
from ptxc.tools.compare import compare_model, diff

from support.tool_models import cbr_model, save


class AddBecomesSub(RewritePattern):
    """Deliberately wrong: ``add(a, b)`` at ONNX node "add1" becomes ``sub(a, b)``."""

    root = "graph.add"

    def match_and_rewrite(self, op, rewriter):
        if op.loc != "add1":
            return False
        rewriter.replace_op(op, rewriter.create("graph.sub", list(op.operands)))
        return True


@add_pass
@attrs.frozen
class WrongAddPass(Pass):
    """Test only: applies :class:`AddBecomesSub` (a wrong rewrite).

    Before:
        %y = "graph.add"(%a, %b) loc("add1")
    After:
        %y = "graph.sub"(%a, %b) loc("add1")
    """

    name = "test-wrong-add"

    def run(self, module) -> bool:
        return apply_patterns_greedily(module, [AddBecomesSub])


WRONG = "test-wrong-add,graph-opt"


def test_diff_reports_max_errors_and_where():
    ref = np.zeros((2, 3), np.float32)
    got = ref.copy()
    got[1, 2] = 0.5
    ref[0, 1], got[0, 1] = 2.0, 2.2     # rel error 0.1 at (0, 1)
    d = diff("y", got, ref, atol=1e-3, rtol=1e-2)
    assert not d.passed and d.bad == 2
    assert d.max_abs == pytest.approx(0.5) and d.abs_at == (1, 2)
    assert d.max_rel == pytest.approx(0.1, rel=1e-5) and d.rel_at == (0, 1)
    assert diff("y", ref, ref, 0, 0).passed


def test_compare_matching_model(tmp_path):
    r = compare_model(cbr_model(), target="cpu")
    assert r.passed and len(r.outputs) == 1 and r.outputs[0].name == "y"
    assert r.outputs[0].max_abs < 1e-4


def test_compare_layerwise_names_the_first_wrong_layer():
    model = cbr_model()
    good = compare_model(model, layerwise=True)
    assert good.passed and [o.name for o in good.layers] == ["t3", "t6"]
    # the graph with a wrong rewrite in it: conv1's layer is right, conv2+add1+relu2's is not
    from ptxc.tools import compare as cmp
    engine = ptxc.compile(cmp.with_outputs(model, ["t3", "t6"])[0], target="cpu",
                          graph_passes=WRONG)
    bad = compare_model(cmp.with_outputs(model, ["t3", "t6"])[0], engine=engine)
    assert not bad.passed
    by = {o.name: o for o in bad.outputs}
    assert by["t3"].passed and not by["t6"].passed and not by["y"].passed


def test_cli_compare_exit_status_and_json(tmp_path, capsys, monkeypatch):
    path = save(cbr_model(), tmp_path / "m.onnx")
    j = tmp_path / "r.json"
    assert main(["compare", path, "--target", "cpu", "--json", str(j)]) == 0
    out = capsys.readouterr().out
    assert "PASS y[1, 8, 1, 1]: max abs" in out and out.rstrip().endswith("PASSED")
    assert json.loads(j.read_text())["passed"] is True
    # a perturbed plan: its weights scaled by 1.01 after compiling
    plan = tmp_path / "m.plan"
    assert main(["compile", path, "--target", "cpu", "-o", str(plan)]) == 0
    real_load = ptxc.driver.load.load_plan

    def perturbed(p, **kw):
        e = real_load(p, **kw)
        g = e.program._globals
        for k, a in g.items():
            if a.dtype.kind == "f" and a.size > 8:
                g[k] = a * np.float32(1.01)
        return e
    monkeypatch.setattr(ptxc.driver.load, "load_plan", perturbed)
    capsys.readouterr()
    assert main(["compare", path, "--plan", str(plan)]) == 1
    out = capsys.readouterr().out
    assert "FAIL y" in out and out.rstrip().endswith("FAILED")
    assert main(["compare", path, "--plan", str(plan), "--atol", "1", "--rtol", "1"]) == 0


def test_cli_compare_layerwise_names_the_layer(tmp_path, capsys):
    path = save(cbr_model(), tmp_path / "m.onnx")
    assert main(["compare", path, "--target", "cpu", "--layerwise", "--passes", WRONG]) == 1
    out = capsys.readouterr().out
    assert "PASS t3" in out and "FAIL t6" in out
    assert "first layer out of tolerance: t6 [relu2 (Relu)]" in out


def test_bisect_names_the_wrong_pattern(tmp_path, capsys):
    r = bisect_model(cbr_model(), graph_passes=WRONG, later_stages=False)
    assert r.found and r.culprit.pattern == "AddBecomesSub"
    assert r.culprit.pass_name == "test-wrong-add" and r.culprit.loc == "add1"
    assert r.culprit.op == "graph.add" and "differs" in r.mismatch
    # the replay agrees: one application fewer matches the reference
    assert r.index >= 1 and r.probes <= 2 + int(np.ceil(np.log2(r.applications + 1))) + 1
    path = save(cbr_model(), tmp_path / "m.onnx")
    assert main(["bisect", path, "--passes", WRONG, "--graph-only"]) == 1
    out = capsys.readouterr().out
    assert "pattern AddBecomesSub (pass test-wrong-add) on graph.add at ONNX node 'add1'" in out


def test_bisect_right_model_names_nothing(capsys):
    r = bisect_model(cbr_model())
    assert not r.found and r.applications > 0
    assert "no rewrite changes the result" in r.format()
