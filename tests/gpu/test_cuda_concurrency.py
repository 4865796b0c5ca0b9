"""Execution contexts on the GPU: one cuda engine run from 8 threads gives every run its own
right answer (each run takes a context: its own stream, arena, bindings and CUDA graph).

The body is the cpu test's (tests/support/concurrency.py): the reference for each input is the
engine run single-threaded first, itself checked against the interpreter; every threaded output is
compared bitwise with it. Skipped without a GPU."""

import pytest

import ptxc
from support.concurrency import (context_runners, deep_net, eight_threads_zero_wrong, hammer,
                                 make_inputs, reference)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def engine():
    return ptxc.compile(deep_net(), target="cuda")


def cuda_arena(ctx):
    return None if ctx._state is None else ctx._state.arena.device_ctypes_pointer.value


@pytest.mark.parametrize("graph", [True, False], ids=["cuda-graph", "launches"])
def test_eight_threads_on_one_cuda_engine_zero_wrong(engine, graph):
    engine.cuda_graph = graph
    ctxs = eight_threads_zero_wrong(engine, cuda_arena)
    streams = [int(c._state.stream.handle) for c in ctxs if c._state is not None]
    assert len(set(streams)) == len(streams)


def test_explicit_contexts_and_run_device_in_threads(engine):
    from numba import cuda
    inputs = make_inputs(4)
    engine.cuda_graph = True
    want = reference(engine, inputs)
    ctxs = [engine.create_context() for _ in range(4)]
    host = context_runners(ctxs)

    def device(c, run_host):  # odd iterations through run_device, even through run
        return lambda x, k: (c.run_device({"x": cuda.to_device(x)})["y"].copy_to_host()
                             if k % 2 else run_host(x, k))
    wrong, errors = hammer([device(c, h) for c, h in zip(ctxs, host)], inputs, want, runs=100)
    assert errors == [] and wrong == 0
    for c in ctxs:
        c.context.release()
    assert engine.run({"x": inputs[0]})["y"].tobytes() == want[0].tobytes()
