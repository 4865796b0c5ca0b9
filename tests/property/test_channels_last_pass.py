"""to-channels-last keeps random graphs (the shared strategy) verified and numerically equal
under check-numerics, alone and after graph-opt, with and without channel padding; so does the
cuda layout pipeline, whose space-to-depth-stem rewrites the strategy's stride-2 convs on 2-4
channels of even-sized images."""

import pytest
from hypothesis import HealthCheck, given, settings

from ptxc.rewrite import PassManager

from .strategies import graphs
from .tolerance import numerics_options

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", [
    "to-channels-last",
    "graph-opt,to-channels-last,cancel-transposes,eliminate-concat,dce",
    "graph-opt,to-channels-last{channel-multiple=8},cancel-transposes,eliminate-concat,dce",
    "space-to-depth-stem",
    "graph-opt,space-to-depth-stem,to-channels-last{channel-multiple=4 int8-channel-multiple=16},"
    "cancel-transposes,eliminate-concat,dce",
])
@SETTINGS
@given(case=graphs())
def test_channels_last_keeps_random_graphs_equal(pipeline, case):
    module = case.network.to_module()
    PassManager(pipeline, check_numerics=True, **numerics_options(module)).run(module)
