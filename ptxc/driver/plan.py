"""Plan files: a compiled Engine in one file, loaded without recompiling the model.

    engine.save("model.plan")              # save_plan(engine, path)
    engine = ptxc.load("model.plan")       # load_plan(path, threads=None)

**Layout** (integers little-endian)::

    0         8 bytes   magic b"PTXCPLAN"
    8         u32       format version (FORMAT_VERSION, 1)
    12        u64       H: length of the JSON header
    20        H bytes   the header, UTF-8 JSON
              zeros up to the next multiple of 64: the blob section starts there, at B
    B + off   the blobs, each at a multiple of 64 from B, raw little-endian arrays, zeros between
    end - 32  SHA-256 of every byte before it

Blob offsets count from B, not from the file start (a decision: the header holds the offsets,
so offsets from the file start would depend on the header's own length). B and every blob are
64-byte aligned in the file; the loader reads the file into a 64-byte aligned buffer and views
the weights in it without copying.

**Header**: ``format`` ("ptxc-plan") and ``format_version``; ``ptxc_version``,
``llvmlite_version``, ``llvm_version``; ``target`` ("cpu" or "cuda") and ``arch`` (the CUDA
arch of the PTX, e.g. "sm_90"; None for cpu); ``host`` (cpu: LLVM ``triple``, ``data_layout``,
and the ``cpu_name`` it was built on; cuda: None); ``options`` (``precision``; cpu:
``min_parallel_work``, ``allocator``; cuda: ``cuda_graph``); ``bindings`` (``inputs``/``outputs``:
name, shape, dtype); ``kernel_table`` (:meth:`KernelTable.to_json`; a cuda kernel has its
``grid``, ``block``, ``shared_bytes`` and ``schedule``); ``memory_plan``
(:meth:`MemoryPlan.to_json`; for cpu only when the runtime uses the planned arena, for cuda
always: the device arena's offsets); ``blobs`` (name, kind "llvm" | "ptx" | "weight", dtype,
shape, offset, nbytes) and ``data_bytes`` (the length of the blob section). Unknown keys are
ignored: they are data, never looked up as code.

**Blobs by target.** cpu: ``llvm``/``module`` (the LLVM IR text, UTF-8 bytes) and the weights.
cuda: ``ptx``/``module`` (the PTX text, UTF-8 bytes, exactly as compiled) and the weights; the
NVPTX LLVM IR is not stored (the PTX is the program; ``explore`` shows the IR).

**What loading runs.** Loading parses JSON (data only) and views raw arrays of a fixed set of
numeric dtypes; nothing from the file is unpickled, evaluated or imported. A cpu plan stores the
LLVM IR loop-to-llvm emitted, before optimization, and the host object code it was compiled to
(blob ``object``/``module``, with ``host.cpu_features``): loading checks the IR (below) and
loads the object into MCJIT, so neither the LLVM optimizer nor the code generator runs (ResNet-50
loads in well under the 14.6 s its JIT took). The object may use every feature of the CPU it was
built on, so a plan with an object is refused (cause ``target``) on a host whose CPU features
differ (``cpu_name`` is a record). A plan without an object (older ptxc) is optimized for this host's CPU and
JIT-compiled, as a GPU driver JIT-compiles a cuda plan's PTX. Either way no pass, lowering or
code generation of the model compiler runs (the tests make ``run_stages`` and
``lower_loop_to_llvm`` raise while loading). The code is the program, so a plan is trusted as a
shared library is. A cuda plan stores the PTX; loading checks it declares
exactly the table's kernels (``.entry``) with one parameter per table buffer, and nothing
touches the GPU until the first run, where the driver JIT-compiles the PTX for the device (as
it does for any PTX); no LLVM runs, so a cuda plan does not depend on the LLVM version. Before
the JIT a cpu plan's module is checked to define exactly the
table's kernels with the table's signatures and footprints (each buffer's
``dereferenceable`` bytes and the ``range`` of the kernel's iteration arguments, stated by
loop-to-llvm: a slot, binding or trip count edited in the header alone is refused), to declare only the C library functions the CPU
runtime registers and LLVM intrinsics, to call only named functions (no inline assembly, no
calls through pointers) and to hold no global variables: these catch damage and mismatch and
keep a plan's code from calling into the rest of the process; the object code's ELF tables are
checked (:mod:`ptxc.driver.plan_object`) before LLVM's loader reads them, and it may link only
against the kernels and the runtime's functions; but these are no sandbox (a crafted
file with a recomputed checksum can still index outside its buffers). The SHA-256 detects
damage; it does not authenticate.

**Refusals.** Each is a :class:`~ptxc.errors.PlanError` whose message names the file and the
cause and whose ``cause`` attribute is one of :data:`CAUSES`: ``magic`` (not a plan file),
``truncated`` (shorter than its prefix or its header say), ``format`` (another format version,
or a header whose ``format`` is not a ptxc plan), ``checksum`` (a byte changed anywhere),
``header`` (not JSON, missing or ill-typed fields, parts that disagree), ``blob`` (out of the
blob section, overlapping, a dtype outside the numeric set, a weight that does not fit its
buffer), ``version`` (another ptxc version; for cpu another LLVM major version, whose textual
IR this LLVM may not read), ``target`` (a target or arch this machine cannot run: a cpu plan for
another triple; a cuda plan for another arch than the device's — the plan's kernels and tiles
were chosen for that arch, so it is refused as TensorRT refuses an engine built for another
device), ``code`` (the stored IR or PTX does not parse, breaks the rules above, or does not
compile).

**A cuda plan on a machine without a GPU loads** (a decision): the arch is checked at load only
when a device is present (:func:`device_arch`), so a plan built and inspected on a CPU machine
is an Engine there too; its first run raises :class:`~ptxc.errors.DeviceError` saying there is
no GPU. When the plan is loaded where no device is seen and runs where one is (a GPU that
appears later in the process), the first run checks the arch exactly as loading would have
(``CudaProgram(exact_arch=True)``), a DeviceError naming both archs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import struct
import tempfile
import time

import numpy as np

from ..errors import CompileError, PlanError

__all__ = ["save_plan", "load_plan", "plan_to_bytes", "engine_from_plan", "encode_plan",
           "decode_plan", "MAGIC", "FORMAT_VERSION", "CAUSES"]

MAGIC = b"PTXCPLAN"
FORMAT_VERSION = 1
FORMAT_NAME = "ptxc-plan"
ALIGN = 64
CAUSES = ("magic", "truncated", "format", "checksum", "header", "blob", "version", "target",
          "code", "file", "signature")
#: the LLVM intrinsics a cpu plan's IR may declare: those loop-to-llvm emits (by name prefix,
#: before the type suffix); anything else (``llvm.trap``, ``llvm.memcpy``, ...) is refused
INTRINSICS = ("llvm.exp.", "llvm.log.", "llvm.sqrt.", "llvm.floor.", "llvm.ceil.",
              "llvm.fabs.", "llvm.pow.", "llvm.fptosi.sat.", "llvm.fptoui.sat.")
#: the largest element count or trip count a header may give (far above any real tensor)
MAX_COUNT = 2**48
BLOB_KINDS = ("llvm", "ptx", "weight", "object")
#: the dtypes a blob may have: numbers only (an object dtype would be a way to smuggle pointers)
DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                    "uint64", "float16", "float32", "float64"})
_PREFIX = struct.Struct("<8sIQ")
_DIGEST = 32


def _refuse(cause: str, message: str, source: str) -> PlanError:
    assert cause in CAUSES
    err = PlanError(f"{source}: {message} [{cause}]")
    err.cause = cause
    return err


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _aligned_empty(n: int) -> np.ndarray:
    base = np.empty(n + ALIGN, np.uint8)
    shift = (-base.ctypes.data) % ALIGN
    return base[shift:shift + n]


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


# ---- the container: prefix, header, blobs, checksum ------------------------------------------

def encode_plan(header: dict, blobs: list) -> bytes:
    """The bytes of a plan file: ``header`` (a JSON-able dict) with the blob table and
    ``data_bytes`` filled in from ``blobs``, a list of ``(name, kind, array)``."""
    table, arrays, at = [], [], 0
    for name, kind, array in blobs:
        a = np.ascontiguousarray(array)
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        if a.dtype.name not in DTYPES or kind not in BLOB_KINDS:
            raise PlanError(f"plan: blob {name!r} of kind {kind!r} and dtype {a.dtype} cannot be "
                            "stored")
        table.append({"name": name, "kind": kind, "dtype": a.dtype.name, "shape": list(a.shape),
                      "offset": at, "nbytes": a.nbytes})
        arrays.append(a)
        at = _align(at + a.nbytes)
    head = json.dumps({**header, "blobs": table, "data_bytes": at}, separators=(",", ":"),
                      ensure_ascii=False, allow_nan=False).encode("utf-8")
    start = _align(_PREFIX.size + len(head))
    out = bytearray(start + at + _DIGEST)
    out[:_PREFIX.size] = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(head))
    out[_PREFIX.size:_PREFIX.size + len(head)] = head
    for row, a in zip(table, arrays):
        o = start + row["offset"]
        out[o:o + a.nbytes] = a.view(np.uint8).reshape(-1).tobytes() if a.size else b""
    out[-_DIGEST:] = hashlib.sha256(memoryview(out)[:-_DIGEST]).digest()
    return bytes(out)


def _check_blob_table(header: dict, source: str) -> list:
    data_bytes = header.get("data_bytes")
    rows = header.get("blobs")
    if not _is_int(data_bytes) or data_bytes < 0 or not isinstance(rows, list):
        raise _refuse("header", "the header lacks a blob table ('blobs', 'data_bytes')", source)
    seen, spans = set(), []
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or not {"name", "kind", "dtype", "shape", "offset",
                                           "nbytes"} <= set(r):
            raise _refuse("header", f"blob #{i} lacks fields (name, kind, dtype, shape, offset, "
                          "nbytes)", source)
        name, kind, shape = r["name"], r["kind"], r["shape"]
        if not isinstance(name, str) or kind not in BLOB_KINDS or (kind, name) in seen:
            raise _refuse("blob", f"blob #{i} has a bad or repeated name/kind {name!r}/{kind!r} "
                          f"(kinds: {', '.join(BLOB_KINDS)})", source)
        seen.add((kind, name))
        if not isinstance(r["dtype"], str) or r["dtype"] not in DTYPES:
            raise _refuse("blob", f"blob {name!r} has dtype {r['dtype']!r}; a plan holds only "
                          f"{', '.join(sorted(DTYPES))}", source)
        if not (isinstance(shape, list) and all(_is_int(d) and d >= 0 for d in shape)):
            raise _refuse("blob", f"blob {name!r} has a bad shape {shape!r}", source)
        off, n = r["offset"], r["nbytes"]
        want = math.prod(shape) * np.dtype(r["dtype"]).itemsize
        if not (_is_int(off) and _is_int(n)) or n != want:
            raise _refuse("blob", f"blob {name!r}: nbytes {n!r} is not shape x itemsize ({want})",
                          source)
        if off < 0 or off % ALIGN or off + n > data_bytes:
            raise _refuse("blob", f"blob {name!r} [{off}, {off + n}) lies outside the blob "
                          f"section of {data_bytes} bytes or is not {ALIGN}-byte aligned", source)
        spans.append((off, off + n, name))
    spans.sort()
    for (_, e0, n0), (o1, _, n1) in zip(spans, spans[1:]):
        if o1 < e0:
            raise _refuse("blob", f"blobs {n0!r} and {n1!r} overlap", source)
    return rows


def decode_plan(data, source: str = "<plan>") -> tuple[dict, dict]:
    """Check a plan's container and return ``(header, blobs)``: ``blobs`` maps ``(kind, name)``
    to a read-only array viewing ``data`` (copied first into a 64-byte aligned buffer unless it
    is one). Raises PlanError (magic, truncated, format, checksum, header, blob)."""
    if isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ctypes.data % ALIGN == 0:
        buf = data.reshape(-1)
    else:
        raw = memoryview(data).cast("B")
        buf = _aligned_empty(len(raw))
        buf[:] = np.frombuffer(raw, np.uint8)
    n = buf.size
    head8 = buf[:len(MAGIC)].tobytes()
    if head8 != MAGIC:
        if n < len(MAGIC) and MAGIC.startswith(head8):
            raise _refuse("truncated", f"{n} bytes, cut inside the magic tag", source)
        raise _refuse("magic", f"not a ptxc plan (starts with {head8!r}, not {MAGIC!r})", source)
    if n < _PREFIX.size:
        raise _refuse("truncated", f"{n} bytes, cut inside the {_PREFIX.size}-byte prefix",
                      source)
    _, version, hlen = _PREFIX.unpack(buf[:_PREFIX.size].tobytes())
    if version != FORMAT_VERSION:
        raise _refuse("format", f"plan format version {version}; this ptxc reads version "
                      f"{FORMAT_VERSION}", source)
    if _PREFIX.size + hlen + _DIGEST > n:
        raise _refuse("truncated", f"{n} bytes, but the header alone takes {hlen} bytes after "
                      "the prefix", source)
    head = buf[_PREFIX.size:_PREFIX.size + hlen].tobytes()
    start = _align(_PREFIX.size + hlen)
    try:  # before the checksum: only to tell a cut file from a damaged one
        claimed = json.loads(head).get("data_bytes")
        expected = start + claimed + _DIGEST if _is_int(claimed) else None
    except (ValueError, AttributeError, RecursionError):
        expected = None
    if expected is not None and n < expected:
        raise _refuse("truncated", f"{n} bytes; its header describes {expected}", source)
    digest = hashlib.sha256(memoryview(buf[:-_DIGEST])).digest()
    if digest != buf[-_DIGEST:].tobytes():
        raise _refuse("checksum", "SHA-256 mismatch: the file is damaged", source)
    try:
        header = json.loads(head.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise _refuse("header", f"the header is not UTF-8 JSON ({type(e).__name__}: {e})",
                      source) from None
    if not isinstance(header, dict):
        raise _refuse("header", f"the header is a JSON {type(header).__name__}, not an object",
                      source)
    if header.get("format") != FORMAT_NAME:
        raise _refuse("format", f"the header's format is {header.get('format')!r}, not "
                      f"{FORMAT_NAME!r}", source)
    if header.get("format_version") != version:
        raise _refuse("header", f"the header says format version {header.get('format_version')!r}"
                      f", the prefix {version}", source)
    rows = _check_blob_table(header, source)
    if n != start + header["data_bytes"] + _DIGEST:
        raise _refuse("header", f"{n} bytes; its header describes "
                      f"{start + header['data_bytes'] + _DIGEST}", source)
    blobs = {}
    for r in rows:
        o = start + r["offset"]
        a = buf[o:o + r["nbytes"]].view(np.dtype(r["dtype"]).newbyteorder("<"))
        a = a.reshape(r["shape"])
        a.flags.writeable = False
        blobs[(r["kind"], r["name"])] = a
    return header, blobs


# ---- engines -----------------------------------------------------------------------------------

def _versions() -> dict:
    import llvmlite
    import llvmlite.binding as llvm
    from .. import __version__
    return {"ptxc_version": __version__, "llvmlite_version": llvmlite.__version__,
            "llvm_version": ".".join(map(str, llvm.llvm_version_info))}


def _binding(name: str, t) -> dict:
    return {"name": name, "shape": list(t.shape), "dtype": t.element.np_dtype.name}


def _memory_plan(engine, cpu):
    """The engine's memory plan (an ``engine.memory_plan``, else the planned arena of its CPU
    runtime, planned now if it has not run yet), or None when it has none."""
    plan = getattr(engine, "memory_plan", None)
    alloc = getattr(cpu, "allocator", None)
    if plan is None and type(alloc).__name__ == "ArenaAllocator":
        plan = alloc.plan
        if plan is None:
            from .memory_plan import buffers_from_slots, plan_memory
            slots = [s for s in cpu.table.slots if s.kind == "alloc"]
            plan = plan_memory(buffers_from_slots(slots), alloc.alignment, refine=alloc.refine)
    return plan


def _overrides_option(engine) -> dict:
    """``{"precision_overrides": {...}}`` when the engine has any (absent otherwise)."""
    ov = dict(getattr(engine, "precision_overrides", None) or {})
    return {"precision_overrides": ov} if ov else {}


def _overrides(options: dict, source) -> dict:
    """The plan's ``precision_overrides`` (node name -> precision), checked."""
    ov = options.get("precision_overrides") or {}
    if not isinstance(ov, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                           for k, v in ov.items()):
        raise _refuse("header", "precision_overrides is not a map of node names to "
                      "precisions", source)
    return dict(ov)


