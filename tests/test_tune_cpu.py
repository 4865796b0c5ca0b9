"""Auto-tuning end to end on the cpu target, with real measurements (CI has no GPU: the same
machinery as cuda's, timing this host): a tuned compile computes what the untuned one does and
what onnxruntime does; its timing cache is written, and a second compile takes every tactic
from it without measuring; the plan keeps the tuning record and ``ptxc inspect`` prints it;
``layout="auto"`` under tuning is chosen by measuring both layouts; ``ptxc tune`` on the
command line; Ray on a local instance (slow)."""

import json

import numpy as np
import onnxruntime as ort
import pytest

import ptxc
from ptxc.plan.inspect import inspect_plan

from support.tool_models import cbr_model, save


def _feeds():
    return {"x": np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)}


def _ort(model, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)[0]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    model = cbr_model(channels=8, size=16)
    cache = str(tmp_path_factory.mktemp("t") / "cbr.timing")
    engine = ptxc.compile(model, target="cpu", cache=False, tuning="fast", timing_cache=cache,
                          layout="nchw")
    return model, cache, engine


def test_tuned_matches_untuned_and_onnxruntime(tuned):
    model, _, engine = tuned
    feeds = _feeds()
    ref = _ort(model, feeds)
    base = ptxc.compile(model, target="cpu", cache=False, layout="nchw").run(feeds)["y"]
    got = engine.run(feeds)["y"]
    scale = np.abs(ref).max()
    assert np.abs(base - ref).max() <= 1e-4 * scale
    assert np.abs(got - ref).max() <= 1e-4 * scale
    rows = engine.tuning
    assert rows and {r["source"] for r in rows} == {"tuned"}
    assert all(r["candidates"] >= 1 and r["time_s"] > 0 and r["default_time_s"] > 0
               for r in rows)
    assert sum(r["kernels"] for r in rows) == len(engine.kernels.kernels)


def test_the_timing_cache_is_written_and_reused(tuned):
    model, cache, engine = tuned
    data = json.load(open(cache))
    assert data["format"] == "ptxc-timing-cache" and len(data["entries"]) == len(engine.tuning)
    again = ptxc.compile(model, target="cpu", cache=False, tuning="fast", timing_cache=cache,
                         layout="nchw")
    assert {r["source"] for r in again.tuning} == {"cache"}
    assert [r["tactic"] for r in again.tuning] == [r["tactic"] for r in engine.tuning]
    # tuning off reads the cache too: the same tactics, nothing measured
    read = ptxc.compile(model, target="cpu", cache=False, timing_cache=cache, layout="nchw")
    assert [r["tactic"] for r in read.tuning] == [r["tactic"] for r in engine.tuning]
    assert read.llvm_text == again.llvm_text


def test_the_plan_keeps_the_tuning_record(tuned, tmp_path):
    _, _, engine = tuned
    path = str(tmp_path / "m.plan")
    engine.save(path)
    loaded = ptxc.load(path)
    assert loaded.tuning == engine.tuning
    text = inspect_plan(path)
    assert f"tuning: {len(engine.tuning)} distinct kernels" in text
    for r in engine.tuning:
        assert f"tactic {r['tactic']} [tuned]" in text
    # each kernel's row names its tactic, and so does the profile
    tuned_kernels = [k for k in engine.kernels.kernels if k.tactic]
    assert tuned_kernels and {k.tactic for k in tuned_kernels} <= {r["tactic"] for r in
                                                                   engine.tuning}
    for k in tuned_kernels:
        assert f"{k.name}  layer" in text and f"tactic {k.tactic}" in text
    assert [k.tactic for k in loaded.kernels.kernels] == [k.tactic for k in
                                                          engine.kernels.kernels]
    from ptxc.tools.profile import profile_engine
    prof = profile_engine(loaded, _feeds())
    assert [r.tactic for r in prof.rows] == [k.tactic for k in engine.kernels.kernels]
    assert f"[tactic {tuned_kernels[0].tactic}]" in prof.format()
    np.testing.assert_array_equal(loaded.run(_feeds())["y"], engine.run(_feeds())["y"])



