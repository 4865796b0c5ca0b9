"""Channels-last on the GPU: the nine light models with random weights compiled for cuda with
``layout="nhwc"`` (input channels padded to multiples of 4) match onnxruntime at the bar of every
random-weight comparison (light_models.assert_matches_reference), and ResNet-50 gives the same
logits in both layouts (run times printed, never asserted). Skipped without a GPU (marker ``gpu``).
"""

import time

import pytest

from support import light_models as lm
import ptxc

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", lm.NAMES)
def test_light_model_channels_last_on_cuda_matches_onnxruntime(name):
    model = lm.with_random_weights(lm.load(name), seed=7)
    inputs = lm.random_inputs(model, seed=8)
    ref = lm.onnxruntime_outputs(model, inputs)
    t0 = time.perf_counter()
    engine = ptxc.compile(model, target="cuda", layout="nhwc")
    print(f"\n{name}: compile {time.perf_counter() - t0:.1f} s")
    got = engine.run(inputs)
    assert list(got) == list(ref)
    for k in ref:
        assert ref[k].std() > 1e-4, "degenerate reference output"
        lm.assert_matches_reference(got[k], ref[k])


def test_resnet50_nhwc_equals_nchw_on_cuda():
    """The two layouts of one model agree (both against onnxruntime's bar); run times of both are
    printed, never asserted."""
    model = lm.with_random_weights(lm.load("resnet50"), seed=7)
    inputs = lm.random_inputs(model, seed=8)
    out = {}
    for layout in ("nchw", "nhwc"):
        engine = ptxc.compile(model, target="cuda", layout=layout)
        engine.run(inputs)  # load, upload, capture
        t0 = time.perf_counter()
        out[layout] = engine.run(inputs)
        print(f"\nresnet50 {layout}: {(time.perf_counter() - t0) * 1e3:.2f} ms (host copies "
              "included)")
    for k in out["nchw"]:
        lm.assert_matches_reference(out["nhwc"][k], out["nchw"][k])
