"""fold-qdq: DQ -> conv/matmul/gemm -> Q folded into int8 ops. A QDQ model made by
onnxruntime.quantization.quantize_static matches onnxruntime's own run of it (within one
quantization step of the logits; ResNet-50 bit for bit against onnxruntime's optimized run with
every Q/DQ conv fused, see test_qdq_resnet50_folds_and_matches_onnxruntime) through the
interpreter and cpu; --explain says why a pair did not fold; check-numerics holds across the
pass."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ptxc
from ptxc.ir.printer import print_ir
from ptxc.rewrite.explain import Explain
from ptxc.rewrite.pass_manager import PassManager
from support.qdq_models import quantize_qdq, small_cnn

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
    # provenance: each int8 op names the Q/DQ nodes it took, and the float op's own fusions
    from ptxc.rewrite.provenance import nodes_of
    nodes = {n.name: n.op_type for n in qdq_cnn.graph.node}
    for op in m.walk():
        if op.name in ("graph.qlinear_conv", "graph.qlinear_matmul"):
            kinds = [nodes.get(n) for n in nodes_of(op)]
            assert kinds[0] in ("Conv", "Gemm", "MatMul") and "DequantizeLinear" in kinds, kinds


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


def test_a_float_bias_is_rounded_to_the_nearest_accumulator_step():
    """A float bias of a layer with an int8 result becomes int32 in units of xs * ws: the
    nearest step (rint), not the step toward zero; the reference is computed here."""
    m = _dq_gemm()
    bias = np.array([0.0004, -0.0004, 1.23478, -0.9878], np.float32)   # steps 0.8, ..., -1975.6
    t = next(t for t in m.graph.initializer if t.name == "bias")
    t.CopyFrom(numpy_helper.from_array(bias, "bias"))
    mod = ptxc.import_onnx(m)
    PassManager("graph-opt").run(mod)
    from ptxc.ir.spec import lookup
    from ptxc.rewrite.passes.fold_constants import constant_value
    op = next(op for op in mod.walk() if op.name == "graph.qlinear_matmul")
    got = constant_value(lookup(op.name).groups(op)["B"])
    step = np.float64(np.float32(0.05) * np.float32(0.01))   # xs * ws, in float32
    want = np.rint(bias.astype(np.float64) / step)
    assert not np.array_equal(want, np.trunc(bias / step))   # the check can tell them apart
    np.testing.assert_array_equal(np.asarray(got).reshape(-1), want.astype(np.int32))


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


def _residual_model(after_add=()):
    """DQ -> conv -> + DQ(x) -> [after_add nodes] -> Q -> DQ, 4 channels, 6x6."""
    c = 4
    inits = {"s": np.float32(0.04), "z": np.int8(0), "ys": np.float32(0.07),
             "wq": RNG.integers(-60, 60, (c, c, 3, 3)).astype(np.int8),
             "ws": RNG.uniform(0.005, 0.02, c).astype(np.float32), "wz": np.zeros(c, np.int8)}
    n = helper.make_node
    nodes = [n("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             n("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             n("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
             n("Conv", ["xd", "wd"], ["cv"], name="conv", pads=[1, 1, 1, 1]),
             n("Add", ["cv", "xd"], ["a0"], name="add")]
    last = "a0"
    for i, kind in enumerate(after_add):
        nodes.append(n(kind, [last], [f"a{i + 1}"], name=f"{kind.lower()}{i}"))
        last = f"a{i + 1}"
    nodes += [n("QuantizeLinear", [last, "ys", "z"], ["aq"], name="q"),
              n("DequantizeLinear", ["aq", "ys", "z"], ["y"])]
    shape = [1, c, 6, 6]
    return _model(nodes, inits, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                  shape), shape


def _assert_within_one_output_step(m, shape, step=0.07):
    mod = ptxc.import_onnx(m)
    PassManager("graph-opt").run(mod)
    for _ in range(3):
        x = RNG.standard_normal(shape).astype(np.float32)
        ref = ptxc.interpret(ptxc.import_onnx(m), {"x": x})["y"]
        got = ptxc.interpret(mod, {"x": x})["y"]
        assert np.max(np.abs(got - ref)) <= step * 1.0001
        assert np.mean(got == ref) > 0.95
        assert np.array_equal(ptxc.compile(m, target="cpu").run({"x": x})["y"], got)
    return print_ir(mod, elide_constants=True)


@pytest.mark.slow
def test_residual_epilogue_is_scaled_to_output_units():
    """DQ -> conv -> + DQ(residual) -> relu -> Q: the residual joins the int8 conv's epilogue in
    units of the output scale, the division by it distributed to the leaves (the residual's DQ
    scale becomes 0.04 / 0.07; no division left); equal to the unfolded float graph within one
    output step."""
    m, shape = _residual_model(["Relu"])
    text = _assert_within_one_output_step(m, shape)
    assert '"graph.qlinear_conv"' in text and '"arith.div"' not in text
    ratio = np.float32(0.04) / np.float32(0.07)
    assert f"dense<{str(ratio)}>" in text, text


@pytest.mark.slow
def test_nonlinear_residual_epilogue_keeps_the_division():
    """A residual epilogue that does more than add, compare and scale (a sigmoid) cannot take
    the output scale into its leaves: it stays ``old(v * ys) / ys``, still within one step."""
    m, shape = _residual_model(["Sigmoid"])
    text = _assert_within_one_output_step(m, shape)
    assert '"graph.qlinear_conv"' in text and '"arith.div"' in text


# ---- ResNet-50 (random weights) quantized by onnxruntime ------------------------------------------

@pytest.fixture(scope="module")
def qdq_resnet50():
    from support import light_models as L
    m = L.with_random_weights(L.load("resnet50"))
    qm = quantize_qdq(m, [L.random_inputs(m, seed=s) for s in range(4)])
    return qm, L.random_inputs(m, seed=99)


def _ort_level(model, feeds, level, int8_allowed=False):
    """onnxruntime's run of ``model`` at optimization ``level``; ``int8_allowed`` sets
    ``session.qdqisint8allowed``: every DQ -> Conv -> Q with int8 activations becomes a fused
    QLinearConv (onnxruntime's default on ARM64; on x86 it is off)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    if int8_allowed:
        so.add_session_config_entry("session.qdqisint8allowed", "1")
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)[0]


