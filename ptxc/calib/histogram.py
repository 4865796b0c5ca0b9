"""A histogram of absolute values whose range grows by doubling, so that no batch is ever
clipped and no bin is ever split.

Calibration sees its data one batch at a time and cannot know the final maximum in advance.
TensorRT runs the data twice (a max pass, then a histogram pass); onnxruntime re-bins by
interpolation, which smears counts. Here the range ``[0, width * bins)`` doubles when a batch
exceeds it, and doubling merges pairs of adjacent bins exactly (bin edges stay aligned), so one
pass gives the same histogram as if the final range had been known from the start, up to where
each value falls at the boundary of a merged pair.

    h = AbsHistogram(bins=2048)
    h.add(np.array([0.5, -3.0]))    # range [0, 3.0 * (1 + 2**-10)), |x| binned
    h.add(np.array([10.0]))         # range doubled twice: pairs of bins merged each time
"""

from __future__ import annotations

import numpy as np


class AbsHistogram:
    """Counts of ``|x|`` over ``bins`` equal bins of ``[0, width * bins)``; also the exact max."""

    def __init__(self, bins: int = 2048):
        if bins < 2 or bins % 2:
            raise ValueError(f"bins must be an even number >= 2, got {bins}")
        self.bins = bins
        self.counts = np.zeros(bins, dtype=np.int64)
        self.width = 0.0      # 0 until the first non-zero value
        self.amax = 0.0       # the largest |x| seen
        self.count = 0        # values seen (zeros included)

    @property
    def edges(self) -> np.ndarray:
        return np.arange(self.bins + 1, dtype=np.float64) * self.width

    def add(self, x: np.ndarray) -> None:
        a = np.abs(np.asarray(x, dtype=np.float64)).ravel()
        a = a[np.isfinite(a)]
        if a.size == 0:
            return
        self.count += a.size
        m = float(a.max())
        self.amax = max(self.amax, m)
        if m == 0.0 and self.width == 0.0:
            self.counts[0] += a.size  # bin 0 holds the zeros whatever the width becomes
            return
        if self.width == 0.0:
            # a little headroom so that the max itself falls inside the last bin
            self.width = m * (1 + 2.0 ** -10) / self.bins
        while m >= self.width * self.bins:
            self._double()
        idx = np.minimum((a / self.width).astype(np.int64), self.bins - 1)
        self.counts += np.bincount(idx, minlength=self.bins)

    def _double(self) -> None:
        self.counts = np.concatenate([self.counts.reshape(-1, 2).sum(axis=1),
                                      np.zeros(self.bins // 2, dtype=np.int64)])
        self.width *= 2.0
