"""Compile time of a small cuda model that calls libdevice (tanh, sigmoid and softmax: expf, tanhf),
and of its link + O3 step alone (ptxc.ptx.optimize_nvptx on the same LLVM IR), with the compile
cache off. No GPU needed: the cuda target compiles to PTX anywhere.

    PYTHONPATH=. python bench/libdevice_link.py [COMPILES]
"""
import os, sys, time
os.environ["PTXC_CACHE"] = "0"
import numpy as np
import ptxc

def net(seed):
    rng = np.random.default_rng(seed)
    n = ptxc.Network("ld")
    x = n.add_input("x", (1, 3, 16, 16))
    y = n.add_conv(x, rng.standard_normal((8, 3, 3, 3)).astype(np.float32), padding=1)
    y = n.add_activation(y, "tanh")
    y = n.add_flatten(y)
    y = n.add_fully_connected(y, rng.standard_normal((10, 8 * 256)).astype(np.float32))
    y = n.add_activation(y, "sigmoid")
    n.mark_output(n.add_softmax(y), "y")
    return n

t = []
for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 4):
    t0 = time.perf_counter()
    e = ptxc.compile(net(i), target="cuda")
    t.append(time.perf_counter() - t0)
print("compile s:", " ".join(f"{x:.3f}" for x in t), "| first", f"{t[0]:.3f}", "later median",
      f"{np.median(t[1:]):.3f}")
print("ptx has __nv_ calls inlined:", "__nv_" not in e.ptx, len(e.ptx))
# the link + optimize step alone, on the same LLVM IR text
from ptxc.ptx import optimize_nvptx
text = e.program.ptx_program.llvm_text
names = [k.name for k in e.program.table.kernels]
ts = []
for i in range(5):
    t0 = time.perf_counter()
    optimize_nvptx(text, "sm_90", 3, names)
    ts.append(time.perf_counter() - t0)
print("link+O3 s:", " ".join(f"{x:.3f}" for x in ts), "median", f"{np.median(ts):.3f}")
