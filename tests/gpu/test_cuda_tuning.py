"""Auto-tuning on the GPU (ptxc/tune): tuning a small CNN and a BERT-style attention block in
fp16 measures candidates on this GPU and gives the same outputs as the untuned build (both
checked against onnxruntime fp32), and a second tuned compile with the timing cache measures
nothing."""

import numpy as np
import onnxruntime as ort
import pytest

import ptxc

from support.attention_models import bert_attention
from support.tool_models import cbr_model

pytestmark = pytest.mark.gpu


def _ort(model, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def _models():
    rng = np.random.default_rng(0)
    cnn = cbr_model(channels=32, size=32)
    att, att_feeds = bert_attention(b=2, s=64, heads=4, d=32)
    return [("cnn", cnn, {"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}),
            ("attention", att, att_feeds)]


@pytest.mark.parametrize("name, model, feeds", _models(), ids=["cnn", "attention"])
def test_tuned_fp16_matches_untuned_and_onnxruntime(name, model, feeds, tmp_path):
    ref = _ort(model, feeds)[0]
    cache = str(tmp_path / "timing.json")
    # one layout each (layout="auto" would time both: tests/test_tune_cpu.py covers that)
    kw = {"target": "cuda", "precision": "fp16", "cache": False,
          "layout": "nhwc" if name == "cnn" else "nchw"}
    untuned = ptxc.compile(model, **kw)
    tuned = ptxc.compile(model, **kw, tuning="fast", timing_cache=cache, tuning_budget_s=120)
    a = list(untuned.run(feeds).values())[0].astype(np.float64)
    b = list(tuned.run(feeds).values())[0].astype(np.float64)
    scale = np.abs(ref).max()
    assert np.abs(a - ref).max() <= 2e-2 * scale
    assert np.abs(b - ref).max() <= 2e-2 * scale
    assert np.abs(a - b).max() <= 2e-2 * scale
    rows = tuned.tuning
    assert rows and all(r["source"] == "tuned" for r in rows), rows
    assert all(r["candidates"] >= 1 and r["time_s"] > 0 for r in rows)
    again = ptxc.compile(model, **kw, tuning="fast", timing_cache=cache)
    assert {r["source"] for r in again.tuning} == {"cache"}
    assert [r["tactic"] for r in again.tuning] == [r["tactic"] for r in rows]
