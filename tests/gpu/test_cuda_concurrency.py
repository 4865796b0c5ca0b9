"""Execution contexts on the GPU: one cuda engine run from 8 threads gives every run its own
right answer (each run takes a context: its own stream, arena, bindings and CUDA graph).

The reference for each input is the engine run single-threaded first, itself checked against
the interpreter; every threaded output is compared bitwise with it. Skipped without a GPU."""

import threading

import numpy as np
import pytest

import ptxc
from test_concurrency import deep_net, hammer, make_inputs

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def engine():
    return ptxc.compile(deep_net(), target="cuda")


def test_eight_threads_on_one_cuda_engine_zero_wrong(engine):
    inputs = make_inputs()
    want = [engine.run({"x": x})["y"] for x in inputs]
    ref = ptxc.interpret(deep_net().to_module(), {"x": inputs[0]})["y"]
    np.testing.assert_allclose(want[0], ref, rtol=1e-5, atol=1e-5)
    for graph in (True, False):
        engine.cuda_graph = graph
        wrong, errors = hammer(engine.run, inputs, want, threads=8, runs=200)
        assert errors == [] and wrong == 0, (graph, wrong, errors[:1])
    ctxs = engine.program._contexts.contexts
    assert 1 <= len(ctxs) <= 8
    arenas = {c._state.arena.device_ctypes_pointer.value for c in ctxs if c._state is not None}
    streams = {int(c._state.stream.handle) for c in ctxs if c._state is not None}
    assert len(arenas) == len(streams) == len([c for c in ctxs if c._state is not None])


def test_explicit_contexts_and_run_device_in_threads(engine):
    from numba import cuda
    inputs = make_inputs(4)
    engine.cuda_graph = True
    want = [engine.run({"x": x})["y"] for x in inputs]
    ctxs = [engine.create_context() for _ in range(4)]
    errors, wrong = [], [0]

    def work(c, seed):
        rng = np.random.default_rng(seed)
        try:
            for k in range(100):
                i = int(rng.integers(len(inputs)))
                if k % 2:
                    got = c.run_device({"x": cuda.to_device(inputs[i])})["y"].copy_to_host()
                else:
                    got = c.run({"x": inputs[i]})["y"]
                wrong[0] += got.tobytes() != want[i].tobytes()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work, args=(c, s)) for s, c in enumerate(ctxs)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == [] and wrong[0] == 0
    for c in ctxs:
        c.context.release()
    assert engine.run({"x": inputs[0]})["y"].tobytes() == want[0].tobytes()
