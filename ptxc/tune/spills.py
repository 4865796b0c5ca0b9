"""Registers, spills and shared memory of each kernel of a PTX module, as ptxas reports them
(no GPU needed): what a tuner prunes candidates with before timing them.

    ptxas_report(ptx, "sm_90")   # {"main_k3": {"registers": 128, "spill_bytes": 0,
                                 #              "shared": 49152}, ...}  (None: no ptxas)
    spills(ptx, "sm_90")         # False (None: no ptxas)

A candidate tactic that makes a kernel spill (its registers overflow into local memory, each
access a round trip through L1) is rarely the fastest and is what a schedule's heuristic must
never pick (tests/test_target_archs.py holds the defaults to no spills), so a tuner can drop it
without a timing run. The assembling and the parsing of ptxas's ``-v`` report are
ptxc/ptx/ptxas.py's (:func:`ptxc.ptx.ptxas.assemble`, used by bench/light_spills.py too); this
module only reads its per-kernel resources. ``spill_bytes`` is spill stores plus spill loads
(bench/light_spills.py's measure), ``shared`` the static shared memory ptxas counts (dynamic
shared memory, which loop_to_llvm uses above 48 KiB, is the launch's, not in the report).

Where ptxas is absent (:func:`ptxc.ptx.ptxas.ptxas_path`) both return None: "not known", which
a caller must not read as "no spills". PTX that ptxas rejects is a CompileError with its
message.
"""

from __future__ import annotations

from ..ptx.ptxas import assemble, ptxas_path


def ptxas_report(ptx: str, arch: str) -> dict[str, dict[str, int]] | None:
    """Per kernel (entry function) name of ``ptx`` assembled for ``arch``: ``registers``,
    ``spill_bytes`` and ``shared`` (module docstring); None where there is no ptxas."""
    if ptxas_path() is None:
        return None
    rep = assemble(ptx, arch)
    return {name: {"registers": k.registers, "spill_bytes": k.spill_stores + k.spill_loads,
                   "shared": k.shared_bytes}
            for name, k in sorted(rep.kernels.items())}


def spills(ptx: str, arch: str) -> bool | None:
    """Whether any kernel of ``ptx`` spills registers on ``arch``; None where there is no
    ptxas (not known)."""
    report = ptxas_report(ptx, arch)
    if report is None:
        return None
    return any(k["spill_bytes"] for k in report.values())