def test_inspect_prints_each_rows_times_and_its_speedup(tuned, tmp_path):
    """``ptxc inspect``'s tuning rows, from a record of known times: each time in ms, and the
    speedup as the default's time over the tactic's (3x faster reads 3.00x); a row without
    times (the heuristic's) prints dashes and no speedup."""
    from ptxc.plan.save import plan_to_bytes
    from test_plan import edited
    _, _, engine = tuned
    a, b = dict(engine.tuning[0]), dict(engine.tuning[0])
    a.update(key="a" * 16, loc="conv_a", kernels=3, tactic="cpu{unroll=4}", source="cache",
             time_s=1e-5, default_time_s=3e-5, candidates=6, rejected=["x: wrong output"])
    b.update(key="b" * 16, loc=None, kernels=1, tactic="auto", source="heuristic",
             time_s=None, default_time_s=None, candidates=0, rejected=[])
    path = tmp_path / "edited.plan"
    path.write_bytes(edited(plan_to_bytes(engine), lambda h: h.update(tuning=[a, b])))
    lines = inspect_plan(path).splitlines()
    assert "tuning: 2 distinct kernels (1 cache, 1 heuristic)" in lines
    assert f"  {'a' * 16}  layer 'conv_a' x3  tactic cpu{{unroll=4}} [cache]  time 0.0100 ms  " \
        "default 0.0300 ms (3.00x the default)  candidates 6, 1 rejected" in lines
    assert f"  {'b' * 16}  layer None x1  tactic auto [heuristic]  time -  default -  " \
        "candidates 0" in lines

def test_a_tampered_tuning_record_is_refused(tuned):
    from ptxc.driver.load import engine_from_plan
    from ptxc.errors import PlanError
    from ptxc.plan.format import decode_plan, encode_plan
    from ptxc.plan.save import plan_to_bytes
    _, _, engine = tuned
    header, blobs = decode_plan(plan_to_bytes(engine))
    arrays = [(n, k, a) for (k, n), a in blobs.items()]
    keep = {k: v for k, v in header.items() if k not in ("blobs", "data_bytes")}
    assert engine_from_plan(encode_plan(keep, arrays)).tuning == engine.tuning
    for bad in ([{"key": 1}], "rows", [dict(engine.tuning[0], candidates="8")]):
        with pytest.raises(PlanError, match="tuning record"):
            engine_from_plan(encode_plan(dict(keep, tuning=bad), arrays))


def test_layout_auto_under_tuning_is_measured():
    model = cbr_model(channels=8, size=16)
    e = ptxc.compile(model, target="cpu", cache=False, tuning="fast", tuning_budget_s=120)
    assert e.layout in ("nchw", "nhwc")
    assert set(e.layout_times) == {"nchw", "nhwc"} and all(t > 0 for t in e.layout_times.values())
    assert e.layout_times[e.layout] == min(e.layout_times.values())
    feeds = _feeds()
    ref = _ort(model, feeds)
    assert np.abs(e.run(feeds)["y"] - ref).max() <= 1e-4 * np.abs(ref).max()


def test_ptxc_tune_on_the_command_line(tmp_path, capsys):
    from ptxc.cli import main
    onnx_path = save(cbr_model(channels=8, size=16), tmp_path / "cbr.onnx")
    cache = str(tmp_path / "cbr.timing")
    plan = str(tmp_path / "cbr.plan")
    assert main(["tune", onnx_path, "--target", "cpu", "--layout", "nchw", "--timing-cache",
                 cache, "-o", plan]) == 0
    out = capsys.readouterr().out
    assert "distinct kernels" in out and "[tuned]" in out and f"timing cache: {cache}" in out
    assert main(["compile", onnx_path, "--target", "cpu", "--layout", "nchw",
                 "--timing-cache", cache]) == 0
    assert main(["tune", onnx_path, "--target", "cpu", "--tuning", "off", "--timing-cache",
                 cache]) == 2
    assert "ptxc tune measures" in capsys.readouterr().err


@pytest.mark.slow
def test_ray_on_a_local_instance(tmp_path):
    """Each kernel a Ray task on a local instance; the results merged into one timing cache."""
    pytest.importorskip("ray")
    model = cbr_model(channels=8, size=16)
    cache = str(tmp_path / "ray.timing")
    e = ptxc.compile(model, target="cpu", cache=False, tuning="fast", timing_cache=cache,
                     layout="nchw", tuning_workers="ray")
    assert e.tuning and {r["source"] for r in e.tuning} == {"tuned"}
    assert len(json.load(open(cache))["entries"]) == len(e.tuning)
    feeds = _feeds()
    ref = _ort(model, feeds)
    assert np.abs(e.run(feeds)["y"] - ref).max() <= 1e-4 * np.abs(ref).max()
