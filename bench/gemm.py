"""GEMM micro-benchmark: ptxc's mma schedule against cuBLAS (torch.matmul), same run, same GPU.

Each shape is an fp16 MatMul (f16 operands, f32 accumulation) built as an ONNX model and lowered
by ptxc to the loop stage (tests/contraction_ir.py: the contraction form the precision pass
hands to the mma schedule), mapped by map-to-gpu, compiled to PTX and launched straight from
the kernel table (no engine: the kernel alone, as torch.matmul is the cuBLAS kernel alone).
Both are timed the same way: ``ITERS`` launches queued back to back after a warm-up, wall clock
around a final synchronize, best of ``REPEATS``. Numerics: ptxc's output against
torch.matmul's f16 product upcast (both accumulate in f32), max relative error.

    python3 bench/gemm.py [--out DIR] [--shapes 4096x4096x4096,128x768x768]

Prints a table and writes gemm.json (shape, FLOPs, µs, TFLOP/s, ratio ptxc / cuBLAS).
FLOPs of M x N x K: 2MNK. At 4096^3 that is 137.4 GFLOP: 0.18 ms at cuBLAS's ~750 TFLOP/s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, ".."))

#: (M, K, N, name): the issue's 4096^3 and BERT-base's layers at batch 1 and 32 (sequence 128)
SHAPES = [(4096, 4096, 4096, "square 4096"),
          (128, 768, 768, "BERT b1 qkv/out"), (128, 768, 3072, "BERT b1 ffn1"),
          (128, 3072, 768, "BERT b1 ffn2"),
          (4096, 768, 768, "BERT b32 qkv/out"), (4096, 768, 3072, "BERT b32 ffn1"),
          (4096, 3072, 768, "BERT b32 ffn2")]
ITERS, REPEATS = 50, 5


def ptxc_kernel(M, K, N, cfg=None):
    """(PtxProgram, schedule names) of the fp16 MatMul M x K x N; ``cfg`` (an mma Config)
    forces the tile instead of the schedule's heuristic."""
    from contraction_ir import loop_module, matmul_model

    from ptxc.lower.gpu_map import mma
    from ptxc.ptx import lower_to_ptx
    from ptxc.rewrite import PassManager
    m = loop_module(matmul_model(M=M, K=K, N=N, bias=False, relu=False))
    if cfg is not None:
        mma.build_all(m, cfg)
    PassManager("map-to-gpu").run(m)
    scheds = [o.attributes["schedule"] for o in m.walk() if o.name == "gpu.launch"]
    return lower_to_ptx(m), scheds


def _compile_candidate(args):
    M, K, N, cfg = args
    try:
        p, _ = ptxc_kernel(M, K, N, cfg)
        return cfg, p
    except Exception as e:  # noqa: BLE001
        return cfg, f"{type(e).__name__}: {e}"


def search(M, K, N, min_tile=128 * 128, jobs=16):
    """Compile every mma candidate tile of at least ``min_tile`` outputs (in parallel), time
    each against cuBLAS; rows sorted fastest first."""
    from concurrent.futures import ProcessPoolExecutor

    from contraction_ir import loop_module, matmul_model
    from ptxc.lower.gpu_map import contraction, mma
    m = loop_module(matmul_model(M=M, K=K, N=N, bias=False, relu=False))
    c = next(contraction.analyze(o) for o in m.walk()
             if o.name == "loop.parallel" and contraction.analyze(o) is not None)
    cfgs = [x for x in mma.candidates(c) if x.bm * x.bn >= min_tile and x.stages >= 3
            and x.threads <= 256]
    with ProcessPoolExecutor(jobs) as ex:
        built = list(ex.map(_compile_candidate, [(M, K, N, x) for x in cfgs]))
    rows = []
    for cfg, p in built:
        tag = f"{cfg.bm}x{cfg.bn}x{cfg.bk} warps {cfg.warps_m}x{cfg.warps_n} stages {cfg.stages}"
        if isinstance(p, str):
            rows.append({"config": tag, "error": p})
            continue
        r = run_shape(M, K, N, program=(p, ["mma"]))
        r["config"] = tag
        rows.append(r)
        print(f"  {tag:>32}: {r['ptxc_tflops']:6.1f} TF/s ratio {r['ratio']:.2f} "
              f"err {r['max_rel_err']:.1e}", flush=True)
    rows.sort(key=lambda r: -r.get("ptxc_tflops", 0))
    return rows


