"""Compile time of the cuda target, stage by stage. Prints a table; never run as a test.

    PYTHONPATH=. python bench/compile_time.py [--models resnet50] [--batches 1,32]
        [--precisions fp16,fp32] [--layout nhwc] [--ptxas] [--dump DIR]

Each (model, batch, precision) compiles as ``ptxc.compile(model, target="cuda",
precision=P, layout=L)`` does (bench/gpu.py's fp16 rows use ``--layout nhwc``), with no compile
cache, one stage at a time so each is timed:

=========  ==================================================================================
import     ONNX -> graph dialect (``light:NAME`` models, batch rewritten; random weights)
graph      graph-opt (+ channels-last, lower-precision)
tensor     lower-graph-to-tensor, fuse-tensor-elementwise
loop       lower-tensor-to-loop
map        map-to-gpu
emit       loop-to-llvm: llvmlite.ir objects -> text (``verify``: a parse+verify of the whole
           text, where the emission still does one)
split      one module text per kernel, identical kernels found (:mod:`ptxc.ptx.split`)
parse      llvmlite parse + verify            } per kernel module, summed over modules:
libdevice  linking libdevice                  } CPU seconds, spread over processes when
optimize   NVPTX O3                           } ``compile`` runs in parallel
codegen    NVPTX codegen to PTX text          }
compile    wall seconds of parse..codegen of every module (:mod:`ptxc.ptx.jobs`)
join       the PTX texts joined into one
ptxas      ``ptxas -arch=sm_90`` of the PTX (with ``--ptxas``; the runtime does not run it)
=========  ==================================================================================

``total`` is the wall time: every column but the per-module steps and ptxas. Also printed:
the kernel count, the distinct kernel modules compiled, the seconds of the slowest module
(the floor of ``compile`` however many cores), the LLVM text size and the PTX size.
Where ``compile`` is missing (an older ptxc: one module), parse..codegen are wall seconds.
``PTXC_COMPILE_JOBS`` sets the processes (default: the cores this process may use).
``--cpu``: CPU seconds, all in this process (comparable across commits on a shared machine).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("PTXC_CACHE", "0")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

COLUMNS = ("import", "graph", "tensor", "loop", "map", "emit", "verify", "split", "parse",
           "libdevice", "optimize", "codegen", "compile", "join", "ptxas")
#: the per-module steps inside ``compile`` (summed over modules: CPU seconds when parallel)
STEPS = ("parse", "libdevice", "optimize", "codegen")


def rebatch(model, batch: int):
    """``model`` (batch 1) at ``batch``: every graph input's first dimension, and the first
    entry of each constant Reshape shape that is 1 (the flatten before the classifier)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    m = onnx.ModelProto()
    m.CopyFrom(model)
    if batch == 1:
        return m
    del m.graph.value_info[:]  # shapes of batch 1; shape inference redoes them
    inits = {t.name for t in m.graph.initializer}
    for vi in [*m.graph.input, *m.graph.output]:
        if vi.name in inits:
            continue
        dims = vi.type.tensor_type.shape.dim
        if dims and dims[0].dim_value == 1:
            dims[0].dim_value = batch
    shapes = {n.input[1] for n in m.graph.node if n.op_type == "Reshape" and len(n.input) > 1}
    for i, t in enumerate(m.graph.initializer):
        if t.name in shapes:
            a = numpy_helper.to_array(t).copy()
            if a.ndim == 1 and a.size and a[0] == 1:
                a[0] = batch
                m.graph.initializer[i].CopyFrom(numpy_helper.from_array(a.astype(np.int64),
                                                                         t.name))
    return m


def load(name: str, batch: int):
    from tests.support import light_models as L
    return rebatch(L.with_random_weights(L.load(name)), batch)


