"""Random graphs from the shared strategy lowered all the way to the loop dialect under
check-numerics (every lowering, lower-tensor-to-loop included, interpreted before and after on
the same random inputs), then JIT-compiled for the CPU: the compiled program equals the graph
interpreter within 1e-4 relative. Once as drawn, once after the graph optimizer (fused convs,
in-place concats, merged siblings), which is where bufferization has the most to decide."""

import numpy as np
from hypothesis import HealthCheck, given, settings

import ptxc.lower.tensor_to_loop  # noqa: F401  (registers the pass)
from ptxc.driver.cpu import CpuProgram
from ptxc.ir import interpret
from ptxc.rewrite import PassManager

from .strategies import graphs
from .tolerance import numerics_options, scaled_tolerance

SETTINGS = settings(max_examples=15, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

PIPELINE = ("lower-graph-to-tensor,generalize-named-ops,fuse-tensor-elementwise,"
            "lower-tensor-to-loop")


def _check(module, inputs):
    want = interpret(module, inputs)
    rtol, atol = scaled_tolerance(module, inputs)
    PassManager(PIPELINE, check_numerics=True, **numerics_options(module)).run(module)
    left = [op.name for op in module.walk() if op.name.split(".")[0] in ("graph", "tensor")]
    assert not left, left
    got = CpuProgram.from_module(module, threads=2, min_parallel_work=0)(inputs)
    assert list(got) == list(want)
    for k, w in want.items():
        np.testing.assert_allclose(got[k], w, rtol=rtol, atol=atol, err_msg=k)


@SETTINGS
@given(case=graphs())
def test_random_graphs_compile_to_loops_and_run(case):
    _check(case.network.to_module(), case.inputs)


@SETTINGS
@given(case=graphs())
def test_optimized_random_graphs_compile_to_loops_and_run(case):
    module = case.network.to_module()
    PassManager("graph-opt").run(module)
    _check(module, case.inputs)