def _cuda_plan_to_bytes(engine) -> bytes:
    cuda = engine.program
    header = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **_versions(),
              "target": "cuda", "arch": cuda.arch, "host": None,
              "options": {"precision": getattr(engine, "precision", "fp32"),
                          **_overrides_option(engine),
                          "cuda_graph": bool(cuda.cuda_graph)},
              "bindings": {"inputs": [_binding(n, t) for n, t in engine.inputs.items()],
                           "outputs": [_binding(n, t) for n, t in engine.outputs.items()]},
              "kernel_table": engine.kernels.to_json(),
              "memory_plan": cuda.plan.to_json()}
    blobs = [("module", "ptx", np.frombuffer(cuda.ptx.encode("utf-8"), np.uint8))]
    globals_ = cuda.ptx_program.globals
    blobs += [(s.name, "weight", globals_[s.name]) for s in engine.kernels.slots
              if s.kind == "global"]
    return encode_plan(header, blobs)


def plan_to_bytes(engine) -> bytes:
    """The plan file of ``engine`` as bytes (deterministic: one engine, one byte string)."""
    import llvmlite.binding as llvm
    if engine.target == "cuda":
        return _cuda_plan_to_bytes(engine)
    if engine.target != "cpu":
        raise PlanError(f"plan: cannot save an engine for target {engine.target!r}; the targets "
                        "are cpu and cuda")
    cpu = engine.program
    prog = cpu.program
    plan = _memory_plan(engine, cpu)
    header = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **_versions(),
              "target": "cpu", "arch": None,
              "host": {"triple": prog.triple, "data_layout": prog.data_layout,
                       "cpu_name": llvm.get_host_cpu_name(),
                       "cpu_features": host_cpu_features()},
              "options": {"precision": getattr(engine, "precision", "fp32"),
                          **_overrides_option(engine),
                          "min_parallel_work": int(cpu.min_parallel_work),
                          "allocator": "arena" if plan is not None else "per-run"},
              "bindings": {"inputs": [_binding(n, t) for n, t in engine.inputs.items()],
                           "outputs": [_binding(n, t) for n, t in engine.outputs.items()]},
              "kernel_table": engine.kernels.to_json()}
    if plan is not None:
        header["memory_plan"] = plan.to_json()
    text = np.frombuffer(prog.text.encode("utf-8"), np.uint8)
    blobs = [("module", "llvm", text)]
    if getattr(cpu, "object_code", None):
        blobs.append(("module", "object", np.frombuffer(cpu.object_code, np.uint8)))
    blobs += [(s.name, "weight", prog.globals[s.name]) for s in engine.kernels.slots
              if s.kind == "global"]
    return encode_plan(header, blobs)


