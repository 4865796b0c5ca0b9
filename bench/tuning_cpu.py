"""Auto-tuning on the cpu target: tuned against untuned, same machine, same run.

    python bench/tuning_cpu.py [--models squeezenet,shufflenet] [--level fast] [--repeat 10]

For each light model (random weights): the untuned compile's time; a tuned compile's time with
an empty timing cache (cold) and again with the cache it wrote (warm: nothing measured); each
engine's latency (median of ``--repeat`` runs after a warm-up, same inputs, the pool's threads)
and their ratio; how many distinct kernels tuning changed; the largest difference between the
two engines' outputs relative to the largest output. ``layout="nchw"`` for both (a tuned
``auto`` would also time channels-last). Prints a markdown table for bench/RESULTS.md. Timings
are never test assertions.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support import light_models as lm  # noqa: E402

import ptxc  # noqa: E402
from cpu import median_time  # noqa: E402  (bench/cpu.py: the same latency measure)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="squeezenet,shufflenet")
    ap.add_argument("--level", default="fast", choices=("fast", "full"))
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"{time.strftime('%Y-%m-%d')} · {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores · commit {commit} · tuning={args.level}\n")
    print("| model | untuned compile s | tuned cold s | tuned warm s | kernels changed / "
          "distinct | untuned ms | tuned ms | tuned / untuned | max rel diff |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|")
    for name in args.models.split(","):
        model = lm.with_random_weights(lm.load(name))
        feeds = lm.random_inputs(model)
        with tempfile.TemporaryDirectory() as tmp:
            cache = os.path.join(tmp, f"{name}.timing")
            t0 = time.perf_counter()
            base = ptxc.compile(model, target="cpu", cache=False, layout="nchw")
            t_base = time.perf_counter() - t0
            t0 = time.perf_counter()
            tuned = ptxc.compile(model, target="cpu", cache=False, layout="nchw",
                                 tuning=args.level, timing_cache=cache)
            t_cold = time.perf_counter() - t0
            t0 = time.perf_counter()
            warm = ptxc.compile(model, target="cpu", cache=False, layout="nchw",
                                tuning=args.level, timing_cache=cache)
            t_warm = time.perf_counter() - t0
            assert {r["source"] for r in warm.tuning} == {"cache"}
        a, b = base.run(feeds), tuned.run(feeds)
        diff = max(float(np.abs(a[k] - b[k]).max() / (np.abs(a[k]).max() + 1e-30)) for k in a)
        lat_base = median_time(lambda: base.run(feeds), args.repeat)
        lat_tuned = median_time(lambda: tuned.run(feeds), args.repeat)
        changed = sum(1 for r in tuned.tuning if r["tactic"] != "auto")
        print(f"| {name} | {t_base:.1f} | {t_cold:.1f} | {t_warm:.1f} | {changed} / "
              f"{len(tuned.tuning)} | {lat_base * 1e3:.1f} | {lat_tuned * 1e3:.1f} | "
              f"{lat_tuned / lat_base:.2f}x | {diff:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
