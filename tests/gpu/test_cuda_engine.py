"""The cuda Engine's runtime contract, on the GPU (see the CUDA runtime in ptxc/driver/cuda.py):

* CUDA-graph replay computes the same bits as plain launches (the same kernels, in the same
  order, on the same buffers; ``engine.cuda_graph`` switches between them);
* runs in a row with fresh inputs each give their own right answer, and the arrays ``run``
  returned earlier are not overwritten by later runs;
* ``run_device`` on device arrays (numba's, torch's: anything with ``__cuda_array_interface__``)
  equals ``run`` on the same values, also with new device arrays on every call;
* a saved cuda plan loads (``ptxc.load``) and computes the same bits;
* a wrong input is a BindingError, on ``run`` and ``run_device``;
* an engine whose arena cannot fit raises OutOfMemoryError naming the requested and free bytes,
  and the process still compiles and runs a small engine afterwards.

Numbers are checked against independent references (the interpreter, onnxruntime), so two paths
agreeing on a wrong answer fails too. Skipped without a GPU (marker ``gpu``)."""

import gc
import math
import re

import numpy as np
import pytest

from support import light_models as lm
import ptxc
from ptxc.errors import BindingError, OutOfMemoryError

from support.small_nets import conv_relu_pool as small_net

pytestmark = pytest.mark.gpu


def check_small_engine(engine, seed: int = 1) -> None:
    x = np.random.default_rng(seed).standard_normal((1, 3, 10, 10)).astype(np.float32)
    got = engine.run({"x": x})["y"]
    ref = ptxc.interpret(small_net().to_module(), {"x": x})["y"]
    assert got.shape == ref.shape == (1, 4, 5, 5) and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


class Squeezenet:
    """SqueezeNet with random weights (concats written in place, pools, many kernels) compiled
    once for the module's tests; onnxruntime gives the reference."""

    def __init__(self):
        self.model = lm.with_random_weights(lm.load("squeezenet"), seed=3)
        self.engine = ptxc.compile(self.model, target="cuda")

    def inputs(self, seed: int) -> dict:
        return lm.random_inputs(self.model, seed=seed)

    def check(self, got: dict, inputs: dict) -> None:
        ref = lm.onnxruntime_outputs(self.model, inputs)
        assert list(got) == list(ref)
        for k in ref:
            assert np.std(ref[k]) > 1e-4, "degenerate reference output"
            lm.assert_matches_reference(got[k], ref[k])


@pytest.fixture(scope="module")
def squeezenet():
    return Squeezenet()


