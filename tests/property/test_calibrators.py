"""Property tests of the calibrators on known distributions (ptxc.calib.calibrators)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptxc.calib.calibrators import make_calibrator
from ptxc.calib.histogram import AbsHistogram

arrays = st.builds(
    lambda seed, n, kind, scale: _draw(seed, n, kind, scale),
    st.integers(0, 2**31 - 1), st.integers(1, 3000),
    st.sampled_from(["normal", "uniform", "laplace", "relu", "outlier"]),
    st.floats(1e-3, 1e3))


def _draw(seed, n, kind, scale):
    rng = np.random.default_rng(seed)
    if kind == "normal":
        x = rng.standard_normal(n)
    elif kind == "uniform":
        x = rng.uniform(-1, 1, n)
    elif kind == "laplace":
        x = rng.laplace(size=n)
    elif kind == "relu":
        x = np.maximum(rng.standard_normal(n), 0)
    else:
        x = rng.standard_normal(n)
        x[0] = 50.0
    return (x * scale).astype(np.float32)


def _split(x, parts):
    return np.array_split(x, parts) if x.size >= parts else [x]


@settings(max_examples=40, deadline=None)
@given(arrays, st.integers(1, 4))
def test_minmax_is_the_observed_max(x, parts):
    c = make_calibrator("minmax")
    for b in _split(x, parts):
        c.observe(b)
    assert c.amax() == float(np.abs(x).max())


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(arrays, st.integers(1, 3))
def test_entropy_and_mse_lie_within_the_observed_range(x, parts):
    amax = float(np.abs(x).max())
    for method in ("entropy", "mse"):
        c = make_calibrator(method)
        for b in _split(x, parts):
            c.observe(b)
        t = c.amax()
        assert (0.0 < t <= amax) if amax > 0 else t == 0.0, (method, t, amax)


@settings(max_examples=30, deadline=None)
@given(arrays)
def test_percentile_is_monotone_and_bounds_the_true_percentile(x):
    a = np.abs(x).astype(np.float64)
    prev = 0.0
    for p in (50.0, 90.0, 99.0, 99.9, 99.99, 100.0):
        c = make_calibrator("percentile", percentile=p)
        c.observe(x)
        t = c.amax()
        assert t >= prev
        prev = t
        # never below the true percentile, at most one histogram bin above it
        k = max(1, int(np.ceil(a.size * p / 100 - 1e-9)))   # the rank of the p-th percentile
        true = float(np.sort(a)[k - 1])
        assert true <= t * (1 + 1e-12) + 1e-30
        assert t <= true + c.hist.width * (1 + 1e-9) or t == float(a.max())
    assert prev == float(a.max())


@settings(max_examples=30, deadline=None)
@given(arrays, st.integers(1, 5))
def test_histogram_in_batches_equals_one_pass_counts(x, parts):
    """Doubling the range merges bins exactly: all values counted, max exact, every value inside
    its bin's range."""
    h = AbsHistogram(64)
    for b in _split(x, parts):
        h.add(b)
    a = np.abs(x).astype(np.float64)
    assert h.count == x.size and h.counts.sum() == x.size
    assert h.amax == float(a.max())
    if h.amax > 0:
        assert a.max() < h.width * h.bins
