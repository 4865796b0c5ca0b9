"""fuse-epilogues and fuse-elementwise, each alone and in sequence, on random graphs from the
shared strategy: the IR verifies, the results stay equal (check-numerics), the text round-trips,
and a second run finds nothing left to fuse."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import ptxc
from ptxc.dialects.graph.scalar_forms import scalar_form
from ptxc.rewrite import PassManager
from property.strategies import graphs
from property.tolerance import numerics_options, scaled_tolerance

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

BASES = {"graph.conv", "graph.gemm", "graph.matmul", "graph.fused_conv", "graph.fused_gemm",
         "graph.fused_matmul"}


def top_ops(m):
    return [op for op in m.walk() if op.parent_op is not None
            and op.parent_op.name == "func.func"]


def fusable_pairs(m, bases):
    """(producer, consumer) pairs the pass should have fused: a single user with a scalar form
    and the producer's result type."""
    out = []
    for op in top_ops(m):
        if op.name not in bases:
            continue
        users = op.results[0].users
        if len(users) == 1 and scalar_form(users[0]) is not None and \
                users[0].results[0].type == op.results[0].type:
            out.append((op.loc, users[0].loc))
    return out


@pytest.mark.parametrize("pipeline", ["fuse-epilogues", "fuse-elementwise",
                                      "fuse-elementwise,fuse-epilogues"])
@SETTINGS
@given(case=graphs())
def test_fusion_passes_keep_numerics_on_random_graphs(pipeline, case):
    m = case.network.to_module()
    want = ptxc.interpret(m, case.inputs)["y"]
    rtol, atol = scaled_tolerance(m, case.inputs)
    PassManager(pipeline, check_numerics=True, **numerics_options(m)).run(m)
    ptxc.ir.verify(m)
    np.testing.assert_allclose(ptxc.interpret(m, case.inputs)["y"], want, rtol=rtol, atol=atol)
    text = ptxc.print_ir(m)
    assert ptxc.print_ir(ptxc.parse_ir(text)) == text
    assert PassManager(pipeline).run(m) is False, text  # a fixpoint
    if "fuse-epilogues" in pipeline:
        assert fusable_pairs(m, BASES) == [], text
