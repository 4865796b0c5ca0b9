"""The calibration cache: TensorRT's calibration table, as JSON.

    {"format": "ptxc-calibration", "version": 1,
     "model": "<sha256 of the graph module>", "settings": {"method": "entropy", "bins": 2048},
     "key": "<sha256 of model and settings>", "batches": 32,
     "amax": {"conv1_out": 4.71, ...}, "scale": {"conv1_out": 0.0371, ...}}

The model hash covers the graph module's text (constants elided) and every constant's bytes, so
it changes with any weight, op, attribute or shape, and not with file paths or ONNX metadata.
A cache for another model is refused (:class:`CalibrationCacheError`): its scales would be
silently wrong. ``scale`` is ``amax / 127`` (symmetric int8), written for readers; ``amax`` is
what is read back.
"""

from __future__ import annotations

import hashlib
import json
import os

from ..errors import CalibrationCacheError
from ..ir.attributes import DenseElements

FORMAT, VERSION = "ptxc-calibration", 1


def model_hash(module) -> str:
    from ..ir.printer import print_ir
    h = hashlib.sha256(print_ir(module, elide_constants=True).encode())
    for op in module.walk():
        for k in sorted(op.attributes):
            v = op.attributes[k]
            if isinstance(v, DenseElements):
                h.update(v.digest)
    return h.hexdigest()


def cache_key(model: str, settings: dict) -> str:
    return hashlib.sha256((model + json.dumps(settings, sort_keys=True)).encode()).hexdigest()


def write_cache(path: str, model: str, settings: dict, amax: dict, batches: int) -> None:
    from .calibrators import QMAX
    doc = {"format": FORMAT, "version": VERSION, "model": model, "settings": settings,
           "key": cache_key(model, settings), "batches": batches,
           "amax": {k: float(v) for k, v in amax.items()},
           "scale": {k: float(v) / QMAX for k, v in amax.items()}}
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def read_cache(path: str) -> dict:
    """The cache document, checked for format; CalibrationCacheError when unusable."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise CalibrationCacheError(f"calibration cache {path!r}: cannot read: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CalibrationCacheError(f"calibration cache {path!r}: not a ptxc calibration cache")
    if doc.get("version") != VERSION:
        raise CalibrationCacheError(f"calibration cache {path!r}: version {doc.get('version')}"
                                    f", this ptxc reads version {VERSION}")
    amax = doc.get("amax")
    if not isinstance(amax, dict) or not all(
            isinstance(v, (int, float)) and v >= 0 for v in amax.values()):
        raise CalibrationCacheError(f"calibration cache {path!r}: 'amax' must map tensor names "
                                    "to non-negative numbers")
    if doc.get("key") != cache_key(str(doc.get("model")), doc.get("settings") or {}):
        raise CalibrationCacheError(f"calibration cache {path!r}: its key does not match its "
                                    "model hash and settings (edited or damaged)")
    return doc
