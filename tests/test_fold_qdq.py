"""fold-qdq: DQ -> conv/matmul/gemm -> Q folded into int8 ops. A QDQ model made by
onnxruntime.quantization.quantize_static matches onnxruntime's own run of it (within one
quantization step of the logits; in practice bit for bit) through the interpreter and cpu;
--explain says why a pair did not fold; check-numerics holds across the pass."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ptxc
from ptxc.ir.printer import print_ir
from ptxc.rewrite.explain import Explain
from ptxc.rewrite.pass_manager import PassManager
from qdq_models import quantize_qdq, small_cnn

RNG = np.random.default_rng(3)


def _x(n=1):
    return RNG.standard_normal((n, 3, 16, 16)).astype(np.float32)


@pytest.fixture(scope="module")
def qdq_cnn():
    samples = [{"x": _x()} for _ in range(8)]
    return quantize_qdq(small_cnn(), samples)


def _ort(model, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)[0]


def _logit_step(model) -> float:
    """The scale of the last DequantizeLinear (the logits' quantization step)."""
    dq = [n for n in model.graph.node if n.op_type == "DequantizeLinear"][-1]
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return float(init[dq.input[1]])


def test_qdq_cnn_folds_into_int8_layers(qdq_cnn):
    m = ptxc.import_onnx(qdq_cnn)
    ex = Explain()
    PassManager("graph-opt", check_numerics=True, explain=ex).run(m)
    text = print_ir(m, elide_constants=True)
    assert text.count('"graph.qlinear_conv"') == 3 and text.count('"graph.qlinear_matmul"') == 1
    for name in ('"graph.conv"', '"graph.fused_conv"', '"graph.gemm"', '"graph.matmul"'):
        assert name not in text
    fired = [r for r in ex.fired() if r.pattern == "FoldQDQ"]
    assert len(fired) == 4


@pytest.mark.parametrize("path", ["interpret", pytest.param("cpu", marks=pytest.mark.slow)])
def test_qdq_cnn_matches_onnxruntime(qdq_cnn, path):
    step = _logit_step(qdq_cnn)
    if path == "cpu":
        engine = ptxc.compile(qdq_cnn, target="cpu")
    for _ in range(4):
        x = _x()
        want = _ort(qdq_cnn, {"x": x})
        if path == "interpret":
            m = ptxc.import_onnx(qdq_cnn)
            PassManager("graph-opt").run(m)
            got = ptxc.interpret(m, {"x": x})["logits"]
        else:
            got = engine.run({"x": x})["logits"]
        assert np.max(np.abs(got - want)) <= step * 1.0001, (got, want, step)


def _model(nodes, inits, inputs, out_shape, opset=13):
    g = helper.make_graph(nodes, "g", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _dq_gemm(alpha=1.0, quantize_out=True):
    """x -> Q -> DQ -> Gemm(DQ(w), bias) [-> Q -> DQ]."""
    inits = {"s": np.float32(0.05), "z": np.int8(0), "wq": RNG.integers(-60, 60, (6, 4)).astype(
        np.int8), "ws": np.float32(0.01), "wz": np.int8(0),
        "bias": RNG.standard_normal(4).astype(np.float32), "ys": np.float32(0.1)}
    n = helper.make_node
    nodes = [n("QuantizeLinear", ["x", "s", "z"], ["xq"], name="qx"),
             n("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dqx"),
             n("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], name="dqw"),
             n("Gemm", ["xd", "wd", "bias"], ["g" if quantize_out else "y"], name="fc",
               alpha=alpha)]
    if quantize_out:
        nodes += [n("QuantizeLinear", ["g", "ys", "z"], ["gq"], name="qy"),
                  n("DequantizeLinear", ["gq", "ys", "z"], ["y"], name="dqy")]
    return _model(nodes, inits, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 6])],
                  [3, 4])


def test_float_bias_is_quantized_and_gemm_folds():
    m = _dq_gemm()
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    mod = ptxc.import_onnx(m)
    PassManager("graph-opt", check_numerics=True).run(mod)
    assert '"graph.qlinear_matmul"' in print_ir(mod, elide_constants=True)
    got = ptxc.interpret(mod, {"x": x})["y"]
    want = _ort(m, {"x": x})
    assert np.max(np.abs(got - want)) <= 0.1 * 1.0001


def test_layer_without_q_gets_a_float_result():
    m = _dq_gemm(quantize_out=False)
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    mod = ptxc.import_onnx(m)
    PassManager("graph-opt", check_numerics=True).run(mod)
    text = print_ir(mod, elide_constants=True)
    assert '"graph.qlinear_matmul"' in text and "tensor<3x4xf32> loc(\"fc\")" in text
    # int32 accumulation of the same integers, the bias rounded to the accumulator's scale
    assert np.allclose(ptxc.interpret(mod, {"x": x})["y"], _ort(m, {"x": x}), atol=0.05 * 0.01)


