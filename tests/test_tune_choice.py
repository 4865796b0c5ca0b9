"""The tuner's choice logic (ptxc/tune/tuner.py), proven with a fake timer.

``choose`` keeps the fastest valid candidate, ties to the earlier one, the default unless a
candidate beats it by the margin, and is deterministic. ``tune_kernel`` measures real builds of
a real kernel on the cpu (a test schedule pass whose ``wrong`` option breaks the kernel): the
fake timer makes the wrong candidate the fastest, and it must still lose, reported by name.
"""

import attrs
import numpy as np
import pytest

import ptxc
from ptxc.errors import TuningError
from ptxc.frontend.load import as_module
from ptxc.ir.printer import print_ir
from ptxc.pipeline import CompileOptions, run_stages
from ptxc.rewrite.pass_ import Pass, add_pass, registered_passes
from ptxc.target import Target
from ptxc.tune.kernels import KERNEL_OPS, kernel_key, kernels_of
from ptxc.tune.tactic import DEFAULT, Tactic
from ptxc.tune.tuner import MARGIN, Measured, choose, tune_kernel


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


@attrs.frozen
class _TestSchedule(Pass):
    """A cpu schedule pass for this test: per kernel, its tactic's ``wrong`` breaks the kernel
    (its stored values doubled); ``variant`` changes nothing (a candidate as good as the
    default, told apart only by the fake timer).

    Before:
        (no change without tactics)
    After:
        (no change without tactics)
    """

    name = "test-tune-schedule"
    wrong: bool = False
    variant: int = 0
    target: object = None
    tactics: object = attrs.field(factory=dict)

    def __str__(self) -> str:
        return str(attrs.evolve(self, target=None, tactics={})) if self.target or \
            self.tactics else super().__str__()

    def candidates(self, op, level="full"):
        return [DEFAULT, Tactic("auto", {"variant": 1}), Tactic("auto", {"wrong": True}),
                Tactic("auto", {"variant": 2})]

    def run(self, module) -> bool:
        from ptxc.dialects.func import func_body, functions
        from ptxc.ir.core import Operation
        changed = False
        for f in functions(module):
            for op in list(func_body(f).ops):
                if op.name not in KERNEL_OPS or not self.tactics:
                    continue
                t = self.tactics.get(kernel_key(op))
                if t is not None and t.apply(self).wrong:
                    for st in [o for o in op.walk() if o.name == "loop.store"]:
                        v = st.operands[0]
                        add = Operation("arith.add", [v, v], [v.type])
                        st.block.insert_before(st, add)
                        st.set_operand(0, add.results[0])
                        changed = True
        return changed


@pytest.fixture(scope="module")
def schedule():
    if "test-tune-schedule" not in registered_passes():
        add_pass(_TestSchedule)
    return _TestSchedule()


def _kernel():
    rng = np.random.default_rng(0)
    net = ptxc.Network("fc")
    x = net.add_input("x", (4, 16))
    net.mark_output(net.add_activation(net.add_fully_connected(
        x, rng.standard_normal((8, 16)).astype(np.float32), None), "relu"), "y")
    m = as_module(net)
    run_stages(m, "loop", CompileOptions.make("cpu"), progress=None)
    return kernels_of(m)[0]


def test_tune_kernel_never_picks_a_wrong_candidate(schedule):
    k = _kernel()
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