def host_cpu_features() -> str:
    """The host CPU's LLVM feature string, sorted (what an object file's code may use)."""
    import llvmlite.binding as llvm
    return ",".join(sorted(llvm.get_host_cpu_features().flatten().split(",")))


def _object_code(header: dict, blobs: dict, table, source: str) -> bytes | None:
    """A cpu plan's host object code, when it has one: refused (cause ``target``) unless this
    host's CPU features are the ones it was built for, since the code may use any of them (the
    CPU name only tunes scheduling: it is a record), and (cause ``code``) unless its ELF
    structure passes :func:`~ptxc.driver.plan_object.check_object`, so that LLVM's object
    loader never sees a damaged table; a plan without an object, from an older ptxc, is
    JIT-compiled from its IR."""
    import llvmlite.binding as llvm
    obj = blobs.get(("object", "module"))
    if obj is None:
        return None
    if obj.dtype != np.uint8 or obj.ndim != 1:
        raise _refuse("blob", "the object code is not a uint8 blob", source)
    host = header["host"]
    want, have = host.get("cpu_features"), host_cpu_features()
    if want != have:
        w = set(want.split(",")) if isinstance(want, str) else set()
        h = set(have.split(","))
        diff = sorted(w - h)[:6] + sorted(h - w)[:6]
        raise _refuse("target", f"its machine code is for another CPU (built on "
                      f"{str(host.get('cpu_name'))[:40]!r}; this host is "
                      f"{llvm.get_host_cpu_name()!r}; features differ: {', '.join(diff)}); "
                      "recompile the model here", source)
    from .cpu import _LIBGCC, _LIBM
    from .plan_object import check_object
    code = obj.tobytes()
    try:
        check_object(code, host.get("triple"), [k.name for k in table.kernels],
                     set(_LIBM) | set(_LIBGCC))
    except ValueError as e:
        raise _refuse("code", f"the stored object code is malformed: {e}", source) from None
    return code