def resnet50_references(qm, x):
    """(step, onnxruntime's optimized run with every Q/DQ conv fused, its default optimized
    run on this machine)."""
    all_ = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return (_logit_step(qm), _ort_level(qm, x, all_, int8_allowed=True), _ort_level(qm, x, all_))


def assert_near_fused_run(out, fused, x86, step, what: str) -> float:
    """``out`` (logits) within one quantization ``step`` of onnxruntime's fused run and equal
    to it bit for bit on at least 99% of the logits; prints both distances and returns the
    one from onnxruntime's x86 default run (``x86``), in steps."""
    d = np.max(np.abs(out - fused)) / step
    exact = np.mean(out == fused)
    from_x86 = np.max(np.abs(out - x86)) / step
    print(f"{what}: {d:.3f} steps from onnxruntime's fused run, bit-exact {exact:.1%}; "
          f"{from_x86:.3f} from its x86 default run")
    assert d <= 1.0001, d
    assert exact >= 0.99, exact
    return from_x86


@pytest.mark.slow
def test_qdq_resnet50_folds_and_matches_onnxruntime(qdq_resnet50):
    """All 53 convs and the FC fold, and the logits are within one quantization step of
    onnxruntime's optimized (ORT_ENABLE_ALL) run of the QDQ model through the interpreter and
    cpu; in fact equal to it bit for bit, and the cpu engine equal to the interpreter.

    The reference run fuses every DQ -> Conv -> Q into a QLinearConv, the defined semantics
    of the int8 layer that ptxc folds to (``session.qdqisint8allowed=1``, onnxruntime's default
    on ARM64). onnxruntime's default on x86 leaves the 20 convs whose int8 input has a second
    reader (the residual Sum, or the sibling conv after the max pool) in float: the DQ that
    feeds two node units is duplicated, QDQS8ToU8Transformer then skips that Q (it has two
    readers), and the Conv selector takes no int8 activations unless int8 is allowed; MLAS's
    float convolution rounds 0 to 3 int8 outputs per such layer the other way, and that run's
    logits lie 2 steps from onnxruntime's fused run. ptxc is no further from it than
    onnxruntime's own fused run is (they are equal)."""
    qm, x = qdq_resnet50
    mod = ptxc.import_onnx(qm)
    PassManager("graph-opt").run(mod)
    text = print_ir(mod, elide_constants=True)
    assert text.count('"graph.qlinear_conv"') == 53 and text.count('"graph.qlinear_matmul"') == 1
    assert '"graph.conv"' not in text and '"graph.fused_conv"' not in text
    step, fused, x86 = resnet50_references(qm, x)
    got = next(iter(ptxc.interpret(mod, x).values()))
    cpu = next(iter(ptxc.compile(qm, target="cpu").run(x).values()))
    ort_spread = np.max(np.abs(fused - x86)) / step
    for what, out in (("interpreter", got), ("cpu", cpu)):
        from_x86 = assert_near_fused_run(out, fused, x86, step,
                                         f"{what} (onnxruntime's own runs: {ort_spread:.3f})")
        assert from_x86 <= ort_spread * 1.0001
    assert np.array_equal(cpu, got)


