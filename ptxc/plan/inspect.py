"""``ptxc inspect PLAN``: what a plan file holds, read without compiling or running anything.

Target and versions, the GPU (or host) it was built for, with a note where the GPU here is
another (a plan for another arch does not load; one for the same arch with another SM count
runs, with tiles sized for the other chip), bindings, the kernel table (each kernel's layer and
buffers; cpu: its outer range; cuda: its grid, block, static shared bytes and the map-to-gpu
schedule; its precision: the element types of its buffers), a tuned build's tactics (per
distinct kernel: the tactic, its time, the default's time, the candidates tried), the memory
plan (arena, lower bound, offsets) and the blobs (LLVM IR or PTX, weights). Where one layer has several kernels,
a legend line says why (:data:`LEGEND`).
"""

from __future__ import annotations

from ..errors import PlanError, PtxcError
from ..target import arch_number, device_target
from .format import ALIGN, FORMAT_VERSION, MAGIC, decode_plan
from .load import describe, recorded_target
from .trust import read_plan_file, strip_signature


def inspect_plan(path) -> str:
    """The report; a file that is no plan, or a header of unexpected shape, is a PlanError
    (only typed errors: the header is untrusted data, read under the same rules as ``load``,
    without the signature check: inspecting runs nothing)."""
    data, signed = strip_signature(read_plan_file(path, MAGIC, FORMAT_VERSION, ALIGN))
    header, _ = decode_plan(data, str(path))
    try:
        return _report(path, data, header, signed)
    except PtxcError:
        raise
    except Exception as e:  # noqa: BLE001  (a checksum-valid header of unexpected shape)
        raise PlanError(f"{path}: the header has fields of unexpected types or values "
                        f"({type(e).__name__}: {e}) [header]") from None


_SHORT = {"float16": "f16", "float32": "f32", "float64": "f64", "bfloat16": "bf16", "int8": "i8",
          "uint8": "u8", "int16": "i16", "int32": "i32", "int64": "i64", "bool": "i1"}


def _precision(kernel: dict, slots: list) -> str:
    """The element types a kernel reads and writes (its buffers'), e.g. ``f16+f32`` for an fp16
    layer with an fp32 bias, or ``f32`` for a layer kept in fp32; an mma kernel's tile also
    names its operand type (accumulation is f32, or s32 for int8)."""
    types = {slots[i].get("dtype") for i in kernel.get("buffers", [])
             if isinstance(i, int) and 0 <= i < len(slots)} - {None}
    return "+".join(sorted(_SHORT.get(t, str(t)) for t in types)) or "-"


#: printed under ``kernels:`` when a layer has several kernels
LEGEND = ("  (rows that name the same layer are that layer's kernels, in launch order: a nest "
          "unrolled by 8 or 4 and a second one for the rest of its innermost dim (the same "
          "buffers); a pad's border fill (pointwise, writing only the padded buffer) before the "
          "kernel that writes its interior; split-K's partial sums, then the kernel that adds "
          "them)")


def _built_for(header: dict) -> list[str]:
    """The ``built for`` line, and a note on the GPU here where it is not the one built for."""
    built = recorded_target(header)
    if built is None:
        return [f"built for: {header.get('built_for')!r} (not a target description)"]
    out = [f"built for: {describe(built)}"]
    here = device_target() if built.kind == "cuda" else None
    if here is None:
        return out
    if arch_number(here.arch)[0] != built.sm:
        out.append(f"  note: this GPU is {describe(here)}: the plan does not load here (it is "
                   f"for {built.arch}; recompile for this GPU)")
    elif here.sms != built.sms:
        out.append(f"  note: this GPU is {describe(here)}: the plan runs here, with tiles "
                   f"sized for {built.sms} SMs (recompile to tune for {here.sms})")
    return out


def _ms(t) -> str:
    return "-" if t is None else f"{t * 1e3:.4f} ms"


def _tuning(rows) -> list[str]:
    """A tuned plan's record: per distinct kernel (its key; the layer of its first kernel and
    how many kernels share it), the tactic chosen and where it came from, its time, the default
    tactic's time and the candidates tried."""
    if not rows:
        return []
    by = {}
    for r in rows:
        by[r["source"]] = by.get(r["source"], 0) + 1
    out = [f"tuning: {len(rows)} distinct kernels (" + ", ".join(
        f"{n} {s}" for s, n in sorted(by.items())) + ")"]
    for r in rows:
        speed = ""
        if r.get("time_s") and r.get("default_time_s"):
            speed = f" ({r['default_time_s'] / r['time_s']:.2f}x the default)"
        out.append(f"  {r['key']}  layer {r['loc']!r} x{r['kernels']}  tactic {r['tactic']} "
                   f"[{r['source']}]  time {_ms(r.get('time_s'))}  default "
                   f"{_ms(r.get('default_time_s'))}{speed}  candidates {r['candidates']}"
                   + (f", {len(r['rejected'])} rejected" if r.get("rejected") else ""))
    return out


def _report(path, data, header: dict, signed: bool) -> str:
    out = [f"plan {path}: {len(data):,} bytes, format {header.get('format')} "
           f"v{header.get('format_version')}, ptxc {header.get('ptxc_version')}"
           + ("; signed (HMAC-SHA256, not verified by inspect)" if signed else "")]
    arch = header.get("arch")
    out.append(f"target: {header.get('target')}" + (f" ({arch})" if arch else "")
               + f"; options: {header.get('options')}")
    out += _built_for(header)
    b = header.get("bindings", {})
    for kind in ("inputs", "outputs"):
        for x in b.get(kind, []):
            shape = "x".join(map(str, x["shape"])) or "scalar"
            out.append(f"  {kind[:-1]:<6} {x['name']}: {x['dtype']}[{shape}]")
    table = header.get("kernel_table", {})
    kernels = table.get("kernels", [])
    slots = table.get("slots", [])
    out.append(f"kernels: {len(kernels)}")
    layers = [k.get("loc") for k in kernels if isinstance(k, dict)]
    if len(set(layers)) < len(layers):
        out.append(LEGEND)
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
            shape = f"outer range {k.get('trip_count')} ({mode})" + (
                f"  threads {k['threads']}" if k.get("threads") else "")
        out.append(f"  {k.get('name')}  layer {k.get('loc')!r}  {shape}  precision "
                   f"{_precision(k, slots)}  buffers {', '.join(names)}"
                   + (f"  tactic {k['tactic']}" if k.get("tactic") else ""))
    out += _tuning(header.get("tuning"))
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
