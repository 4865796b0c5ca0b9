"""The timing cache: which tactic won for each kernel on each device, and by how much.

    cache = TimingCache.load("model.timing", on_error="skip")   # or TimingCache() to start
    e = cache.get(target, kernel.key)            # an Entry, or None: tune this kernel
    cache.put(target, kernel.key, Entry(tactic, time_s=1.2e-5, default_time_s=2.0e-5,
                                        candidates=9, rejected=(), level="full"))
    cache.save("model.timing")                   # atomic: readers see the old or the new file
    team = TimingCache.merge_all(a, b, c)        # one cache from several machines' caches

Timing every candidate tactic of every kernel is the slow part of a tuned build. The timing
cache records the outcome so that a later build of the same kernels on the same device skips
the measurement: TensorRT's timing cache (``ITimingCache``), per kernel instead of per layer.

**What is keyed.** An entry belongs to a *(device, kernel)* pair:

* the kernel key (:func:`ptxc.tactic.kernels.kernel_key`, 16 hex digits): a hash of the kernel's
  canonical IR before the schedule pass, so its shapes, dtypes and code, and not its ONNX
  names or weights. Two layers of one shape share an entry, in one model or across models.
* the device key (:func:`device_key`): the target's ``kind``, its name (``device``), ``arch``,
  SM count (``sms``) and the ptxc version (``ptxc``) that generated the code. On cpu the arch is
  the host CPU's name, ``sms`` is 0, and ``cpu_features`` is a hash of the host's CPU feature
  string (llvmlite's, with every ``+avx512f``/``-amx-int8``), since two hosts of one CPU name
  can differ in enabled features and so in timings.

Two devices with different keys never share an entry: a timing on an H100 PCIe (114 SMs) says
nothing about an H100 SXM (132 SMs), nor does one made by an older ptxc, whose kernels differ.
An entry records the chosen tactic, its median time (``time_s``), the default tactic's median
(``default_time_s``), how many candidates were timed, the tactics discarded with the reason
(``"mma{...}: output differs by 3e-2"``), and the tuning ``level`` (``fast``: a few
candidates, few repetitions; ``full``: all of them).

**Sharing.** A cache file holds entries for any number of devices and is plain JSON (sorted
keys, one entry per (device, kernel)), so it can be checked in, copied and diffed. A cache made
on one machine serves every machine whose device key is equal: the same GPU model (the name
the driver reports, and the SM count), the same arch to build for, the same ptxc version. To
share across a fleet of one GPU kind, tune on one machine (or on several, for different
models), merge the files (:meth:`TimingCache.merge_all`) and ship the result; a build on a
machine of another kind loads it without complaint and finds no entry of its own (its entries
never match :meth:`TimingCache.get`), so it tunes and adds its own. Keep in mind that a preset
target (``Target.preset("h100-sxm")``) and the GPU described by its driver
(``"NVIDIA H100 80GB HBM3"``) are different names, hence different devices: tune and build
with the same target description.

**Merging.** :meth:`TimingCache.merge` is the union of both caches. Where both hold an entry for
one (device, kernel), the one kept is the one measured more thoroughly: the higher ``level``
(``full`` beats ``fast``), then the one with more candidates, then the one with the smaller
``time_s``; entries equal in all three are ordered by their JSON text, so the result does not
depend on the order of the arguments (merge is commutative and associative). :meth:`put` is
not a merge: it replaces, because the caller just measured.

**Trust.** A cache is measurement, not code: the entry's tactic is re-applied by its user (the
tuner applies it to the kernel through the schedule pass, which validates the options and
builds the kernel as for any tactic), so a stale, edited or foreign tactic can cost speed or be
refused, but can never produce a wrong kernel. This module does not do that itself: it checks
only that each entry is well formed (every field present and of its type, times finite and not
negative, a tactic :meth:`Tactic.from_json` accepts).

**Errors.** A file that cannot be read, is not JSON, is of another format or version, or has a
malformed entry is a :class:`~ptxc.errors.TimingCacheError` naming the file and, for an entry,
its index and kernel key. ``load(path, on_error="skip")`` instead logs a warning
(``ptxc.tune``) for each problem, drops the bad entries (or the whole file, when the file
itself is bad) and returns the good ones.

File format (version 1)::

    {"format": "ptxc-timing-cache", "version": 1, "entries": [
      {"device": {"arch": "sm_90", "device": "h200", "kind": "cuda", "ptxc": "0.1.0",
                  "sms": 132},
       "kernel": "5e1c0a9b2f3d4e67", "tactic": {"params": {"block_size": 128},
                                                "schedule": "pointwise"},
       "time_s": 1.2e-05, "default_time_s": 2.0e-05, "candidates": 9,
       "rejected": ["pointwise{block-size=1024}: output differs by 3e-2"], "level": "full"}]}
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import re
import tempfile
from typing import Iterable

import attrs

from ..errors import TimingCacheError, TuningError
from ..target import Target
from ..tactic.tactic import Tactic

log = logging.getLogger("ptxc.tune")

FORMAT, VERSION = "ptxc-timing-cache", 1
LEVELS = ("fast", "full")              # in rank order: a later level beats an earlier one
_KERNEL_KEY = re.compile(r"[0-9a-f]{16}")
_DEVICE_FIELDS = {"kind": str, "device": str, "arch": str, "sms": int, "ptxc": str}
_DEVICE_OPTIONAL = {"cpu_features": str}
_ENTRY_FIELDS = ("device", "kernel", "tactic", "time_s", "default_time_s", "candidates",
                 "rejected", "level")


# ---- the device key -----------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _host_features_hash() -> str:
    import llvmlite.binding as llvm
    return hashlib.sha256(llvm.get_host_cpu_features().flatten().encode()).hexdigest()[:16]


def device_key(target: Target) -> dict:
    """What a timing depends on besides the kernel (module docstring): ``kind``, ``device``
    (the chip, :func:`ptxc.target.chip_name`: a GPU read from the driver and its preset have
    one name), ``arch``, ``sms``, ``ptxc`` (the version); on cpu also
    ``cpu_features`` (16 hex digits of this host's feature string: a cpu target is this
    host)."""
    from .. import __version__
    if not isinstance(target, Target):
        raise TuningError(f"timing cache: a device key is made of a Target, not {target!r}")
    from ..target import chip_name
    key = {"kind": target.kind, "device": chip_name(target), "arch": target.arch,
           "sms": target.sms, "ptxc": __version__}
    if target.kind == "cpu":
        key["sms"] = 0
        key["cpu_features"] = _host_features_hash()
    return key


def _device_json(device: dict) -> str:
    """The canonical text of a device key: the in-memory index."""
    return json.dumps(device, sort_keys=True, separators=(",", ":"))


# ---- an entry -----------------------------------------------------------------------------------

def _is_time(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
        and v >= 0


@attrs.frozen
class Entry:
    """The outcome of tuning one kernel on one device (module docstring). ``tactic`` is the
    tactic kept; ``time_s`` its median time in seconds and ``default_time_s`` the default
    tactic's; ``candidates`` how many tactics were timed; ``rejected`` the tactics discarded,
    each with its reason; ``level`` ``"fast"`` or ``"full"``. A TuningError names the field
    that is not of its type."""

    tactic: Tactic
    time_s: float
    default_time_s: float
    candidates: int
    rejected: tuple = attrs.field(default=(), converter=lambda v: tuple(v)
                                  if isinstance(v, list) else v)
    level: str = "full"

    def __attrs_post_init__(self):
        if not isinstance(self.tactic, Tactic):
            raise TuningError(f"timing cache entry: tactic {self.tactic!r} is not a Tactic")
        for name in ("time_s", "default_time_s"):
            if not _is_time(getattr(self, name)):
                raise TuningError(f"timing cache entry: {name} {getattr(self, name)!r} is not "
                                  "a finite non-negative number of seconds")
        if not isinstance(self.candidates, int) or isinstance(self.candidates, bool) or \
                self.candidates < 1:
            raise TuningError(f"timing cache entry: candidates {self.candidates!r} is not a "
                              "count of at least 1 (the default tactic is always timed)")
        if not isinstance(self.rejected, tuple) or \
                not all(isinstance(r, str) for r in self.rejected):
            raise TuningError(f"timing cache entry: rejected {self.rejected!r} is not a list "
                              "of reasons (text)")
        try:
            json.dumps(self.tactic.to_json(), allow_nan=False)
        except ValueError:
            raise TuningError(f"timing cache entry: tactic {self.tactic} has a value JSON "
                              "cannot hold (nan or infinity)") from None
        if self.level not in LEVELS:
            raise TuningError(f"timing cache entry: level {self.level!r} is not one of "
                              f"{', '.join(LEVELS)}")

    @property
    def speedup(self) -> float:
        """``default_time_s / time_s`` (how much the tactic kept gains over the default)."""
        return self.default_time_s / self.time_s if self.time_s > 0 else math.inf

    def to_json(self) -> dict:
        return {"tactic": self.tactic.to_json(), "time_s": float(self.time_s),
                "default_time_s": float(self.default_time_s), "candidates": self.candidates,
                "rejected": list(self.rejected), "level": self.level}

    @classmethod
    def from_json(cls, d: dict) -> "Entry":
        """The entry of :meth:`to_json`'s fields; a TuningError naming the first bad one."""
        try:
            tactic = Tactic.from_json(d["tactic"])
        except TuningError as e:
            raise TuningError(f"tactic {d['tactic']!r} refused: {e}") from None
        if not isinstance(d["rejected"], list):
            raise TuningError(f"rejected {d['rejected']!r} is not a list")
        return cls(tactic, d["time_s"], d["default_time_s"], d["candidates"],
                   tuple(d["rejected"]), d["level"])

    def rank(self) -> tuple:
        """The merge order (module docstring): the greater rank is kept."""
        return (LEVELS.index(self.level), self.candidates, -self.time_s,
                json.dumps(self.to_json(), sort_keys=True))