def save_plan(engine, path, key=None) -> None:
    """Write ``engine`` to ``path`` (atomically: a crash leaves the old file or none); with
    ``key`` (or ``PTXC_PLAN_KEY``) the plan is signed (:mod:`ptxc.driver.plan_trust`)."""
    from .plan_trust import sign
    data = sign(plan_to_bytes(engine), key)
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".ptxc-plan-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_plan(path, *, threads: int | None = None, key=None, max_memory: int | None = None):
    """Read the plan at ``path`` into an Engine (see the module docstring for what runs). The
    file is read under the trust model of :mod:`ptxc.driver.plan_trust`: a regular file, its
    prefix checked before the rest is read, and its signature checked against ``key`` (or
    ``PTXC_PLAN_KEY``). ``max_memory``: the engine's memory budget, as ``compile``'s."""
    from .memory_limit import _valid
    from .plan_trust import read_plan_file, verify
    _valid(max_memory)
    path = os.fspath(path)
    buf = verify(read_plan_file(path, MAGIC, FORMAT_VERSION, ALIGN), key, path)
    engine = engine_from_plan(buf, threads=threads, source=path)
    engine.max_memory = max_memory
    return engine


@functools.lru_cache(maxsize=None)
def device_arch() -> str | None:
    """The CUDA arch of the current GPU ("sm_90"), or None when there is none."""
    try:
        from numba import cuda
        if not cuda.is_available():
            return None
        major, minor = cuda.get_current_device().compute_capability
        return f"sm_{major}{minor}"
    except Exception:  # no driver, no numba-cuda: no GPU to run on
        return None


