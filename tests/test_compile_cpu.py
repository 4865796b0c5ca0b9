"""ptxc.compile for the CPU target: the Engine API, its errors, and the light models with random
weights against onnxruntime (rtol 1e-3, atol 1e-5) through every stage and the LLVM JIT."""

import numpy as np
import pytest

from support import light_models as lm
import ptxc
from ptxc.errors import BindingError, CompileError

from support.small_nets import conv_relu_pool as small_net


def test_engine_runs_and_names_its_bindings():
    net = small_net()
    engine = ptxc.compile(net, target="cpu")
    assert list(engine.inputs) == ["x"] and list(engine.outputs) == ["y"]
    assert str(engine.outputs["y"]) == "tensor<1x4x5x5xf32>"
    x = np.random.default_rng(1).standard_normal((1, 3, 10, 10)).astype(np.float32)
    got = engine.run({"x": x})["y"]
    ref = ptxc.interpret(net.to_module(), {"x": x})["y"]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert set(engine.timings) >= {"import", "graph", "tensor", "loop", "llvm", "jit"}


def test_engine_binding_errors():
    engine = ptxc.compile(small_net(), target="cpu")
    x = np.zeros((1, 3, 10, 10), np.float32)
    with pytest.raises(BindingError, match="missing input.*'x'"):
        engine.run({})
    with pytest.raises(BindingError, match="shape \\[1, 3, 10, 11\\]"):
        engine.run({"x": np.zeros((1, 3, 10, 11), np.float32)})
    with pytest.raises(BindingError, match="dtype float64"):
        engine.run({"x": x.astype(np.float64)})
    with pytest.raises(BindingError, match="dict"):
        engine.run([x])


def test_unbuilt_targets_and_precisions_are_clear_errors():
    with pytest.raises(CompileError, match="unknown target 'tpu'"):
        ptxc.compile(small_net(), target="tpu")
    with pytest.raises(CompileError, match="unknown precision 'fp8'"):
        ptxc.compile(small_net(), precision="fp8")


@pytest.mark.slow
@pytest.mark.parametrize("name", lm.NAMES)
def test_light_model_compiled_vs_onnxruntime_random_weights(name):
    model = lm.with_random_weights(lm.load(name), seed=5)
    inputs = lm.random_inputs(model, seed=6)
    ref = lm.onnxruntime_outputs(model, inputs)
    got = ptxc.compile(model, target="cpu").run(inputs)
    assert list(got) == list(ref)
    for k in ref:
        assert np.std(ref[k]) > 1e-4, "degenerate reference output"
        lm.assert_matches_reference(got[k], ref[k])


def test_memory_report_bounds():
    engine = ptxc.compile(small_net(), target="cpu")
    m = engine.memory_report()
    assert 0 < m["lower_bound_bytes"] <= m["arena_bytes"] <= m["no_reuse_bytes"]
