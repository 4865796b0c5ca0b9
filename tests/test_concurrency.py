"""Execution contexts: one engine run from many threads gives every thread its own right answer.

The reference for each input is the same engine run single-threaded first; then 8 threads run
200 inferences each on random inputs from that set and every output is compared bitwise.
"""

import threading

import numpy as np
import pytest

import ptxc
from ptxc.driver.memory_plan import ArenaAllocator
from small_nets import conv_relu_pool


def deep_net():
    """conv -> relu -> conv -> relu -> pool -> softmax-ish chain: several scratch buffers, so
    two runs sharing one arena overwrite each other's intermediates."""
    rng = np.random.default_rng(1)
    net = ptxc.Network("deep")
    x = net.add_input("x", (1, 3, 12, 12))
    y = net.add_conv(x, rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
                     rng.standard_normal(8).astype(np.float32), padding=1)
    y = net.add_activation(y, "relu")
    y = net.add_conv(y, rng.standard_normal((8, 8, 3, 3)).astype(np.float32),
                     rng.standard_normal(8).astype(np.float32), padding=1)
    y = net.add_activation(y, "relu")
    net.mark_output(net.add_pooling(y, "max", kernel=2), "y")
    return net


@pytest.fixture(scope="module")
def engine():
    return ptxc.compile(deep_net(), target="cpu")


def hammer(run, inputs, want, threads=8, runs=200):
    """Each thread runs ``runs`` inferences on inputs picked at random; returns the count of
    wrong outputs (compared bitwise with ``want``) and the errors raised."""
    wrong, errors = [0], []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def work(seed):
        rng = np.random.default_rng(seed)
        start.wait()
        bad = 0
        try:
            for _ in range(runs):
                i = int(rng.integers(len(inputs)))
                got = run({"x": inputs[i]})["y"]
                bad += got.tobytes() != want[i].tobytes()
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)
        with lock:
            wrong[0] += bad

    ts = [threading.Thread(target=work, args=(s,)) for s in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return wrong[0], errors


def make_inputs(n=16):
    rng = np.random.default_rng(7)
    return [rng.standard_normal((1, 3, 12, 12)).astype(np.float32) for _ in range(n)]


@pytest.mark.slow
def test_eight_threads_on_one_cpu_engine_zero_wrong(engine):
    inputs = make_inputs()
    want = [engine.run({"x": x})["y"] for x in inputs]
    wrong, errors = hammer(engine.run, inputs, want)
    assert errors == [] and wrong == 0
    # the pool grew to at most one context per thread, each with its own arena
    ctxs = engine.program._contexts.contexts
    assert 1 <= len(ctxs) <= 8
    arenas = {c.allocator._arena.ctypes.data for c in ctxs if c.allocator._arena is not None}
    assert len(arenas) == len([c for c in ctxs if c.allocator._arena is not None])


def test_contexts_in_threads_and_the_result_is_right(engine):
    """One explicit context per thread (TensorRT's pattern), 4 x 50 runs; and the first
    answer matches the reference interpreter."""
    inputs = make_inputs(4)
    want = [engine.run({"x": x})["y"] for x in inputs]
    ref = ptxc.interpret(deep_net().to_module(), {"x": inputs[0]})["y"]
    np.testing.assert_allclose(want[0], ref, rtol=1e-5, atol=1e-5)
    ctxs = [engine.create_context() for _ in range(4)]
    assert len({id(c.context.allocator) for c in ctxs}) == 4
    errors, wrong = [], [0]

    def work(c, seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(50):
                i = int(rng.integers(len(inputs)))
                wrong[0] += c.run({"x": inputs[i]})["y"].tobytes() != want[i].tobytes()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work, args=(c, s)) for s, c in enumerate(ctxs)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == [] and wrong[0] == 0


def test_shared_arena_would_give_wrong_results(engine, monkeypatch):
    """The check above can fail: contexts that share one arena (fork returning the same
    allocator) give wrong outputs under the same load."""
    inputs = make_inputs()
    want = [engine.run({"x": x})["y"] for x in inputs]
    fresh = ptxc.compile(deep_net(), target="cpu")
    monkeypatch.setattr(ArenaAllocator, "fork", lambda self: self)
    fresh.program.allocator = fresh.program.allocator  # a new pool, forks now share
    for _ in range(5):
        wrong, errors = hammer(fresh.run, inputs, want, runs=50)
        if wrong:
            break
    assert wrong > 0


def test_allocator_without_fork_serializes():
    """A custom allocator with no fork(): one context, runs wait for it; still right."""
    engine = ptxc.compile(conv_relu_pool(), target="cpu")

    class Plain:
        def allocate(self, slots):
            return [np.empty(max(s.span, 1), s.dtype) for s in slots]

    engine.program.allocator = Plain()
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((1, 3, 10, 10)).astype(np.float32) for _ in range(4)]
    want = [engine.run({"x": x})["y"] for x in inputs]
    wrong = [0]

    def work(seed):
        r = np.random.default_rng(seed)
        for _ in range(30):
            i = int(r.integers(4))
            wrong[0] += engine.run({"x": inputs[i]})["y"].tobytes() != want[i].tobytes()

    ts = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert wrong[0] == 0 and len(engine.program._contexts.contexts) == 1
    with pytest.raises(ptxc.CompileError, match="no fork"):
        engine.create_context()
