"""GEMM micro-benchmark: ptxc's mma schedule against cuBLAS (torch.matmul), same run, same GPU.

Each shape is an fp16 MatMul (f16 operands, f32 accumulation) built as an ONNX model and lowered
by ptxc to the loop stage (tests/support/contraction_ir.py: the contraction form the precision
pass hands to the mma schedule), mapped by map-to-gpu, compiled to PTX and launched straight from
the kernel table (no engine: the kernel alone, as torch.matmul is the cuBLAS kernel alone).

``--precision int8``: an ONNX MatMulInteger of an int8 input A [M, K] and a constant int8 B
[K, N] (tests/support/int8_ir.py; ptxc stores B transposed, K contiguous, as a fully connected
layer's weights), i32 result, against ``torch._int_mm`` (cuBLASLt int8, i32 result) on the same data
(B handed to torch column-major, cuBLASLt's preferred int8 layout, where torch accepts it);
both results must be equal, element for element (exact integer sums). ``--ptxas`` (no GPU
needed) assembles every candidate tile of the search space and prints registers and spills.
Both are timed the same way: ``ITERS`` launches queued back to back after a warm-up, wall clock
around a final synchronize, best of ``REPEATS``. Numerics: ptxc's output against
torch.matmul's f16 product upcast (both accumulate in f32), max relative error.

    python3 bench/gemm.py [--out DIR] [--shapes 4096x4096x4096,128x768x768] [--precision int8]
    python3 bench/gemm.py --precision int8 --ptxas 4096x4096x4096
    python3 bench/gemm.py --shapes 4096x4096x4096 --kmajor-b [--wgmma off]

``--kmajor-b``: B is given [N, K] (K contiguous, as a Gemm's transB weight), the layout the
**wgmma** form takes (gpu_map/wgmma.py: sm_90, large fp16 GEMMs); cuBLAS gets the same
[N, K] tensor (``torch.matmul(a, bt.t())``). The default run adds the 4096^3 row in this
layout (:data:`KMAJOR_SHAPES`), so it times the wgmma kernel beside the mma.sync ones;
``--wgmma off`` (or ``on``) is map-to-gpu's option, to time mma.sync on the same operands.

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
#: rows timed with B [N, K] (``--kmajor-b``): the wgmma form's layout
KMAJOR_SHAPES = [(4096, 4096, 4096, "square 4096, B [N,K]")]
ITERS, REPEATS = 50, 5


def loop_gemm(M, K, N, precision="fp16", kmajor_b=False):
    """The loop module (nothing mapped) of the benchmark's GEMM M x K x N (``kmajor_b``: B
    given [N, K])."""
    if precision == "int8":
        from support.int8_ir import loop_module as int8_loop, matmul_integer_model
        return int8_loop(matmul_integer_model(M, K, N))
    from support.contraction_ir import loop_module, matmul_model
    return loop_module(matmul_model(M=M, K=K, N=N, bias=False, relu=False, trans_b=kmajor_b))


def ptxc_kernel(M, K, N, cfg=None, precision="fp16", kmajor_b=False, wgmma="auto"):
    """(PtxProgram, schedule names) of the fp16 MatMul (or int8 MatMulInteger) M x K x N;
    ``cfg`` (an mma Config) forces the tile instead of the schedule's heuristic; ``wgmma``:
    map-to-gpu's option (auto, on, off)."""
    from ptxc.lower.gpu_map import mma_kernel
    from ptxc.codegen import lower_to_ptx
    from ptxc.rewrite import PassManager
    from ptxc.target import Target
    m = loop_gemm(M, K, N, precision, kmajor_b)
    if cfg is not None:
        mma_kernel.build_all(m, cfg, Target.resolve())
    PassManager(f"map-to-gpu{{wgmma={wgmma}}}").run(m)
    scheds = [o.attributes["schedule"] for o in m.walk() if o.name == "gpu.launch"]
    return lower_to_ptx(m), scheds


def _compile_candidate(args):
    M, K, N, cfg, precision = args
    try:
        p, _ = ptxc_kernel(M, K, N, cfg, precision)
        return cfg, p
    except Exception as e:  # noqa: BLE001
        return cfg, f"{type(e).__name__}: {e}"