def _check_runtime(header: dict, source: str) -> None:
    """Versions and target: can this ptxc, LLVM and machine run the plan?"""
    import llvmlite.binding as llvm
    from .. import __version__
    if header.get("ptxc_version") != __version__:
        raise _refuse("version", f"written by ptxc {header.get('ptxc_version')!r}; this is "
                      f"ptxc {__version__} (recompile the model)", source)
    target = header.get("target")
    if target == "cuda":
        arch, have = header.get("arch"), device_arch()
        if not isinstance(arch, str):
            raise _refuse("header", "a cuda plan without its arch", source)
        if have is not None and arch != have:  # no GPU here: loads, and its run says so
            raise _refuse("target", f"a cuda plan for {arch}; this GPU is {have} (recompile "
                          f"with arch={have!r})", source)
        return
    if target != "cpu":
        raise _refuse("target", f"target {target!r}; this ptxc runs cpu and cuda plans", source)
    llvm_version = header.get("llvm_version")
    major = str(llvm.llvm_version_info[0])
    if not isinstance(llvm_version, str) or llvm_version.split(".")[0] != major:
        raise _refuse("version", f"its LLVM IR is from LLVM {llvm_version!r}; this llvmlite has "
                      f"LLVM {'.'.join(map(str, llvm.llvm_version_info))}", source)
    host = header.get("host")
    if not isinstance(host, dict):
        raise _refuse("header", "a cpu plan without its host (triple, data layout)", source)
    from ..lower.loop_to_llvm import host_target
    triple, layout = host_target()
    if host.get("triple") != triple or host.get("data_layout") != layout:
        raise _refuse("target", f"built for {host.get('triple')!r} (data layout "
                      f"{host.get('data_layout')!r}); this host is {triple!r} ({layout!r})",
                      source)


