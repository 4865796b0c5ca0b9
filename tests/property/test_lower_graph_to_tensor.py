"""Random graphs from the shared strategy lowered to the tensor dialect under check-numerics:
lower-graph-to-tensor alone, then with generalize-named-ops and fuse-tensor-elementwise, also
after the graph optimizer's fusions (fused conv/gemm/matmul, graph.elementwise, in-place
concats). Every stage is interpreted on the same random inputs and must agree."""

import pytest
from hypothesis import HealthCheck, given, settings

from ptxc.rewrite import PassManager

from .strategies import graphs
from .tolerance import numerics_options

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

LOWER = "lower-graph-to-tensor"
FULL = "lower-graph-to-tensor,generalize-named-ops,fuse-tensor-elementwise"


def _no_graph_ops_left(module):
    left = [op.name for op in module.walk() if op.name.startswith("graph.")]
    assert not left, left


@pytest.mark.parametrize("pipeline", [LOWER, FULL])
@SETTINGS
@given(case=graphs())
def test_random_graphs_lower_with_equal_numerics(pipeline, case):
    module = case.network.to_module()
    PassManager(pipeline, check_numerics=True, **numerics_options(module)).run(module)
    _no_graph_ops_left(module)
    if pipeline == FULL:
        names = {op.name for op in module.walk()}
        assert not names & {"tensor.matmul", "tensor.conv", "tensor.pool", "tensor.reduce"}


@SETTINGS
@given(case=graphs())
def test_optimized_random_graphs_lower_with_equal_numerics(case):
    module = case.network.to_module()
    PassManager("fold-batchnorm,fuse-epilogues,fuse-elementwise,eliminate-concat,dce").run(module)
    PassManager(FULL, check_numerics=True, **numerics_options(module)).run(module)
    _no_graph_ops_left(module)