def search_space(M, K, N, precision="fp16", min_tile=128 * 128):
    """The candidate tiles the search times: at least ``min_tile`` outputs, 3+ stages, at
    most 256 threads."""
    from ptxc.lower.gpu_map import contraction, mma_config
    m = loop_gemm(M, K, N, precision)
    c = next(contraction.analyze(o) for o in m.walk()
             if o.name == "loop.parallel" and contraction.analyze(o) is not None)
    from ptxc.target import Target
    return [x for x in mma_config.candidates(c, Target.resolve()) if x.bm * x.bn >= min_tile and x.stages >= 3
            and x.threads <= 256]


def _tag(cfg) -> str:
    return f"{cfg.bm}x{cfg.bn}x{cfg.bk} warps {cfg.warps_m}x{cfg.warps_n} stages {cfg.stages}"


def ptxas_report(M, K, N, precision="fp16", jobs=2):
    """Registers, spills and shared memory of every candidate tile (ptxas -arch=sm_90 -v; no
    GPU): rows of dicts, printed as they come."""
    from concurrent.futures import ProcessPoolExecutor

    from ptxc.ptx import assemble
    cfgs = search_space(M, K, N, precision)
    rows = []
    with ProcessPoolExecutor(jobs) as ex:
        for cfg, p in ex.map(_compile_candidate, [(M, K, N, x, precision) for x in cfgs]):
            if isinstance(p, str):
                rows.append({"config": _tag(cfg), "error": p})
                print(f"  {_tag(cfg):>32}: {p}", flush=True)
                continue
            rep = assemble(p.ptx, "sm_90").kernels
            mk = [t.name for t in p.table.kernels if t.schedule == "mma"]
            for name in mk:
                r = rep[name]
                row = {"config": _tag(cfg), "registers": r.registers,
                       "spill_stores": r.spill_stores, "spill_loads": r.spill_loads,
                       "stack": r.stack_bytes,
                       "shared": next(t.shared_bytes for t in p.table.kernels if t.name == name)}
                rows.append(row)
                print(f"  {row['config']:>32}: {r.registers:3d} registers, spills "
                      f"{r.spill_stores}/{r.spill_loads}, stack {r.stack_bytes}, shared "
                      f"{row['shared']}", flush=True)
    return rows


def search(M, K, N, min_tile=128 * 128, jobs=16, precision="fp16"):
    """Compile every mma candidate tile of at least ``min_tile`` outputs (in parallel), time
    each against cuBLAS; rows sorted fastest first."""
    from concurrent.futures import ProcessPoolExecutor
    cfgs = search_space(M, K, N, precision, min_tile)
    with ProcessPoolExecutor(jobs) as ex:
        built = list(ex.map(_compile_candidate, [(M, K, N, x, precision) for x in cfgs]))
    rows = []
    for cfg, p in built:
        tag = _tag(cfg)
        if isinstance(p, str):
            rows.append({"config": tag, "error": p})
            continue
        r = run_shape(M, K, N, program=(p, ["mma"]), precision=precision)
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


