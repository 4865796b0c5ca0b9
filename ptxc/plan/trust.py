"""The plan trust model: how a plan file is read before anything in it is believed, and how a
plan is signed.

A plan is code: a cpu plan holds LLVM IR the runtime JIT-compiles, a cuda plan PTX the driver
JIT-compiles, and the kernel table says how large each buffer is. Loading checks what can be
checked without trusting the file (this module and the checks of :mod:`ptxc.plan.load`), but a
crafted file with a recomputed SHA-256 can still pair code with buffer sizes it does not fit:
only a plan whose origin is known may be run, as a shared library. That is what signing gives.

**Reading** (:func:`read_plan_file`): the path must be a regular file (a FIFO, a device or a
directory is refused without blocking: the file is opened ``O_NONBLOCK`` and ``fstat``-ed); the
20-byte prefix is read first, and the magic tag, the format version and the header length are
checked against the file's size and :data:`MAX_HEADER_BYTES` before the rest is read; a file
larger than the host's memory (:func:`~ptxc.codegen.memory_plan.host_memory_bytes`) is
refused before it is read.

**Signing** (:func:`sign`, :func:`verify`): ``engine.save(path, key=...)`` appends a trailer of
``b"PTXCSIG1"`` and an HMAC-SHA256 (standard library ``hmac``) over every byte before it (the
whole plan, its SHA-256 included); ``ptxc.load(path, key=...)`` checks it with a constant-time
comparison. The key is bytes or a str (UTF-8); ``PTXC_PLAN_KEY`` in the environment supplies it
when no ``key=`` is given. Rules: a key is given and the plan is unsigned or signed with another
key: refused; the plan is signed and no key is given: refused (a signature nobody checks proves
nothing and is taken as a sign that one was expected). Each refusal is a PlanError with cause
``signature``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
import struct

import numpy as np

from ..codegen.memory_plan import host_memory_bytes
from ..errors import PlanError

__all__ = ["read_plan_file", "sign", "verify", "plan_key", "MAX_HEADER_BYTES", "SIG_MAGIC"]

SIG_MAGIC = b"PTXCSIG1"
SIG_BYTES = len(SIG_MAGIC) + 32
#: the largest JSON header a plan may have (a ResNet-50 plan's is about 200 KiB)
MAX_HEADER_BYTES = 64 << 20
_PREFIX = struct.Struct("<8sIQ")


def _refuse(cause: str, message: str, source: str) -> PlanError:
    err = PlanError(f"{source}: {message} [{cause}]")
    err.cause = cause
    return err


def plan_key(key) -> bytes | None:
    """The signing key: ``key`` (bytes or str), else ``PTXC_PLAN_KEY``, else None."""
    if key is None:
        key = os.environ.get("PTXC_PLAN_KEY") or None
    if key is None:
        return None
    if isinstance(key, str):
        key = key.encode("utf-8")
    if not isinstance(key, (bytes, bytearray)) or not key:
        raise PlanError("a plan key is non-empty bytes or str")
    return bytes(key)


def sign(data: bytes, key) -> bytes:
    """``data`` (a plan's bytes) with the signature trailer appended."""
    k = plan_key(key)
    if k is None:
        return data
    return data + SIG_MAGIC + hmac.new(k, data, hashlib.sha256).digest()


def _signed(buf: np.ndarray) -> bool:
    """Whether the buffer ends in a signature trailer that the plan's own sizes account for:
    the prefix's header length and the header's ``data_bytes`` give the unsigned length."""
    n = buf.size
    if n < _PREFIX.size + SIG_BYTES or buf[n - SIG_BYTES:n - 32].tobytes() != SIG_MAGIC:
        return False
    _, _, hlen = _PREFIX.unpack(buf[:_PREFIX.size].tobytes())
    return _PREFIX.size + hlen + SIG_BYTES <= n


def verify(buf: np.ndarray, key, source: str) -> np.ndarray:
    """The plan bytes without their trailer, after the rules of the module docstring."""
    k = plan_key(key)
    signed = _signed(buf)
    if signed:
        body = buf[:buf.size - SIG_BYTES]
        mac = buf[buf.size - 32:].tobytes()
        if k is None:
            raise _refuse("signature", "the plan is signed; give its key (key= or "
                          "PTXC_PLAN_KEY) to load it", source)
        want = hmac.new(k, memoryview(body), hashlib.sha256).digest()
        if not hmac.compare_digest(mac, want):
            raise _refuse("signature", "the plan's HMAC-SHA256 signature does not match the "
                          "key: it was signed with another key or changed after signing", source)
        return body
    if k is not None:
        raise _refuse("signature", "the plan is not signed and a key was given (key= or "
                      "PTXC_PLAN_KEY): unsigned plans are refused when a key is set", source)
    return buf


def strip_signature(buf: np.ndarray) -> tuple[np.ndarray, bool]:
    """(the plan without its trailer, whether it had one) -- for inspection only."""
    return (buf[:buf.size - SIG_BYTES], True) if _signed(buf) else (buf, False)


def read_plan_file(path, magic: bytes, version: int, align: int = 64) -> np.ndarray:
    """The bytes of the plan at ``path`` in a ``align``-aligned buffer, after the checks of the
    module docstring (regular file; prefix, header length and size checked before the rest)."""
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise PlanError(f"{path}: cannot read the plan: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _refuse("file", "not a regular file (a plan is read only from a regular file)",
                      path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise PlanError(f"{path}: cannot read the plan: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped between stat and open
            raise _refuse("file", "not a regular file", path)
        size = st.st_size
        with os.fdopen(os.dup(fd), "rb") as f:
            prefix = f.read(_PREFIX.size)
            if prefix[:len(magic)] != magic:
                if len(prefix) < len(magic) and magic.startswith(prefix):
                    raise _refuse("truncated", f"{size} bytes, cut inside the magic tag", path)
                raise _refuse("magic", f"not a ptxc plan (starts with {prefix[:8]!r}, not "
                              f"{magic!r})", path)
            if len(prefix) < _PREFIX.size:
                raise _refuse("truncated", f"{size} bytes, cut inside the {_PREFIX.size}-byte "
                              "prefix", path)
            _, ver, hlen = _PREFIX.unpack(prefix)
            if ver != version:
                raise _refuse("format", f"plan format version {ver}; this ptxc reads version "
                              f"{version}", path)
            if hlen > MAX_HEADER_BYTES:
                raise _refuse("header", f"header length {hlen} is over the limit of "
                              f"{MAX_HEADER_BYTES} bytes", path)
            if _PREFIX.size + hlen + 32 > size:
                raise _refuse("truncated", f"{size} bytes, but the header alone takes {hlen} "
                              "bytes after the prefix", path)
            limit = host_memory_bytes()
            if size > limit:
                raise _refuse("file", f"{size:,} bytes: larger than this host's memory "
                              f"({limit:,} bytes)", path)
            base = np.empty(size + align, np.uint8)
            shift = (-base.ctypes.data) % align
            buf = base[shift:shift + size]
            buf[:_PREFIX.size] = np.frombuffer(prefix, np.uint8)
            got = _PREFIX.size + (f.readinto(memoryview(buf[_PREFIX.size:])) or 0)
    except OSError as e:
        raise PlanError(f"{path}: cannot read the plan: {e.strerror or e}") from None
    finally:
        os.close(fd)
    return buf[:got]
