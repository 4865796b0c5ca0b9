"""Programmatic dependent launch on the GPU (gpu.launch's ``pdl``, tests/test_pdl.py for what
is checked without one): an engine whose kernels wait with ``griddepcontrol.wait`` and are
launched (and captured into the CUDA graph) with programmatic stream serialization computes
bit for bit what the same engine without it computes, over many runs with fresh inputs, the
graph replayed. A kernel that read or wrote the arena before its predecessors finished (the
memory plan reuses their buffers) would show as a difference, so the fp16 and int8 models here
have many kernels (mma and wgmma ones that copy their weights before the wait, pointwise ones,
pools)."""

from __future__ import annotations

import numpy as np
import pytest

from support import light_models as lm
import ptxc

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_pdl_engine_equals_the_plain_one_over_many_replays(precision):
    model = lm.with_random_weights(lm.load("squeezenet"), seed=5)
    kw = {"precision": precision, "layout": "nhwc"}
    if precision == "int8":
        from ptxc.calib import calibrate
        kw["calibration"] = calibrate(model, [lm.random_inputs(model, seed=99)], "minmax")
    pdl = ptxc.compile(model, target="cuda", **kw)
    plain = ptxc.compile(model, target="cuda", pass_options={"map-to-gpu": {"pdl": False}}, **kw)
    assert all(k.pdl for k in pdl.kernels.kernels)
    assert not any(k.pdl for k in plain.kernels.kernels)
    assert any(k.schedule in ("mma", "wgmma") for k in pdl.kernels.kernels)
    assert "griddepcontrol.wait" in pdl.ptx and "griddepcontrol" not in plain.ptx
    outs = []
    for seed in range(12):
        x = lm.random_inputs(model, seed=seed)
        outs.append((pdl.run(x), plain.run(x)))   # runs 3.. replay the captured graphs
    for got, want in outs:
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    ref = lm.onnxruntime_outputs(model, x)
    for k in ref:   # and the last run is the model's (a loose check: fp16 or int8 rounding)
        a, b = got[k].ravel().astype(np.float64), ref[k].ravel().astype(np.float64)
        assert a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) > 0.98, k
