"""The sensitivity report: how far each int8 layer moves the model's outputs, and which layers
to keep in float (:func:`ptxc.calib.sensitivity` makes it; ``ptxc calibrate --report``
writes it as JSON and prints :meth:`Report.text`).

Two measures of an output's error against the float model's, over all held-out batches; of a
model with several float outputs, the worst output's:

* ``rel-max``: ``max |y_int8 - y_fp32| / max |y_fp32|``, the largest error in units of the
  output's range (0.05: no logit is off by more than 5% of the largest logit);
* ``cosine``: ``1 - cos(y_int8, y_fp32)`` of the flattened outputs (TensorRT's and the
  accuracy tables' agreement measure; 1e-4 is close, 1e-2 is visibly off).
"""

from __future__ import annotations

import math

import attrs
import numpy as np

#: the error measures, by name (``metric=``, ``--metric``)
METRICS = ("rel-max", "cosine")
FORMAT, VERSION = "ptxc-sensitivity", 1


class OutputError:
    """Accumulates the error of outputs against reference outputs, batch by batch."""

    def __init__(self):
        self.max_err: dict[int, float] = {}
        self.max_ref: dict[int, float] = {}
        self.dots: dict[int, np.ndarray] = {}   # [got.ref, got.got, ref.ref]

    def add(self, got: list, ref: list) -> None:
        for i, (g, r) in enumerate(zip(got, ref)):
            g = np.asarray(g, np.float64).ravel()
            r = np.asarray(r, np.float64).ravel()
            self.max_err[i] = max(self.max_err.get(i, 0.0), float(np.max(np.abs(g - r),
                                                                         initial=0.0)))
            self.max_ref[i] = max(self.max_ref.get(i, 0.0), float(np.max(np.abs(r),
                                                                         initial=0.0)))
            d = np.array([g @ r, g @ g, r @ r])
            self.dots[i] = self.dots.get(i, 0.0) + d

    @property
    def rel_max(self) -> float:
        out = 0.0
        for i, e in self.max_err.items():
            ref = self.max_ref[i]
            out = max(out, e / ref if ref > 0 else (0.0 if e == 0 else math.inf))
        return out

    @property
    def cosine(self) -> float:
        """``1 - cos`` of the worst output (0 for two zero outputs, 1 for one)."""
        out = 0.0
        for gr, gg, rr in self.dots.values():
            if gg == 0 and rr == 0:
                d = 0.0
            elif gg == 0 or rr == 0:
                d = 1.0
            else:
                d = 1.0 - float(gr / math.sqrt(gg * rr))
            out = max(out, d)
        return max(out, 0.0)

    def value(self, metric: str) -> float:
        return self.rel_max if metric == "rel-max" else self.cosine


@attrs.frozen
class LayerError:
    """One quantizable layer (an ONNX node name) alone in int8: the output error it causes."""

    layer: str
    op: str               # conv, gemm or matmul
    rel_max: float
    cosine: float
    rank: int = 0         # 1: the layer that alone moves the outputs most

    def value(self, metric: str) -> float:
        return self.rel_max if metric == "rel-max" else self.cosine

    def to_json(self) -> dict:
        return {"rank": self.rank, "layer": self.layer, "op": self.op,
                "rel_max_error": self.rel_max, "cosine_distance": self.cosine}


@attrs.frozen
class Step:
    """The int8 model with the layers of ``fp32`` kept in float, as measured."""

    fp32: tuple
    rel_max: float
    cosine: float

    def value(self, metric: str) -> float:
        return self.rel_max if metric == "rel-max" else self.cosine

    def to_json(self) -> dict:
        return {"fp32": list(self.fp32), "rel_max_error": self.rel_max,
                "cosine_distance": self.cosine}