# ---- the cache ----------------------------------------------------------------------------------

def _check_kernel_key(kernel_key) -> str:
    if not isinstance(kernel_key, str) or not _KERNEL_KEY.fullmatch(kernel_key):
        raise TuningError(f"timing cache: kernel key {kernel_key!r} is not 16 hex digits "
                          "(ptxc.tactic.kernels.kernel_key)")
    return kernel_key


class TimingCache:
    """Timings by (device, kernel), in memory (module docstring). Equal caches compare equal."""

    def __init__(self):
        self._entries: dict[tuple[str, str], Entry] = {}

    # ---- lookup ---------------------------------------------------------------------------------
    def get(self, target: Target, kernel_key: str) -> Entry | None:
        """The entry for ``kernel_key`` on ``target``'s device, or None."""
        return self._entries.get((_device_json(device_key(target)), kernel_key))

    def put(self, target: Target, kernel_key: str, entry: Entry) -> None:
        """Record ``entry`` for ``kernel_key`` on ``target``'s device, replacing any."""
        if not isinstance(entry, Entry):
            raise TuningError(f"timing cache: put takes an Entry, not {entry!r}")
        self._entries[(_device_json(device_key(target)), _check_kernel_key(kernel_key))] = entry

    def __len__(self) -> int:
        return len(self._entries)

    def __eq__(self, other) -> bool:
        return isinstance(other, TimingCache) and self._entries == other._entries

    def __repr__(self) -> str:
        devices = len({d for d, _ in self._entries})
        return f"<TimingCache: {len(self)} entries, {devices} devices>"

    def entries(self) -> list[tuple[dict, str, Entry]]:
        """Every ``(device key, kernel key, entry)``, ordered by device and kernel."""
        return [(json.loads(d), k, e) for (d, k), e in sorted(self._entries.items(),
                                                              key=lambda kv: kv[0])]

    # ---- merging --------------------------------------------------------------------------------
    def _offer(self, index: tuple[str, str], entry: Entry) -> None:
        """Keep ``entry`` at ``index`` unless the entry there ranks higher."""
        old = self._entries.get(index)
        if old is None or entry.rank() > old.rank():
            self._entries[index] = entry

    def merge(self, other: "TimingCache") -> "TimingCache":
        """A new cache: the union of this one and ``other``, conflicts resolved by rank
        (module docstring); neither input changes."""
        return TimingCache.merge_all(self, other)

    @classmethod
    def merge_all(cls, *caches: "TimingCache | Iterable[TimingCache]") -> "TimingCache":
        """One cache from many (caches, or one iterable of them); the result is the same in
        any order of the arguments."""
        if len(caches) == 1 and not isinstance(caches[0], TimingCache):
            caches = tuple(caches[0])
        out = cls()
        for c in caches:
            if not isinstance(c, TimingCache):
                raise TuningError(f"timing cache: cannot merge {c!r}, not a TimingCache")
            for index, entry in c._entries.items():
                out._offer(index, entry)
        return out

    # ---- files ----------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION,
                "entries": [{"device": d, "kernel": k, **e.to_json()}
                            for d, k, e in self.entries()]}

    def save(self, path: str | os.PathLike) -> None:
        """Write the cache to ``path`` atomically (a temporary file in the same folder, then
        ``os.replace``): a reader sees the old file or the new one, never a part."""
        path = os.fspath(path)
        text = json.dumps(self.to_json(), indent=1, sort_keys=True, allow_nan=False)
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".",
                                   suffix=".tmp", dir=os.path.dirname(path) or ".")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    @classmethod
    def load(cls, path: str | os.PathLike, on_error: str = "raise") -> "TimingCache":
        """The cache in ``path``. ``on_error="raise"``: a TimingCacheError for a bad file or
        entry; ``"skip"``: a warning on the ``ptxc.tune`` logger for each, and the good entries
        (none, when the file itself is bad). Two entries of one (device, kernel) in one file (a
        hand-joined file; :meth:`save` writes each once) resolve as :meth:`merge` does."""
        if on_error not in ("raise", "skip"):
            raise TuningError(f"timing cache: on_error is 'raise' or 'skip', not {on_error!r}")
        path = os.fspath(path)
        out = cls()
        try:
            entries = _read_document(path)
        except TimingCacheError as e:
            if on_error == "raise":
                raise
            log.warning("%s; ignoring the file", e)
            return out
        for i, raw in enumerate(entries):
            try:
                index, entry = _read_entry(path, i, raw)
            except TimingCacheError as e:
                if on_error == "raise":
                    raise
                log.warning("%s; skipping the entry", e)
                continue
            out._offer(index, entry)   # a file written by save has no duplicates
        return out


