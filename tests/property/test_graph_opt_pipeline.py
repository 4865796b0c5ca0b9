"""Every pass of graph-opt alone, and the whole pipeline, on random graphs from the shared
strategy, with check-numerics (interpreter before vs after each pass, tolerances scaled to
the graph: tests/property/tolerance.py)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import ptxc
from support.light_models import onnxruntime_outputs
from property.strategies import graphs
from property.tolerance import numerics_options, scaled_tolerance
from ptxc.rewrite.pass_manager import PassManager
from ptxc.rewrite.passes.graph_opt import GRAPH_OPT

SETTINGS = settings(max_examples=20, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("pass_name", GRAPH_OPT.split(","))
@SETTINGS
@given(case=graphs())
def test_each_graph_opt_pass_alone(pass_name, case):
    module = case.network.to_module()
    PassManager(pass_name, check_numerics=True, **numerics_options(module)).run(module)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=graphs(max_layers=8))
def test_whole_graph_opt_pipeline(case):
    module = case.network.to_module()
    rtol, atol = scaled_tolerance(module, case.inputs)
    PassManager("graph-opt", check_numerics=True, **numerics_options(module)).run(module)
    got = ptxc.interpret(module, case.inputs)["y"]
    ref = onnxruntime_outputs(case.network.to_onnx(), case.inputs)["y"]
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)
