"""``graph.attention``: recognized by graph-opt from an exported BERT-style block and from the
ONNX Attention converter's composition; numerics against onnxruntime (interpreter and cpu), the
softmax in f32 for f16 inputs, the cases left alone and why (--explain), cuda compile + ptxas."""

import warnings

import numpy as np
import pytest
from onnx import helper

import ptxc
from support.attention_models import bert_attention
from support.new_ops import check_model, close, graph_model, onnxruntime_run
from ptxc.dialects.graph.attention import attention
from ptxc.ir import interpret
from ptxc.rewrite import PassManager


def _graph(model):
    return ptxc.explore(model, stage="graph")


@pytest.mark.slow
@pytest.mark.parametrize("form", ["div", "mul"])
def test_bert_block_is_one_attention_op(form):
    model, feeds = bert_attention(scale_form=form)
    text = _graph(model)
    assert text.count('"graph.attention"') == 1
    assert '"graph.softmax"' not in text
    assert "scale = 0.5" in text          # 1 / sqrt(4), whether divided or multiplied
    want = onnxruntime_run(model, feeds)["y"]
    close(ptxc.compile(model, target="cpu").run(feeds)["y"], want, 1e-5, 1e-5, "cpu")


@pytest.mark.slow
def test_bert_block_cuda_assembles():
    model, feeds = bert_attention(b=1, s=8, heads=2, d=8)
    check_model(model, feeds, rtol=1e-5, atol=1e-5)


def test_attention_op_reference_matches_composition_and_keeps_softmax_f32():
    rng = np.random.default_rng(3)
    q, kt, v = (rng.standard_normal(s) * 4 for s in ((2, 3, 5, 4), (2, 3, 4, 6), (2, 3, 6, 4)))
    mask = np.where(rng.random((2, 1, 5, 6)) < 0.3, -np.inf, 0.0)
    mask[0, 0, 1] = -np.inf                     # one row masked everywhere
    s = q @ kt * 0.25 + mask
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        p = np.nan_to_num(e / e.sum(-1, keepdims=True), nan=0.0)
    got = attention(q, kt, v, mask, 0.25, 1)
    np.testing.assert_allclose(got, p @ v, rtol=1e-12, atol=1e-12)
    # f16 inputs: the scores and softmax in f32, the probabilities rounded to f16 once
    q16, kt16, v16 = (a.astype(np.float16) for a in (q, kt, v))
    s32 = q16.astype(np.float32) @ kt16.astype(np.float32) * np.float32(0.25)
    e32 = np.exp(s32 - s32.max(-1, keepdims=True))
    p16 = (e32 / e32.sum(-1, keepdims=True)).astype(np.float16)
    want = (p16.astype(np.float32) @ v16.astype(np.float32)).astype(np.float16)
    got16 = attention(q16, kt16, v16, None, 0.25, 0)
    assert got16.dtype == np.float16
    np.testing.assert_array_equal(got16, want)


def _f16_attention_chain(seed: int, scale: float = 1.0):
    """An f16 export's attention, MatMul -> Softmax -> MatMul on q [1,2,6,8], kt [1,2,8,6],
    v [1,2,6,8] (standard normal times ``scale``), and its feeds; recognized as one
    graph.attention."""
    rng = np.random.default_rng(seed)
    q, kt, v = (rng.standard_normal(s).astype(np.float16) * np.float16(scale) for s in
                ((1, 2, 6, 8), (1, 2, 8, 6), (1, 2, 6, 8)))
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    feeds = {"q": q, "kt": kt, "v": v}
    model = graph_model(nodes, feeds, ["y"], opset=17)
    assert '"graph.attention"' in _graph(model)
    return model, feeds


@pytest.mark.slow
def test_f16_export_lowered_keeps_softmax_f32():
    """An f16 export's Softmax is f16; the fused op computes it in f32: through every lowering
    (check-numerics) the compiled result is the f32-softmax reference, closer to an f32 run."""
    model, feeds = _f16_attention_chain(seed=5, scale=3)
    q, kt, v = feeds["q"], feeds["kt"], feeds["v"]
    got = ptxc.compile(model, target="cpu").run(feeds)["y"]
    np.testing.assert_array_equal(got, attention(q, kt, v, None, 1.0, 0))
    module = ptxc.import_onnx(model)
    PassManager("recognize-patterns,lower-graph-to-tensor,lower-tensor-to-loop",
                check_numerics=True).run(module)
    np.testing.assert_array_equal(interpret(module, feeds)["y"], got)


def _attention_node_models():
    from onnx.backend.test.loader import load_model_tests
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [c for c in load_model_tests(kind="node")
                 if c.name.startswith("test_attention") and "expanded" not in c.name]
    return {c.name: c.model for c in cases}