def load(path: str | os.PathLike, on_error: str = "raise") -> TimingCache:
    """:meth:`TimingCache.load`."""
    return TimingCache.load(path, on_error=on_error)


# ---- reading ------------------------------------------------------------------------------------

def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a number a timing cache holds")


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"{text} overflows a float")
    return v


def _read_document(path: str) -> list:
    """The file's entry list, the file checked for format and version."""
    where = f"timing cache {path!r}"
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TimingCacheError(f"{where}: cannot read: {e}") from None
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant,
                         parse_float=_finite_float)
    except (ValueError, RecursionError) as e:   # UnicodeDecodeError is a ValueError
        raise TimingCacheError(f"{where}: not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        fmt = doc.get("format") if isinstance(doc, dict) else None
        raise TimingCacheError(f"{where}: not a ptxc timing cache (format {fmt!r}, expected "
                               f"{FORMAT!r})")
    version = doc.get("version")
    if type(version) is not int or version != VERSION:
        raise TimingCacheError(f"{where}: version {version!r}; this ptxc reads version "
                               f"{VERSION}")
    extra = sorted(set(doc) - {"format", "version", "entries"})
    if extra:
        raise TimingCacheError(f"{where}: unknown fields {extra}")
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise TimingCacheError(f"{where}: 'entries' is {type(entries).__name__}, not a list")
    return entries


def _read_entry(path: str, i: int, raw) -> tuple[tuple[str, str], Entry]:
    """``((device json, kernel key), entry)`` of entry ``i``; a TimingCacheError naming the
    file, the index and the kernel key."""
    kernel = raw.get("kernel") if isinstance(raw, dict) else None
    where = f"timing cache {path!r}: entry {i} (kernel {kernel!r})"
    if not isinstance(raw, dict):
        raise TimingCacheError(f"{where}: is {type(raw).__name__}, not an object")
    missing = [k for k in _ENTRY_FIELDS if k not in raw]
    extra = sorted(set(raw) - set(_ENTRY_FIELDS))
    if missing or extra:
        raise TimingCacheError(f"{where}: " + "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else [])
            + ([f"unknown fields {extra}"] if extra else [])))
    try:
        _check_kernel_key(kernel)
        device = _check_device(raw["device"])
        entry = Entry.from_json(raw)
    except TuningError as e:
        raise TimingCacheError(f"{where}: {e}") from None
    return (_device_json(device), kernel), entry


def _check_device(device) -> dict:
    if not isinstance(device, dict):
        raise TuningError(f"device {device!r} is not an object")
    for name, typ in {**_DEVICE_FIELDS, **_DEVICE_OPTIONAL}.items():
        if name not in device:
            if name in _DEVICE_FIELDS:
                raise TuningError(f"device has no {name!r}")
            continue
        v = device[name]
        if not isinstance(v, typ) or isinstance(v, bool):
            raise TuningError(f"device {name} {v!r} is not a {typ.__name__}")
    extra = sorted(set(device) - set(_DEVICE_FIELDS) - set(_DEVICE_OPTIONAL))
    if extra:
        raise TuningError(f"device has unknown fields {extra}")
    return device
