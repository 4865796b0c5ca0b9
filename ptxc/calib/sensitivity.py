"""Per-layer int8 sensitivity: which layers move the outputs, and which to keep in float.

    report = ptxc.calib.sensitivity("model.onnx", "calib/", method="entropy", max_error=0.05)
    print(report.text())                   # ranked layers, the search, the proposal
    engine = ptxc.compile("model.onnx", precision="int8", calibration=report.table,
                          precision_overrides=report.overrides)

The data's batches are split: the last ``held_out`` fraction of them (at least one) are held
back, the others calibrate (unless a ``table`` is given). On each held-out batch:

1. **One layer at a time.** The float model runs once with every value kept
   (:class:`ptxc.calib.replay.FloatRun`). For each layer ``quantize_int8`` would quantize (a
   conv, gemm or matmul with constant float weights and a calibrated input, batch norms
   folded into it as ``quantize_int8`` folds them), its input goes through the same symmetric
   per-tensor Q/DQ (for every reader of that tensor, as ``quantize_int8`` pairs it) and its
   weights through the same per-channel quantization, and the run is replayed from there. Only
   that layer is int8; its error against the float model's outputs is the layer's sensitivity
   (:mod:`ptxc.calib.report`: relative max error and 1 - cosine). This is simulated
   quantization: with one int8 layer, fold-qdq's int8 kernel computes the same sums, scaled
   once in f32 (tests/test_calibrate_cli.py compares the two).
2. **The proposal** (with ``max_error``): the int8 model itself, every quantizable layer int8
   but those kept in float, is built as the cpu target builds it (``quantize_int8``, then the
   graph stage: graph-opt with fold-qdq's int8 layers, residual pairs, fma multipliers) and
   interpreted (the interpreter and the cpu engine compute the same int8 numerics). With no
   layer kept, then keeping the worst-ranked layers one more at a time, it is measured until
   its error is at most ``max_error``: the error of the combination as measured, not a sum of
   the single-layer errors (they interact: a layer's error is amplified or damped by the int8
   layers after it).

Everything runs on the numpy interpreter, which is faster here than compiling for the cpu
target: a cpu compile per search step costs 0.4 s (the digits CNN) to 10 s (ResNet-50), building
the int8 graph and interpreting it 0.08 s to 2 s (batch 32 and batch 1, on 2 cores).
"""

from __future__ import annotations

import math
import os

import numpy as np

from ..dialects.func import arg_names, func_body, get_func
from ..dialects.graph.quant import dequantize, quantize
from ..errors import CalibrationError
from ..ir.interpreter import Interpreter
from ..ir.types import I8
from .data import Entries, check_batch, entries
from .progress import Progress
from .quantize import LAYERS, QMAX, _skip_reason, _weight_axis, quantize_weights
from .replay import FloatRun
from .report import METRICS, LayerError, OutputError, Report, Step


