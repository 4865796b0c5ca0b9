"""What each kernel costs inside the CUDA graph: ResNet-50 (torchvision, random weights) at
``--batch`` on the cuda target, its graph re-captured without one kernel at a time and timed
(device time between two CUDA events, ``program.launch_times``).

    OUT=bench_out PYTHONPATH=. python3 bench/graph_ablation.py --precisions int8,fp16

Why: ptxc's per-kernel profile (ptxc.tools.profile) launches kernels one by one between events,
so every kernel's time includes a launch gap (small kernels read 3-5 us whatever they do), and
the graph overlaps a kernel's start with its predecessor's tail (programmatic dependent launch).
A kernel's *marginal* cost in the graph is what removing it saves. The ablated runs compute
garbage (a skipped kernel's consumers read stale memory): timing only, never an output. The
time of a kernel does not depend on the values it reads in these kernels (no data-dependent
control flow), so the garbage does not move the timings.

Drift: the H200's clocks moved the graph's time by up to 3% over a run (fp16, session 16), more
than a small kernel's cost, so each ablated graph is paired with an unablated one timed just
before it, and the saving is their difference. Writes graph_ablation.json under $OUT and prints
one line per kernel: saved us (marginal), isolated us (profile), schedule, node, tile.
Timings are never test assertions.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os

import numpy as np

_SKIP: set = set()


def _install_skip_hook():
    """Wrap the cuda driver's single-launch function so that kernels named in ``_SKIP`` are
    not launched (nor captured into a graph): the ablation's only hook into ptxc."""
    from ptxc.driver import cuda_context
    launch = cuda_context._launch_one

    def launch_unless_skipped(cc, stream, k, kern, cfg, args, doing):
        if k.name not in _SKIP:
            launch(cc, stream, k, kern, cfg, args, doing)
    cuda_context._launch_one = launch_unless_skipped


def _graph_ms(engine, feeds: dict, runs: int) -> float:
    """Median device ms of the graph with the current ``_SKIP`` (every context's captured
    graphs dropped first, so the next runs capture a new one)."""
    import torch
    from ptxc.driver.cuda_graphs import GraphCache
    for c in engine.program._contexts.contexts:
        if c._state is not None:
            c._state.graphs.close()
            c._state.graphs = GraphCache()
    for _ in range(3):   # a pointer set is captured on its second run (GraphCache)
        engine.run_device(feeds)
    torch.cuda.synchronize()
    return float(np.median(engine.program.launch_times(runs)))


def ablate(engine, feeds: dict, x, runs: int) -> dict:
    """{kernel: {saved_us, isolated_us, ...}} and the unablated times, for one engine."""
    from ptxc.tools.profile import profile_engine
    prof = profile_engine(engine, {"x": x.cpu().numpy()})
    isolated = {r.kernel: r.time * 1e6 for r in prof.rows}
    kernels = engine.kernels.kernels
    rows = {}
    bases = []
    for k in kernels:
        # the unablated graph timed just before each ablated one: the pair sees the same clocks
        _SKIP.clear()
        base = _graph_ms(engine, feeds, runs)
        _SKIP.add(k.name)
        ablated = _graph_ms(engine, feeds, runs)
        bases.append(base)
        rows[k.name] = {"saved_us": (base - ablated) * 1e3, "isolated_us": isolated.get(k.name),
                        "schedule": k.schedule, "tile": getattr(k, "tile", None),
                        "nodes": list(getattr(k, "nodes", ()) or ()), "grid": list(k.grid),
                        "block": list(k.block)}
    _SKIP.clear()
    return {"base_ms": bases, "kernels": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precisions", default="int8,fp16")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--runs", type=int, default=40, help="graph replays per timing")
    ap.add_argument("--map-options", default="", help="extra map-to-gpu options")
    args = ap.parse_args(argv)
    import torch
    spec = importlib.util.spec_from_file_location(
        "bench_gpu", os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu.py"))
    bench_gpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_gpu)
    import tempfile

    import ptxc
    from ptxc.calib import calibrate
    _install_skip_hook()
    model, x = bench_gpu.build_model("resnet50", args.batch)
    with tempfile.TemporaryDirectory() as tmp:
        proto, _ = bench_gpu.export_onnx(model, x, os.path.join(tmp, "resnet50.onnx"))
    feeds = {"x": x.contiguous()}
    result = {"batch": args.batch, "map_options": args.map_options, "precisions": {}}
    for precision in args.precisions.split(","):
        kw = {"layout": "nhwc", "precision": precision}
        if precision == "int8":
            kw["calibration"] = calibrate(proto, [{"x": x.cpu().numpy()}], "percentile")
        engine = ptxc.compile(proto, target="cuda", pass_options=bench_gpu.map_options(
            f"mma-epilogue=staged {args.map_options}".strip()), **kw)
        engine.run_device(feeds)
        torch.cuda.synchronize()
        r = ablate(engine, feeds, x, args.runs)
        result["precisions"][precision] = r
        b = r["base_ms"]
        print(f"== {precision}: unablated graph ms: median {np.median(b):.4f}, "
              f"{min(b):.4f}-{max(b):.4f}")
        for name, k in r["kernels"].items():
            node = (k["nodes"] or [""])[0][-40:]
            iso = k["isolated_us"]
            print(f"{name:10s} saved {k['saved_us']:7.1f} us  isolated "
                  f"{iso if iso is None else round(iso, 1)!s:>6} us  {k['schedule']:9s} "
                  f"{node:40s} {k['tile'] or ''}", flush=True)
        del engine
    out = os.environ.get("OUT") or "."
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "graph_ablation.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