def test_explain_says_why_a_pair_did_not_fold():
    m = _dq_gemm(alpha=2.0)
    mod = ptxc.import_onnx(m)
    ex = Explain()
    PassManager("graph-opt", explain=ex).run(mod)
    why = [r.reason for r in ex.not_fired() if r.pattern == "FoldQDQ"]
    assert why == ['Q/DQ around fc -> qy not folded into an int8 op: gemm with alpha or beta '
                   'not 1, or transA']
    assert '"graph.gemm"' in print_ir(mod, elide_constants=True)   # left in float
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    assert np.array_equal(ptxc.interpret(mod, {"x": x})["y"], _ort(m, {"x": x}))


@pytest.mark.slow
def test_residual_epilogue_is_scaled_to_output_units():
    """DQ -> conv -> + DQ(residual) -> Q: the residual joins the int8 conv's epilogue in units
    of the output scale; equal to the unfolded float graph within one output step."""
    c = 4
    inits = {"s": np.float32(0.04), "z": np.int8(0), "ys": np.float32(0.07),
             "wq": RNG.integers(-60, 60, (c, c, 3, 3)).astype(np.int8),
             "ws": RNG.uniform(0.005, 0.02, c).astype(np.float32), "wz": np.zeros(c, np.int8)}
    n = helper.make_node
    nodes = [n("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             n("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             n("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
             n("Conv", ["xd", "wd"], ["cv"], name="conv", pads=[1, 1, 1, 1]),
             n("Add", ["cv", "xd"], ["a"], name="add"),
             n("QuantizeLinear", ["a", "ys", "z"], ["aq"], name="q"),
             n("DequantizeLinear", ["aq", "ys", "z"], ["y"])]
    shape = [1, c, 6, 6]
    m = _model(nodes, inits, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
               shape)
    mod = ptxc.import_onnx(m)
    PassManager("graph-opt").run(mod)
    text = print_ir(mod, elide_constants=True)
    assert '"graph.qlinear_conv"' in text and '"arith.div"' in text
    for _ in range(3):
        x = RNG.standard_normal(shape).astype(np.float32)
        ref = ptxc.interpret(ptxc.import_onnx(m), {"x": x})["y"]
        got = ptxc.interpret(mod, {"x": x})["y"]
        assert np.max(np.abs(got - ref)) <= 0.07 * 1.0001
        assert np.mean(got == ref) > 0.95
        assert np.array_equal(ptxc.compile(m, target="cpu").run({"x": x})["y"], got)


# ---- ResNet-50 (random weights) quantized by onnxruntime ------------------------------------------

@pytest.fixture(scope="module")
def qdq_resnet50():
    import light_models as L
    m = L.with_random_weights(L.load("resnet50"))
    qm = quantize_qdq(m, [L.random_inputs(m, seed=s) for s in range(4)])
    return qm, L.random_inputs(m, seed=99)


def _ort_level(model, feeds, level):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)[0]


@pytest.mark.slow
def test_qdq_resnet50_folds_and_matches_onnxruntime(qdq_resnet50):
    """All 53 convs and the FC fold. The logits stay within two quantization steps of
    onnxruntime's run of the QDQ model, which is how far onnxruntime's own optimized run (its
    QLinearConv/QLinearAdd fusions) and unoptimized run (float Conv between DQ and Q) are from
    each other on this model: with random weights the activations are large and a one-step
    rounding difference early in the network moves later ones."""
    qm, x = qdq_resnet50
    step = _logit_step(qm)
    mod = ptxc.import_onnx(qm)
    PassManager("graph-opt").run(mod)
    text = print_ir(mod, elide_constants=True)
    assert text.count('"graph.qlinear_conv"') == 53 and text.count('"graph.qlinear_matmul"') == 1
    assert '"graph.conv"' not in text and '"graph.fused_conv"' not in text
    opt = _ort_level(qm, x, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    raw = _ort_level(qm, x, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    ort_spread = np.max(np.abs(opt - raw)) / step
    got = next(iter(ptxc.interpret(mod, x).values()))
    cpu = next(iter(ptxc.compile(qm, target="cpu").run(x).values()))
    for out in (got, cpu):
        d = np.max(np.abs(out - opt)) / step
        assert d <= max(2.0, ort_spread) * 1.0001, (d, ort_spread)
    assert np.max(np.abs(cpu - got)) <= step * 1.0001