def run_shape(M, K, N, program=None, precision="fp16", kmajor_b=False, wgmma="auto"):
    import cuda.core as cc
    import torch
    from numba import cuda

    p, scheds = program if program is not None else ptxc_kernel(
        M, K, N, precision=precision, kmajor_b=kmajor_b, wgmma=wgmma)
    rng = np.random.default_rng(0)
    if precision == "int8":
        from support.int8_ir import matmul_integer_model
        from onnx import numpy_helper
        a = rng.integers(-128, 128, (M, K)).astype(np.int8)
        b = numpy_helper.to_array(matmul_integer_model(M, K, N).graph.initializer[0])
    else:
        a = rng.standard_normal((M, K)).astype(np.float16)
        b = rng.standard_normal((N, K) if kmajor_b else (K, N)).astype(np.float16)
    t = p.table
    dev = {}
    for s in t.slots:
        host = {"a": a, "b": b}.get(s.name)
        if host is None and s.kind == "global":
            host = p.globals[s.name]
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
    if kmajor_b:
        tb = tb.t()        # [K, N], column-major: cuBLAS reads the same [N, K] bytes
    peer = torch.matmul
    if precision == "int8":
        tb_col = tb.t().contiguous().t()   # column-major [K, N]: cuBLASLt's int8 layout
        try:
            torch._int_mm(ta, tb_col)
            tb = tb_col
        except RuntimeError:
            pass
        peer = torch._int_mm
    ref = peer(ta, tb)
    tsec = time_queue(lambda: peer(ta, tb), torch.cuda.synchronize)
    refn = ref.cpu().numpy()
    if precision == "int8":
        err = int(np.count_nonzero(y != refn))     # elements that differ (want 0)
    else:
        refn = refn.astype(np.float32)
        err = float(np.abs(y - refn).max() / max(1e-6, np.abs(refn).max()))
    flops = 2 * M * N * K
    return {"M": M, "K": K, "N": N, "precision": precision, "schedules": scheds,
            "b_layout": "[N,K]" if kmajor_b else "[K,N]", "arch": p.arch,
            "kernels": [{"grid": k.grid, "block": k.block, "shared": k.shared_bytes,
                         "schedule": k.schedule, "tile": k.tile} for k in t.kernels],
            "flops": flops, "ptxc_us": sec * 1e6, "cublas_us": tsec * 1e6,
            "ptxc_tflops": flops / sec / 1e12, "cublas_tflops": flops / tsec / 1e12,
            "ratio": tsec / sec, "max_rel_err" if precision != "int8" else "mismatches": err}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--shapes", default=None, help="MxKxN,... (default: the issue's list)")
    ap.add_argument("--search", default=None, metavar="MxKxN",
                    help="time every candidate tile of the mma schedule on one shape")
    ap.add_argument("--precision", default="fp16", choices=("fp16", "int8"),
                    help="fp16 (vs torch.matmul) or int8 (MatMulInteger vs torch._int_mm)")
    ap.add_argument("--ptxas", default=None, metavar="MxKxN",
                    help="no GPU: registers and spills of every candidate tile (ptxas)")
    ap.add_argument("--kmajor-b", action="store_true",
                    help="B given [N, K] (the wgmma form's layout) in the --shapes rows")
    ap.add_argument("--wgmma", default="auto", choices=("auto", "on", "off"),
                    help="map-to-gpu's wgmma option (sm_90: the wgmma form of large GEMMs)")
    args = ap.parse_args(argv)
    if args.ptxas:
        M, K, N = map(int, args.ptxas.split("x"))
        rows = ptxas_report(M, K, N, args.precision)
        with open(os.path.join(args.out, f"gemm_ptxas_{args.precision}_{args.ptxas}.json"),
                  "w") as f:
            json.dump(rows, f, indent=1)
        return 0
    if args.search:
        M, K, N = map(int, args.search.split("x"))
        rows = search(M, K, N, precision=args.precision)
        with open(os.path.join(args.out, f"gemm_search_{args.precision}_{args.search}.json"),
                  "w") as f:
            json.dump(rows, f, indent=1, default=str)
        for r in rows[:8]:
            print(r.get("config"), r.get("ptxc_tflops"), r.get("ratio"), r.get("error", ""))
        return 0
    if args.shapes is None:
        shapes = [s + (False,) for s in SHAPES]
        if args.precision == "fp16":
            shapes += [s + (True,) for s in KMAJOR_SHAPES]
    else:
        shapes = [tuple(map(int, s.split("x"))) + (s, args.kmajor_b)
                  for s in args.shapes.split(",")]
    rows = []
    int8 = args.precision == "int8"
    print(f"{args.precision}: ptxc vs {'torch._int_mm (TOPS)' if int8 else 'cuBLAS'}; ratio = "
          "peer time / ptxc time", flush=True)
    print(f"{'shape':>22} {'MxKxN':>16} {'ptxc us':>9} {'cuBLAS us':>9} {'ptxc TF/s':>9} "
          f"{'cuBLAS TF/s':>11} {'ratio':>6} {'mismatch' if int8 else 'rel err':>8}", flush=True)
    for M, K, N, name, kmajor_b in shapes:
        try:
            r = run_shape(M, K, N, precision=args.precision, kmajor_b=kmajor_b,
                          wgmma=args.wgmma)
        except Exception as e:  # noqa: BLE001  (a benchmark row that failed says why)
            r = {"M": M, "K": K, "N": N, "error": f"{type(e).__name__}: {e}"}
            print(f"{name:>22} {M}x{K}x{N}: {r['error']}", flush=True)
        else:
            print(f"{name:>22} {f'{M}x{K}x{N}':>16} {r['ptxc_us']:9.1f} {r['cublas_us']:9.1f} "
                  f"{r['ptxc_tflops']:9.1f} {r['cublas_tflops']:11.1f} {r['ratio']:6.2f} "
                  f"{r['mismatches'] if int8 else r['max_rel_err']:8.1e}", flush=True)
        r["name"] = name
        rows.append(r)
        with open(os.path.join(args.out, f"gemm{'_int8' if int8 else ''}.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
