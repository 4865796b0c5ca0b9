"""Execution contexts: one engine run from many threads gives every thread its own right answer.

The reference for each input is the same engine run single-threaded first (itself checked
against the interpreter); then 8 threads run 200 inferences each on random inputs from that set
and every output is compared bitwise. The body is shared with the GPU test
(tests/gpu/test_cuda_concurrency.py) through tests/support/concurrency.py.
"""

import numpy as np
import pytest

import ptxc
from support.concurrency import (context_runners, deep_net, eight_threads_zero_wrong,
                                 engine_runners, hammer, make_inputs, reference)
from ptxc.driver.arena import ArenaAllocator
from support.small_nets import conv_relu_pool


@pytest.fixture(scope="module")
def engine():
    return ptxc.compile(deep_net(), target="cpu")


def cpu_arena(ctx):
    arena = ctx.allocator._arena
    return None if arena is None else arena.ctypes.data


@pytest.mark.slow
def test_eight_threads_on_one_cpu_engine_zero_wrong(engine):
    eight_threads_zero_wrong(engine, cpu_arena)


def test_contexts_in_threads_and_the_result_is_right(engine):
    """One explicit context per thread (TensorRT's pattern), 4 x 50 runs."""
    inputs = make_inputs(4)
    want = reference(engine, inputs)
    ctxs = [engine.create_context() for _ in range(4)]
    assert len({id(c.context.allocator) for c in ctxs}) == 4
    wrong, errors = hammer(context_runners(ctxs), inputs, want, runs=50)
    assert errors == [] and wrong == 0


def test_shared_arena_would_give_wrong_results(engine, monkeypatch):
    """The check above can fail: contexts that share one arena (fork returning the same
    allocator) give wrong outputs under the same load."""
    inputs = make_inputs()
    want = reference(engine, inputs, check_first=False)
    fresh = ptxc.compile(deep_net(), target="cpu")
    monkeypatch.setattr(ArenaAllocator, "fork", lambda self: self)
    fresh.program.allocator = fresh.program.allocator  # a new pool, forks now share
    for _ in range(5):
        wrong, errors = hammer(engine_runners(fresh), inputs, want, runs=50)
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
    inputs = make_inputs(4, shape=(1, 3, 10, 10))
    want = [engine.run({"x": x})["y"] for x in inputs]
    wrong, errors = hammer(engine_runners(engine, threads=4), inputs, want, runs=30)
    assert errors == [] and wrong == 0 and len(engine.program._contexts.contexts) == 1
    with pytest.raises(ptxc.CompileError, match="no fork"):
        engine.create_context()
