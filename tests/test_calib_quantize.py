"""ptxc.calib.quantize_int8: implicit INT8 from a calibration table (Q/DQ pairs that fold-qdq
turns into int8 layers): which layers go int8, numerics against fp32 and across paths, the
cache giving identical modules, per-channel weight quantization."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import ptxc
from ptxc.calib import calibrate, quantize_int8
from ptxc.calib.quantize import quantize_weights
from ptxc.ir.printer import print_ir
from ptxc.rewrite.pass_manager import PassManager
from support.qdq_models import small_cnn

RNG = np.random.default_rng(11)


def _data(n):
    return [{"x": RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(n)]


@pytest.fixture(scope="module")
def table():
    return calibrate(small_cnn(), _data(16), "minmax", progress=False)


def _opt(module):
    m = module.clone()
    PassManager("graph-opt").run(m)
    return m, print_ir(m, elide_constants=True)


@pytest.mark.slow
def test_all_layers_go_int8_and_stay_close_to_fp32(table):
    report = []
    q = quantize_int8(small_cnn(), table, report=report)
    assert [(r[0], r[1]) for r in report] == [("conv1", "int8"), ("conv2", "int8"),
                                               ("conv3", "int8"), ("fc", "int8")]
    m, text = _opt(q)
    assert text.count('"graph.qlinear_conv"') == 3 and text.count('"graph.qlinear_matmul"') == 1
    assert '"graph.conv"' not in text and '"graph.fused_conv"' not in text
    engine = ptxc.compile(q, target="cpu")
    f32 = ptxc.import_onnx(small_cnn())
    for d in _data(4):
        ref = ptxc.interpret(f32, d)["logits"].ravel()
        got = ptxc.interpret(m, d)["logits"].ravel()
        cos = float(ref @ got / np.linalg.norm(ref) / np.linalg.norm(got))
        assert cos > 0.99, cos
        assert np.allclose(engine.run(d)["logits"].ravel(), got, rtol=1e-5, atol=1e-5)


def test_excluded_layer_stays_fp32(table):
    report = []
    q = quantize_int8(small_cnn(), table, exclude={"conv2"}, report=report)
    assert ("conv2", "fp32", "excluded (precision override)") in report
    _, text = _opt(q)
    assert text.count('"graph.qlinear_conv"') == 2 and '"graph.fused_conv"' in text


def test_uncalibrated_input_stays_fp32():
    report = []
    quantize_int8(small_cnn(), {"x": 4.0}, report=report)
    assert report[0][:2] == ("conv1", "int8")
    assert report[1] == ("conv2", "fp32", "input 'r1' has no calibrated range")


def test_an_input_that_was_all_zeros_stays_fp32():
    """A range of 0 would be a scale of 0: the layer keeps fp32 and the report says why."""
    report = []
    q = quantize_int8(small_cnn(), {"x": 0.0, "r1": 2.0}, report=report)
    assert report[0] == ("conv1", "fp32", "input 'x' is all zeros on the calibration data")
    assert report[1][:2] == ("conv2", "int8")
    from ptxc.rewrite.passes.fold_constants import constant_value
    for op in q.walk():
        if op.name == "graph.quantize_linear":
            assert np.all(constant_value(op.operands[1]) > 0)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_weights_are_scaled_per_output_column(trans_b):
    """Gemm's output channels are B's columns (rows under transB): one scale per output channel,
    max |w| of that channel / 127 (the reference here), with columns of very different sizes."""
    from ptxc.rewrite.passes.fold_constants import constant_value
    k, n = 6, 4
    w = RNG.standard_normal((k, n)).astype(np.float32) * np.array([0.01, 1, 10, 100],
                                                                  np.float32)
    b = w.T.copy() if trans_b else w
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transB=trans_b)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])],
        [numpy_helper.from_array(b, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    q = quantize_int8(m, {"x": 2.0})
    dq = [op for op in q.walk() if op.name == "graph.dequantize_linear"
          and constant_value(op.operands[0]) is not None]
    assert len(dq) == 1
    scale = constant_value(dq[0].operands[1])
    np.testing.assert_allclose(scale, np.abs(w).max(axis=0) / 127, rtol=1e-6)
    wq = constant_value(dq[0].operands[0]).astype(np.float32)
    back = wq * (scale[None, :] if not trans_b else scale[:, None])
    assert np.all(np.abs(back - b) <= (scale[None, :] if not trans_b else scale[:, None]) * 0.5001)


def test_cache_gives_the_same_quantized_module(tmp_path):
    cache = str(tmp_path / "c.json")
    t1 = calibrate(small_cnn(), _data(4), "percentile", cache=cache, progress=False)
    t2 = calibrate(small_cnn(), None, "percentile", cache=cache, progress=False)
    assert t2.from_cache
    a = print_ir(quantize_int8(small_cnn(), t1))
    b = print_ir(quantize_int8(small_cnn(), t2))
    assert a == b


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([(4, 3, 3, 3), (5, 7), (2, 1, 1, 1)]),
       st.floats(1e-3, 1e3))
def test_weight_round_trip_within_half_a_step(seed, shape, scale):
    w = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)
    for axis in (0, len(shape) - 1):
        q, s = quantize_weights(w, axis)
        bshape = [1] * w.ndim
        bshape[axis] = -1
        back = q.astype(np.float32) * s.reshape(bshape)
        assert np.all(np.abs(back - w) <= s.reshape(bshape) * 0.5001)
        assert q.min() >= -127 and q.max() <= 127
        other = tuple(i for i in range(w.ndim) if i != axis)
        assert np.all(np.abs(q).max(axis=other) == 127)   # each channel uses its full range


def test_sibling_layers_reading_one_input_share_one_pair():
    """ResNet's projection shortcut and its first branch conv read the same tensor: both go int8
    on one Q/DQ pair."""
    from onnx import TensorProto, helper, numpy_helper
    w = {k: numpy_helper.from_array(RNG.standard_normal((4, 3, 1, 1)).astype(np.float32), k)
         for k in ("wa", "wb")}
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a"),
         helper.make_node("Conv", ["x", "wb"], ["b"], name="conv_b"),
         helper.make_node("Add", ["a", "b"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], list(w.values()))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    report = []
    q = quantize_int8(m, {"x": 3.0}, report=report)
    assert [r[:2] for r in report] == [("conv_a", "int8"), ("conv_b", "int8")]
    assert print_ir(q, elide_constants=True).count('"graph.quantize_linear"') == 1


@pytest.mark.slow
def test_compile_precision_int8_with_calibration_data_table_and_cache(tmp_path):
    import onnx
    data = _data(4)
    cache = str(tmp_path / "c.json")
    e = ptxc.compile(small_cnn(), target="cpu", precision="int8", calibration=data,
                     calibration_cache=cache, precision_overrides={"fc": "fp32"})
    assert e.precision == "int8"
    assert [r[:2] for r in e.layer_precisions] == [("conv1", "int8"), ("conv2", "int8"),
                                                    ("conv3", "int8"), ("fc", "fp32")]
    table = calibrate(small_cnn(), None, "entropy", cache=cache, progress=False)
    assert table.from_cache
    path = str(tmp_path / "m.onnx")
    onnx.save(small_cnn(), path)
    e2 = ptxc.compile(path, target="cpu", precision="int8", calibration=table,
                      precision_overrides={"fc": "fp32"})
    d = _data(1)[0]
    assert np.array_equal(e.run(d)["logits"], e2.run(d)["logits"])
    # the cache alone (no data) gives the same engine numerics
    e3 = ptxc.compile(small_cnn(), target="cpu", precision="int8", calibration_cache=cache,
                      precision_overrides={"fc": "fp32"})
    assert np.array_equal(e.run(d)["logits"], e3.run(d)["logits"])


@pytest.mark.slow
def test_int8_cpu_plan_round_trip(tmp_path):
    """An int8 cpu engine (requantization: clamps, relu, roundeven, the exact quotient's fmas)
    saves to a plan and loads back: its IR declares only intrinsics the plan check allows, and
    the loaded engine gives the same bits."""
    e = ptxc.compile(small_cnn(), target="cpu", precision="int8", calibration=_data(2))
    path = tmp_path / "int8.plan"
    e.save(path)
    loaded = ptxc.load(path)
    d = _data(1)[0]
    assert loaded.run(d)["logits"].tobytes() == e.run(d)["logits"].tobytes()


def _projection_block(B=2, C=16, M=32, HW=6, seed=0, add="Add"):
    """ResNet's first block in small: conv0 -> relu -> (conv3 + downsample: two 1x1 convs of
    the same input, the projection shortcut) -> add -> relu -> next conv. ``add``: the ONNX op
    that joins the branches (torch exports Add; ONNX's model zoo ResNet-50 has Sum)."""
    rng = np.random.default_rng(seed)
    inits = []

    def w(name, shape):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * np.sqrt(
            2 / np.prod(shape[1:]))).astype(np.float32), name))
        return name
    n = helper.make_node
    nodes = [n("Conv", ["x", w("w0", (C, C, 1, 1))], ["t0"], name="conv0"),
             n("Relu", ["t0"], ["x1"], name="relu0"),
             n("Conv", ["x1", w("w1", (M, C, 1, 1))], ["c3"], name="conv3"),
             n("Conv", ["x1", w("wd", (M, C, 1, 1))], ["ds"], name="downsample"),
             n(add, ["c3", "ds"], ["a"], name="add"),
             n("Relu", ["a"], ["r"], name="relu"),
             n("Conv", ["r", w("w2", (C, M, 1, 1))], ["y"], name="next")]
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "proj", [vi("x", TensorProto.FLOAT, [B, C, HW, HW])],
                          [vi("y", TensorProto.FLOAT, [B, C, HW, HW])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("add", ["Add", "Sum"])
def test_projection_shortcut_is_stored_int8_and_read_as_the_residual(add):
    """add(conv3, downsample) of two int8 layers: the shortcut gets a Q/DQ pair, so after
    graph-opt the downsample conv has an int8 result and conv3 takes the add (and relu) into
    its epilogue, reading that int8 tensor (a DQ of it) as its residual; no float conv is
    left; the shortcut conv stores int8 at the loop stage. The int8 engine stays close to fp32."""
    m = _projection_block(add=add)
    rng = np.random.default_rng(1)
    data = [{"x": rng.standard_normal((2, 16, 6, 6)).astype(np.float32)} for _ in range(4)]
    table = calibrate(m, data, "minmax", progress=False)
    q = quantize_int8(m, table)
    PassManager("graph-opt").run(q)
    text = print_ir(q, elide_constants=True)
    assert '"graph.conv"' not in text
    assert '"graph.add"' not in text and '"graph.sum"' not in text
    assert text.count('"graph.qlinear_conv"') == 4
    ds = [ln for ln in text.splitlines() if 'loc("downsample")' in ln]
    assert ds and "xi8>" in ds[0].rsplit("->", 1)[1], ds
    conv3 = next(ln for ln in text.splitlines() if 'loc("conv3")' in ln)
    assert "xi8>" in conv3.rsplit("->", 1)[1] and "ptxc.fused" in conv3 and '"add"' in conv3
    # at the loop stage the shortcut conv's requantization stays in its own nest (it stores
    # int8), not folded into conv3's epilogue, which would leave it storing its i32 sums
    # (tensor_passes._epilogue_of)
    from ptxc.compiler import run_stages
    q = quantize_int8(m, table)
    run_stages(q, "loop", target="cpu")
    allocs = [o.results[0].type for o in q.walk() if o.name == "loop.alloc"]
    assert all(t.element.name == "i8" for t in allocs), allocs
    x = data[0]
    ref = ptxc.compile(m, target="cpu").run(x)["y"]
    got = ptxc.compile(m, target="cpu", precision="int8", calibration=table).run(x)["y"]
    cos = float(np.sum(ref * got) / (np.linalg.norm(ref) * np.linalg.norm(got)))
    assert cos > 0.999, cos


def _conv_bn_model(B=2, C=8, M=16, HW=6, seed=0):
    """conv -> batch norm -> relu -> conv -> batch norm: the form ONNX's model zoo keeps."""
    rng = np.random.default_rng(seed)
    inits = []

    def c(name, arr):
        inits.append(numpy_helper.from_array(arr.astype(np.float32), name))
        return name

    def bn(i, ch):
        return [c(f"g{i}", rng.uniform(0.5, 2.0, ch)), c(f"b{i}", rng.standard_normal(ch)),
                c(f"m{i}", rng.standard_normal(ch) * 0.1), c(f"v{i}", rng.uniform(0.5, 2.0, ch))]
    n = helper.make_node
    nodes = [n("Conv", ["x", c("w0", rng.standard_normal((M, C, 3, 3)) * 0.2)], ["t0"],
               name="conv0", pads=[1, 1, 1, 1]),
             n("BatchNormalization", ["t0"] + bn(0, M), ["t1"], name="bn0"),
             n("Relu", ["t1"], ["t2"], name="relu0"),
             n("Conv", ["t2", c("w1", rng.standard_normal((C, M, 1, 1)) * 0.3)], ["t3"],
               name="conv1"),
             n("BatchNormalization", ["t3"] + bn(1, C), ["y"], name="bn1")]
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "cbn", [vi("x", TensorProto.FLOAT, [B, C, HW, HW])],
                          [vi("y", TensorProto.FLOAT, [B, C, HW, HW])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_batch_norms_fold_into_the_weights_before_quantization():
    """quantize_int8 folds each batch norm into its conv's float weights and bias first (as
    TensorRT does), so the per-channel int8 weight scales absorb the batch norm and no float
    scale and shift is left after the int8 layer; the int8 engine stays close to fp32."""
    m = _conv_bn_model()
    rng = np.random.default_rng(2)
    data = [{"x": rng.standard_normal((2, 8, 6, 6)).astype(np.float32)} for _ in range(4)]
    table = calibrate(m, data, "minmax", progress=False)
    report = []
    q = quantize_int8(m, table, report=report)
    text = print_ir(q, elide_constants=True)
    assert "graph.batch_normalization" not in text
    assert [(r[0], r[1]) for r in report] == [("conv0", "int8"), ("conv1", "int8")]
    PassManager("graph-opt").run(q)
    text = print_ir(q, elide_constants=True)
    assert text.count('"graph.qlinear_conv"') == 2 and '"graph.mul"' not in text
    x = data[0]
    ref = ptxc.compile(m, target="cpu").run(x)["y"]
    got = ptxc.compile(m, target="cpu", precision="int8", calibration=table).run(x)["y"]
    cos = float(np.sum(ref * got) / (np.linalg.norm(ref) * np.linalg.norm(got)))
    assert cos > 0.999, cos


def test_compile_int8_errors():
    from ptxc.errors import CompileError
    with pytest.raises(CompileError, match="needs calibration"):
        ptxc.compile(small_cnn(), target="cpu", precision="int8")
    with pytest.raises(CompileError, match="is for precision='int8'"):
        ptxc.compile(small_cnn(), target="cpu", calibration=_data(1))
    with pytest.raises(CompileError, match="precision_overrides"):
        ptxc.compile(small_cnn(), target="cpu", precision="int8", calibration=_data(1),
                     precision_overrides={"fc": "fp64"})


@pytest.mark.slow
def test_cli_int8_with_calib_folder(tmp_path, capsys):
    import onnx
    from ptxc.cli import main
    path = str(tmp_path / "m.onnx")
    onnx.save(small_cnn(), path)
    d = tmp_path / "calib"
    d.mkdir()
    for i, b in enumerate(_data(2)):
        np.save(d / f"{i}.npy", b["x"])
    assert main(["run", path, "--target", "cpu", "--int8", "--calib", str(d),
                 "--calib-cache", str(tmp_path / "c.json")]) == 0
    assert (tmp_path / "c.json").exists()
    assert main(["compile", path, "--target", "cpu", "--calib", str(d)]) != 0
    assert "--calib and --calib-cache are for --int8" in capsys.readouterr().err
