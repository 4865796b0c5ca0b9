"""A schedule pass for the tuner's tests (tests/test_tune_choice.py, tests/test_tune_tuner.py):
a real pass on real kernels whose tactics are known in advance, and one of which is wrong."""

import attrs
import numpy as np

import ptxc
from ptxc.frontend.load import as_module
from ptxc.pipeline import CompileOptions, run_stages
from ptxc.rewrite.pass_ import Pass, add_pass, registered_passes
from ptxc.tactic.kernels import KERNEL_OPS, kernel_key
from ptxc.tactic.tactic import DEFAULT, Tactic


@attrs.frozen
class TestSchedule(Pass):
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


def test_schedule() -> "TestSchedule":
    """The pass (registered once per process, so that its pipeline text parses)."""
    if "test-tune-schedule" not in registered_passes():
        add_pass(TestSchedule)
    return TestSchedule()


test_schedule.__test__ = False   # not a pytest test
TestSchedule.__test__ = False


def fc_net(layers: int = 1):
    """``layers`` fully connected + relu layers of one shape: x[4,16] -> y[4,16]."""
    rng = np.random.default_rng(0)
    net = ptxc.Network("fc")
    x = net.add_input("x", (4, 16))
    for _ in range(layers):
        x = net.add_activation(net.add_fully_connected(
            x, rng.standard_normal((16, 16)).astype(np.float32), None), "relu")
    net.mark_output(x, "y")
    return net


def fc_module(layers: int = 1):
    """fc_net's loop module before any schedule pass (cpu: lower-tensor-to-loop only): one
    kernel key for all of its layers."""
    m = as_module(fc_net(layers))
    run_stages(m, "loop", CompileOptions.make(
        "cpu", stage_passes={"loop": "lower-tensor-to-loop"}), progress=None)
    return m
