"""Random graph-dialect DAGs from the shared strategy: valid, round-trip through the text
format, identical to importing their ONNX export, and numerically equal to onnxruntime."""

import numpy as np
from hypothesis import HealthCheck, given, settings

import ptxc
from support.light_models import onnxruntime_outputs
from property.strategies import graphs
from property.tolerance import scaled_tolerance

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(graphs())
def test_random_graphs_are_valid_and_round_trip(case):
    module = case.network.to_module()
    ptxc.ir.verify(module)
    text = ptxc.print_ir(module)
    assert ptxc.print_ir(ptxc.parse_ir(text)) == text
    assert ptxc.print_ir(ptxc.import_onnx(case.network.to_onnx())) == text


@SETTINGS
@given(graphs())
def test_random_graphs_match_onnxruntime(case):
    module = case.network.to_module()
    got = ptxc.interpret(module, case.inputs)["y"]
    ref = onnxruntime_outputs(case.network.to_onnx(), case.inputs)["y"]
    rtol, atol = scaled_tolerance(module, case.inputs)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)
