"""Implicit INT8 on ResNet-50 with random weights (onnx's light model): calibrate on random
inputs, quantize (ptxc.calib.quantize_int8: per-tensor activations, per-channel weights; all 53
convs and the FC int8 after fold-qdq), and compare the int8 logits with fp32 on held-out random
inputs: top-1 agreement and cosine similarity, on ptxc's cpu engine.

    PYTHONPATH=. python bench/resnet50_int8.py --calib 8 --n 256 --method percentile

Random weights (tests/light_models.with_random_weights) and N(0, 1) inputs: no download.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calib", type=int, default=8, help="calibration inputs")
    ap.add_argument("--n", type=int, default=256, help="evaluation inputs")
    ap.add_argument("--method", default="percentile")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import light_models as L

    import ptxc
    from ptxc.calib import calibrate, quantize_int8
    model = L.with_random_weights(L.load("resnet50"))
    t0 = time.perf_counter()
    table = calibrate(model, [L.random_inputs(model, seed=1000 + i) for i in range(args.calib)],
                      args.method, progress=True)
    t_cal = time.perf_counter() - t0
    report = []
    q = quantize_int8(model, table, report=report)
    n_int8 = sum(r[1] == "int8" for r in report)
    t0 = time.perf_counter()
    f32 = ptxc.compile(model, target="cpu")
    i8 = ptxc.compile(q, target="cpu")
    t_compile = time.perf_counter() - t0
    agree, cos = 0, []
    for i in range(args.n):
        x = L.random_inputs(model, seed=i)
        a = next(iter(f32.run(x).values())).ravel().astype(np.float64)
        b = next(iter(i8.run(x).values())).ravel().astype(np.float64)
        agree += int(np.argmax(a) == np.argmax(b))
        cos.append(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))
    row = {"method": args.method, "calibration_inputs": args.calib, "inputs": args.n,
           "int8_layers": f"{n_int8}/{len(report)}", "top1_agreement": agree / args.n,
           "cosine_min": min(cos), "cosine_mean": float(np.mean(cos)),
           "calibration_s": round(t_cal, 1), "compile_s": round(t_compile, 1)}
    print(json.dumps(row, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
