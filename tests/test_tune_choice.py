"""The tuner's choice logic (ptxc/tune/tuner.py), proven with a fake timer.

``choose`` keeps the fastest valid candidate, ties to the earlier one, the default unless a
candidate beats it by the margin, and is deterministic. ``tune_kernel`` measures real builds of
a real kernel on the cpu (a test schedule pass whose ``wrong`` option breaks the kernel): the
fake timer makes the wrong candidate the fastest, and it must still lose, reported by name.
"""

import numpy as np
import pytest

from ptxc.errors import TuningError
from ptxc.ir.printer import print_ir
from ptxc.target import Target
from ptxc.tactic.tactic import DEFAULT, Tactic
from ptxc.tune.measure import compare_outputs
from ptxc.tune.tuner import MARGIN, Measured, choose, tune_kernel

from support.tune_schedule import fc_module, test_schedule


def _m(i, t, error=None, schedule="auto"):
    return Measured(Tactic(schedule, {"block_size": 64 * (i + 1)} if i else {}), i,
                    () if t is None else (t, t, t), error)


def test_choose_keeps_the_fastest_valid_and_ties_to_the_earlier():
    ms = [_m(0, 1.0), _m(1, 0.5), _m(2, 0.4, error="wrong output"), _m(3, 0.5), _m(4, 0.7)]
    assert choose(ms).index == 1               # 2 is faster but wrong; 3 ties with 1
    assert choose(list(ms)).index == choose(ms).index   # deterministic
    assert choose([_m(0, 1.0), _m(1, 1.0 - MARGIN / 2)]).index == 0   # within the margin
    assert choose([_m(0, 1.0), _m(1, None, error="build: spills")]).index == 0
    with pytest.raises(TuningError, match="default tactic failed"):
        choose([_m(0, None, error="build: boom"), _m(1, 0.1)])


def test_tune_kernel_never_picks_a_wrong_candidate():
    from ptxc.tactic.kernels import kernels_of
    schedule = test_schedule()
    k = kernels_of(fc_module())[0]
    cands = schedule.candidates(k.op)
    # the fake timer: the wrong candidate is the fastest, variant 2 the fastest valid one
    fake = {str(DEFAULT): 1.0, "auto{variant=1}": 0.8, "auto{wrong=true}": 0.1,
            "auto{variant=2}": 0.6}

    def timer(tactic, bench, inputs, runs):
        return [fake[str(tactic)]] * runs

    runs = [tune_kernel(print_ir(k.module), k.key, "test-tune-schedule",
                        Target.host().to_dict(), [c.to_json() for c in cands], 5, timer=timer)
            for _ in range(2)]
    res = runs[0]
    assert runs[1] == res                                  # deterministic
    assert Tactic.from_json(res["tactic"]) == Tactic("auto", {"variant": 2})
    assert res["time_s"] == 0.6 and res["default_time_s"] == 1.0
    assert res["candidates"] == 3                          # the wrong one was not timed
    (why,) = res["rejected"]
    assert why.startswith("auto{wrong=true}: wrong output") and "differs" in why


# ---- the check: what counts as the default's output (measure.compare_outputs) ---------------

@pytest.mark.parametrize("dtype,tol", [("float32", 1e-4), ("float16", 1e-2),
                                       ("bfloat16", 2e-2)])
def test_the_comparison_tolerance_is_the_outputs_dtypes(dtype, tol):
    """docs/tuning.md's tolerances, relative to the default output's largest magnitude (here
    exactly 1): half of it passes, twice of it is a wrong output; the dtype's own, not
    another's (a float32 candidate off by 2e-4 is wrong)."""
    from ptxc.tune.measure import _np_dtype
    dt = _np_dtype(dtype)
    e = np.array([1.0, 0.0, -0.5, 0.25], np.float32).astype(dt)
    for off, ok in ((tol / 2, True), (2 * tol, False)):
        g = e.copy()
        g[1] = np.float32(off).astype(dt)          # exact enough at 0: dt's spacing is finer
        why = compare_outputs({"y": e}, {"y": g})
        assert (why is None) == ok, (dtype, off, why)
        if not ok:
            assert why.startswith("output y: differs by") and dtype in why


def test_integer_outputs_are_compared_exactly():
    e = np.array([3, -7, 127], np.int8)
    assert compare_outputs({"y": e}, {"y": e.copy()}) is None
    assert "1 of 3 values differ" in compare_outputs({"y": e}, {"y": e + np.int8(1) * (e == 3)})


def test_nans_must_be_in_the_same_places_both_ways():
    """A candidate with a NaN where the default has a number is wrong, and so is one with a
    number where the default has NaN; NaNs in the same places (and equal infinities) pass."""
    e = np.array([1.0, np.nan, -0.5, np.inf], np.float32)
    assert compare_outputs({"y": e}, {"y": e.copy()}) is None
    for i, v in ((0, np.nan), (2, np.nan), (1, 0.0), (3, np.nan)):
        g = e.copy()
        g[i] = v
        why = compare_outputs({"y": e}, {"y": g})
        assert why is not None and "NaN" in why, (i, v, why)
    for v in (-np.inf, 3.0e38):
        g = e.copy()
        g[3] = v
        assert compare_outputs({"y": e}, {"y": g}) == "output y: infinities differ"
    g = e.copy()
    g[0] = np.inf
    assert compare_outputs({"y": e}, {"y": g}) is not None   # an infinity the default lacks
    assert "shape" in compare_outputs({"y": e}, {"y": e[:2]})
    assert "shape" in compare_outputs({"y": e}, {})


def test_the_default_is_never_pruned_as_spilling(monkeypatch):
    """ptxas's spill report prunes candidates, never the default (the heuristic's own code,
    the reference every candidate is checked against): with every build reported as spilling,
    the default is still measured and kept, and each other candidate is rejected as a
    spiller."""
    import ptxc.tune.tuner as tuner
    from ptxc.tactic.kernels import kernels_of
    monkeypatch.setattr(tuner, "spill_reason", lambda art: "spills 8 bytes (kernel_0)")
    k = kernels_of(fc_module())[0]
    cands = test_schedule().candidates(k.op)
    timed = []

    def timer(tactic, bench, inputs, runs):
        timed.append(str(tactic))
        return [1.0] * runs

    res = tune_kernel(print_ir(k.module), k.key, "test-tune-schedule", Target.host().to_dict(),
                      [c.to_json() for c in cands], 3, timer=timer)
    assert timed == ["auto"] and Tactic.from_json(res["tactic"]) == DEFAULT
    assert res["default_time_s"] == res["time_s"] == 1.0 and res["candidates"] == 1
    assert res["rejected"] == [f"{c}: spills 8 bytes (kernel_0)" for c in cands[1:]]
