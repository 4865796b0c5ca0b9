"""Nsight Compute on chosen kernels of ResNet-50 b32 (torchvision, random weights, NHWC, cuda),
int8 and fp16: the diagnostic behind the "why is this kernel latency-bound" questions of
issue 10 (stalls, occupancy, DRAM and SM throughput), which CUDA events cannot answer.

Two steps, the first compiling in parallel processes (bench/kernel_variants.py's workers) so
the profiler wraps only the runs:

    PYTHONPATH=. python3 bench/ncu_resnet.py compile --dir /tmp/plans [--variant OPTS]
    ncu --clock-control none --kernel-name "$(cat /tmp/plans/int8.regex)" \\
        --launch-count $(( $(tr -cd '|' < /tmp/plans/int8.regex | wc -c) + 1 )) \\
        --section SpeedOfLight --section Occupancy --section WarpStateStats ... \\
        python3 bench/ncu_resnet.py run --plan /tmp/plans/int8.plan

``compile`` writes, beside the plans, ``<precision>.regex`` (ncu's ``--kernel-name`` filter:
the kernels computing ``--nodes``, by default the stem and every conv of each layer's second
block) and ``kernels.json`` (each kernel's name, schedule, tile and ONNX nodes). ``run`` loads
a plan and runs it once (the CUDA graph: the launch count above takes each filtered kernel's
first launch there), then launches its kernels one by one (``program.kernel_times``) inside
the NVTX range ``ptxc-kernels`` and prints each one's time. Session 20's run is in
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import importlib.util
import json
import multiprocessing
import os
import pickle
import sys

import numpy as np

#: the kernels profiled by default: the stem and the second block of each layer
NODES = ",".join(["/conv1/Conv"] + [f"/layer{i}/layer{i}.1/conv{j}/Conv" for i in (1, 2, 3, 4)
                                     for j in (1, 2, 3)])
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compile_plans(args) -> int:
    from ptxc.calib import calibrate
    from ptxc.target import device_arch
    sys.path.insert(0, HERE)   # the spawned workers import compile_one by its module's name
    import kernel_variants as variants
    bench_gpu = _load("gpu")
    os.makedirs(args.dir, exist_ok=True)
    model, x = bench_gpu.build_model("resnet50", args.batch)
    model_path = os.path.join(args.dir, "resnet50.onnx")
    proto, _ = bench_gpu.export_onnx(model, x, model_path)
    calib_path = os.path.join(args.dir, "calib.pkl")
    with open(calib_path, "wb") as f:
        pickle.dump(calibrate(proto, [{"x": x.cpu().numpy()}], "percentile"), f)
    np.save(os.path.join(args.dir, "x.npy"), x.cpu().numpy())
    arch = device_arch()    # the workers compile for it without touching the GPU
    jobs = {p: os.path.join(args.dir, f"{p}.plan") for p in args.precisions.split(",")}
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(len(jobs), mp_context=ctx) as ex:
        futures = {p: ex.submit(variants.compile_one, model_path, calib_path, p, args.variant,
                                path, arch) for p, path in jobs.items()}
        for p, fut in futures.items():
            print(p, fut.result(), flush=True)
    import ptxc
    table = {}
    for p, path in jobs.items():
        engine = ptxc.load(path)
        table[p] = [{"name": k.name, "schedule": k.schedule, "tile": getattr(k, "tile", None),
                     "nodes": list(k.nodes or [])} for k in engine.kernels.kernels]
        # the kernels computing the chosen ONNX nodes, as ncu's --kernel-name filter
        wanted = set(args.nodes.split(","))
        names = [k["name"] for k in table[p]
                 if k["schedule"] != "pointwise" and wanted & set(k["nodes"])]
        if not names:   # e.g. another exporter's node names: say so, profile nothing
            raise SystemExit(f"{p}: no tensor-core kernel computes any of --nodes "
                             f"({sorted(wanted)[:3]} ...); the first kernels' nodes: "
                             f"{[k['nodes'][:2] for k in table[p][:6]]}")
        with open(os.path.join(args.dir, f"{p}.regex"), "w") as f:
            f.write(f"regex:^({'|'.join(names)})$")
        print(p, "profiled:", names, flush=True)
    with open(os.path.join(args.dir, "kernels.json"), "w") as f:
        json.dump(table, f, indent=1)
    return 0


def run_plan(args) -> int:
    import torch

    import ptxc
    engine = ptxc.load(args.plan)
    xn = np.load(os.path.join(os.path.dirname(args.plan), "x.npy"))
    engine.run_device({"x": torch.from_numpy(xn).cuda()})
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("ptxc-kernels")
    times = engine.program.kernel_times({"x": xn})
    torch.cuda.nvtx.range_pop()
    for k, (_, ms) in zip(engine.kernels.kernels, times):
        print(f"{k.name:10s} {ms * 1e3:8.1f} us  {getattr(k, 'tile', None) or k.schedule}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile")
    c.add_argument("--dir", required=True)
    c.add_argument("--precisions", default="int8,fp16")
    c.add_argument("--batch", type=int, default=32)
    c.add_argument("--variant", default="", help="map-to-gpu options")
    c.add_argument("--nodes", default=NODES,
                   help="comma-separated ONNX node names whose kernels the <precision>.regex "
                        "filter names")
    r = sub.add_parser("run")
    r.add_argument("--plan", required=True)
    args = ap.parse_args(argv)
    return compile_plans(args) if args.cmd == "compile" else run_plan(args)


if __name__ == "__main__":
    raise SystemExit(main())
