"""The nine light model-zoo models (tests/support/light_models.py) compiled for the cuda target and
run on the GPU: (1) with their shipped weights, each output equals the expected output shipped with
onnx, at the bar of the CPU test (tests/test_cpu_light_models.py: rtol 1e-3, atol 1e-7); (2)
with random weights (the shipped ones are constants, so those outputs are nearly uniform and
prove little), the logits equal onnxruntime's at the bar of every random-weight comparison
(light_models.assert_matches_reference: rtol 1e-3, atol 1e-5 on the output's scale).

Compile and run times are printed (never asserted). Skipped without a GPU (marker ``gpu``)."""

import time

import numpy as np
import pytest

from support import light_models as lm
import ptxc

pytestmark = pytest.mark.gpu


def compile_cuda(model):
    t0 = time.perf_counter()
    engine = ptxc.compile(model, target="cuda")
    assert engine.target == "cuda"
    return engine, time.perf_counter() - t0


@pytest.mark.parametrize("name", lm.NAMES)
def test_light_model_on_cuda_matches_expected_output(name):
    model = lm.load(name)
    engine, compile_s = compile_cuda(model)
    inputs = lm.dummy_inputs(model)
    engine.run(inputs)  # the first run loads the module, uploads weights, captures the graph
    t0 = time.perf_counter()
    (out,) = engine.run(inputs).values()
    run_s = time.perf_counter() - t0
    print(f"\n{name}: compile {compile_s:.1f} s, run {run_s * 1e3:.2f} ms")
    np.testing.assert_allclose(out, lm.expected_output(name), rtol=1e-3, atol=1e-7)


@pytest.mark.parametrize("name", lm.NAMES)
def test_light_model_with_random_weights_on_cuda_matches_onnxruntime(name):
    """Random weights make every channel count: concats written in place (squeezenet), merged
    and scattered siblings (inception), residual epilogues (resnet), grouped convolutions and
    channel shuffles (shufflenet), dense concatenations (densenet), large fully connected layers
    (alexnet, vgg, zfnet)."""
    model = lm.with_random_weights(lm.load(name), seed=7)
    inputs = lm.random_inputs(model, seed=8)
    ref = lm.onnxruntime_outputs(model, inputs)
    engine, compile_s = compile_cuda(model)
    got = engine.run(inputs)
    print(f"\n{name}: compile {compile_s:.1f} s")
    assert list(got) == list(ref)
    for k in ref:
        assert np.std(ref[k]) > 1e-4, "degenerate reference output"
        lm.assert_matches_reference(got[k], ref[k])
