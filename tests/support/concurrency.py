"""The shared body of the concurrency tests (tests/test_concurrency.py on cpu,
tests/gpu/test_cuda_concurrency.py on cuda): a net with several scratch buffers, its inputs, and
the hammer that runs it from many threads and counts wrong outputs bitwise against a
single-threaded reference."""

import threading

import numpy as np

import ptxc


def deep_net():
    """conv -> relu -> conv -> relu -> pool: several scratch buffers, so two runs sharing one
    arena overwrite each other's intermediates."""
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


def make_inputs(n=16, shape=(1, 3, 12, 12)):
    rng = np.random.default_rng(7)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def hammer(runners, inputs, want, runs=200):
    """One thread per runner (``runner(x, k) -> y`` for input ``x`` at iteration ``k``), each
    running ``runs`` inferences on inputs picked at random, all started together. Returns
    (wrong outputs, compared bitwise with ``want``; the exceptions raised)."""
    wrong, errors = [0], []
    lock = threading.Lock()
    start = threading.Barrier(len(runners))

    def work(runner, seed):
        rng = np.random.default_rng(seed)
        start.wait()
        bad = 0
        try:
            for k in range(runs):
                i = int(rng.integers(len(inputs)))
                bad += runner(inputs[i], k).tobytes() != want[i].tobytes()
        except Exception as e:  # noqa: BLE001  (reported to the caller)
            errors.append(e)
        with lock:
            wrong[0] += bad

    ts = [threading.Thread(target=work, args=(r, s)) for s, r in enumerate(runners)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return wrong[0], errors


def engine_runners(engine, threads=8):
    """``threads`` runners that all call ``engine.run`` (its pool gives each a context)."""
    return [lambda x, k: engine.run({"x": x})["y"]] * threads


def context_runners(contexts):
    """One runner per explicit context (TensorRT's pattern: a context per thread)."""
    return [lambda x, k, c=c: c.run({"x": x})["y"] for c in contexts]


def reference(engine, inputs, check_first=True):
    """The engine's single-threaded outputs for ``inputs``; the first checked against the
    interpreter (so the reference is itself right)."""
    want = [engine.run({"x": x})["y"] for x in inputs]
    if check_first:
        ref = ptxc.interpret(deep_net().to_module(), {"x": inputs[0]})["y"]
        np.testing.assert_allclose(want[0], ref, rtol=1e-5, atol=1e-5)
    return want


def eight_threads_zero_wrong(engine, memory_of, runs=200):
    """The issue's check: 8 threads x ``runs`` inferences on one engine, 0 wrong outputs and no
    error; the pool grew to at most 8 contexts, each on memory of its own (``memory_of(ctx)``:
    an address of its arena, or None when it has none yet). Returns the contexts."""
    inputs = make_inputs()
    want = reference(engine, inputs)
    wrong, errors = hammer(engine_runners(engine), inputs, want, runs=runs)
    assert errors == [] and wrong == 0, (wrong, errors[:1])
    ctxs = engine.program._contexts.contexts
    assert 1 <= len(ctxs) <= 8
    mem = [m for m in map(memory_of, ctxs) if m is not None]
    assert len(set(mem)) == len(mem)
    return ctxs