@attrs.frozen
class Report:
    """What :func:`ptxc.calib.sensitivity` found. ``layers``: ranked, worst first;
    ``all_int8``: every layer in int8; ``steps``: the int8 model measured after each layer the
    search kept in float (the first step keeps none); ``overrides``: the proposed
    ``precision_overrides`` (None without ``max_error``); ``met``: whether the last step is
    under ``max_error``. ``table`` is the calibration table that was measured (not in JSON)."""

    model: str
    method: str
    metric: str
    calibration_batches: int
    held_out: tuple           # where each held-out batch came from
    layers: tuple
    not_quantized: tuple      # (layer, why)
    steps: tuple
    max_error: float | None
    overrides: dict | None
    table: object = attrs.field(default=None, eq=False, repr=False)
    evaluator: str = ("interpreter: one layer at a time as simulated Q/DQ (the float run "
                      "replayed from the layer on); the int8 model as the cpu target compiles "
                      "it (graph-opt, fold-qdq)")

    @property
    def all_int8(self) -> Step:
        return self.steps[0]

    @property
    def met(self) -> bool | None:
        if self.max_error is None:
            return None
        return self.steps[-1].value(self.metric) <= self.max_error

    def to_json(self) -> dict:
        return {
            "format": FORMAT, "version": VERSION, "model": self.model, "method": self.method,
            "metric": self.metric, "max_error": self.max_error,
            "calibration_batches": self.calibration_batches,
            "held_out_batches": list(self.held_out), "evaluator": self.evaluator,
            "layers": [e.to_json() for e in self.layers],
            "not_quantized": [{"layer": n, "why": w} for n, w in self.not_quantized],
            "all_int8": self.all_int8.to_json(),
            "search": [s.to_json() for s in self.steps],
            "precision_overrides": self.overrides, "met": self.met,
        }

    def text(self) -> str:
        """The report as a table for a terminal."""
        calib = (f"{self.method} calibration on {self.calibration_batches} batch"
                 f"{'es' if self.calibration_batches != 1 else ''}"
                 if self.calibration_batches else f"{self.method} table given")
        lines = [f"int8 sensitivity of {self.model}: {calib}, {len(self.held_out)} held-out "
                 f"batch{'es' if len(self.held_out) != 1 else ''}, on the interpreter",
                 f"each layer alone in int8 (the others fp32), worst first by {self.metric}:"]
        w = max([len("layer")] + [len(e.layer) for e in self.layers])
        lines.append(f"  {'rank':>4}  {'layer':<{w}}  {'op':<6}  {'rel max error':>13}  "
                     f"{'1 - cosine':>10}")
        for e in self.layers:
            lines.append(f"  {e.rank:>4}  {e.layer:<{w}}  {e.op:<6}  {e.rel_max:>13.4g}  "
                         f"{e.cosine:>10.3g}")
        if not self.layers:
            lines.append("  (no conv, gemm or matmul layer is quantized)")
        for name, why in self.not_quantized:
            lines.append(f"  not quantized: {name}: {why}")
        a = self.all_int8
        lines.append(f"every layer int8: rel max error {a.rel_max:.4g}, 1 - cosine "
                     f"{a.cosine:.3g}")
        if self.max_error is not None and len(self.steps) == 1 and self.met:
            lines.append(f"--max-error {self.max_error:g} ({self.metric}): met with every layer "
                         "int8; proposed precision_overrides={} (none)")
        elif self.max_error is not None:
            lines.append(f"--max-error {self.max_error:g} ({self.metric}): the worst layers "
                         "kept in fp32 one by one, the int8 model measured each time:")
            for s in self.steps[1:]:
                lines.append(f"  fp32: {', '.join(s.fp32):<{max(20, w)}}  rel max error "
                             f"{s.rel_max:.4g}, 1 - cosine {s.cosine:.3g}")
            last = self.steps[-1].value(self.metric)
            if self.met:
                keep = ", ".join(f"{k!r}: 'fp32'" for k in self.overrides)
                lines.append(f"proposed precision_overrides={{{keep}}} ({self.metric} "
                             f"{last:.4g} <= {self.max_error:g})")
                if self.overrides:
                    flags = " ".join(f"--precision-override {k}=fp32" for k in self.overrides)
                    lines.append(f"  ptxc compile MODEL --int8 --calib-cache CACHE {flags}")
            else:
                lines.append(f"no proposal: with every quantizable layer in fp32 that can be "
                             f"overridden, {self.metric} is {last:.4g} > {self.max_error:g}")
        return "\n".join(lines) + "\n"
