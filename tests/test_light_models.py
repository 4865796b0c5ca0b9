"""The nine light model-zoo models: import, interpret, match the expected outputs shipped with
onnx; with random weights, match onnxruntime."""

import numpy as np
import pytest

from support import light_models as lm
import ptxc


@pytest.mark.slow
@pytest.mark.parametrize("name", lm.NAMES)
def test_light_model_expected_output(name):
    """The expected output, unless the model's final softmax is ill-conditioned
    (:func:`light_models.softmax_is_ill_conditioned`: squeezenet's logits are all about 6.8e9);
    then the logits are compared with onnxruntime's instead, on their own scale."""
    model = lm.load(name)
    inputs = lm.dummy_inputs(model)
    logits_model = lm.without_final_softmax(model)
    if logits_model is not None:
        (ref,) = lm.onnxruntime_outputs(logits_model, inputs).values()
        if lm.softmax_is_ill_conditioned(ref):
            (z,) = ptxc.interpret(ptxc.import_onnx(logits_model), inputs).values()
            lm.assert_matches_reference(z, ref)
            return
    module = ptxc.import_onnx(lm.path(name))
    (out,) = ptxc.interpret(module, inputs).values()
    np.testing.assert_allclose(out, lm.expected_output(name), rtol=1e-3, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("name", lm.NAMES)
def test_light_model_random_weights_vs_onnxruntime(name):
    model = lm.with_random_weights(lm.load(name), seed=1)
    inputs = lm.random_inputs(model, seed=2)
    ref = lm.onnxruntime_outputs(model, inputs)
    got = ptxc.interpret(ptxc.import_onnx(model), inputs)
    assert list(got) == list(ref)
    for k in ref:
        # the random weights must make the outputs informative, or the test proves nothing
        assert np.std(ref[k]) > 1e-4, "degenerate reference output"
        lm.assert_matches_reference(got[k], ref[k])
