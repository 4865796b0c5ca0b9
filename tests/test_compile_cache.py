"""The compile cache: a second compile of the same model and options loads the plan; other
options, another model or a changed pipeline compile; PTXC_CACHE=0 turns it off; a damaged
entry is ignored and replaced."""

import os
import time

import numpy as np
import pytest

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


def test_a_cached_compile_keeps_its_runtime_options(tmp_path, monkeypatch):
    """max_memory is left out of the key (it is applied to the engine): a compile served from
    the cache must apply it as a fresh compile does, refusing a budget the engine does not fit
    (engine_bytes: weights, arena and bindings, as test_memory_limit checks them)."""
    from ptxc.driver.memory_limit import engine_bytes
    from ptxc.errors import CompileError
    _on(monkeypatch, tmp_path)
    model = save(cbr_model(), tmp_path / "m.onnx")
    calls = _count_compiles(monkeypatch)
    need = engine_bytes(ptxc.compile(model, target="cpu"))["total"]
    assert len(calls) == 1
    a = ptxc.compile(model, target="cpu", max_memory=need)
    assert len(calls) == 1 and a.max_memory == need              # from the cache
    with pytest.raises(CompileError, match="max_memory"):
        ptxc.compile(model, target="cpu", max_memory=need - 1)  # from the cache too
    assert len(calls) == 1
    assert ptxc.compile(model, target="cpu").max_memory is None


def _wide_model(seed: int, path):
    """A matmul with a 1 MiB weight: each plan of it is over 1 MiB, so PTXC_CACHE_MAX_MB counts
    whole entries."""
    from onnx import TensorProto, helper, numpy_helper
    w = np.random.default_rng(seed).standard_normal((256, 1024)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "wide",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1024])],
                          [numpy_helper.from_array(w, "w")])
    return save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_the_cache_evicts_the_least_recently_used_entry(tmp_path, monkeypatch):
    """Over PTXC_CACHE_MAX_MB the least recently *used* entry goes: an entry loaded since it
    was written counts from its last use, so the model compiled first but used last stays."""
    _on(monkeypatch, tmp_path)
    monkeypatch.setenv("PTXC_CACHE_MAX_MB", "3")
    a, b, c = (_wide_model(i, tmp_path / f"{n}.onnx") for i, n in enumerate("abc"))
    calls = _count_compiles(monkeypatch)
    ptxc.compile(a, target="cpu")
    ptxc.compile(b, target="cpu")
    entries = sorted((tmp_path / "cache").iterdir(), key=os.path.getmtime)
    assert len(entries) == 2 and all(e.stat().st_size > 1 << 20 for e in entries)
    now = time.time()
    for age, e in zip((300, 200), entries):      # a written long ago, b a while after
        os.utime(e, (now - age, now - age))
    ptxc.compile(a, target="cpu")                # a used now: b is the least recently used
    assert len(calls) == 2
    ptxc.compile(c, target="cpu")                # three entries pass 3 MiB: one goes
    assert len(calls) == 3 and len(os.listdir(tmp_path / "cache")) == 2
    ptxc.compile(a, target="cpu")
    assert len(calls) == 3                       # a stayed
    ptxc.compile(b, target="cpu")
    assert len(calls) == 4                       # b went
