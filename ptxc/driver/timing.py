"""An engine's compute time per inference: what the bench tools and the tuner's layout choice
measure.

    fn, compute = runner(engine, feeds)   # fn(): one inference; compute(n): n compute times, s

cuda: the inputs are copied to the device once and bound; ``fn`` is ``run_device`` on them and
``compute(n)`` the device time of ``n`` replays of the launch sequence between CUDA events
(``program.launch_times``). cpu: ``fn`` is ``run`` and ``compute(n)`` the sum of the kernels'
wall times of each of ``n`` inferences (the runtime's ``on_kernel`` spans), without the
bindings' copies.
"""

from __future__ import annotations

import numpy as np


def runner(engine, feeds: dict):
    """(fn, compute) for ``engine`` on host arrays ``feeds`` (module docstring)."""
    if engine.target == "cuda":
        from numba import cuda
        device = {n: cuda.to_device(np.ascontiguousarray(x)) for n, x in feeds.items()}

        def compute(n):
            engine.run_device(device)  # the inputs are bound
            return [ms / 1e3 for ms in engine.program.launch_times(n)]
        return (lambda: engine.run_device(device)), compute

    def compute(n):
        out = []
        for _ in range(n):
            spans = []
            engine.program(feeds, on_kernel=lambda i, t0, t1: spans.append(t1 - t0))
            out.append(sum(spans))
        return out
    return (lambda: engine.run(feeds)), compute
