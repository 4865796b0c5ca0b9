"""Kernel auto-tuning: tactics per kernel, measured on the target, kept in a timing cache.

    tuner.py      Tuner: per distinct kernel key, the cache's tactic, a measured one, or the
                  heuristic; the choice logic
    measure.py    one candidate built, run on synthetic inputs, compared and timed
    executors.py  where kernels are measured: here, every GPU of the host, a Ray cluster
    cache.py      the timing cache: the tactic kept per (device, kernel), saved, loaded, merged
    layout.py     a tuned build's layout, chosen by measuring both
    spills.py     ptxas's registers and spills per kernel (candidates that spill are pruned)

TensorRT builds with measurement: for each layer it times the candidate implementations
("tactics") on the target GPU and keeps the fastest, recording the timings in a timing cache.
ptxc does the same per kernel, before the target's schedule pass (cuda: ``map-to-gpu``; cpu:
``cpu-schedule``); a build without tuning takes the default tactic (``auto``: the pass's own
heuristic). What a tactic is, and the kernel keys, are :mod:`ptxc.tactic`'s (data, below the
lowerings); this package builds and runs code. docs/tuning.md is the user's guide.
"""
