"""CPU benchmark: ptxc's CPU engine against onnxruntime's CPU session, same machine, same run.

    python bench/cpu.py [--models resnet50,squeezenet] [--repeat 10] [--threads 2]

For each of the nine light models (random weights in place of their constant ones): ptxc's
compile time by stage, then the median latency of ptxc and of onnxruntime over ``--repeat`` runs
after a warm-up (same inputs, same thread count), their ratio, and the largest relative error
between the two. Prints a markdown table for bench/RESULTS.md. Timings are never test assertions.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support import light_models as lm  # noqa: E402

import ptxc  # noqa: E402


def median_time(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(lm.NAMES))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    import onnxruntime as ort

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=os.path.dirname(__file__)).stdout.strip()
    print(f"date {time.strftime('%Y-%m-%d')}, commit {commit}, {platform.processor() or platform.machine()}"
          f", {os.cpu_count()} cores, {args.threads} threads, onnxruntime {ort.__version__}, "
          f"repeat {args.repeat} (median)\n")
    print("| model | compile s (graph/tensor/loop/llvm/jit) | ptxc ms | onnxruntime ms | "
          "ptxc / ort | max rel err |")
    print("|---|---|---:|---:|---:|---:|")
    for name in args.models.split(","):
        model = lm.with_random_weights(lm.load(name), seed=0)
        inputs = lm.random_inputs(model, seed=1)
        t0 = time.perf_counter()
        engine = ptxc.compile(model, target="cpu", threads=args.threads)
        compile_s = time.perf_counter() - t0
        t = engine.timings
        parts = "/".join(f"{t.get(k, 0):.1f}" for k in ("graph", "tensor", "loop", "llvm", "jit"))
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.log_severity_level = 3  # no warnings about the unused shape initializers
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        out_names = [o.name for o in sess.get_outputs()]
        ref = dict(zip(out_names, sess.run(out_names, inputs)))
        got = engine.run(inputs)
        err = max(float(np.max(np.abs(got[k] - ref[k])) / (np.max(np.abs(ref[k])) + 1e-30))
                  for k in ref)
        t_ptxc = median_time(lambda: engine.run(inputs), args.repeat)
        t_ort = median_time(lambda: sess.run(out_names, inputs), args.repeat)
        print(f"| {name} | {compile_s:.1f} ({parts}) | {t_ptxc * 1e3:.1f} | {t_ort * 1e3:.1f} | "
              f"{t_ptxc / t_ort:.1f}x | {err:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