def _kernel_table(header: dict, blobs: dict, source: str):
    """The kernel table, checked against itself, the bindings and the weights."""
    from ..ir.types import TensorType, scalar_from_numpy
    from ..lower.loop_to_llvm import KernelTable
    try:
        _check_table_fields(header["kernel_table"])
        table = KernelTable.from_json(header["kernel_table"])
        for s in table.slots:
            if s.kind not in ("arg", "alloc", "global") or s.dtype not in DTYPES:
                raise ValueError(f"slot {s.name!r}: kind {s.kind!r}, dtype {s.dtype!r}")
            t = s.type
            if t.span != s.span or t.min_element < 0 or not isinstance(s.name, str):
                raise ValueError(f"slot {s.name!r}: span {s.span} for {t}")
        for k in table.kernels:
            if not (isinstance(k.name, str) and all(_is_int(i) and 0 <= i < len(table.slots)
                                                    for i in k.buffers)
                    and _is_int(k.trip_count) and k.trip_count >= 0 and _is_int(k.work)
                    and isinstance(k.parallel, bool)):
                raise ValueError(f"kernel {k.name!r}")
            most = max([table.slots[i].span for i in k.buffers] + [1])
            if header.get("target") != "cuda" and k.trip_count > most:
                # every kernel's outer loop indexes one of its buffers along that range
                raise ValueError(f"kernel {k.name!r}: trip_count {k.trip_count} is larger than "
                                 f"any of its buffers ({most} elements)")
            if header.get("target") == "cuda":
                dims = (k.grid, k.block)
                if not (all(isinstance(d, tuple) and len(d) == 3
                            and all(_is_int(x) and x >= 1 for x in d) for d in dims)
                        and math.prod(k.block) <= 1024 and _is_int(k.shared_bytes)
                        and k.shared_bytes >= 0):
                    raise ValueError(f"kernel {k.name!r}: launch grid {k.grid!r}, block "
                                     f"{k.block!r}, shared bytes {k.shared_bytes!r}")
        args = {s.name: s for s in table.slots if s.kind == "arg"}
        names = list(table.inputs) + list(table.outputs)
        if sorted(args) != sorted(names) or len(args) != sum(s.kind == "arg"
                                                             for s in table.slots):
            raise ValueError("inputs and outputs are not the argument slots")
        bindings = header["bindings"]
        have = {d: [(b["name"], list(b["shape"]), b["dtype"]) for b in bindings[d]]
                for d in ("inputs", "outputs")}
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, IndexError) as e:
        raise _refuse("header", f"malformed kernel table or bindings ({type(e).__name__}: {e})",
                      source) from None
    for d, names in (("inputs", table.inputs), ("outputs", table.outputs)):
        want = [(n, list(args[n].shape), args[n].dtype) for n in names]
        if have[d] != want:
            raise _refuse("header", f"bindings {d} {have[d]} do not match the kernel table's "
                          f"{want}", source)
    globals_ = {}
    for s in table.slots:
        if s.kind != "global":
            continue
        w = blobs.get(("weight", s.name))
        if w is None or w.dtype.name != s.dtype or w.size < s.span:
            got = "none" if w is None else f"{w.dtype.name}[{w.size}]"
            raise _refuse("blob", f"weight {s.name!r} needs {s.span} of {s.dtype}, the plan "
                          f"holds {got}", source)
        globals_[s.name] = w
    tensor = lambda n: TensorType(args[n].shape, scalar_from_numpy(args[n].dtype))  # noqa: E731
    return (table, globals_, {n: tensor(n) for n in table.inputs},
            {n: tensor(n) for n in table.outputs})


_CALL = re.compile(r"\b(?:call|invoke|callbr)\b([^\n]*)")
_CALLEE = re.compile(r"@|%|\basm\b")


def _calls_not_by_name(text: str) -> bool:
    """Whether some call, invoke or callbr of the IR text may not name its callee directly
    (``@name``): its first ``@``, ``%`` or ``asm`` on the line is not an ``@``. A fast,
    conservative filter (IR has one instruction a line): when it says no, the per-instruction
    walk of :func:`_check_code` could find nothing; when it says yes, the walk decides."""
    for m in _CALL.finditer(text):
        c = _CALLEE.search(m.group(1))
        if c is None or c.group(0) != "@":
            return True
    return False


def _check_table_fields(d: dict) -> None:
    """Every integer field of the header's kernel table is an int within sane bounds (before
    anything computes with it: a dimension of 10**30 would overflow numpy or ctypes), and the
    scratch and binding slots fit the host's memory. A failure is a ValueError naming the
    field, which the caller turns into a PlanError."""
    from .plan_trust import host_memory_bytes
    limit = host_memory_bytes()

    def count(where, v, lo=0, hi=MAX_COUNT):
        if not (_is_int(v) and lo <= v <= hi):
            raise ValueError(f"{where} is {v!r}, not an int in [{lo}, {hi}]")

    slots = d["slots"]
    kernels = d["kernels"]
    if not isinstance(slots, list) or not isinstance(kernels, list):
        raise ValueError("slots and kernels must be lists")
    for i, s in enumerate(slots):
        where = f"slot #{i} ({s.get('name')!r})"
        shape, strides = s["shape"], s["strides"]
        if not isinstance(shape, list) or not isinstance(strides, list) \
                or len(shape) != len(strides) or len(shape) > 64:
            raise ValueError(f"{where}: shape/strides are not two lists of one length <= 64")
        for k, v in enumerate(shape):
            count(f"{where} shape[{k}]", v)
        for k, v in enumerate(strides):
            count(f"{where} strides[{k}]", v, -MAX_COUNT, MAX_COUNT)
        count(f"{where} offset", s["offset"])
        count(f"{where} span", s["span"])
        count(f"{where} first", s.get("first", -1), -1)
        count(f"{where} last", s.get("last", -1), -1)
        if s.get("dtype") in DTYPES and s.get("kind") in ("alloc", "arg"):
            nbytes = s["span"] * np.dtype(s["dtype"]).itemsize
            if nbytes > limit:
                raise ValueError(f"{where}: span of {nbytes:,} bytes is more than this host's "
                                 f"memory ({limit:,} bytes)")
    for i, k in enumerate(kernels):
        where = f"kernel #{i} ({k.get('name')!r})"
        count(f"{where} trip_count", k["trip_count"])
        count(f"{where} work", k["work"], 0, 2**62)
        if not isinstance(k["buffers"], list):
            raise ValueError(f"{where}: buffers is not a list")
        for j, v in enumerate(k["buffers"]):
            count(f"{where} buffers[{j}]", v, 0, len(slots) - 1)
        count(f"{where} shared_bytes", k.get("shared_bytes", 0), 0, 1 << 20)
        for what in ("grid", "block"):
            if k.get(what) is not None:
                if not isinstance(k[what], list) or len(k[what]) != 3:
                    raise ValueError(f"{where}: {what} is not 3 ints")
                for j, v in enumerate(k[what]):
                    count(f"{where} {what}[{j}]", v, 1, 2**31 - 1)
    checks = d.get("checks", [])
    if not isinstance(checks, list) or not all(isinstance(c, str) for c in checks):
        raise ValueError("checks is not a list of strings")


