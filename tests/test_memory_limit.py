"""max_memory= (ptxc/driver/memory_limit.py): an engine's memory budget, refused up front with a
typed error naming the layer of its largest scratch buffer; contexts capped to what fits."""

import threading

import numpy as np
import pytest

import ptxc
from ptxc.driver.memory_limit import engine_bytes
from ptxc.errors import CompileError, OutOfMemoryError
from support.small_nets import conv_relu_pool


@pytest.fixture(scope="module")
def engine():
    return ptxc.compile(conv_relu_pool(), target="cpu", cache=False)


def x_input(seed=0):
    return np.random.default_rng(seed).standard_normal((1, 3, 10, 10)).astype(np.float32)


def test_engine_bytes_add_up(engine):
    b = engine_bytes(engine)
    # independently: the arena from the memory report, bindings from the engine's types
    io = sum(int(np.prod(t.shape)) * t.element.np_dtype.itemsize
             for t in list(engine.inputs.values()) + list(engine.outputs.values()))
    assert b["arena"] == engine.memory_report()["arena_bytes"] > 0
    assert b["bindings"] == io
    assert b["weights"] > 0 and b["total"] == b["weights"] + b["arena"] + b["bindings"]


def test_compile_under_a_too_small_budget_is_a_compile_error_naming_the_layer(engine):
    need = engine_bytes(engine)["total"]
    with pytest.raises(CompileError) as e:
        ptxc.compile(conv_relu_pool(), target="cpu", cache=False, max_memory=need - 1)
    msg = str(e.value)
    assert "max_memory" in msg and f"{need:,}" in msg and "written by layer" in msg, msg
    ok = ptxc.compile(conv_relu_pool(), target="cpu", cache=False, max_memory=need)
    assert ok.max_memory == need
    np.testing.assert_allclose(ok.run({"x": x_input()})["y"], engine.run({"x": x_input()})["y"])


@pytest.mark.parametrize("bad", [0, -5, 1.5, "1GB", True])
def test_a_bad_max_memory_is_refused_before_compiling(bad, monkeypatch):
    import ptxc.compiler
    monkeypatch.setattr(ptxc.compiler, "run_stages",
                        lambda *a, **k: pytest.fail("compiled with a bad max_memory"))
    with pytest.raises(CompileError, match="max_memory"):
        ptxc.compile(conv_relu_pool(), target="cpu", cache=False, max_memory=bad)


def test_load_with_a_budget(engine, tmp_path):
    p = tmp_path / "m.plan"
    engine.save(p)
    need = engine_bytes(engine)["total"]
    with pytest.raises(CompileError, match="max_memory"):
        ptxc.load(p, max_memory=need // 2)
    assert ptxc.load(p, max_memory=need).max_memory == need


def test_contexts_past_the_budget(engine):
    e = ptxc.compile(conv_relu_pool(), target="cpu", cache=False)
    b = engine_bytes(e)
    e.max_memory = b["weights"] + 2 * b["context"]  # room for two contexts
    c1 = e.create_context()
    c2 = e.create_context()
    with pytest.raises(OutOfMemoryError, match="max_memory"):
        e.create_context()
    for c in (c1, c2):
        np.testing.assert_allclose(c.run({"x": x_input()})["y"], engine.run({"x": x_input()})["y"])


def test_concurrent_runs_under_a_one_context_budget_wait_and_stay_right(engine):
    e = ptxc.compile(conv_relu_pool(), target="cpu", cache=False)
    e.max_memory = engine_bytes(e)["total"]  # exactly one context
    xs = [x_input(i) for i in range(4)]
    want = [engine.run({"x": x})["y"] for x in xs]
    got = [None] * 4

    def work(i):
        for _ in range(5):
            got[i] = e.run({"x": xs[i]})["y"]
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert len(e.program._contexts.contexts) == 1
