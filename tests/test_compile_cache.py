"""The compile cache: a second compile of the same model and options loads the plan; other
options, another model or a changed pipeline compile; PTXC_CACHE=0 turns it off; a damaged
entry is ignored and replaced."""

import os

import numpy as np

import ptxc
import ptxc.compiler as compiler
from ptxc.plan import cache

from support.tool_models import cbr_model, save


def _on(monkeypatch, tmp_path):
    monkeypatch.setenv("PTXC_CACHE", "1")
    monkeypatch.setenv("PTXC_CACHE_DIR", str(tmp_path / "cache"))


def _count_compiles(monkeypatch):
    calls = []
    real = compiler.run_stages

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)
    monkeypatch.setattr(compiler, "run_stages", counting)
    return calls


def test_second_compile_loads_from_the_cache(tmp_path, monkeypatch):
    _on(monkeypatch, tmp_path)
    model = save(cbr_model(), tmp_path / "m.onnx")
    calls = _count_compiles(monkeypatch)
    a = ptxc.compile(model, target="cpu")
    assert len(calls) == 1 and len(os.listdir(tmp_path / "cache")) == 1
    b = ptxc.compile(model, target="cpu")
    assert len(calls) == 1                       # no stage ran: the plan was loaded
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.testing.assert_array_equal(a.run({"x": x})["y"], b.run({"x": x})["y"])
    ptxc.compile(model, target="cpu", input_shapes={"x": (1, 3, 16, 16)})  # other options
    assert len(calls) == 2
    save(cbr_model(seed=1), tmp_path / "m.onnx")                          # another model
    ptxc.compile(model, target="cpu")
    assert len(calls) == 3
    ptxc.compile(model, target="cpu", graph_passes="dce")                 # another pipeline
    assert len(calls) == 4
    ptxc.compile(model, target="cpu", stage_passes={"layout": "to-channels-last"})  # layout
    assert len(calls) == 5
    ptxc.compile(model, target="cpu", pass_options={"lower-tensor-to-loop": {"jam_min_points": 8}})
    assert len(calls) == 6                                                # a pass's option
    ptxc.compile(model, target="cpu", graph_passes="dce")
    assert len(calls) == 6                                                # each one cached


def test_cache_off_and_damaged_entries(tmp_path, monkeypatch):
    _on(monkeypatch, tmp_path)
    model = save(cbr_model(), tmp_path / "m.onnx")
    calls = _count_compiles(monkeypatch)
    ptxc.compile(model, target="cpu")
    (entry,) = (tmp_path / "cache").iterdir()
    data = bytearray(entry.read_bytes())
    data[100] ^= 1
    entry.write_bytes(bytes(data))
    ptxc.compile(model, target="cpu")            # damaged: compiled again, and replaced
    assert len(calls) == 2
    ptxc.compile(model, target="cpu")
    assert len(calls) == 2
    monkeypatch.setenv("PTXC_CACHE", "0")
    assert cache.cache_dir() is None
    ptxc.compile(model, target="cpu")
    assert len(calls) == 3
    monkeypatch.setenv("PTXC_CACHE", "1")
    ptxc.compile(model, target="cpu", cache=False)
    ptxc.compile(model, target="cpu", check_numerics=True)
    assert len(calls) == 5


def test_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("PTXC_CACHE", "1")
    monkeypatch.delenv("PTXC_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == os.path.join(str(tmp_path), "ptxc")
