"""The calibrators and their histogram against independent references (ptxc/calib/calibrators.py,
ptxc/calib/histogram.py).

* the growing histogram equals numpy's histogram of all the data over the final bin edges (the
  doubling merges adjacent pairs exactly);
* minmax is the exact largest ``|x|``;
* percentile is never below the true percentile (the value of rank ``ceil(n p / 100)`` of the
  sorted ``|x|``) and at most one bin above it;
* entropy is the threshold a direct implementation of TensorRT's procedure picks (P: the first
  ``i`` bins, the clipped tail added to the last; Q: the same bins merged into 128 levels and
  spread evenly over their non-zero bins; the least KL(P || Q)), written here with plain loops;
* mse is a bin edge whose quantization error (rounding below it, clipping above it) is the least
  of every bin edge's, computed here by brute force.
"""

import math

import numpy as np
import pytest

from ptxc.calib import make_calibrator
from ptxc.calib.histogram import AbsHistogram

QMAX = 127


def _growing_batches(seed=0):
    """Batches whose maximum grows, so that the histogram doubles its range several times."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(4000).astype(np.float32) * s for s in (0.1, 0.5, 1.0, 7.0, 2.0)]


def _observe(method, batches, **options):
    cal = make_calibrator(method, **options)
    for b in batches:
        cal.observe(b)
    return cal


def test_the_growing_histogram_equals_numpys_over_the_final_edges():
    h = AbsHistogram(256)
    batches = _growing_batches()
    widths = []
    for b in batches:
        h.add(b)
        widths.append(h.width)
    assert len(set(widths)) >= 3, "the range should have doubled"
    a = np.abs(np.concatenate(batches).astype(np.float64))
    want, _ = np.histogram(a, bins=h.edges)
    assert h.count == a.size and h.amax == a.max()
    # equal up to values that fall exactly on the boundary of a merged pair
    assert np.abs(h.counts - want).sum() <= 2, np.flatnonzero(h.counts != want)[:10]


def test_minmax_is_the_largest_magnitude():
    batches = _growing_batches(1)
    assert _observe("minmax", batches).amax() == max(float(np.abs(b).max()) for b in batches)


@pytest.mark.parametrize("values, p", [
    (np.arange(1, 11, dtype=np.float32), 95.0),      # rank ceil(9.5) = 10: the max
    (np.arange(1, 11, dtype=np.float32), 50.0),      # rank 5 exactly
    (-np.arange(1, 101, dtype=np.float32), 99.0),    # negative values: |x|
    (None, 99.9),
    (None, 99.99),
])
def test_percentile_is_never_below_the_true_one_and_at_most_one_bin_above(values, p):
    if values is None:
        values = np.concatenate(_growing_batches(2))
    cal = _observe("percentile", [values], percentile=p, bins=512)
    a = np.sort(np.abs(values.astype(np.float64)))
    true = a[math.ceil(a.size * p / 100) - 1]
    got = cal.amax()
    assert true <= got <= true + cal.hist.width * (1 + 1e-9), (got, true, cal.hist.width)


def entropy_reference(counts, width, levels=QMAX + 1):
    """TensorRT's entropy calibration, step by step (Migacz, "8-bit Inference with TensorRT",
    2017): for each i from 128 bins to the last occupied one, P = bins[0:i] with the outliers
    bins[i:] added to P[i-1]; Q = bins[0:i] merged into 128 levels, each level's count spread
    evenly over its non-zero bins; the threshold is the upper edge of the i of least KL(P||Q)."""
    counts = [float(c) for c in counts]
    last = max(k for k, c in enumerate(counts) if c > 0) + 1
    if last <= levels:
        return last * width
    best_i, best_kl = None, math.inf
    for i in range(levels, last + 1):
        p = counts[:i]
        p[i - 1] += sum(counts[i:])
        q = [0.0] * i
        for g in range(levels):
            lo, hi = g * i // levels, (g + 1) * i // levels
            occupied = [k for k in range(lo, hi) if counts[k] > 0]
            for k in occupied:
                q[k] = sum(counts[lo:hi]) / len(occupied)
        sp, sq = sum(p), sum(q)
        kl = 0.0
        for pk, qk in zip(p, q):
            if pk > 0:
                if qk == 0:
                    kl = math.inf
                    break
                kl += pk / sp * math.log((pk / sp) / (qk / sq))
        if kl < best_kl:
            best_i, best_kl = i, kl
    return best_i * width


@pytest.mark.parametrize("seed, tail", [(0, 1.0), (2, 12.0), (3, 30.0)])
def test_entropy_picks_the_threshold_of_tensorrts_procedure(seed, tail):
    """Normal data with a few outliers ``tail`` standard deviations out: the threshold clips
    the outliers, so the tail term and the normalization of P and Q both matter."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.standard_normal(20000), rng.uniform(3, 3 + tail, 40)])
    cal = _observe("entropy", [x.astype(np.float32)], bins=512)
    want = min(entropy_reference(cal.hist.counts, cal.hist.width), cal.hist.amax)
    assert cal.amax() == pytest.approx(want, rel=1e-12), (cal.amax(), want)
    assert cal.amax() < cal.hist.amax  # the outliers are clipped


def _mse(counts, width, t):
    centres = (np.arange(len(counts)) + 0.5) * width
    s = t / QMAX
    q = np.minimum(np.round(centres / s), QMAX) * s
    return float(((centres - q) ** 2 * counts).sum())


@pytest.mark.parametrize("kind", ["normal-with-outliers", "mass-at-the-max", "laplace"])
def test_mse_picks_a_bin_edge_of_least_quantization_error(kind):
    """Brute force over every bin edge: the chosen edge's error is the least (half the data at
    +-1: the max itself, clipping it costs most; heavy tails: below it)."""
    rng = np.random.default_rng(5)
    x = {"normal-with-outliers": np.concatenate([rng.standard_normal(20000),
                                                 rng.uniform(8, 12, 20)]),
         "mass-at-the-max": np.concatenate([rng.uniform(-1, 1, 10000),
                                           np.sign(rng.uniform(-1, 1, 10000))]),
         "laplace": rng.laplace(size=20000)}[kind].astype(np.float32)
    cal = _observe("mse", [x], bins=512)
    h = cal.hist
    last = int(np.nonzero(h.counts)[0][-1]) + 1
    errors = {k: _mse(h.counts, h.width, k * h.width) for k in range(1, last + 1)}
    best = min(errors.values())
    got = cal.amax()
    k = last if got == h.amax else round(got / h.width)   # amax() is at most the max seen
    assert got == pytest.approx(min(k * h.width, h.amax), rel=1e-12)
    assert errors[k] <= best * (1 + 1e-9), (k, errors[k], min(errors, key=errors.get), best)
    if kind == "mass-at-the-max":
        assert k == last
    else:
        assert k < last