def qdq_small_resnet():
    """qdq_models.small_resnet quantized by onnxruntime, and a maker of its inputs."""
    from support.qdq_models import small_resnet
    rng = np.random.default_rng(1)

    def x():
        return {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    return quantize_qdq(small_resnet(), [x() for _ in range(8)]), x


@pytest.mark.parametrize("path", ["interpret", pytest.param("cpu", marks=pytest.mark.slow)])
def test_qdq_small_resnet_equals_onnxruntime_bit_for_bit(path):
    """ResNet-50's layer kinds, small: float batch norms between DQ and Q, a residual Sum and
    relu, an AveragePool, Reshape, the FC. Equal to onnxruntime's fused optimized run
    (resnet50_references) bit for bit."""
    qm, make_x = qdq_small_resnet()
    if path == "cpu":
        run = ptxc.compile(qm, target="cpu").run
    else:
        mod = ptxc.import_onnx(qm)
        PassManager("graph-opt").run(mod)
        assert print_ir(mod, elide_constants=True).count('"graph.qlinear_conv"') == 3

        def run(x):
            return ptxc.interpret(mod, x)
    for _ in range(4):
        x = make_x()
        fused = _ort_level(qm, x, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, int8_allowed=True)
        assert np.array_equal(run(x)["logits"], fused)


# ---- a quantized max pool runs on int8 (QuantizeBeforeMaxPool) ------------------------------------

@pytest.mark.parametrize("to, zp, pads, ceil", [(np.int8, 0, [1, 1, 1, 1], 0),
                                                 (np.uint8, 128, [1, 1, 1, 1], 0),
                                                 (np.int8, -5, [0, 0, 1, 1], 1)])
def test_quantize_moves_before_max_pool_exactly(to, zp, pads, ceil):
    """Q(max_pool(x)) -> max_pool(Q(x)): the pool then reads int8, bit for bit the same result
    (quantization is monotone; the int8 pool's padding is what Q makes of -inf), values past
    the int8 range and all-negative windows included."""
    n = helper.make_node
    nodes = [n("MaxPool", ["x"], ["p"], name="pool", kernel_shape=[3, 3], strides=[2, 2],
               pads=pads, ceil_mode=ceil),
             n("QuantizeLinear", ["p", "s", "z"], ["q"], name="q"),
             n("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq")]
    shape = [2, 3, 9, 9]
    out = [2, 3, 5, 5] if ceil or pads[0] else [2, 3, 4, 4]
    m = _model(nodes, {"s": np.float32(0.05), "z": np.asarray(zp, to)},
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)], out)
    mod = ptxc.import_onnx(m)
    PassManager("fold-qdq").run(mod)
    text = print_ir(mod, elide_constants=True)
    pool = [ln for ln in text.splitlines() if '"graph.max_pool"' in ln]
    assert len(pool) == 1 and ("xi8>" in pool[0] or "xui8>" in pool[0]), pool
    for scale in (1.0, 20.0, -3.0):  # within, past and below the int8 range
        x = (RNG.standard_normal(shape) * scale).astype(np.float32)
        ref = ptxc.interpret(ptxc.import_onnx(m), {"x": x})["y"]
        assert np.array_equal(ptxc.interpret(mod, {"x": x})["y"], ref)
        assert np.array_equal(ptxc.compile(m, target="cpu").run({"x": x})["y"], ref)


