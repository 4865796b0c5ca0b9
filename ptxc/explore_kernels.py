"""Kernel outlines for ``ptxc explore --stage loop --target cuda``: one ``//`` block per
``gpu.launch`` ahead of the IR, so the shape of each kernel reads at a glance before its
thousands of lines of generic IR.

Every launch gets its schedule, tile, grid, block and shared memory. A launch whose body holds a
loop (an mma pipeline's loop over K tiles, a reduction's loop) is outlined phase by phase: what
runs before the first top-level loop (an mma kernel's prologue: the first stages' cp.async
copies), in each loop (with its trip count), and after the last (the epilogue's stores). Each
phase lists its tensor-core and memory ops by kind, with the attributes that tell them apart
(``ldmatrix.x4.trans``, ``mma.m16n8k16``, ``cp.async.16``, ``wait_group 1``)::

    // kernel 1 'mm': mma [f16 32x64x32 warps 1x2 stages 3]  grid 2x2x1  block 64  shared 10 KiB
    //   prologue:         cp.async.16 x4, commit x2
    //   loop x2:          wait_group 1, barrier x2, ldmatrix.x4 x2, ldmatrix.x4.trans x2,
    //                     mma.m16n8k16 x16, cp.async.16 x2, commit
    //   epilogue:         store x16

A kernel without a loop (pointwise) is one line.
"""

from __future__ import annotations

from collections import Counter

from .ir.core import Operation

_SHOWN = ("gpu.cp_async", "gpu.cp_async_commit", "gpu.cp_async_wait", "gpu.barrier",
          "gpu.warp_barrier", "gpu.ldmatrix", "gpu.mma", "gpu.wgmma_fence", "gpu.wgmma",
          "gpu.wgmma_commit", "gpu.wgmma_wait", "loop.load", "loop.store")


def _label(op: Operation) -> str:
    a = op.attributes
    if op.name == "gpu.cp_async":
        return f"cp.async.{a.get('bytes')}"
    if op.name == "gpu.cp_async_commit":
        return "commit"
    if op.name == "gpu.cp_async_wait":
        return f"wait_group {a.get('pending')}"
    if op.name == "gpu.ldmatrix":
        return f"ldmatrix.x{a.get('num')}" + (".trans" if a.get("trans") else "")
    if op.name == "gpu.mma":
        return f"mma.{a.get('shape')}"
    if op.name == "gpu.wgmma":
        return f"wgmma.{a.get('shape')}"
    if op.name in ("gpu.wgmma_fence", "gpu.wgmma_commit"):
        return op.name.replace("gpu.", "").replace("_", ".")
    if op.name == "gpu.wgmma_wait":
        return f"wgmma.wait {a.get('pending')}"
    return op.name.split(".", 1)[1]


def _count(ops) -> Counter:
    c: Counter = Counter()
    for top in ops:
        for op in top.walk():
            if op.name in _SHOWN:
                c[_label(op)] += 1
    return c


def _phase(c: Counter) -> str:
    return ", ".join(k if n == 1 else f"{k} x{n}" for k, n in c.items()) or "-"


def _trips(loop: Operation) -> int:
    a = loop.attributes
    lo, hi, step = int(a.get("lower", 0)), int(a.get("upper", 0)), int(a.get("step", 1) or 1)
    return max(0, -(-(hi - lo) // step))


def _dims(d) -> str:
    return "x".join(str(int(v)) for v in d) if d is not None else "-"


def outline(launch: Operation, index: int) -> list[str]:
    """The outline lines of one ``gpu.launch`` (without the leading ``// ``)."""
    a = launch.attributes
    shared = sum(t.size * max(8, t.element.bitwidth) // 8
                 for t in (op.results[0].type for op in launch.walk() if op.name == "gpu.shared"))
    head = (f"kernel {index} {launch.loc!r}: {a.get('schedule')}"
            + (f" [{a['tile']}]" if a.get("tile") else "")
            + f"  grid {_dims(a.get('grid'))}  block {_dims(a.get('block'))}"
            + (f"  shared {shared / 1024:.0f} KiB" if shared else ""))
    body = list(launch.regions[0].blocks[0].ops)
    loops = [i for i, op in enumerate(body) if op.name == "loop.for"]
    if not loops:
        return [head + f"  ({_phase(_count(body))})"]
    lines = [head]
    phases = [("prologue", body[:loops[0]])]
    for n, i in enumerate(loops):
        phases.append((f"loop x{_trips(body[i])}", [body[i]]))
        end = loops[n + 1] if n + 1 < len(loops) else len(body)
        if body[i + 1:end]:
            phases.append(("epilogue" if n + 1 == len(loops) else "between", body[i + 1:end]))
    for name, ops in phases:
        c = _count(ops)
        if c:
            lines.append(f"  {name + ':':<17} {_phase(c)}")
    return lines


def kernel_outlines(module: Operation) -> str:
    """``//`` lines outlining every ``gpu.launch`` of a mapped loop module ('' when none)."""
    launches = [op for op in module.walk() if op.name == "gpu.launch"]
    out = []
    for i, launch in enumerate(launches):
        out += outline(launch, i)
    return "".join(f"// {line}\n" for line in out)
