"""Calibrators: from the values a tensor took on the calibration data to the ``amax`` of its
symmetric int8 range (``scale = amax / 127``).

One small interface, four methods (TensorRT's and onnxruntime's, on one shared histogram):

=============  =====================================================================================
``minmax``     the largest ``|x|`` seen: nothing clipped, coarse steps when there are outliers
``percentile`` the ``percentile`` (default 99.99) of ``|x|``: outliers clipped by rank
``entropy``    TensorRT's method: the threshold whose 128-level quantized distribution has the
               least KL divergence from the observed one (2048-bin histogram of ``|x|``)
``mse``        the threshold (a bin edge) that minimizes the mean squared quantization error of
               the observed distribution, clipping error included
=============  =====================================================================================

    cal = make_calibrator("percentile", percentile=99.9)
    for batch in data:
        cal.observe(batch)
    amax = cal.amax()

Each calibrator's ``settings`` (its name and options) key the calibration cache.
"""

from __future__ import annotations

import numpy as np

from ..errors import CalibrationError
from .histogram import AbsHistogram

QMAX = 127  # symmetric int8: [-127, 127] (TensorRT's; -128 unused so that negation is exact)


class Calibrator:
    """Observes batches of one tensor; ``amax()`` is the chosen clipping threshold (>= 0)."""

    method = ""

    def __init__(self, bins: int = 2048):
        self.hist = AbsHistogram(bins)

    @property
    def settings(self) -> dict:
        return {"method": self.method, "bins": self.hist.bins}

    def observe(self, x: np.ndarray) -> None:
        self.hist.add(x)

    def amax(self) -> float:
        if self.hist.count == 0:
            raise CalibrationError(f"{self.method} calibrator: no values observed")
        if self.hist.amax == 0.0:
            return 0.0
        return float(min(self._amax(), self.hist.amax))

    def _amax(self) -> float:
        raise NotImplementedError


class MinMax(Calibrator):
    """The largest absolute value observed."""

    method = "minmax"

    def _amax(self):
        return self.hist.amax


class Percentile(Calibrator):
    """The ``percentile`` of ``|x|``, read from the histogram: the upper edge of the bin where the
    cumulative count reaches it (never below the true percentile, at most one bin above)."""

    method = "percentile"

    def __init__(self, percentile: float = 99.99, bins: int = 2048):
        if not 0.0 < percentile <= 100.0:
            raise CalibrationError(f"percentile must be in (0, 100], got {percentile}")
        super().__init__(bins)
        self.percentile = float(percentile)

    @property
    def settings(self):
        return {**super().settings, "percentile": self.percentile}

    def _amax(self):
        cdf = np.cumsum(self.hist.counts)
        # the rank ceil(n * p / 100), robust to the rounding of n * p / 100
        rank = np.ceil(cdf[-1] * self.percentile / 100.0 * (1 - 1e-12))
        i = int(np.searchsorted(cdf, rank, side="left"))
        return (min(i, self.hist.bins - 1) + 1) * self.hist.width


class Entropy(Calibrator):
    """TensorRT's entropy calibration: for each candidate threshold ``i`` bins (from 128 to all),
    P is the histogram up to ``i`` with the clipped tail added to its last bin, Q is P's first
    ``i`` bins merged into 128 levels and spread back evenly over the bins that were non-zero;
    the threshold is the upper edge of the ``i`` with the least KL(P || Q)."""

    method = "entropy"
    levels = QMAX + 1

    def _amax(self):
        counts = self.hist.counts.astype(np.float64)
        last = int(np.nonzero(counts)[0][-1]) + 1
        if last <= self.levels:  # fewer occupied bins than levels: nothing to gain from clipping
            return last * self.hist.width
        tail = np.concatenate([np.cumsum(counts[::-1])[::-1], [0.0]])  # tail[i] = sum(counts[i:])
        nz = counts > 0
        csum = np.concatenate([[0.0], np.cumsum(counts)])
        nzsum = np.concatenate([[0.0], np.cumsum(nz)])
        k = np.arange(self.levels + 1)
        best_i, best_kl = last, np.inf
        for i in range(self.levels, last + 1):
            p = counts[:i].copy()
            p[-1] += tail[i]
            # Q: bins [0, i) merged into `levels` groups (group g: bins [g*i//L, (g+1)*i//L)),
            # each group's total spread evenly over its non-zero bins; zero bins stay zero
            edges = (k * i) // self.levels
            totals = csum[edges[1:]] - csum[edges[:-1]]
            nonzero = nzsum[edges[1:]] - nzsum[edges[:-1]]
            per = np.divide(totals, nonzero, out=np.zeros(self.levels), where=nonzero > 0)
            q = np.repeat(per, np.diff(edges)) * nz[:i]
            kl = _kl(p, q)
            if kl < best_kl:
                best_i, best_kl = i, kl
        return best_i * self.hist.width


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    """KL(P || Q) of two unnormalized histograms; a bin where P > 0 and Q = 0 costs infinity."""
    m = p > 0
    pm, qm = p[m], q[m]
    if not np.all(qm > 0):
        return np.inf
    ps, qs = pm.sum(), q.sum()
    return float(np.dot(pm, np.log((pm * qs) / (qm * ps))) / ps)


class MSE(Calibrator):
    """The bin edge ``t`` minimizing the expected squared error of quantizing the observed values
    (bin centres, weighted by counts) with ``scale = t / 127``: rounding error below ``t``,
    clipping error ``(|x| - t)**2`` above."""

    method = "mse"

    def _amax(self):
        h = self.hist
        centres = (np.arange(h.bins) + 0.5) * h.width
        w = h.counts.astype(np.float64)
        occupied = w > 0
        centres, w = centres[occupied], w[occupied]
        last = int(np.nonzero(h.counts)[0][-1]) + 1
        candidates = np.arange(max(1, last // 16), last + 1) * h.width
        best_t, best_err = candidates[-1], np.inf
        for chunk in np.array_split(candidates, max(1, len(candidates) // 128)):
            t = chunk[:, None]
            s = t / QMAX
            q = np.minimum(np.round(centres[None, :] / s), QMAX) * s
            err = ((centres[None, :] - q) ** 2 * w[None, :]).sum(axis=1)
            k = int(np.argmin(err))
            if err[k] < best_err:
                best_t, best_err = float(chunk[k]), float(err[k])
        return best_t


CALIBRATORS = {c.method: c for c in (Entropy, MinMax, Percentile, MSE)}


def make_calibrator(method: str = "entropy", **options) -> Calibrator:
    """A calibrator by name (entropy, minmax, percentile, mse) with its options."""
    cls = CALIBRATORS.get(method)
    if cls is None:
        raise CalibrationError(f"unknown calibrator {method!r}; the calibrators are "
                               f"{', '.join(CALIBRATORS)}")
    try:
        return cls(**options)
    except TypeError as e:
        raise CalibrationError(f"calibrator {method!r}: bad options {options}: {e}") from None
