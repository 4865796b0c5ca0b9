"""ptxc.calib: calibration of whole models (every tensor's range through the interpreter), data
from iterables and folders, the cache file, and the errors."""

import io
import json
import os

import numpy as np
import pytest

import ptxc
from ptxc.calib import calibrate, collect_ranges, make_calibrator
from ptxc.calib.progress import Progress
from ptxc.errors import CalibrationCacheError, CalibrationError
from support.small_nets import conv_relu_pool


def _data(n=4, seed=1):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 3, 10, 10)).astype(np.float32)} for _ in range(n)]


def test_minmax_ranges_equal_the_interpreted_tensors_max():
    net = conv_relu_pool()
    module = net.to_module()
    data = _data()
    amax, n = collect_ranges(module, data, "minmax", progress=False)
    assert n == 4
    # independent reference: every tensor's max over the batches, from a fresh interpreter run
    from ptxc.dialects.func import func_body, get_func
    from ptxc.ir.interpreter import Interpreter
    f = get_func(module)
    want = {}
    for d in data:
        it = Interpreter()
        it.run_func(f, [d["x"]])
        for v, x in it.env.items():
            if v.name_hint and np.asarray(x).dtype.kind == "f":
                want[v.name_hint] = max(want.get(v.name_hint, 0.0), float(np.abs(x).max()))
    assert set(amax) == set(want) and "x" in amax and "y" in amax
    for k in want:
        assert amax[k] == pytest.approx(want[k], rel=0, abs=0), k
    assert amax["x"] == max(float(np.abs(d["x"]).max()) for d in data)


@pytest.mark.parametrize("method", [pytest.param("entropy", marks=pytest.mark.slow),
                                    "percentile", "mse"])
def test_each_calibrator_gives_ranges_within_the_observed_max(method):
    net = conv_relu_pool()
    data = _data()
    mm, _ = collect_ranges(net.to_module(), data, "minmax", progress=False)
    got, _ = collect_ranges(net.to_module(), data, method, progress=False)
    assert set(got) == set(mm)
    for k in got:
        assert 0 < got[k] <= mm[k]


def test_folder_of_npy_files_equals_the_iterable(tmp_path):
    data = _data(3)
    for i, d in enumerate(data):
        np.save(tmp_path / f"b{i}.npy", d["x"])
    a, n = collect_ranges(conv_relu_pool().to_module(), str(tmp_path), "minmax", progress=False)
    b, _ = collect_ranges(conv_relu_pool().to_module(), data, "minmax", progress=False)
    assert n == 3 and a == b


def test_folder_of_npz_and_subfolders(tmp_path):
    data = _data(2)
    np.savez(tmp_path / "a.npz", x=data[0]["x"])
    os.mkdir(tmp_path / "b")
    np.save(tmp_path / "b" / "x.npy", data[1]["x"])
    a, n = collect_ranges(conv_relu_pool().to_module(), str(tmp_path), "minmax", progress=False)
    b, _ = collect_ranges(conv_relu_pool().to_module(), data, "minmax", progress=False)
    assert n == 2 and a == b


def test_cache_rebuild_runs_no_data_and_gives_the_same_table(tmp_path):
    cache = str(tmp_path / "c.json")
    net = conv_relu_pool()
    t1 = calibrate(net, _data(), "percentile", percentile=99.9, cache=cache, progress=False)
    assert not t1.from_cache and os.path.exists(cache)
    doc = json.load(open(cache))
    assert doc["settings"] == {"method": "percentile", "bins": 2048, "percentile": 99.9}
    assert doc["scale"]["y"] == pytest.approx(doc["amax"]["y"] / 127)

    def no_data():
        raise AssertionError("the data ran")
        yield  # noqa

    t2 = calibrate(net, no_data(), "percentile", percentile=99.9, cache=cache, progress=False)
    assert t2.from_cache and t2.amax == t1.amax
    t3 = calibrate(net, None, "percentile", percentile=99.9, cache=cache, progress=False)
    assert t3.amax == t1.amax


def test_cache_for_another_model_is_refused(tmp_path):
    cache = str(tmp_path / "c.json")
    calibrate(conv_relu_pool(), _data(2), "minmax", cache=cache, progress=False)
    other = ptxc.Network("other")
    x = other.add_input("x", (1, 3, 10, 10))
    other.mark_output(other.add_activation(x, "relu"), "y")
    with pytest.raises(CalibrationCacheError, match="another model"):
        calibrate(other, _data(2), "minmax", cache=cache, progress=False)


def test_cache_with_other_settings_recalibrates_with_data_and_refuses_without(tmp_path):
    cache = str(tmp_path / "c.json")
    net = conv_relu_pool()
    calibrate(net, _data(2), "minmax", cache=cache, progress=False)
    with pytest.raises(CalibrationCacheError, match="settings"):
        calibrate(net, None, "mse", cache=cache, progress=False)
    t = calibrate(net, _data(2), "mse", cache=cache, progress=False)
    assert not t.from_cache and json.load(open(cache))["settings"]["method"] == "mse"


def test_damaged_cache_is_refused(tmp_path):
    cache = tmp_path / "c.json"
    calibrate(conv_relu_pool(), _data(2), "minmax", cache=str(cache), progress=False)
    doc = json.loads(cache.read_text())
    doc["model"] = "0" * 64
    cache.write_text(json.dumps(doc))
    with pytest.raises(CalibrationCacheError, match="damaged"):
        calibrate(conv_relu_pool(), None, "minmax", cache=str(cache), progress=False)
    cache.write_text("not json")
    with pytest.raises(CalibrationCacheError, match="cannot read"):
        calibrate(conv_relu_pool(), None, "minmax", cache=str(cache), progress=False)


@pytest.mark.parametrize("data,match", [
    ([{"z": np.zeros((1, 3, 10, 10), np.float32)}], "missing input"),
    ([{"x": np.zeros((1, 3, 9, 10), np.float32)}], "expects"),
    ([{"x": np.zeros((1, 3, 10, 10), np.float64)}], "expects"),
    ([], "no batches"),
    ({"x": 1}, "not one dict"),
    (42, "iterable"),
])
def test_bad_data_is_a_calibration_error(data, match):
    with pytest.raises(CalibrationError, match=match):
        calibrate(conv_relu_pool(), data, "minmax", progress=False)


def test_bad_folder_and_calibrator(tmp_path):
    with pytest.raises(CalibrationError, match="no .npy"):
        calibrate(conv_relu_pool(), str(tmp_path), progress=False)
    with pytest.raises(CalibrationError, match="not a folder"):
        calibrate(conv_relu_pool(), str(tmp_path / "nope"), progress=False)
    with pytest.raises(CalibrationError, match="unknown calibrator"):
        make_calibrator("kl")
    with pytest.raises(CalibrationError, match="percentile"):
        make_calibrator("percentile", percentile=0)


def test_progress_lines():
    s = io.StringIO()
    p = Progress(3, stream=s, every_s=0.0)
    for _ in range(3):
        p.step()
    p.close()
    lines = s.getvalue().splitlines()
    assert lines[0].startswith("ptxc calibrate: running: batch 1/3")
    assert lines[-1].startswith("ptxc calibrate: done: batch 3/3")
