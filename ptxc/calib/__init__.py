"""INT8 calibration: the ranges of every float tensor of a model on representative data.

    table = ptxc.calib.calibrate("model.onnx", data="calib/", method="entropy",
                                 cache="model.calib.json")
    table.amax["conv1_out"], table.scale("conv1_out")      # scale = amax / 127

The model runs on the data through the graph-dialect interpreter (the reference semantics),
which keeps every intermediate value of a run; each float tensor's values go to one calibrator
per tensor (calibrators.py), keyed by the tensor's name (its ONNX output name). With ``cache``,
an existing cache for the same model and settings is read and no data runs; a cache for another
model is a CalibrationCacheError. A new table is written to ``cache`` after calibrating.

Which layers to keep in float: :func:`sensitivity` (ptxc/calib/sensitivity.py) quantizes one
layer at a time on held-back batches, ranks the layers by the output error each one causes, and
proposes ``precision_overrides`` that bring the int8 model's measured error under a bound;
``ptxc calibrate`` is its command.
"""

from __future__ import annotations

import os

import attrs

from ..errors import CalibrationCacheError, CalibrationError
from .cache import cache_key, model_hash, read_cache, write_cache
from .calibrators import CALIBRATORS, QMAX, Calibrator, make_calibrator  # noqa: F401
from .data import batches, check_batch
from .progress import Progress

__all__ = ["calibrate", "CalibrationTable", "make_calibrator", "CALIBRATORS", "QMAX",
           "collect_ranges", "quantize_int8", "sensitivity", "Report", "LayerError"]


@attrs.frozen
class CalibrationTable:
    """Per-tensor ``amax`` (symmetric int8 range), with the model hash and calibrator settings
    it was made for; ``from_cache`` says whether it was read from a cache (no data ran)."""

    amax: dict
    model: str
    settings: dict
    batches: int = 0
    from_cache: bool = False

    def scale(self, name: str) -> float:
        return self.amax[name] / QMAX


def _graph_module(model, input_shapes=None):
    from ..frontend.load import as_module
    return as_module(model, input_shapes)


def collect_ranges(module, data, method: str = "entropy", progress: bool = True,
                   **options) -> tuple[dict, int]:
    """Run ``module`` (graph dialect) on every batch of ``data``; returns ({tensor name: amax},
    number of batches). Every float tensor with a name (arguments and op results) is observed."""
    from ..dialects.func import arg_names, func_body, get_func
    from ..ir.interpreter import Interpreter
    from ..ir.types import TensorType
    make_calibrator(method, **options)  # check the settings before any data runs
    f = get_func(module, "main")
    body = func_body(f)
    names = arg_names(f)
    types = [a.type for a in body.args]
    watched = {}
    for v in list(body.args) + [r for op in body.ops for r in op.results]:
        if isinstance(v.type, TensorType) and v.type.element.is_float and v.name_hint:
            watched.setdefault(v.name_hint, v)
    cals: dict[str, Calibrator] = {}
    it, total = batches(data, names, types)
    bar = Progress(total, enabled=progress)
    n = 0
    for where, batch in it:
        args = check_batch(where, batch, names, types)
        interp = Interpreter()
        interp.run_func(f, args)
        for name, v in watched.items():
            if v in interp.env:
                cals.setdefault(name, make_calibrator(method, **options)).observe(interp.env[v])
        n += 1
        bar.step()
    if n == 0:
        raise CalibrationError("calibration data has no batches")
    bar.close()
    return {k: c.amax() for k, c in cals.items()}, n


def calibrate(model, data=None, method: str | None = "entropy", *, cache: str | None = None,
              progress: bool = True, input_shapes: dict | None = None, refresh: bool = False,
              **options) -> CalibrationTable:
    """Calibrate ``model`` (path, ModelProto, Network or graph module) on ``data`` (a folder,
    an ``.npz`` data set file or an iterable of input dicts; ptxc/calib/data.py) with
    calibrator ``method`` and its ``options`` (percentile=, bins=). With ``cache``: read it when
    it exists and matches (no data runs), write it after calibrating; ``refresh=True``
    calibrates on ``data`` even then and overwrites it. ``method=None``: whatever calibrator an
    existing cache for this model was made with (how ``compile`` reads a cache that ``ptxc
    calibrate --method mse`` wrote), else entropy."""
    module = _graph_module(model, input_shapes)
    mhash = model_hash(module)
    doc = None
    if cache is not None and os.path.exists(cache) and not refresh:
        doc = read_cache(cache)
        if doc["model"] != mhash:
            raise CalibrationCacheError(
                f"calibration cache {cache!r} was written for another model (model hash "
                f"{doc['model'][:12]}..., this model {mhash[:12]}...); delete it or give another "
                "cache path")
    if method is None:
        if doc is not None:
            if not isinstance(doc.get("settings"), dict):
                raise CalibrationCacheError(f"calibration cache {cache!r}: 'settings' must be "
                                            "an object (the calibrator and its options)")
            method = doc["settings"].get("method", "entropy")
            options = {**{k: v for k, v in doc["settings"].items() if k != "method"}, **options}
        else:
            method = "entropy"
    settings = make_calibrator(method, **options).settings
    if doc is not None:
        if doc["key"] == cache_key(mhash, settings):
            return CalibrationTable(dict(doc["amax"]), mhash, settings, doc.get("batches", 0),
                                    from_cache=True)
        if data is None:
            raise CalibrationCacheError(
                f"calibration cache {cache!r} holds settings {doc['settings']}, not {settings}, "
                "and no calibration data was given to recalibrate")
    if data is None:
        raise CalibrationError("calibration needs data (a folder, an .npz file or an iterable "
                               "of input dicts), or an existing cache")
    amax, n = collect_ranges(module, data, method, progress=progress, **options)
    if cache is not None:
        write_cache(cache, mhash, settings, amax, n)
    return CalibrationTable(amax, mhash, settings, n)


from .quantize import quantize_int8  # noqa: E402,F401  (needs the names above)
from .report import LayerError, Report  # noqa: E402,F401
from .sensitivity import sensitivity  # noqa: E402,F401