def time_queue(launch, sync) -> float:
    """Best per-launch seconds of ``REPEATS`` rounds of ``ITERS`` queued launches."""
    for _ in range(3):
        launch()
    sync()
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for _ in range(ITERS):
            launch()
        sync()
        best = min(best, (time.perf_counter() - t0) / ITERS)
    return best


def run_shape(M, K, N, program=None):
    import cuda.core as cc
    import torch
    from numba import cuda

    p, scheds = program if program is not None else ptxc_kernel(M, K, N)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    t = p.table
    dev = {}
    for s in t.slots:
        host = {"a": a, "b": b}.get(s.name)
        if host is None:
            host = np.zeros(max(s.span, 1), s.dtype)
        dev[s.name] = cuda.to_device(np.ascontiguousarray(host).reshape(-1))
    slots = [dev[s.name] for s in t.slots]
    mod = cuda.current_context().create_module_ptx(p.ptx)
    stream = cc.Device().create_stream()
    from ptxc.driver.cuda import launch_config, load_kernel
    kernels = [(load_kernel(mod, k), launch_config(k),
                [slots[i].device_ctypes_pointer.value for i in k.buffers]) for k in t.kernels]

    def launch():
        for kern, cfg, args in kernels:
            cc.launch(stream, cfg, kern, *args)
    sec = time_queue(launch, stream.sync)
    y = dev["y"].copy_to_host()[:M * N].reshape(M, N)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    ref = torch.matmul(ta, tb)
    tsec = time_queue(lambda: torch.matmul(ta, tb), torch.cuda.synchronize)
    refn = ref.float().cpu().numpy()
    err = float(np.abs(y - refn).max() / max(1e-6, np.abs(refn).max()))
    flops = 2 * M * N * K
    return {"M": M, "K": K, "N": N, "schedules": scheds,
            "kernels": [{"grid": k.grid, "block": k.block, "shared": k.shared_bytes}
                        for k in t.kernels],
            "flops": flops, "ptxc_us": sec * 1e6, "cublas_us": tsec * 1e6,
            "ptxc_tflops": flops / sec / 1e12, "cublas_tflops": flops / tsec / 1e12,
            "ratio": tsec / sec, "max_rel_err": err}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--shapes", default=None, help="MxKxN,... (default: the issue's list)")
    ap.add_argument("--search", default=None, metavar="MxKxN",
                    help="time every candidate tile of the mma schedule on one shape")
    args = ap.parse_args(argv)
    if args.search:
        M, K, N = map(int, args.search.split("x"))
        rows = search(M, K, N)
        with open(os.path.join(args.out, f"gemm_search_{args.search}.json"), "w") as f:
            json.dump(rows, f, indent=1, default=str)
        for r in rows[:8]:
            print(r.get("config"), r.get("ptxc_tflops"), r.get("ratio"), r.get("error", ""))
        return 0
    shapes = SHAPES if args.shapes is None else \
        [tuple(map(int, s.split("x"))) + (s,) for s in args.shapes.split(",")]
    rows = []
    print(f"{'shape':>22} {'MxKxN':>16} {'ptxc us':>9} {'cuBLAS us':>9} {'ptxc TF/s':>9} "
          f"{'cuBLAS TF/s':>11} {'ratio':>6} {'rel err':>8}", flush=True)
    for M, K, N, name in shapes:
        try:
            r = run_shape(M, K, N)
        except Exception as e:  # noqa: BLE001  (a benchmark row that failed says why)
            r = {"M": M, "K": K, "N": N, "error": f"{type(e).__name__}: {e}"}
            print(f"{name:>22} {M}x{K}x{N}: {r['error']}", flush=True)
        else:
            print(f"{name:>22} {f'{M}x{K}x{N}':>16} {r['ptxc_us']:9.1f} {r['cublas_us']:9.1f} "
                  f"{r['ptxc_tflops']:9.1f} {r['cublas_tflops']:11.1f} {r['ratio']:6.2f} "
                  f"{r['max_rel_err']:8.1e}", flush=True)
        r["name"] = name
        rows.append(r)
        with open(os.path.join(args.out, "gemm.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
