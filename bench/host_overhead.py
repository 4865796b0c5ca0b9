"""Where a small model's latency goes on the GPU: device time against host time per call, and
which Python functions the host time is spent in (one run, on the GPU machine).

    OUT=bench_out PYTHONPATH=. python3 bench/host_overhead.py [--models bert_layer,mobilenet_v2]
        [--calls 300]

Why: on the H200 (2026-12-02) the BERT layer at batch 1 took 0.531 ms per ``run_device`` call
while its 21 kernels took 0.297 ms, and torch.compile's whole call took 0.146 ms. At batch 1
the host's share decides the ratio. For each model (bench/gpu.py's builders, fp16, NHWC), this
measures, in the same process:

* ``device``: the device time of one inference replayed from the CUDA graph
  (``program.launch_times``: the graph between two CUDA events), the floor;
* ``run_device``: a fresh output array per call (numba allocation and a device-to-device copy);
* ``run_device out=``: a preallocated torch output bound into the kernels;
* ``run``: host numpy arrays in and out (the two copies included);
* ``launch+sync``: the CUDA graph launch and the synchronize of one inference alone (the host
  floor of any call); ``interfaces``: reading the input's and the output's array interfaces;
  ``sync idle``: a synchronize with nothing queued;
* the torch.compile (reduce-overhead) call of the same model, the peer;

each the median of ``--calls`` synchronize-bracketed calls, and a cProfile of ``--calls`` calls
of ``run_device out=``: the 25 functions with the most own time. Writes host_overhead.json and
host_overhead_profile.txt under $OUT; prints a table. Timings are never test assertions.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import io
import json
import os
import pstats
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _bench_gpu():
    """bench/gpu.py as a module (its model builders, export and latency helper)."""
    spec = importlib.util.spec_from_file_location(
        "bench_gpu", os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _median_ms(fn, sync, calls: int) -> float:
    for _ in range(10):
        fn()
    sync()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def measure(name: str, calls: int, out_dir: str) -> dict:
    import torch
    import ptxc
    g = _bench_gpu()
    model, x = g.build_model(name, 1)
    row: dict = {"model": name, "batch": 1}
    with tempfile.TemporaryDirectory() as tmp:
        proto, _ = g.export_onnx(model, x, os.path.join(tmp, f"{name}.onnx"))
    engine = ptxc.compile(proto, target="cuda", precision="fp16", layout="nhwc")
    in_name, out_name = list(engine.inputs)[0], list(engine.outputs)[0]
    feeds = {in_name: x.contiguous()}
    out = {out_name: torch.empty(tuple(engine.outputs[out_name].shape), dtype=torch.float32,
                                 device="cuda")}
    sync = torch.cuda.synchronize
    row["kernels"] = len(engine.program.table.kernels)
    row["run_device_ms"] = _median_ms(lambda: engine.run_device(feeds), sync, calls)
    row["run_device_out_ms"] = _median_ms(lambda: engine.run_device(feeds, out=out), sync,
                                          calls)
    xh = {in_name: x.detach().cpu().numpy()}
    row["run_ms"] = _median_ms(lambda: engine.run(xh), sync, calls)
    engine.run_device(feeds, out=out)   # bind the out= pointers last: launch_times replays them
    sync()
    row["device_ms"] = float(np.median(engine.program.launch_times(calls)))
    # the floor of a call on the host: the graph launch and the synchronize (and error flag)
    # of the last run alone, and reading the arrays' interfaces (the rest is Python bookkeeping)
    with engine.program._contexts.take() as ctx:
        st = ctx._ready()
        row["launch_sync_ms"] = _median_ms(lambda: (ctx._launch_all(st, *st.last),
                                                    ctx._sync(st)), sync, calls)
    prog = engine.program
    row["interfaces_ms"] = _median_ms(
        lambda: (prog._device_pointer(in_name, feeds[in_name], "input"),
                 prog._device_pointer(out_name, out[out_name], "out")), lambda: None, calls)
    row["sync_idle_ms"] = _median_ms(lambda: None, sync, calls)
    row["host_share_out"] = 1.0 - row["device_ms"] / row["run_device_out_ms"]

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        engine.run_device(feeds, out=out)
    sync()
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
    with open(os.path.join(out_dir, f"host_overhead_profile_{name}.txt"), "w") as f:
        f.write(s.getvalue())

    half, xhalf = model.half(), x.half()
    cm = torch.compile(half, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(3):
            cm(xhalf)
        row["torch_compile_ms"] = _median_ms(lambda: cm(xhalf), sync, calls)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="bert_layer,mobilenet_v2")
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args(argv)
    out_dir = os.environ.get("OUT") or "."
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    for name in args.models.split(","):
        try:
            rows.append(measure(name, args.calls, out_dir))
        except Exception as e:  # noqa: BLE001  (recorded; the next model still runs)
            rows.append({"model": name, "error": f"{type(e).__name__}: {e}"[:2000]})
        print(json.dumps(rows[-1]), flush=True)
        with open(os.path.join(out_dir, "host_overhead.json"), "w") as f:
            json.dump(rows, f, indent=1)
    print("| model | kernels | device ms | launch+sync ms | run_device out= ms | run_device ms "
          "| run ms | torch.compile ms | host share (out=) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | error: {r['error'][:80]} |")
            continue
        print(f"| {r['model']} | {r['kernels']} | {r['device_ms']:.3f} "
              f"| {r['launch_sync_ms']:.3f} | {r['run_device_out_ms']:.3f} | {r['run_device_ms']:.3f} | {r['run_ms']:.3f} "
              f"| {r['torch_compile_ms']:.3f} | {r['host_share_out']:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