def test_max_pool_with_other_users_keeps_its_float_input():
    """The pool's float value also read elsewhere: the Q stays after it."""
    n = helper.make_node
    nodes = [n("MaxPool", ["x"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             n("QuantizeLinear", ["p", "s", "z"], ["q"]),
             n("DequantizeLinear", ["q", "s", "z"], ["d"]),
             n("Add", ["d", "p"], ["y"])]
    m = _model(nodes, {"s": np.float32(0.05), "z": np.int8(0)},
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
               [1, 2, 2, 2])
    mod = ptxc.import_onnx(m)
    PassManager("fold-qdq").run(mod)
    (pool,) = [ln for ln in print_ir(mod).splitlines() if '"graph.max_pool"' in ln]
    assert "xf32>) -> tensor<1x2x2x2xf32>" in pool


def test_implicit_int8_stem_writes_int8_into_an_int8_max_pool():
    """ResNet's stem (conv -> relu -> max pool -> conv) under implicit int8: the stem conv folds
    with an int8 result and the pool reads int8; the cpu engine stays within one output step of
    the Q/DQ graph as quantize_int8 wrote it."""
    from ptxc.calib import calibrate, quantize_int8
    n = helper.make_node
    w0 = (RNG.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    w1 = (RNG.standard_normal((4, 8, 1, 1)) * 0.3).astype(np.float32)
    nodes = [n("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             n("Relu", ["c0"], ["r0"], name="relu0"),
             n("MaxPool", ["r0"], ["p"], name="pool", kernel_shape=[3, 3], strides=[2, 2],
               pads=[1, 1, 1, 1]),
             n("Conv", ["p", "w1"], ["y"], name="conv1")]
    m = _model(nodes, {"w0": w0, "w1": w1},
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
               [1, 4, 4, 4])
    data = [{"x": RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(4)]
    table = calibrate(m, data, "minmax")
    q = quantize_int8(m, table)
    ref_mod = quantize_int8(m, table)
    mod = quantize_int8(m, table)
    PassManager("graph-opt").run(mod)
    text = print_ir(mod, elide_constants=True)
    (pool,) = [ln for ln in text.splitlines() if '"graph.max_pool"' in ln]
    assert "xi8>) -> tensor<" in pool and text.count('"graph.qlinear_conv"') == 2
    step = float(table.scale("p"))
    engine = ptxc.compile(q, target="cpu")
    for d in data:
        ref = ptxc.interpret(ref_mod, d)["y"]
        got = engine.run(d)["y"]
        assert np.max(np.abs(got - ref)) <= 2 * step * float(np.abs(w1).sum(1).max()) + 1e-6