def measure(name: str, batch: int, precision: str, layout: str, ptxas: bool,
            dump: str | None) -> dict:
    from ptxc.compiler import as_module, run_stages
    from ptxc.lower import loop_to_llvm
    from ptxc.codegen import lower_to_ptx
    from ptxc.rewrite.pass_manager import PassManager
    from ptxc.rewrite.provenance import annotate_kernels, collect
    model = load(name, batch)
    t: dict = {}
    t0 = time.perf_counter()
    module = as_module(model)
    t["import"] = time.perf_counter() - t0
    prov: dict = {}
    run_stages(module, "tensor", timings=t, target="cuda", layout=layout, precision=precision,
               on_stage=lambda stage, m: collect(m, prov))
    for col, passes in (("loop", "lower-tensor-to-loop"), ("map", "map-to-gpu")):
        t0 = time.perf_counter()
        PassManager(passes).run(module)
        t[col] = time.perf_counter() - t0
    annotate_kernels(module, prov)
    verify = loop_to_llvm._verify_text

    def timed_verify(text):
        t0 = time.perf_counter()
        verify(text)
        t["verify"] = t.get("verify", 0.0) + time.perf_counter() - t0
    loop_to_llvm._verify_text = timed_verify
    try:
        sub: dict = {}
        prog = lower_to_ptx(module, arch="sm_90", timings=sub)
    finally:
        loop_to_llvm._verify_text = verify
    t.update(sub)
    t["emit"] -= t.get("verify", 0.0)
    t["kernels"] = len(prog.table.kernels)
    t["llvm_mb"] = len(prog.llvm_text) / 1e6
    t["ptx_mb"] = len(prog.ptx) / 1e6
    if dump:
        os.makedirs(dump, exist_ok=True)
        stem = os.path.join(dump, f"{name}_b{batch}_{precision}")
        with open(stem + ".ll", "w") as f:
            f.write(prog.llvm_text)
        with open(stem + ".ptx", "w") as f:
            f.write(prog.ptx)
    if ptxas:
        with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
            f.write(prog.ptx)
        t0 = time.perf_counter()
        r = subprocess.run(["ptxas", "-arch=sm_90", f.name, "-o", os.devnull],
                           capture_output=True, text=True)
        t["ptxas"] = time.perf_counter() - t0
        os.unlink(f.name)
        if r.returncode:
            print(r.stderr[-2000:], file=sys.stderr)
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--precisions", default="fp16,fp32")
    ap.add_argument("--layout", default="nhwc")
    ap.add_argument("--ptxas", action="store_true")
    ap.add_argument("--dump", default=None, help="write each program's .ll and .ptx here")
    ap.add_argument("--cpu", action="store_true",
                    help="CPU seconds of this process instead of wall seconds, every module "
                         "compiled in it (PTXC_COMPILE_JOBS=1): the work, on a loaded machine")
    args = ap.parse_args()
    if args.cpu:
        os.environ["PTXC_COMPILE_JOBS"] = "1"
        time.perf_counter = time.process_time  # every stage clock of ptxc reads it
    try:
        from ptxc.gc_pause import fewer_collections
    except ImportError:  # an older ptxc
        from contextlib import nullcontext as fewer_collections
    head = ["model", "batch", "prec", *COLUMNS, "total", "kernels", "modules", "slowest",
            "LLVM MB", "PTX MB"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for p in args.precisions.split(","):
        for name in args.models.split(","):
            for b in args.batches.split(","):
                with fewer_collections():  # as ptxc.compile does
                    t = measure(name, int(b), p, args.layout, args.ptxas, args.dump)
                cells = [f"{t[c]:.2f}" if c in t else "-" for c in COLUMNS]
                skip = {"ptxas", *STEPS} if "compile" in t else {"ptxas"}
                total = sum(t.get(c, 0.0) for c in COLUMNS if c not in skip)
                slowest = f"{t['slowest']:.1f}" if "slowest" in t else "-"
                print(f"| {name} | {b} | {p} | " + " | ".join(cells)
                      + f" | {total:.1f} | {t['kernels']} | {t.get('modules', '-')} | {slowest} "
                      f"| {t['llvm_mb']:.1f} | {t['ptx_mb']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