@pytest.mark.slow
def test_attention_node_tests_are_recognized():
    """The converter's composition becomes one op in every Attention node test without a
    softcap or a qk_matmul_output read elsewhere (those keep the composition); the node tests
    themselves run in tests/test_onnx_backend*.py."""
    fused, kept = [], []
    for name, model in _attention_node_models().items():
        try:
            text = _graph(model)
        except ptxc.PtxcError:
            continue  # out of scope (another op) or inputs that must be bound
        (fused if '"graph.attention"' in text else kept).append(name)
    assert len(fused) >= 50, (len(fused), kept)
    assert all("softcap" in n or "qk_matmul" in n or "mode3" in n or "rank4_mask" in n
               for n in kept), kept
    for name in ("test_attention_4d", "test_attention_3d_causal", "test_attention_4d_gqa",
                 "test_attention_4d_attn_mask_bool"):
        assert name in fused


@pytest.mark.slow
def test_attention_node_against_onnxruntime():
    """Attention (opset 23) with a bool mask, GQA and causal, fused, vs onnxruntime."""
    rng = np.random.default_rng(8)
    q = rng.standard_normal((2, 4, 5, 8)).astype(np.float32)
    k = rng.standard_normal((2, 2, 7, 8)).astype(np.float32)
    v = rng.standard_normal((2, 2, 7, 8)).astype(np.float32)
    mask = rng.random((5, 7)) < 0.8
    node = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], is_causal=0,
                            scale=0.3)
    feeds = {"q": q, "k": k, "v": v, "mask": mask}
    model = graph_model([node], feeds, ["y"], opset=23)
    assert '"graph.attention"' in _graph(model)
    want = onnxruntime_run(model, feeds)["y"]
    close(ptxc.compile(model, target="cpu").run(feeds)["y"], want, 1e-5, 1e-5)


@pytest.mark.slow
def test_scores_read_elsewhere_are_explained():
    model, _ = bert_attention()
    # make the scaled scores a second output: the pattern must not swallow them
    model.graph.output.append(helper.make_tensor_value_info("scaled", 1, [2, 2, 6, 6]))
    text = ptxc.explore(model, stage="graph", explain=True)
    assert '"graph.attention"' not in text
    line = [ln for ln in text.splitlines() if "RecognizeAttention" in ln]
    assert any("pv not recognized as attention: scale has 2 users" in ln for ln in line), line


@pytest.mark.slow
def test_bert_block_under_fp16():
    """precision="fp16": the attention is taken apart for the precision pass, so its two matmuls
    are contractions with f16 factors (tensor cores on cuda) and f32 accumulators, the softmax
    f32; the result stays near onnxruntime's f32 one."""
    model, feeds = bert_attention()
    text = ptxc.explore(model, stage="graph", precision="fp16")
    assert '"graph.attention"' not in text
    # the QK and PV matmuls (they carry the fused attention's node names): f16 x f16
    attn = [ln for ln in text.splitlines() if ln.lstrip().startswith("})") and
            '"softmax"' in ln and "-> tensor<" in ln]
    assert len(attn) == 2, attn
    for ln in attn:
        operands = ln.split(":", 1)[1].split("->")[0]
        assert operands.count("xf16>") == 2, ln
    soft = [ln for ln in text.splitlines() if '"graph.softmax"' in ln]
    assert len(soft) == 1 and "xf16" not in soft[0], soft
    want = onnxruntime_run(model, feeds)["y"]
    got = ptxc.compile(model, target="cpu", precision="fp16").run(feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=0, atol=0.02 * np.abs(want).max())


def test_f16_attention_taken_apart_in_graph_ops():
    """An f16 attention under fp16 is taken apart into graph ops only (its casts to the f32
    compute type are graph.cast, not tensor ops lowered ahead of the lowering), and computes
    the op's reference: the f32 softmax, the probabilities rounded to f16 once."""
    model, feeds = _f16_attention_chain(seed=3)
    q, kt, v = feeds["q"], feeds["kt"], feeds["v"]
    text = ptxc.explore(model, stage="graph", precision="fp16")
    assert '"graph.attention"' not in text and '"tensor.' not in text
    got = ptxc.compile(model, target="cpu", precision="fp16").run(feeds)["y"]
    np.testing.assert_array_equal(got, attention(q, kt, v, None, 1.0, 0))


def test_attention_matmuls_get_tensor_cores_under_fp16_on_cuda():
    """The fused attention's QK and PV products are mapped to the mma schedule under fp16 on
    cuda (kept whole in f32 they went to the f32 tiled schedule)."""
    import collections

    from ptxc.compiler import as_module, run_stages
    from ptxc.rewrite.provenance import nodes_of
    model, _ = bert_attention(b=1, s=32, heads=2, d=16)
    m = as_module(model)
    run_stages(m, "loop", target="cuda", precision="fp16")
    launches = [op for op in m.walk() if op.name == "gpu.launch"]
    schedules = collections.Counter(op.attributes["schedule"] for op in launches)
    # q, k, v and output projections, QK and PV; no contraction left to the f32 tiled schedule
    assert schedules["mma"] == 6 and "tiled" not in schedules, \
        [(nodes_of(op), op.attributes["schedule"]) for op in launches]
