"""``ptxc bench``: latency statistics of an engine, in the spirit of trtexec.

    clock = PerfClock()                          # or any object with now() -> seconds
    samples = measure(fn, clock, warmup=10, iterations=100)    # or warmup_s=, duration_s=
    stats = LatencyStats.from_samples(samples)   # min/mean/median/p90/p99/max, throughput
    result = bench_engine(engine, feeds, clock=clock, iterations=100)

Why a clock object: the loop and the statistics are the part of a benchmark that can be wrong
(an off-by-one warm-up, a percentile of the wrong rank), and they can only be tested if time is
something the test controls; tests pass a fake clock that a fake inference advances.

What one sample is: the wall time of one inference as a user calls it. On the cpu target that is
``engine.run`` on host arrays (binding checks, output allocation, the kernels); on the cuda
target ``engine.run_device`` on device arrays uploaded once (bound into the kernels without a
copy, the launches or the graph replay, the copy of the outputs into fresh device arrays, the
synchronize), as trtexec's latency without host transfers.

The host's share: what of a run's mean latency is not compute. Compute is measured in separate
runs apart from the timed ones: on cuda, timing events around each inference's launches (GPU
time); on the cpu, the sum of the kernel calls' spans (``CpuProgram.run(on_kernel=)``). The
share is ``1 - compute / latency`` (0 when compute comes out larger, which noise can do).
"""

from __future__ import annotations

import time
from typing import Callable, Protocol

import attrs
import numpy as np

from ..errors import PtxcError
from ..driver.timing import runner


class Clock(Protocol):
    def now(self) -> float:
        """Seconds from an arbitrary origin, monotonic."""


class PerfClock:
    """The real clock: ``time.perf_counter``."""

    def now(self) -> float:
        return time.perf_counter()


def measure(fn: Callable[[], object], clock: Clock, *, warmup: int | None = None,
            warmup_s: float | None = None, iterations: int | None = None,
            duration_s: float | None = None) -> list[float]:
    """Call ``fn`` for the warm-up (``warmup`` calls, or until ``warmup_s`` seconds have passed),
    then time it: ``iterations`` calls, or calls until ``duration_s`` seconds have passed (at
    least one either way). Returns the timed calls' durations in seconds, in order."""
    if warmup is not None and warmup_s is not None:
        raise PtxcError("give the warm-up as a count or as a duration, not both")
    if iterations is not None and duration_s is not None:
        raise PtxcError("give the timed runs as a count or as a duration, not both")
    if (warmup or 0) < 0 or (warmup_s or 0) < 0:
        bad = warmup if warmup_s is None else warmup_s
        raise PtxcError(f"the warm-up must be zero or more, not {bad}")
    if iterations is not None and iterations < 1:
        raise PtxcError(f"--iterations must be at least 1, not {iterations}")
    if duration_s is not None and duration_s <= 0:
        raise PtxcError(f"--duration must be more than 0 s, not {duration_s}")
    if warmup_s is not None:
        end = clock.now() + warmup_s
        while True:
            fn()
            if clock.now() >= end:
                break
    else:
        for _ in range(1 if warmup is None else warmup):
            fn()
    samples: list[float] = []
    if duration_s is not None:
        start = clock.now()
        while True:
            t0 = clock.now()
            fn()
            t1 = clock.now()
            samples.append(t1 - t0)
            if t1 - start >= duration_s:
                break
    else:
        for _ in range(10 if iterations is None else iterations):
            t0 = clock.now()
            fn()
            samples.append(clock.now() - t0)
    return samples


