"""``ptxc inspect PLAN``: what a plan file holds, read without compiling or running anything.

Target and versions, bindings, the kernel table (each kernel's layer and buffers; cpu: its
outer range; cuda: its grid, block, static shared bytes and the map-to-gpu schedule), the memory
plan (arena, lower bound, offsets) and the blobs (LLVM IR or PTX, weights).
"""

from __future__ import annotations

from ..errors import PlanError
from .plan import decode_plan


def inspect_plan(path) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise PlanError(f"{path}: cannot read plan: {e.strerror or e}") from None
    header, _ = decode_plan(data, str(path))
    out = [f"plan {path}: {len(data):,} bytes, format {header.get('format')} "
           f"v{header.get('format_version')}, ptxc {header.get('ptxc_version')}"]
    arch = header.get("arch")
    out.append(f"target: {header.get('target')}" + (f" ({arch})" if arch else "")
               + f"; options: {header.get('options')}")
    b = header.get("bindings", {})
    for kind in ("inputs", "outputs"):
        for x in b.get(kind, []):
            shape = "x".join(map(str, x["shape"])) or "scalar"
            out.append(f"  {kind[:-1]:<6} {x['name']}: {x['dtype']}[{shape}]")
    table = header.get("kernel_table", {})
    kernels = table.get("kernels", [])
    slots = table.get("slots", [])
    out.append(f"kernels: {len(kernels)}")
    dims = lambda d: "x".join(map(str, d)) if isinstance(d, list) else str(d)  # noqa: E731
    for k in kernels:
        names = [slots[i]["name"] if i < len(slots) else f"#{i}" for i in k.get("buffers", [])]
        if k.get("grid") is not None or k.get("block") is not None:
            shape = (f"grid {dims(k.get('grid'))}  block {dims(k.get('block'))}  shared "
                     f"{k.get('shared_bytes', 0):,} B"
                     + (" (dynamic)" if k.get("dynamic_shared") else "")
                     + f"  schedule {k.get('schedule')}"
                     + (f" [{k['tile']}]" if k.get("tile") else ""))
        else:
            mode = "parallel" if k.get("parallel") else "sequential"
            shape = f"outer range {k.get('trip_count')} ({mode})"
        out.append(f"  {k.get('name')}  layer {k.get('loc')!r}  {shape}  buffers "
                   f"{', '.join(names)}")
    mp = header.get("memory_plan")
    if mp:
        out.append(f"memory plan: arena {mp.get('arena_bytes'):,} bytes, lower bound "
                   f"{mp.get('lower_bound_bytes'):,}, without reuse {mp.get('no_reuse_bytes'):,}"
                   f", {len(mp.get('buffers', []))} buffers")
    blobs = header.get("blobs", [])
    by_kind: dict[str, list] = {}
    for bl in blobs:
        by_kind.setdefault(bl.get("kind"), []).append(bl)
    for kind, items in sorted(by_kind.items()):
        total = sum(int(x.get("nbytes", 0)) for x in items)
        out.append(f"blobs {kind}: {len(items)}, {total:,} bytes")
    return "\n".join(out) + "\n"
