"""precision="fp16" and "tf32" on random graphs from the shared strategy: the lower-precision pass
after graph-opt stays within the fp16 tolerance of fp32 (check-numerics: rtol = atol = 2e-2 once
the module holds f16 or tf32 products), and every lowering after it is checked by the
interpreter in that precision; the CPU JIT then equals the loop interpreter, and no reduction
that rounds carries an f16 value."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import ptxc.lower.tensor_to_loop  # noqa: F401  (registers the pass)
from ptxc.driver.cpu import CpuProgram
from ptxc.ir import interpret
from ptxc.rewrite import PassManager
from ptxc.rewrite.numerics import FP16_TOLERANCE
from ptxc.rewrite.passes.precision import LowerPrecision, inexact_low_accumulators

from .strategies import graphs

SETTINGS = settings(max_examples=10, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

LOWER = ("lower-graph-to-tensor,generalize-named-ops,fuse-tensor-elementwise,"
         "lower-tensor-to-loop")


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp16", "tf32"])
@SETTINGS
@given(case=graphs())
def test_precision_pass_after_graph_opt(precision, case):
    module = case.network.to_module()
    want = interpret(module, case.inputs)
    PassManager(["graph-opt", LowerPrecision(precision=precision)],
                check_numerics=True).run(module)
    got = interpret(module, case.inputs)
    for k, w in want.items():
        assert got[k].dtype == w.dtype and got[k].shape == w.shape  # boundaries keep dtypes
        np.testing.assert_allclose(got[k], w, rtol=FP16_TOLERANCE, atol=FP16_TOLERANCE)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp16", "tf32"])
@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=graphs())
def test_every_lowering_checked_in_reduced_precision(precision, case):
    module = case.network.to_module()
    PassManager(["graph-opt", LowerPrecision(precision=precision)]).run(module)
    PassManager(LOWER, check_numerics=True).run(module)
    # no reduction that rounds carries f16 (a max pool's window max may: it is exact)
    assert not inexact_low_accumulators(module), "an f16 accumulator"
    want = interpret(module, case.inputs)
    got = CpuProgram.from_module(module, threads=2, min_parallel_work=0)(case.inputs)
    for k, w in want.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-3, atol=1e-4, err_msg=k)
