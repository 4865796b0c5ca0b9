"""ptxc bench: the measuring loop and statistics on a fake clock; the per-kernel profile (rows
name the ONNX nodes fused into each kernel, rows sum to the profiled run's time); the CLI."""

import json

import numpy as np
import pytest

import ptxc
from ptxc.cli import main
from ptxc.errors import PtxcError
from ptxc.tools.bench import LatencyStats, bench_engine, measure, percentile
from ptxc.tools.profile import profile_engine

from support.tool_models import cbr_model, save


class FakeClock:
    """Time moves only when a fake inference says so."""

    def __init__(self):
        self.t = 100.0

    def now(self):
        return self.t


class FakeInference:
    """Advances the clock by the next latency of a script (cycling)."""

    def __init__(self, clock, latencies):
        self.clock, self.latencies, self.calls = clock, list(latencies), 0

    def __call__(self):
        self.clock.t += self.latencies[self.calls % len(self.latencies)]
        self.calls += 1


def test_measure_counts_warmup_and_iterations():
    clock = FakeClock()
    fn = FakeInference(clock, [0.5, 0.001, 0.002, 0.003])   # the first (warm-up) run is slow
    samples = measure(fn, clock, warmup=1, iterations=3)
    assert fn.calls == 4 and samples == pytest.approx([0.001, 0.002, 0.003])


def test_measure_by_duration():
    clock = FakeClock()
    fn = FakeInference(clock, [0.01])
    samples = measure(fn, clock, warmup_s=0.035, duration_s=0.1)
    # warm-up: runs until 35 ms have passed -> 4 runs; timed: until 100 ms -> 10 runs
    assert fn.calls == 4 + 10 and len(samples) == 10
    assert samples == pytest.approx([0.01] * 10)


def test_measure_refuses_bad_counts():
    clock = FakeClock()
    with pytest.raises(PtxcError, match="at least 1"):
        measure(FakeInference(clock, [1]), clock, iterations=0)
    with pytest.raises(PtxcError, match="not both"):
        measure(FakeInference(clock, [1]), clock, iterations=3, duration_s=1.0)


def test_statistics_against_numpy():
    rng = np.random.default_rng(3)
    lat = list(rng.exponential(0.004, 37) + 0.001)
    clock = FakeClock()
    s = LatencyStats.from_samples(measure(FakeInference(clock, [0.0] + lat), clock, warmup=1,
                                          iterations=len(lat)))
    a = np.array(lat)
    assert s.count == 37 and s.min == pytest.approx(a.min()) and s.max == pytest.approx(a.max())
    assert s.mean == pytest.approx(a.mean()) and s.median == pytest.approx(np.median(a))
    assert s.p90 == pytest.approx(np.percentile(a, 90))
    assert s.p99 == pytest.approx(np.percentile(a, 99))
    assert s.throughput == pytest.approx(37 / a.sum())
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5


def test_bench_engine_on_a_fake_clock():
    """The real engine runs; the fake clock gives every timed run 1 s, so the statistics are
    exact and the host share is 1 - kernel time / 1 s."""
    engine = ptxc.compile(cbr_model(), target="cpu")
    clock = FakeClock()
    feeds = {"x": np.ones((1, 3, 16, 16), np.float32)}
    real_run = engine.run

    def run(f):
        clock.t += 1.0
        return real_run(f)
    engine.run = run
    r = bench_engine(engine, feeds, clock=clock, warmup=2, iterations=5)
    assert r.latency.count == 5 and r.latency.median == pytest.approx(1.0)
    assert r.latency.p99 == pytest.approx(1.0) and r.latency.throughput == pytest.approx(1.0)
    assert 0 < r.compute_mean < 1 and r.host_share == pytest.approx(1 - r.compute_mean)
    j = r.to_json()
    assert j["latency_ms"]["mean"] == pytest.approx(1000.0) and len(j["samples_ms"]) == 5


def test_profile_rows_name_fused_nodes_and_sum_to_the_run():
    engine = ptxc.compile(cbr_model(channels=32, size=48), target="cpu")
    x = np.random.default_rng(0).standard_normal((1, 3, 48, 48)).astype(np.float32)
    op_types = {"conv1": "Conv", "bn1": "BatchNormalization", "relu1": "Relu"}
    prof = profile_engine(engine, {"x": x}, op_types)
    assert len(prof.rows) == len(engine.kernels.kernels)
    # the first conv's kernels carry the batch norm and the relu fused into them
    conv1 = [r for r in prof.rows if r.nodes and r.nodes[0] == "conv1"]
    assert conv1 and all(set(r.nodes) >= {"conv1", "bn1", "relu1"} for r in conv1)
    assert "conv1 (Conv), bn1 (BatchNormalization), relu1 (Relu)" in prof.format()
    conv2 = [r for r in prof.rows if "conv2" in r.nodes]
    assert conv2 and any({"add1", "relu2"} <= set(r.nodes) for r in conv2)
    # each kernel is timed inside the profiled run, so their sum cannot exceed it (how much of the
    # run they cover is a timing, which tests never assert)
    assert 0 < prof.kernel_total <= prof.measured
    rows = prof.format().splitlines()[2:]
    times = [float(line.split()[0]) for line in rows]
    assert times == sorted(times, reverse=True)
    trace = prof.chrome_trace()
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(events) == len(prof.rows)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events)
    assert sum(e["dur"] for e in events) == pytest.approx(prof.kernel_total * 1e6)


