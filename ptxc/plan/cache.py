"""The compile cache: a compiled engine's plan file, keyed by what decides it.

    engine = ptxc.compile("model.onnx")     # compiles, and stores the plan in the cache
    engine = ptxc.compile("model.onnx")     # loads the plan (under a second for ResNet-50)

Where: ``$PTXC_CACHE_DIR``, else ``$XDG_CACHE_HOME/ptxc``, else ``~/.cache/ptxc``. Off with
``PTXC_CACHE=0`` (or ``compile(cache=False)``). Entries are plan files (``<key>.plan``) written
atomically and signed with a per-user key kept beside the folder (``<parent>/ptxc-cache.key``);
the folder, the key and each entry must be this user's and writable by no one else
(:mod:`ptxc.plan.cache_trust`: a plan is code, and a cache others can write to would run
theirs). A refused folder or key leaves the cache off, a refused entry unused, each with a
warning on the ``ptxc.cache`` logger; an entry that is damaged, tampered with or signed with
another key is a PlanError on load, and is then removed (warning) and replaced. When the folder
passes ``PTXC_CACHE_MAX_MB`` (default 4096), the least recently used entries go.

The key is a SHA-256 over: the model's bytes (an ONNX path is read; a ModelProto serialized),
every option of ``compile`` that changes the result (``CompileOptions.cache_key``: target,
arch, precision, input shapes, constant inputs, pass options, the passes of every stage), the host (cpu: triple, CPU
name and features, which the object code depends on) and a hash of ptxc's own source files and the
llvmlite version, so changing the compiler never serves a stale engine. What a plan cannot carry
is not cached: a Network or an IR module as the model, ``check_numerics`` (its point is to run
the passes), int8 (its calibration data would have to be part of the key), ``threads`` (a
runtime choice: applied after loading). A new field of ``CompileOptions`` that changes the
engine must join ``CompileOptions.cache_key``.

Why whole plans and not PTX/object code keyed by the LLVM IR: the Python front of the compiler
(import, graph/tensor/loop passes) takes most of a ResNet-50 compile's time once codegen is
skipped, so only a key from the model itself brings a second compile under a second.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os

import numpy as np

from . import cache_trust as trust

log = logging.getLogger("ptxc.cache")


def cache_dir() -> str | None:
    """The cache folder, or None when the cache is off."""
    if os.environ.get("PTXC_CACHE", "1").strip().lower() in ("0", "off", "false", "no"):
        return None
    d = os.environ.get("PTXC_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                ".cache")
        d = os.path.join(base, "ptxc")
    return d


@functools.lru_cache(maxsize=1)
def _ptxc_fingerprint() -> str:
    """A hash of every source file of ptxc and the llvmlite version."""
    import llvmlite
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256(llvmlite.__version__.encode())
    for dirpath, dirnames, files in os.walk(root):
        dirnames.sort()
        for f in sorted(files):
            if f.endswith(".py"):
                p = os.path.join(dirpath, f)
                h.update(os.path.relpath(p, root).encode())
                with open(p, "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()


def _model_bytes(model) -> bytes | None:
    if isinstance(model, (str, os.PathLike)):
        try:
            with open(model, "rb") as f:
                return f.read()
        except OSError:
            return None  # the importer reports it
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    if type(model).__name__ == "ModelProto":
        return model.SerializeToString()
    return None


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in sorted(v.items())}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return {"dtype": v.dtype.str, "shape": list(v.shape),
                "sha": hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()}
    return v


def cache_key(model, target: str, options: dict) -> str | None:
    """The key of a compile, or None when it cannot be cached (see the module docstring)."""
    data = _model_bytes(model)
    if data is None:
        return None
    host = None
    if target == "cpu":
        import llvmlite.binding as llvm
        from ..codegen.host import host_cpu_features
        host = [llvm.get_process_triple(), llvm.get_host_cpu_name(), host_cpu_features()]
    meta = json.dumps({"target": target, "options": _jsonable(options), "host": host,
                       "ptxc": _ptxc_fingerprint()}, sort_keys=True, default=str)
    h = hashlib.sha256(meta.encode())
    h.update(hashlib.sha256(data).digest())
    return h.hexdigest()


def lookup(key: str, load):
    """The cached engine of ``key``, or None (a missing, refused or unusable entry);
    ``load(path, key)`` makes the engine of a plan file signed with ``key`` (the driver's
    :func:`~ptxc.driver.load.load_plan`). Nothing of an entry is used before the folder, the
    key and the entry pass :mod:`ptxc.plan.cache_trust`'s checks and the signature verifies; an
    entry that fails to load is removed (the compile then stores a fresh one)."""
    from ..errors import PtxcError
    d = cache_dir()
    if d is None or key is None:
        return None
    path = os.path.join(d, key + ".plan")
    if not os.path.isdir(d) or not os.path.lexists(path):
        return None
    if not trust.check_folder(d):
        return None
    signing_key = trust.cache_key_bytes(d)
    if signing_key is None:
        return None
    try:
        why = trust.entry_refusal(path)
    except OSError:
        return None  # gone meanwhile
    if why is not None:
        log.warning("compile cache: not loading %s (%s); compiling", path, why)
        return None
    try:
        engine = load(path, signing_key)
    except PtxcError as e:
        log.warning("compile cache: dropping %s (%s); compiling", path, e)
        try:
            os.unlink(path)
        except OSError:
            pass
        return None
    try:
        os.utime(path)  # recently used
    except OSError:
        pass
    log.info("compile cache: loaded %s", path)
    return engine


def store(key: str, engine) -> None:
    """Put ``engine`` in the cache, signed with the cache's key (best effort: a cache that
    cannot be written, or is refused by :mod:`ptxc.plan.cache_trust`, is skipped)."""
    d = cache_dir()
    if d is None or key is None:
        return
    try:
        if not trust.prepare_folder(d):
            return
        signing_key = trust.cache_key_bytes(d)
        if signing_key is None:
            return
        engine.save(os.path.join(d, key + ".plan"), key=signing_key)
        _evict(d, int(os.environ.get("PTXC_CACHE_MAX_MB", "4096")) << 20)
    except (OSError, ValueError) as e:
        log.info("compile cache: not stored (%s)", e)


def _evict(d: str, limit: int) -> None:
    entries = []
    for f in os.listdir(d):
        if f.endswith(".plan"):
            p = os.path.join(d, f)
            st = os.stat(p)
            entries.append((st.st_mtime, st.st_size, p))
    total = sum(e[1] for e in entries)
    for _, size, p in sorted(entries):
        if total <= limit:
            break
        os.unlink(p)
        total -= size
