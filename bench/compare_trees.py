"""Before/after on the GPU: the same models compiled by two checkouts of ptxc, timed in one run.

    OUT=out python3 bench/compare_trees.py --tree new=. --tree old=/path/to/old/checkout \\
        [--models resnet50,bert_layer] [--batches 1,32] [--precisions fp16,int8] [--rounds 3]

A restructuring that must leave behaviour unchanged is checked here: each tree compiles every
(model, batch, precision) in a process of its own (its own ``ptxc`` on ``PYTHONPATH``; up to
``--jobs`` at once) and saves a plan; then, round by round and tree by tree, a process per tree
loads its plans and times them. So the trees alternate on the same GPU, and each tree runs the
plan format and runtime it wrote.

Models: bench/gpu.py's (torchvision ResNet-50 with randomized BatchNorm, one BERT-base encoder
layer), random weights, exported once to ONNX by the parent. int8 is calibrated on
``--calib`` random inputs (the same file for both trees). Only the public API is used
(``ptxc.compile``, ``engine.save``, ``ptxc.load``, ``engine.run_device``), so any two versions
of ptxc can be compared.

Per plan and round: the latency (median of synchronize-bracketed ``run_device`` calls, fresh
outputs each call, CUDA graph on), the host time of the same calls (``run_device``'s return,
before the synchronize: what the host spends enqueueing one inference, where a runtime change
shows without the device's noise) and, where the runtime has it, the device time of one graph
replay (``engine.program.launch_times``). The table gives each tree's median over rounds, the
ratio new/old, and whether the two trees' PTX is byte-identical (sha256). Writes
compare_trees.json and compare_trees.md under $OUT. Timings are never test assertions.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _bench_gpu():
    spec = importlib.util.spec_from_file_location("bench_gpu", os.path.join(HERE, "gpu.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- child processes: run with one tree's ptxc on sys.path ----------------------------------

def child_compile(job: dict) -> dict:
    import numpy as np
    import ptxc
    kw = {}
    if job["precision"] == "int8":
        data = np.load(job["calib"])
        kw["calibration"] = [{"x": data[i:i + 1].repeat(job["batch"], 0)}
                             for i in range(data.shape[0])]
    t0 = time.perf_counter()
    engine = ptxc.compile(job["onnx"], target="cuda", precision=job["precision"], **kw)
    seconds = time.perf_counter() - t0
    engine.save(job["plan"])
    return {"compile_s": seconds, "ptx_sha": hashlib.sha256(engine.ptx.encode()).hexdigest()[:16],
            "arch": engine.arch}


def child_time(jobs: list[dict], repeat: int) -> list[dict]:
    import torch
    import ptxc
    out = []
    for job in jobs:
        engine = ptxc.load(job["plan"])
        torch.manual_seed(0)
        shape = job["shape"]
        x = torch.randn(*shape, device="cuda")
        feeds = {"x": x}
        engine.run_device(feeds)
        torch.cuda.synchronize()
        times, host = [], []
        for _ in range(repeat):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            engine.run_device(feeds)
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            host.append(t1 - t0)
        row = {"key": job["key"], "latency_ms": 1e3 * statistics.median(times),
               "host_ms": 1e3 * statistics.median(host)}
        prog = getattr(engine, "program", None)
        if hasattr(prog, "launch_times"):
            row["device_ms"] = float(statistics.median(prog.launch_times(repeat)))
        out.append(row)
        del engine
    return out


def _run_child(tree: str, what: str, payload) -> object:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), PTXC_CACHE="0")
    code = (f"import json,sys; sys.path.insert(0, {HERE!r}); import numpy as np; "
            f"import compare_trees as c; "
            f"print('@@' + json.dumps(c.{what}(*json.loads(sys.stdin.read()))))")
    p = subprocess.run([sys.executable, "-c", code], input=json.dumps(payload), text=True,
                       capture_output=True, env=env, cwd=os.path.abspath(tree))
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("@@")]
    if p.returncode or not lines:
        raise RuntimeError(f"{what} in {tree} failed ({p.returncode}): {p.stderr[-2000:]}")
    return json.loads(lines[-1][2:])


# ---- the parent --------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", action="append", required=True, help="NAME=PATH (two of them)")
    ap.add_argument("--models", default="resnet50,bert_layer")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--precisions", default="fp16,int8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--calib", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=8)
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree)
    out_dir = os.environ.get("OUT", "bench_out")
    os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="compare_trees_")
    import numpy as np
    import torch
    bg = _bench_gpu()
    jobs = []
    for model in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            net, x = bg.build_model(model, batch)
            path = os.path.join(tmp, f"{model}_b{batch}.onnx")
            bg.export_onnx(net.cpu(), x.cpu(), path)
            calib = os.path.join(tmp, f"{model}_calib.npy")
            np.save(calib, torch.randn(args.calib, *x.shape[1:]).numpy())
            for precision in args.precisions.split(","):
                key = f"{model} b{batch} {precision}"
                jobs += [{"key": key, "tree": name, "onnx": path, "calib": calib,
                          "batch": batch, "shape": list(x.shape), "precision": precision,
                          "plan": os.path.join(tmp, f"{name}_{model}_b{batch}_{precision}.plan")}
                         for name in trees]
    print(f"compiling {len(jobs)} engines, {args.jobs} at a time", flush=True)
    results: dict = {}
    with cf.ThreadPoolExecutor(args.jobs) as ex:
        futs = {ex.submit(_run_child, trees[j["tree"]], "child_compile", [j]): j for j in jobs}
        for f in cf.as_completed(futs):
            j = futs[f]
            try:
                results[(j["tree"], j["key"])] = dict(f.result(), times=[], hosts=[], devs=[])
            except Exception as e:  # noqa: BLE001  (one failed compile is one row's error)
                results[(j["tree"], j["key"])] = {"error": str(e)[-600:], "times": [], "hosts": [],
                                                   "devs": []}
            print(j["tree"], j["key"], results[(j["tree"], j["key"])].get("compile_s",
                  results[(j["tree"], j["key"])].get("error")), flush=True)
    for r in range(args.rounds):
        for name, tree in trees.items():
            mine = [j for j in jobs if j["tree"] == name and "error" not in results[(name, j["key"])]]
            for row in _run_child(tree, "child_time", [mine, args.repeat]):
                res = results[(name, row["key"])]
                res["times"].append(row["latency_ms"])
                res["hosts"].append(row["host_ms"])
                if "device_ms" in row:
                    res["devs"].append(row["device_ms"])
        print(f"round {r + 1} done", flush=True)
    names = list(trees)
    new, old = names[0], names[1]
    lines = [f"| model | {new} latency ms | {old} latency ms | {new}/{old} | {new} host ms | "
             f"{old} host ms | {new}/{old} | {new} device ms | {old} device ms | {new}/{old} | "
             f"same PTX |", "|---|" + "---:|" * 9 + "---|"]
    table = []
    for key in dict.fromkeys(j["key"] for j in jobs):
        a, b = results[(new, key)], results[(old, key)]
        med = (lambda v: statistics.median(v) if v else float("nan"))
        la, lb, da, db = med(a["times"]), med(b["times"]), med(a["devs"]), med(b["devs"])
        ha, hb = med(a["hosts"]), med(b["hosts"])
        same = a.get("ptx_sha") is not None and a.get("ptx_sha") == b.get("ptx_sha")
        table.append({"key": key, new: a, old: b, "same_ptx": same})
        lines.append(f"| {key} | {la:.3f} | {lb:.3f} | {la / lb:.3f} | {ha:.3f} | {hb:.3f} | "
                     f"{ha / hb:.3f} | {da:.3f} | {db:.3f} | {da / db:.3f} | "
                     f"{'yes' if same else 'no'} |")
    md = "\n".join(lines)
    print(md)
    with open(os.path.join(out_dir, "compare_trees.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(out_dir, "compare_trees.json"), "w") as f:
        json.dump({"trees": trees, "gpu": torch.cuda.get_device_name(), "rows": table}, f,
                  indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