def percentile(sorted_samples: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by linear interpolation between closest ranks (numpy's
    default), of samples sorted ascending."""
    n = len(sorted_samples)
    if n == 0:
        raise PtxcError("no samples")
    pos = (n - 1) * q / 100.0
    lo = int(np.floor(pos))
    hi = min(lo + 1, n - 1)
    return sorted_samples[lo] + (sorted_samples[hi] - sorted_samples[lo]) * (pos - lo)


@attrs.frozen
class LatencyStats:
    """Latency statistics in seconds over ``count`` timed inferences; ``throughput`` is
    inferences per second over the timed runs (count / their total time)."""

    count: int
    min: float
    mean: float
    median: float
    p90: float
    p99: float
    max: float
    throughput: float

    @classmethod
    def from_samples(cls, samples) -> "LatencyStats":
        s = sorted(float(x) for x in samples)
        if not s:
            raise PtxcError("no timed runs to report")
        total = sum(s)
        return cls(len(s), s[0], total / len(s), percentile(s, 50), percentile(s, 90),
                   percentile(s, 99), s[-1], len(s) / total if total > 0 else float("inf"))


@attrs.frozen
class BenchResult:
    """What ``ptxc bench`` reports (``to_json`` for ``--json``)."""

    model: str
    target: str
    precision: str
    cuda_graph: bool | None
    warmup: str
    latency: LatencyStats
    compute_mean: float | None   # seconds of compute (GPU time / kernel time) per inference
    samples: tuple = ()

    @property
    def host_share(self) -> float | None:
        if self.compute_mean is None or self.latency.mean <= 0:
            return None
        return max(0.0, 1.0 - self.compute_mean / self.latency.mean)

    def to_json(self) -> dict:
        lat = {k: v * 1e3 for k, v in attrs.asdict(self.latency).items()
               if k not in ("count", "throughput")}
        return {"model": self.model, "target": self.target, "precision": self.precision,
                "cuda_graph": self.cuda_graph, "warmup": self.warmup,
                "iterations": self.latency.count, "latency_ms": lat,
                "throughput_per_s": self.latency.throughput,
                "compute_ms": None if self.compute_mean is None else self.compute_mean * 1e3,
                "host_share": self.host_share,
                "samples_ms": [x * 1e3 for x in self.samples]}

    def format(self) -> str:
        s = self.latency
        ms = lambda x: f"{x * 1e3:.3f} ms"  # noqa: E731
        compute = "gpu compute" if self.target == "cuda" else "kernel time"
        lines = [f"bench {self.model}: target {self.target}, precision {self.precision}"
                 + ("" if self.cuda_graph is None
                    else f", CUDA graph {'on' if self.cuda_graph else 'off'}")
                 + f"; warm-up {self.warmup}, {s.count} timed runs",
                 f"latency: min {ms(s.min)}, mean {ms(s.mean)}, median {ms(s.median)}, "
                 f"p90 {ms(s.p90)}, p99 {ms(s.p99)}, max {ms(s.max)}",
                 f"throughput: {s.throughput:.2f} inferences/s"]
        if self.compute_mean is not None:
            lines.append(f"{compute}: {ms(self.compute_mean)} mean; host share "
                         f"{self.host_share * 100:.1f}% of the mean latency")
        return "\n".join(lines) + "\n"


def bench_engine(engine, feeds: dict, *, model: str = "model", clock: Clock | None = None,
                 warmup: int | None = None, warmup_s: float | None = None,
                 iterations: int | None = None, duration_s: float | None = None,
                 compute_runs: int = 5) -> BenchResult:
    """Warm up, time, and measure compute apart (``compute_runs`` runs); see the module
    docstring."""
    clock = clock or PerfClock()
    fn, compute = runner(engine, feeds)
    samples = measure(fn, clock, warmup=warmup, warmup_s=warmup_s, iterations=iterations,
                      duration_s=duration_s)
    comp = compute(compute_runs) if compute_runs else []
    n = 1 if warmup is None else warmup
    wu = f"{warmup_s:g} s" if warmup_s is not None else f"{n} run{'s' if n != 1 else ''}"
    return BenchResult(model, engine.target, getattr(engine, "precision", "fp32"),
                       engine.cuda_graph if engine.target == "cuda" else None, wu,
                       LatencyStats.from_samples(samples),
                       float(np.mean(comp)) if comp else None, tuple(samples))