def test_profile_rows_sum_to_the_run_on_a_fake_clock():
    """The done-when's "profile rows sum to the measured time within 10%", on a fake clock: the
    real kernels run, but each also advances the clock by a known time (dyadic, so float sums
    are exact), and the host work around them (staging, binding) by a known small time. The rows
    must be the kernel times exactly, in order, start where the kernels started, and sum to the
    measured run within 10%; a profile that timed the warm run, put host work in a kernel's
    span or lost a kernel would fail."""
    engine = ptxc.compile(cbr_model(channels=8, size=16), target="cpu")
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = engine.run({"x": x})
    prog = engine.program
    prog.threads = 1  # one call per kernel: the fake time of a kernel is added once
    clock = FakeClock()
    kernel_s = [(i + 1) / 1024 for i in range(len(prog._fns))]
    stage_s, bind_s = 1 / 8192, 1 / 16384   # host work, small beside the kernels

    def advancing(fn, dt):
        def call(*args):
            clock.t += dt
            return fn(*args)
        return call
    prog._fns = [advancing(fn, dt) for fn, dt in zip(prog._fns, kernel_s)]
    real_stage, real_bind = prog.stage, prog._bind

    def stage(inputs):
        clock.t += stage_s
        return real_stage(inputs)

    def bind(buffers):
        clock.t += bind_s
        return real_bind(buffers)
    prog.stage, prog._bind = stage, bind
    prof = profile_engine(engine, {"x": x}, clock=clock)
    assert [r.index for r in prof.rows] == list(range(len(kernel_s)))
    assert [r.time for r in prof.rows] == kernel_s          # exactly the kernels' times
    assert prof.kernel_total == sum(kernel_s)
    assert prof.measured == sum(kernel_s) + stage_s + bind_s
    assert abs(prof.kernel_total - prof.measured) <= 0.1 * prof.measured
    host_before = stage_s + bind_s      # the first kernel starts after staging and binding
    starts = [host_before + sum(kernel_s[:i]) for i in range(len(kernel_s))]
    assert [r.start for r in prof.rows] == starts
    # and the real kernels ran: the profiled engine still computes what it did
    got = engine.run({"x": x})
    for n in want:
        np.testing.assert_allclose(got[n], want[n], rtol=1e-5, atol=1e-6)


def test_cli_bench_profile_json_and_trace(tmp_path, capsys):
    model = save(cbr_model(), tmp_path / "m.onnx")
    j, tr = tmp_path / "r.json", tmp_path / "t.json"
    assert main(["bench", model, "--target", "cpu", "--iterations", "3", "--warmup", "1",
                 "--profile", "--json", str(j), "--export-profile", str(tr)]) == 0
    out = capsys.readouterr().out
    assert "latency: min" in out and "p99" in out and "host share" in out
    assert "conv1 (Conv), bn1 (BatchNormalization), relu1 (Relu)" in out
    rep = json.loads(j.read_text())
    assert rep["iterations"] == 3 and len(rep["samples_ms"]) == 3
    assert rep["profile"]["kernels"][0]["time_ms"] >= rep["profile"]["kernels"][-1]["time_ms"]
    assert json.loads(tr.read_text())["traceEvents"]


def test_cli_bench_precision_flags_refused_until_available(tmp_path, capsys):
    from ptxc.compiler import PRECISIONS
    if "fp16" in PRECISIONS:
        pytest.skip("fp16 is available: the flag compiles")
    model = save(cbr_model(), tmp_path / "m.onnx")
    assert main(["bench", model, "--target", "cpu", "--fp16"]) == 2
    assert "precision 'fp16' is not available" in capsys.readouterr().err


def test_cli_bench_errors_come_before_compiling(tmp_path, capsys):
    model = save(cbr_model(), tmp_path / "m.onnx")
    assert main(["bench", model, "--json", str(tmp_path / "no" / "r.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["bench", model, "--input", "x=" + str(tmp_path / "x.npy")]) == 2
    assert "x.npy" in capsys.readouterr().err
    assert main(["bench", model, "--target", "cpu", "--cuda-graph", "on"]) == 2
    assert "--target cuda" in capsys.readouterr().err


def test_kernel_nodes_survive_a_plan(tmp_path):
    engine = ptxc.compile(cbr_model(), target="cpu")
    nodes = [k.nodes for k in engine.kernels.kernels]
    assert any(set(n) >= {"conv1", "bn1", "relu1"} for n in nodes)
    engine.save(tmp_path / "m.plan")
    assert [k.nodes for k in ptxc.load(tmp_path / "m.plan").kernels.kernels] == nodes
