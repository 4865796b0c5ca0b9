"""The tuner's choice logic (ptxc/tune/tuner.py), proven with a fake timer.

``choose`` keeps the fastest valid candidate, ties to the earlier one, the default unless a
candidate beats it by the margin, and is deterministic. ``tune_kernel`` measures real builds of
a real kernel on the cpu (a test schedule pass whose ``wrong`` option breaks the kernel): the
fake timer makes the wrong candidate the fastest, and it must still lose, reported by name.
"""

import pytest

from ptxc.errors import TuningError
from ptxc.ir.printer import print_ir
from ptxc.target import Target
from ptxc.tactic.tactic import DEFAULT, Tactic
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