def _check_code(text: str, table, source: str) -> None:
    """The stored IR parses and keeps to what loop-to-llvm emits; see the module docstring."""
    import llvmlite.binding as llvm
    from llvmlite.binding import ValueKind
    from .cpu import _LIBGCC, _LIBM
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as e:
        raise _refuse("code", f"the stored LLVM IR does not parse: {e}", source) from None
    allowed = set(_LIBM) | set(_LIBGCC)
    kernels = {k.name: k for k in table.kernels}
    defined = set()
    suspicious = _calls_not_by_name(text)
    for f in mod.functions:
        if f.is_declaration:
            if not (f.name.startswith(INTRINSICS) or f.name in allowed):
                raise _refuse("code", f"the IR declares {f.name!r}, which is neither a C math "
                              "function of the runtime nor an LLVM intrinsic ptxc emits",
                              source)
            continue
        k = kernels.get(f.name)
        if k is None:
            raise _refuse("code", f"the IR defines {f.name!r}, which is no kernel of the table",
                          source)
        if len(list(f.arguments)) != len(k.buffers) + 2:
            raise _refuse("code", f"kernel {f.name!r} takes {len(list(f.arguments))} arguments; "
                          f"the table gives it {len(k.buffers)} buffers and a range", source)
        defined.add(f.name)
        _check_footprint(f, k, table, source)
        if not suspicious:  # every call names its callee with @: no walk (17k instructions of
            continue        # ResNet-50 through the FFI took 1.7 s)
        for block in f.blocks:
            for ins in block.instructions:
                if ins.opcode in ("call", "invoke", "callbr"):
                    callee = list(ins.operands)[-1]
                    if callee.value_kind != ValueKind.function:
                        raise _refuse("code", f"kernel {f.name!r} calls through a pointer or "
                                      "inline assembly", source)
    if set(kernels) - defined:
        raise _refuse("code", f"the IR lacks kernels {sorted(set(kernels) - defined)}", source)
    if list(mod.global_variables) or "module asm" in text:
        raise _refuse("code", "the IR holds global variables or module assembly", source)


_DEREF = re.compile(rb"^dereferenceable\((\d+)\)$")
_RANGE = re.compile(rb"^range\(i64 (-?\d+), (-?\d+)\)$")


def _check_footprint(fn, kernel, table, source: str) -> None:
    """The kernel table against the footprint the kernel's code states in its signature
    (:func:`ptxc.lower.loop_to_llvm._state_footprint`): each buffer's slot is exactly as large
    as the bytes the code was compiled to touch (``dereferenceable``), and the trip count is the
    one the code's range arguments allow (``range``). This is what refuses a header edited alone
    (a binding and its slot shrunk, a trip count grown, buffers swapped): the kernels would
    read or write past their buffers."""
    args = list(fn.arguments)

    def attr(a, pattern):
        for x in a.attributes:
            m = pattern.match(x)
            if m:
                return tuple(int(g) for g in m.groups())
        return None

    for j, (a, i) in enumerate(zip(args, kernel.buffers)):
        s = table.slots[i]
        want = s.span * np.dtype(s.dtype).itemsize
        have = (attr(a, _DEREF) or (0,))[0]
        if have != want:
            raise _refuse("code", f"kernel {kernel.name!r} was compiled for {have} bytes of "
                          f"buffer #{j}; the kernel table's slot {s.name!r} holds {want} "
                          f"({s.span} x {s.dtype})", source)
    for a in args[-2:]:
        r = attr(a, _RANGE)
        if r != (0, kernel.trip_count + 1):
            top = "none" if r is None else r[1] - 1
            raise _refuse("code", f"kernel {kernel.name!r} was compiled for a trip count of "
                          f"{top}; the kernel table says {kernel.trip_count}", source)


def _stored_memory_plan(header: dict, table, source: str):
    """The header's memory plan, checked against the kernel table's scratch slots (None when
    the header has none)."""
    d = header.get("memory_plan")
    if d is None:
        return None
    try:
        from .memory_plan import MemoryPlan, buffers_from_slots
    except ImportError:
        raise _refuse("version", "the plan has a memory plan and this ptxc no planner",
                      source) from None
    try:
        plan = MemoryPlan.from_json(d)
    except PlanError as e:
        raise _refuse("header", str(e), source) from None
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError,
            ZeroDivisionError) as e:  # (alignment 0)
        raise _refuse("header", f"malformed memory plan ({type(e).__name__}: {e})",
                      source) from None
    from .plan_trust import host_memory_bytes
    if not (_is_int(plan.arena_bytes) and 0 <= plan.arena_bytes <= host_memory_bytes()):
        raise _refuse("header", f"memory_plan.arena_bytes {plan.arena_bytes!r} is more than "
                      f"this host's memory ({host_memory_bytes():,} bytes)", source)
    want = [(b.name, b.size, b.first, b.last)
            for b in buffers_from_slots([s for s in table.slots if s.kind == "alloc"])]
    have = [(b.name, b.size, b.first, b.last) for b in plan.buffers]
    if have != want:
        raise _refuse("header", "the memory plan does not match the kernel table's scratch "
                      "buffers", source)
    return plan


