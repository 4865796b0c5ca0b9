"""Kernel auto-tuning: tactics per kernel, measured on the target, kept in a timing cache.

    tactic.py    Tactic: one way to generate one kernel (the schedule pass's options, per kernel)
    kernels.py   the top-level kernels of a loop module, each isolated in a module, and its key
    tactic_map.py  a schedule pass's ``tactics`` option: kernel key -> Tactic, read-only, hashable
    spills.py    registers, spills and shared memory per kernel by ptxas (pruning candidates)

A kernel's candidate tactics come from its schedule pass (cuda: ``MapToGpu.candidates``,
ptxc/lower/gpu_map/tactics.py), which owns the options they set.

TensorRT builds with measurement: for each layer it times the candidate implementations
("tactics") on the target GPU and keeps the fastest, recording the timings in a timing cache.
ptxc does the same per kernel, before the target's schedule pass (cuda: ``map-to-gpu``; cpu:
``cpu-schedule``); a build without tuning takes the default tactic (``auto``: the pass's own
heuristic).
"""
