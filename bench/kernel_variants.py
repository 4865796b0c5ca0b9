"""Each kernel's device time under several map-to-gpu variants, and what choosing the fastest
variant kernel by kernel would give: a tuner's view of ResNet-50 (torchvision, random weights,
the model bench/gpu.py builds) at batch 32 on the cuda target, int8 and fp16.

    OUT=out PYTHONPATH=. python3 bench/kernel_variants.py --precisions int8,fp16 \\
        --variant "" --variant "mma-stages=4" --variant "wgmma=off" ...

A variant's word ``env:NAME=VALUE`` sets an environment variable in its compile's process
(an experiment's switch, e.g. ``env:PTXC_CACHE=0``).

Every (precision, variant) engine is compiled in a process of its own, ``--jobs`` at a time (a
compile is single-threaded Python; the calibration table, computed once, and the ONNX model
come from files), and saved as a plan. Then, one engine at a time on the GPU: a run checked
against torch fp32 eager (cosine of the logits), each kernel's device time (the median over
``--repeat`` runs of ``program.kernel_times``: the kernels launched one by one between CUDA
events, no graph) and the CUDA graph's device time (median of ``program.launch_times``).

A kernel is known across variants by the ONNX nodes it computes (a split-K pair and the
kernels of one node sum). For each precision the script prints each variant's graph time and
kernel sum, and the kernel sum taking every node group's fastest variant ("best of"), with the
groups that gain most and the variant that wins them. Writes kernel_variants.json under $OUT.
Times in isolation are not the graph's (no overlap between kernels: bench/graph_ablation.py
measures marginal costs), so "best of" is an estimate of a per-kernel choice's worth, not a
result.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import importlib.util
import json
import multiprocessing
import os
import pickle
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _bench_gpu():
    spec = importlib.util.spec_from_file_location("bench_gpu", os.path.join(HERE, "gpu.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compile_one(model_path: str, calib_path: str | None, precision: str, variant: str,
                plan_path: str, arch: str) -> dict:
    """Compile one engine (in a worker process) and save it as a plan; its compile seconds and
    kernel tiles."""
    sys.path.insert(0, os.path.join(HERE, ".."))
    import onnx

    import ptxc
    bench_gpu = _bench_gpu()
    kw = {"layout": "nhwc", "precision": precision, "arch": arch}
    if precision == "int8":
        with open(calib_path, "rb") as f:
            kw["calibration"] = pickle.load(f)
    words = variant.split()
    env = dict(w[4:].partition("=")[::2] for w in words if w.startswith("env:"))
    variant = " ".join(w for w in words if not w.startswith("env:"))
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)    # "env:NAME=VALUE": set for this compile only (workers are reused)
    try:
        t0 = time.perf_counter()
        engine = ptxc.compile(onnx.load(model_path), target="cuda",
                              pass_options=bench_gpu.map_options(
                                  bench_gpu.with_epilogue(variant, "staged")), **kw)
        secs = time.perf_counter() - t0
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    engine.save(plan_path)
    return {"compile_s": round(secs, 1), "kernels": len(engine.kernels.kernels)}


def kernel_key(k) -> str:
    return " + ".join(k.nodes) if k.nodes else (k.loc or k.name)


def time_engine(engine, feeds: dict, host_feeds: dict, repeat: int) -> dict:
    """Per kernel key: median device µs (summed over the key's kernels), the tiles; and the
    graph's median device ms."""
    engine.run_device(feeds)
    runs = [engine.program.kernel_times(host_feeds) for _ in range(repeat)]
    per = np.median(np.array([[d for _, d in r] for r in runs]), axis=0) * 1e3   # µs
    keys: dict = collections.OrderedDict()
    for k, t in zip(engine.kernels.kernels, per):
        e = keys.setdefault(kernel_key(k), {"us": 0.0, "tiles": []})
        e["us"] += float(t)
        e["tiles"].append(getattr(k, "tile", None) or k.schedule)
    engine.run_device(feeds)
    graph = float(np.median(engine.program.launch_times(max(repeat, 20))))
    return {"graph_ms": graph, "kernel_sum_us": float(per.sum()), "kernels": keys}


def summarize(result: dict, top: int = 12) -> None:
    for precision, rows in result["rows"].items():
        ok = {v: r for v, r in rows.items() if "graph_ms" in r}
        if "" not in ok:
            continue
        base = ok[""]
        print(f"\n== {precision}: graph ms / kernel sum µs per variant")
        for v, r in ok.items():
            print(f"  {v or '(defaults)':60s} {r['graph_ms']:.4f} ms  {r['kernel_sum_us']:.1f} µs"
                  f"  cosine {r.get('cosine', float('nan')):.5f}")
        best_sum, gains = 0.0, []
        for key, e in base["kernels"].items():
            times = {v: r["kernels"][key]["us"] for v, r in ok.items() if key in r["kernels"]}
            v_best = min(times, key=times.get)
            best_sum += times[v_best]
            gains.append((e["us"] - times[v_best], key, v_best, e["us"], times[v_best],
                          ok[v_best]["kernels"][key]["tiles"], e["tiles"]))
        unmatched = sum(e["us"] for r in ok.values() for k, e in r["kernels"].items()
                        if k not in base["kernels"])
        print(f"  best of, kernel by kernel: {best_sum:.1f} µs against {base['kernel_sum_us']:.1f}"
              f" (kernels of other node groups in variants: {unmatched:.1f} µs, not counted)")
        result.setdefault("best_of_us", {})[precision] = best_sum
        gains.sort(reverse=True)
        for g, key, v, a, b, tb, ta in gains[:top]:
            print(f"  -{g:5.1f} µs {a:6.1f} -> {b:6.1f}  {v:40s} {key[:60]}\n"
                  f"      {ta} -> {tb}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precisions", default="int8,fp16")
    ap.add_argument("--variant", action="append",
                    help="map-to-gpu options (repeat; '' is the defaults, always included)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--method", default="percentile", help="calibrator")
    args = ap.parse_args(argv)
    variants = [""] + [v for v in (args.variant or []) if v]
    precisions = args.precisions.split(",")

    import torch

    import ptxc
    from ptxc.calib import calibrate
    from ptxc.target import device_arch
    bench_gpu = _bench_gpu()
    out_dir = os.environ.get("OUT") or "."
    os.makedirs(out_dir, exist_ok=True)
    torch.backends.cudnn.allow_tf32 = False
    model, x = bench_gpu.build_model("resnet50", args.batch)
    with torch.no_grad():
        ref = model(x).float().cpu().numpy().astype(np.float64)
    result: dict = {"batch": args.batch, "variants": variants, "rows": {}}
    with tempfile.TemporaryDirectory() as tmp:
        model_path = os.path.join(tmp, "resnet50.onnx")
        proto, _ = bench_gpu.export_onnx(model, x, model_path)
        xn = x.cpu().numpy()
        calib_path = None
        if "int8" in precisions:
            calib_path = os.path.join(tmp, "calib.pkl")
            with open(calib_path, "wb") as f:
                pickle.dump(calibrate(proto, [{"x": xn}], args.method), f)
        jobs = [(p, v, os.path.join(tmp, f"{p}_{i}.plan")) for p in precisions
                for i, v in enumerate(variants)]
        t0 = time.perf_counter()
        ctx = multiprocessing.get_context("spawn")   # the parent holds a CUDA context
        arch = device_arch()    # the workers compile for it without touching the GPU
        with cf.ProcessPoolExecutor(args.jobs, mp_context=ctx) as ex:
            futures = {ex.submit(compile_one, model_path, calib_path, p, v, path, arch): (p, v)
                       for p, v, path in jobs}
            for fut in cf.as_completed(futures):
                p, v = futures[fut]
                row = result["rows"].setdefault(p, {}).setdefault(v, {})
                try:
                    row.update(fut.result())
                except Exception as e:  # noqa: BLE001  (recorded; the others still run)
                    row["error"] = f"{type(e).__name__}: {e}"[:1000]
        print(f"compiled {len(jobs)} engines in {time.perf_counter() - t0:.0f} s", flush=True)
        feeds = {"x": x.contiguous()}
        host = {"x": np.ascontiguousarray(xn)}
        for p, v, path in jobs:
            row = result["rows"][p][v]
            if "error" in row:
                print(f"{p} [{v}]: {row['error']}", flush=True)
                continue
            try:
                engine = ptxc.load(path)
                got = engine.run_device(feeds)["y"].copy_to_host().reshape(ref.shape)
                b = got.astype(np.float64)
                row["cosine"] = float(np.min(np.sum(ref * b, 1) / (
                    np.linalg.norm(ref, axis=1) * np.linalg.norm(b, axis=1))))
                row.update(time_engine(engine, feeds, host, args.repeat))
                del engine
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {e}"[:1000]
            print(f"{p} [{v}]: graph {row.get('graph_ms', float('nan')):.4f} ms, kernels "
                  f"{row.get('kernel_sum_us', float('nan')):.1f} µs {row.get('error', '')}",
                  flush=True)
    summarize(result)
    with open(os.path.join(out_dir, "kernel_variants.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
