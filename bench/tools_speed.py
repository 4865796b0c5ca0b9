"""Compile cache, plan loading and the text format at scale, on ResNet-50 (cpu). Prints numbers;
never run as a test.

    PYTHONPATH=. python bench/tools_speed.py [--skip-compile]

1. first compile (cache empty, in a temporary PTXC_CACHE_DIR) and second compile (from the cache);
2. ptxc.load of the saved plan (object code: no LLVM optimization or codegen), three times;
3. ``explore --dump-dir`` on ResNet-50: total bytes written (constants elided by default);
4. parsing printed weights: a module holding ~100 MB of constants, print then parse, MB/s.
"""

import os
import sys
import tempfile
import time

import numpy as np


def main():
    tmp = tempfile.mkdtemp(prefix="ptxc-bench-")
    os.environ["PTXC_CACHE"] = "1"
    os.environ["PTXC_CACHE_DIR"] = os.path.join(tmp, "cache")
    import ptxc
    from ptxc.cli import resolve_model
    model = resolve_model("light:resnet50")
    t = time.perf_counter()
    e = ptxc.compile(model, target="cpu")
    print(f"first compile: {time.perf_counter() - t:.2f} s  ({e.timings})", flush=True)
    t = time.perf_counter()
    ptxc.compile(model, target="cpu")
    print(f"second compile (cache): {time.perf_counter() - t:.2f} s", flush=True)
    plan = os.path.join(tmp, "r50.plan")
    e.save(plan)
    for _ in range(3):
        t = time.perf_counter()
        ptxc.load(plan)
        print(f"load plan ({os.path.getsize(plan) / 1e6:.0f} MB): "
              f"{time.perf_counter() - t:.2f} s", flush=True)
    d = os.path.join(tmp, "dumps")
    ptxc.explore(model, stage="loop", dump_dir=d)
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
    print(f"explore --stage loop --dump-dir: {total / 1e6:.2f} MB in "
          f"{sum(len(fs) for _, _, fs in os.walk(d))} files", flush=True)
    net = ptxc.Network("weights")
    x = net.add_input("x", (1, 1024))
    rng = np.random.default_rng(0)
    y = x
    for i in range(25):  # 25 x 4 MB = 100 MB of f32 weights
        y = net.add_matmul(y, net.add_constant(rng.standard_normal((1024, 1024)).astype(
            np.float32)))
    net.mark_output(y, "y")
    text = ptxc.print_ir(net.to_module())
    t = time.perf_counter()
    ptxc.parse_ir(text)
    dt = time.perf_counter() - t
    print(f"parse {len(text) / 1e6:.0f} MB of text holding 100 MB of weights: {dt:.2f} s "
          f"({100 / dt:.0f} MB of weights/s)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