def _allocator(header: dict, table, source: str):
    from .memory_plan import ArenaAllocator
    plan = _stored_memory_plan(header, table, source)
    return None if plan is None else ArenaAllocator(plan=plan)


_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(([^)]*)\)")


def _check_ptx(text: str, table, source: str) -> None:
    """The stored PTX declares exactly the table's kernels, each with one parameter per
    buffer (what catches a PTX of another model or a cut one; the driver checks the rest)."""
    if not re.search(r"^\s*\.version\s+\d+\.\d+", text, re.M) or \
            not re.search(r"^\s*\.target\s+sm_\w+", text, re.M):
        raise _refuse("code", "the PTX lacks its .version or .target directive", source)
    entries = {m.group(1): m.group(2).count(".param") for m in _ENTRY.finditer(text)}
    kernels = {k.name: len(k.buffers) for k in table.kernels}
    if set(entries) != set(kernels):
        raise _refuse("code", f"the PTX's kernels {sorted(entries)} are not the table's "
                      f"{sorted(kernels)}", source)
    for name, n in kernels.items():
        if entries[name] != n:
            raise _refuse("code", f"kernel {name} takes {entries[name]} parameters in the PTX; "
                          f"the table gives it {n} buffers", source)


def _text_blob(blobs: dict, kind: str, plan: str, what: str, source: str) -> str:
    """The code blob ``(kind, "module")`` (PTX or LLVM IR) as text; a missing, mistyped or
    non-UTF-8 blob is a PlanError of cause ``blob``."""
    module = blobs.get((kind, "module"))
    if module is None or module.dtype != np.uint8 or module.ndim != 1:
        raise _refuse("blob", f"{plan} without its {what} (uint8 blob 'module')", source)
    try:
        return module.tobytes().decode("utf-8")
    except UnicodeDecodeError:
        raise _refuse("blob", f"the {what} is not UTF-8 text", source) from None


def _cuda_engine_from_plan(header: dict, blobs: dict, source: str, t0: float):
    from .cuda import CudaProgram
    from .engine import Engine
    table, globals_, inputs, outputs = _kernel_table(header, blobs, source)
    ptx = _text_blob(blobs, "ptx", "a cuda plan", "PTX", source)
    _check_ptx(ptx, table, source)
    options = header.get("options")
    if not isinstance(options, dict) or not isinstance(options.get("cuda_graph"), bool):
        raise _refuse("header", "options lack cuda_graph", source)
    plan = _stored_memory_plan(header, table, source)
    if plan is None:
        raise _refuse("header", "a cuda plan without its memory plan", source)
    arch = header["arch"]
    try:
        from ..ptx import PtxProgram
        prog = PtxProgram(ptx=ptx, arch=arch, llvm_text="", table=table, globals=globals_)
        cuda = CudaProgram(prog, plan, cuda_graph=options["cuda_graph"], exact_arch=True)
    except CompileError as e:
        raise _refuse("header", f"the kernel table, arch or memory plan cannot make a cuda "
                      f"program: {e}", source) from None
    engine = Engine("cuda", cuda, inputs, outputs, {"load": time.perf_counter() - t0}, "",
                    table)
    engine.precision = options.get("precision", "fp32")
    engine.precision_overrides = _overrides(options, source)
    engine.memory_plan = plan
    return engine


def engine_from_plan(data, *, threads: int | None = None, source: str = "<plan>"):
    """An Engine from the bytes of a plan file (see the module docstring)."""
    from ..lower.loop_to_llvm import LLVMProgram
    from .cpu import CpuProgram
    from .engine import Engine
    t0 = time.perf_counter()
    header, blobs = decode_plan(data, source)
    _check_runtime(header, source)
    if header.get("target") == "cuda":
        return _cuda_engine_from_plan(header, blobs, source, t0)
    table, globals_, inputs, outputs = _kernel_table(header, blobs, source)
    text = _text_blob(blobs, "llvm", "a cpu plan", "LLVM module", source)
    obj = _object_code(header, blobs, table, source)
    _check_code(text, table, source)  # the IR the object was compiled from keeps to the rules
    options = header.get("options")
    work = options.get("min_parallel_work") if isinstance(options, dict) else None
    if not _is_int(work) or work < 0:
        raise _refuse("header", "options lack min_parallel_work", source)
    allocator = _allocator(header, table, source)
    host = header["host"]
    prog = LLVMProgram(text, table, globals_, host["triple"], host["data_layout"])
    t1 = time.perf_counter()
    try:
        cpu = CpuProgram(prog, threads=threads, min_parallel_work=work, allocator=allocator,
                         object_code=obj)
    except CompileError as e:
        raise _refuse("code", f"the stored LLVM IR does not compile: {e}", source) from None
    t2 = time.perf_counter()
    engine = Engine("cpu", cpu, inputs, outputs, {"load": t1 - t0, "jit": t2 - t1}, text, table)
    engine.precision = options.get("precision", "fp32")
    engine.precision_overrides = _overrides(options, source)
    engine.memory_plan = allocator.plan if allocator is not None else None
    return engine