def sensitivity(model, data, table=None, method: str = "entropy", *, held_out: float = 0.2,
                max_error: float | None = None, metric: str = "rel-max",
                input_shapes: dict | None = None, cache: str | None = None,
                progress: bool = True, **options) -> Report:
    """The per-layer int8 sensitivity of ``model`` (path, ModelProto, Network or graph module)
    on ``data`` (a folder, an ``.npz`` data set file, or an iterable of input dicts; the forms
    ``calibrate`` takes) as the module docstring describes.

    ``table``: a CalibrationTable (or dict tensor -> amax) to measure; None: calibrate with
    ``method`` and its ``options`` on the batches not held out (written to ``cache`` when
    given, replacing what is there). ``held_out``: the fraction of the batches, the last ones,
    that are measured (at least one; 1.0 with a ``table``: all). ``metric``: ``rel-max`` or
    ``cosine`` ranks the layers and is what ``max_error`` bounds."""
    from ..frontend.load import as_module
    from . import calibrate
    if metric not in METRICS:
        raise CalibrationError(f"unknown metric {metric!r}; the metrics are "
                               f"{', '.join(METRICS)}")
    if not (isinstance(held_out, (int, float)) and 0.0 < held_out <= 1.0):
        raise CalibrationError(f"held_out must be a fraction in (0, 1], got {held_out!r}")
    if max_error is not None and not (isinstance(max_error, (int, float))
                                      and math.isfinite(max_error) and max_error >= 0):
        raise CalibrationError(f"max_error must be a number >= 0, got {max_error!r}")
    module = as_module(model, input_shapes)
    f = get_func(module, "main")
    names = arg_names(f)
    types = [a.type for a in func_body(f).args]
    found = entries(data, names, types)
    n = len(found)
    if n == 0:
        raise CalibrationError("calibration data has no batches")
    k = min(n, max(1, int(round(held_out * n))))
    calib_batches = 0
    if table is None:
        if n - k < 1:
            raise CalibrationError(
                f"sensitivity needs at least 2 batches of data (it has {n}): the first "
                f"calibrate and the last {k} are held out to measure on; give more batches, or "
                "a calibration table")
        table = calibrate(module, Entries(found[:n - k]), method, cache=cache, refresh=True,
                          progress=progress, **options)
        calib_batches = n - k
    elif cache is not None:
        raise CalibrationError("sensitivity: cache= is where a new table is written; with "
                               "table= nothing is calibrated")
    amax = table.amax if hasattr(table, "amax") else dict(table)
    held = found[n - k:]

    folded = module.clone()
    from ..rewrite.pass_manager import PassManager
    PassManager("fold-batchnorm").run(folded)   # as quantize_int8 does first
    layers, skipped = _layers(folded, amax)
    ff = get_func(folded, "main")
    per_layer = {id(lay): OutputError() for lay in layers}
    refs, inputs = [], []
    bar = Progress(len(held), enabled=progress, label="sensitivity", unit="held-out batch")
    for where, load in held:
        args = check_batch(where, load(), names, types)
        ref = Interpreter().run_func(f, args)
        floats = [i for i, r in enumerate(ref) if np.asarray(r).dtype.kind == "f"]
        if not floats:
            raise CalibrationError("sensitivity: the model has no float output to measure")
        refs.append([ref[i] for i in floats])
        inputs.append(args)
        run = FloatRun(ff, args)
        for lay in layers:
            outs = run.replay({lay.x: _fake_quant(run.env[lay.x], lay.scale)},
                              {(lay.op, 1): lay.weights})
            per_layer[id(lay)].add([outs[i] for i in floats], refs[-1])
        del run
        bar.step()
    bar.close()

    ranked = sorted(layers, key=lambda lay: -per_layer[id(lay)].value(metric))
    ranking = tuple(LayerError(lay.label, lay.kind, per_layer[id(lay)].rel_max,
                               per_layer[id(lay)].cosine, rank)
                    for rank, lay in enumerate(ranked, 1))

    def measure(fp32: tuple) -> Step:
        err = OutputError()
        q = _int8_graph(module, amax, fp32)
        qf = get_func(q, "main")
        for args, ref in zip(inputs, refs):
            outs = Interpreter().run_func(qf, args)
            err.add([outs[i] for i in floats], ref)
        return Step(fp32, err.rel_max, err.cosine)

    steps = [measure(())]
    overrides = None
    if max_error is not None:
        kept: list[str] = []
        candidates = [lay.label for lay in ranked if lay.overridable]
        for name in candidates:
            if steps[-1].value(metric) <= max_error:
                break
            if name in kept:
                continue
            kept.append(name)
            steps.append(measure(tuple(kept)))
        overrides = {name: "fp32" for name in kept}
    label = os.path.basename(model) if isinstance(model, (str, os.PathLike)) else \
        getattr(getattr(model, "graph", None), "name", None) or type(model).__name__
    return Report(label, table.settings.get("method", method) if hasattr(table, "settings")
                  else method, metric, calib_batches, tuple(w for w, _ in held), ranking,
                  tuple(skipped), tuple(steps), max_error, overrides, table=table)


class _Layer:
    """A quantizable layer: the op, its input activation and scale, its int8 weights as
    floats (DQ of the per-channel int8 values)."""

    def __init__(self, op, x, scale, weights):
        self.op, self.x, self.scale, self.weights = op, x, scale, weights
        self.label = op.loc or op.name
        self.kind = op.name.split(".")[-1]
        self.overridable = op.loc is not None   # precision_overrides names ONNX nodes


def _layers(module, amax) -> tuple[list, list]:
    """(quantizable layers, [(layer, why not)]) of ``module`` (batch norms already folded), by
    ``quantize_int8``'s own rules (``_skip_reason``)."""
    body = func_body(get_func(module, "main"))
    layers, skipped = [], []
    for op in body.ops:
        if op.name not in LAYERS:
            continue
        x = op.operands[0]
        why = _skip_reason(op, x, amax, ())
        if why is not None:
            skipped.append((op.loc or op.name, why))
            continue
        w = op.operands[1].op.attributes["value"].array
        axis = _weight_axis(op)
        wq, ws = quantize_weights(w, axis)
        shape = [1] * w.ndim
        shape[axis] = -1
        dq = dequantize(wq, ws.reshape(shape), 0)
        layers.append(_Layer(op, x, float(amax[x.name_hint]) / QMAX, dq))
    return layers, skipped


def _fake_quant(x: np.ndarray, scale: float) -> np.ndarray:
    """``DQ(Q(x))``, symmetric int8 with zero point 0, by graph.quantize_linear's and
    graph.dequantize_linear's own numerics."""
    s = np.float32(scale)
    return dequantize(quantize(x, s, 0, I8), s, 0)


def _int8_graph(module, amax, fp32: tuple):
    """The int8 graph the cpu target compiles: ``quantize_int8`` with ``fp32`` kept float, then
    the graph stage of a cpu int8 compile."""
    from ..pipeline import CompileOptions, run_stages
    from .quantize import quantize_int8
    q = quantize_int8(module, amax, exclude=set(fp32))
    return run_stages(q, "graph", CompileOptions.make(target="cpu", precision="int8"),
                      progress=None)
