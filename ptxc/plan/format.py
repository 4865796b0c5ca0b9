"""The plan file container: prefix, JSON header, 64-byte aligned blobs, SHA-256 (the bytes
of a plan; how an engine's header is written is :mod:`ptxc.plan.save`, how an Engine comes of
it :mod:`ptxc.plan.load`).

**Layout** (integers little-endian)::

    0         8 bytes   magic b"PTXCPLAN"
    8         u32       format version (FORMAT_VERSION, 2)
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
arch of the PTX, e.g. "sm_90"; None for cpu); ``built_for`` (the
:class:`~ptxc.target.Target` the code was generated for, :meth:`~ptxc.target.Target.to_dict`:
kind, arch, GPU name, SM count, memory limits, features; on cpu the host CPU it was built on);
``host`` (cpu: LLVM ``triple``, ``data_layout``,
and the ``cpu_name`` it was built on; cuda: None); ``options`` (``precision``; cpu:
``min_parallel_work``, ``allocator``; cuda: ``cuda_graph``); ``bindings`` (``inputs``/``outputs``:
name, shape, dtype); ``kernel_table`` (:meth:`KernelTable.to_json`; a cuda kernel has its
``grid``, ``block``, ``shared_bytes`` and ``schedule``; a cpu kernel its ``threads``, absent
in plans written before it: 0); ``memory_plan``
(:meth:`MemoryPlan.to_json`; for cpu only when the runtime uses the planned arena, for cuda
always: the device arena's offsets); ``blobs`` (name, kind "llvm" | "ptx" | "weight", dtype,
shape, offset, nbytes) and ``data_bytes`` (the length of the blob section). Unknown keys are
ignored: they are data, never looked up as code.

**Versions.** 1: the first format. 2: the header gained ``built_for`` (a plan records its
target); a version 1 plan is refused (cause ``format``), as any other version.

**Blobs by target.** cpu: ``llvm``/``module`` (the LLVM IR text, UTF-8 bytes) and the weights.
cuda: ``ptx``/``module`` (the PTX text, UTF-8 bytes, exactly as compiled) and the weights; the
NVPTX LLVM IR is not stored (the PTX is the program; ``explore`` shows the IR).

:func:`encode_plan` writes the container; :func:`decode_plan` checks it (magic, truncation,
format version, checksum, header JSON, the blob table) and views the blobs. Each refusal is a
:class:`~ptxc.errors.PlanError` with a ``cause`` of :data:`CAUSES` (listed in
:mod:`ptxc.plan.load`).
"""

from __future__ import annotations

import hashlib
import json
import math
import struct

import numpy as np

from ..errors import PlanError

__all__ = ["encode_plan", "decode_plan", "MAGIC", "FORMAT_VERSION", "FORMAT_NAME", "ALIGN",
           "CAUSES", "DTYPES", "BLOB_KINDS", "MAX_COUNT", "INTRINSICS"]

MAGIC = b"PTXCPLAN"
FORMAT_VERSION = 2
FORMAT_NAME = "ptxc-plan"
ALIGN = 64
CAUSES = ("magic", "truncated", "format", "checksum", "header", "blob", "version", "target",
          "code", "file", "signature")
#: the LLVM intrinsics a cpu plan's IR may declare: those loop-to-llvm emits (by name prefix,
#: before the type suffix); anything else (``llvm.trap``, ``llvm.memcpy``, ...) is refused
INTRINSICS = ("llvm.exp.", "llvm.log.", "llvm.sqrt.", "llvm.floor.", "llvm.ceil.",
              "llvm.fabs.", "llvm.pow.", "llvm.fptosi.sat.", "llvm.fptoui.sat.",
              "llvm.maximum.", "llvm.minimum.", "llvm.roundeven.", "llvm.fma.", "llvm.copysign.")
#: the largest element count or trip count a header may give (far above any real tensor)
MAX_COUNT = 2**48
BLOB_KINDS = ("llvm", "ptx", "weight", "object")
#: the dtypes a blob may have: numbers only (an object dtype would be a way to smuggle pointers)
DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                    "uint64", "float16", "bfloat16", "float32", "float64"})
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
