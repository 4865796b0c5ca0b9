"""Tactics as data, below the lowerings that take them.

    tactic.py      Tactic: one way to generate one kernel (a schedule pass's options, per kernel)
    tactic_map.py  TacticMap: kernel key -> Tactic, a schedule pass's ``tactics`` option
    kernels.py     the top-level kernels of a loop module, each isolated in a module, and its key

The schedule passes (``map-to-gpu``, ``cpu-schedule``) read tactics by kernel key and list each
kernel's candidates; the tuner (:mod:`ptxc.tune`, which builds and runs code) chooses among
them. This package imports no code generator or runtime, so the lowerings can import it.
"""