def assert_same_bits(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_small_cuda_engine_matches_interpreter():
    engine = ptxc.compile(small_net(), target="cuda")
    assert engine.target == "cuda"
    assert list(engine.inputs) == ["x"] and list(engine.outputs) == ["y"]
    assert ".entry" in engine.ptx  # the kernels it runs are PTX
    check_small_engine(engine)
    report = engine.memory_report()
    assert "arena_bytes" in report, report


def test_cuda_graph_replay_equals_plain_launches(squeezenet):
    engine = squeezenet.engine
    x = squeezenet.inputs(seed=11)
    was = engine.cuda_graph
    try:
        engine.cuda_graph = False
        plain = engine.run(x)
        plain_again = engine.run(x)
        engine.cuda_graph = True
        captured = engine.run(x)   # the first run with the graph on may capture it
        replayed = engine.run(x)   # this one replays it
    finally:
        engine.cuda_graph = was
    assert_same_bits(plain, plain_again)
    assert_same_bits(plain, captured)
    assert_same_bits(plain, replayed)
    squeezenet.check(replayed, x)


def test_runs_in_a_row_with_fresh_inputs(squeezenet):
    """Each run's inputs reach the kernels (a replayed graph reads the engine's input buffers,
    which every run refills) and each run's outputs are fresh arrays."""
    runs = []
    for seed in (20, 21, 22, 23):
        x = squeezenet.inputs(seed=seed)
        runs.append((x, squeezenet.engine.run(x)))
    for x, got in runs:  # checked after all runs: a later run overwrote nothing returned before
        squeezenet.check(got, x)
    (k,) = squeezenet.engine.outputs
    assert not np.array_equal(runs[0][1][k], runs[1][1][k])


def test_run_device_with_numba_arrays_equals_run(squeezenet):
    from numba import cuda
    engine = squeezenet.engine
    for seed in (30, 31):  # new device arrays (new addresses) on every call
        x = squeezenet.inputs(seed=seed)
        host = engine.run(x)
        out = engine.run_device({n: cuda.to_device(a) for n, a in x.items()})
        assert list(out) == list(engine.outputs)
        cuda.synchronize()  # run_device may return before its kernels finish
        got = {}
        for k, d in out.items():
            assert cuda.is_cuda_array(d), type(d)
            got[k] = d.copy_to_host()
        assert_same_bits(got, host)


def test_run_device_with_torch_tensors_equals_run(squeezenet):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    from numba import cuda
    engine = squeezenet.engine
    x = squeezenet.inputs(seed=40)
    host = engine.run(x)
    feeds = {n: torch.from_numpy(a).to("cuda") for n, a in x.items()}
    torch.cuda.synchronize()
    out = engine.run_device(feeds)
    cuda.synchronize()
    assert_same_bits({k: d.copy_to_host() for k, d in out.items()}, host)


def test_saved_cuda_plan_loads_and_matches(squeezenet, tmp_path):
    engine = squeezenet.engine
    path = str(tmp_path / "squeezenet.plan")
    engine.save(path)
    loaded = ptxc.load(path)
    assert loaded.target == "cuda"
    assert list(loaded.inputs) == list(engine.inputs)
    assert list(loaded.outputs) == list(engine.outputs)
    x = squeezenet.inputs(seed=50)
    assert_same_bits(loaded.run(x), engine.run(x))


def test_plan_compiled_with_no_gpu_visible_loads_and_runs(tmp_path, monkeypatch):
    """A cuda plan built where no GPU is visible (compile and save touch none; the arch is the
    sm_90 default) loads and runs on this GPU and matches the interpreter. Checked across
    machines too: a plan compiled on the GPU-less development machine ran here (see
    bench/RESULTS.md)."""
    from numba import cuda
    with monkeypatch.context() as m:
        m.setattr(cuda, "is_available", lambda: False)
        m.delenv("PTXC_CUDA_ARCH", raising=False)
        engine = ptxc.compile(small_net(), target="cuda")
        assert engine.arch == "sm_90"
        path = str(tmp_path / "small.plan")
        engine.save(path)
    check_small_engine(ptxc.load(path), seed=7)


def test_cuda_engine_binding_errors():
    from numba import cuda
    engine = ptxc.compile(small_net(), target="cuda")
    x = np.zeros((1, 3, 10, 10), np.float32)
    with pytest.raises(BindingError, match="'x'"):
        engine.run({})
    with pytest.raises(BindingError, match=r"1, 3, 10, 11"):
        engine.run({"x": np.zeros((1, 3, 10, 11), np.float32)})
    with pytest.raises(BindingError, match="float64"):
        engine.run({"x": x.astype(np.float64)})
    with pytest.raises(BindingError):
        engine.run_device({"x": cuda.to_device(np.zeros((1, 3, 10, 11), np.float32))})
    with pytest.raises(BindingError):
        engine.run_device({})
    check_small_engine(engine)  # the refusals left the engine usable


_UNIT = {"": 1, "b": 1, "byte": 1, "bytes": 1, "kb": 1e3, "kib": 2**10, "mb": 1e6,
         "mib": 2**20, "gb": 1e9, "gib": 2**30, "tb": 1e12, "tib": 2**40}


def byte_quantities(message: str) -> list[float]:
    """Every number in ``message`` as bytes (``211600000000``, ``211,600,000,000 bytes``,
    ``197.1 GiB``)."""
    out = []
    for m in re.finditer(r"(\d[\d,_]*(?:\.\d+)?)\s*(tib|gib|mib|kib|tb|gb|mb|kb|bytes|byte|b)?\b",
                         message, re.IGNORECASE):
        number = float(m.group(1).replace(",", "").replace("_", ""))
        out.append(number * _UNIT[(m.group(2) or "").lower()])
    return out


def huge_net(side: int):
    """relu(a @ b) reduced to its max, a: side x 2, b: 2 x side. The matrix product's side x side
    result is an intermediate in the arena (a reduction's input is materialized), so small
    inputs ask for side**2 * 4 bytes of device memory."""
    net = ptxc.Network("huge")
    a = net.add_input("a", (side, 2))
    b = net.add_input("b", (2, side))
    y = net.add_activation(net.add_matmul(a, b), "relu")
    net.mark_output(net.add_reduce(y, "max", axes=[0, 1], keepdims=True), "y")
    return net


def test_out_of_memory_is_typed_and_the_process_recovers():
    from numba import cuda
    free, total = cuda.current_context().get_memory_info()
    side = math.isqrt(int(1.5 * total / 4)) + 1   # the intermediate: 1.5x the whole device
    giant = side * side * 4
    rng = np.random.default_rng(0)
    inputs = {"a": rng.random((side, 2), dtype=np.float32),
              "b": rng.random((2, side), dtype=np.float32)}
    with pytest.raises(OutOfMemoryError) as info:
        # nothing touches the GPU until the first run, so either step may be the one to refuse
        engine = ptxc.compile(huge_net(side), target="cuda")
        arena = engine.memory_report().get("arena_bytes")
        assert arena is None or arena >= giant, (arena, giant)  # the premise of this test
        engine.run(inputs)
    message = str(info.value)
    assert re.search("request", message, re.IGNORECASE), message
    assert re.search("free", message, re.IGNORECASE), message
    assert max(byte_quantities(message), default=0) >= 0.99 * giant, (message, giant, free)
    del info, inputs
    gc.collect()
    # the process goes on: a small engine compiles and runs, and device memory can be had
    check_small_engine(ptxc.compile(small_net(), target="cuda"), seed=2)
    block = cuda.device_array(2**28, np.float32)  # 1 GiB
    block.copy_to_host(np.empty(2**28, np.float32))
    del block
