"""A progress line on stderr while calibrating.

Plain lines, not tqdm: calibration runs inside builds and CI logs, where carriage-return bars
turn into noise; a line every few seconds (and the last one) says enough, needs no dependency,
and can be silenced with ``progress=False``.
"""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int | None, enabled: bool = True, every_s: float = 2.0,
                 stream=None, label: str = "calibrate", unit: str = "batch"):
        self.total, self.enabled, self.every_s = total, enabled, every_s
        self.label, self.unit = label, unit
        self.stream = stream if stream is not None else sys.stderr
        self.t0 = self.last = time.perf_counter()
        self.done = 0

    def step(self) -> None:
        self.done += 1
        now = time.perf_counter()
        if self.enabled and (now - self.last >= self.every_s or self.done == 1):
            self._line(now)
            self.last = now

    def close(self) -> None:
        if self.enabled:
            self._line(time.perf_counter(), final=True)

    def _line(self, now: float, final: bool = False) -> None:
        of = f"/{self.total}" if self.total is not None else ""
        rate = self.done / max(now - self.t0, 1e-9)
        tag = "done" if final else "running"
        print(f"ptxc {self.label}: {tag}: {self.unit} {self.done}{of}, {now - self.t0:.1f} s "
              f"({rate:.3g} {self.unit.split()[-1]}es/s)", file=self.stream, flush=True)
