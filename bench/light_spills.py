"""Registers and spills of the light models' kernels, without a GPU: each of onnx's nine light
models (random weights, batch 1) compiled for a cuda arch in each precision, its PTX assembled by
``ptxas -v``; per model and precision, the kernels, the tensor-core kernels, the most registers
a kernel takes, and the spill bytes (stores + loads) over all kernels.

    PYTHONPATH=.:tests python3 bench/light_spills.py [--arch sm_90] [--precisions fp16,int8]

A spilling tensor-core kernel is a schedule's heuristic asking for more registers than the
target has (tests/test_target_archs.py asserts there are none); this is the table of it for
bench/RESULTS.md. Needs ptxas on PATH; int8 is calibrated on one random batch (the kernels do
not depend on the ranges).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))


def measure(name: str, precision: str, arch: str) -> dict:
    import test_target_archs as t
    from ptxc.ptx import assemble
    t0 = time.perf_counter()
    prog = t.compile_for(name, precision, arch)
    rep = assemble(prog.ptx, prog.arch)
    kernels = prog.table.kernels
    res = [rep.kernels[k.name] for k in kernels]
    spilling = [k.name for k, r in zip(kernels, res) if r.spill_stores or r.spill_loads]
    return {"model": name, "precision": precision, "arch": prog.arch, "kernels": len(kernels),
            "tensor_core": sum(k.schedule in t.TENSOR_CORE for k in kernels),
            "max_registers": max(r.registers for r in res),
            "spill_bytes": sum(r.spill_stores + r.spill_loads for r in res),
            "spilling": spilling, "seconds": round(time.perf_counter() - t0, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--precisions", default="fp16,int8")
    ap.add_argument("--models", default="", help="comma-separated (default: all nine)")
    a = ap.parse_args(argv)
    from support import light_models as lm
    names = a.models.split(",") if a.models else lm.NAMES
    print("| model | precision | kernels | tensor-core | max registers | spill bytes |")
    print("|---|---|---:|---:|---:|---:|")
    for name in names:
        for precision in a.precisions.split(","):
            m = measure(name, precision, a.arch)
            print(f"| {name} | {precision} | {m['kernels']} | {m['tensor_core']} | "
                  f"{m['max_registers']} | {m['spill_bytes']} |"
                  + (f" <!-- spilling: {' '.join(m['spilling'])} -->" if m["spilling"] else ""),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
