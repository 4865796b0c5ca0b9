"""INT8 on the cuda target (integer loops; the int8 tensor-core kernels are not there yet): the
QDQ small CNN (tests/support/qdq_models.py, quantized by onnxruntime) folded into int8 layers and
run on the GPU gives the cpu engine's logits and stays within one logit step of onnxruntime;
one-node QLinearConv/QLinearMatMul/Q/DQ models equal onnxruntime bit for bit. Skipped without a GPU."""

import numpy as np
import onnxruntime as ort
import pytest

import ptxc
from support.qdq_models import quantize_qdq, small_cnn
from test_fold_qdq import _logit_step
import test_quant_ops as tq

pytestmark = pytest.mark.gpu
RNG = np.random.default_rng(5)


def test_qdq_cnn_on_cuda_matches_cpu_and_onnxruntime():
    qm = quantize_qdq(small_cnn(), [{"x": RNG.standard_normal((1, 3, 16, 16)).astype(
        np.float32)} for _ in range(8)])
    step = _logit_step(qm)
    gpu = ptxc.compile(qm, target="cuda")
    cpu = ptxc.compile(qm, target="cpu")
    s = ort.InferenceSession(qm.SerializeToString(), providers=["CPUExecutionProvider"])
    for _ in range(4):
        x = {"x": RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)}
        g = gpu.run(x)["logits"]
        assert np.array_equal(g, cpu.run(x)["logits"])
        assert np.max(np.abs(g - s.run(None, x)[0])) <= step * 1.0001


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_ops_on_cuda_equal_onnxruntime(dtype, monkeypatch):
    """The cpu tests of test_quant_ops, with ptxc.compile's target switched to cuda."""
    real = ptxc.compile
    monkeypatch.setattr(ptxc, "compile", lambda m, target="auto", **k: real(m, "cuda", **k))
    tq.test_qlinear_conv_matches_onnxruntime(True, dtype)
    tq.test_dequantize_linear_matches_onnxruntime(dtype, True)


def test_qdq_small_resnet_on_cuda_equals_onnxruntime_bit_for_bit():
    """qdq_models.small_resnet (float batch norms and an AveragePool between Q/DQ, a residual
    Sum, the FC) on cuda equals onnxruntime's fused optimized run bit for bit, as on cpu
    (test_fold_qdq.test_qdq_small_resnet_equals_onnxruntime_bit_for_bit)."""
    from test_fold_qdq import _ort_level, qdq_small_resnet
    qm, make_x = qdq_small_resnet()
    gpu = ptxc.compile(qm, target="cuda")
    for _ in range(4):
        x = make_x()
        fused = _ort_level(qm, x, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, int8_allowed=True)
        assert np.array_equal(gpu.run(x)["logits"], fused)


@pytest.mark.parametrize("case", ["bn", "pool7", "pool3s2p1"])
def test_float_ops_between_qdq_on_cuda_equal_onnxruntime(case):
    """BatchNormalization and AveragePool on cuda round as onnxruntime's CPU kernels, bit for
    bit (tests/test_ort_rounding.py on cpu): no FMA contraction of x * s + t (PTX mul.rn/add.rn),
    the window sum in order (the reduction schedule declines ordered sums)."""
    import test_ort_rounding as T
    rng = np.random.default_rng(2)
    if case == "bn":
        m, shape = T._bn()
        x = (rng.standard_normal(shape) * 20).astype(np.float32)
    else:
        k, s, p = ([7, 7], [1, 1], [0] * 4) if case == "pool7" else ([3, 3], [2, 2], [1] * 4)
        shape = [1, 2048, 7, 7]
        out = [1, 2048] + [(7 + 2 * p[0] - k[0]) // s[0] + 1] * 2
        m = T._model(T.helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=k, strides=s,
                                        pads=p), {}, shape, out)
        x = (np.abs(rng.standard_normal(shape)) * 50).astype(np.float32)
    got = ptxc.compile(m, target="cuda").run({"x": x})["y"]
    assert np.array_equal(got, T._ort(m, x))


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_qdq_resnet50_on_cuda_matches_onnxruntime(layout):
    """The issue's bar on cuda: the QDQ ResNet-50 (quantize_static, random weights) within one
    logit step of onnxruntime's optimized run with every Q/DQ conv fused; measured equal on
    interpreter and cpu (test_fold_qdq.test_qdq_resnet50_folds_and_matches_onnxruntime), and
    on cuda asserted bit-exact on at least 99% of the logits."""
    from support import light_models as L
    from test_fold_qdq import assert_near_fused_run, resnet50_references
    m = L.with_random_weights(L.load("resnet50"))
    qm = quantize_qdq(m, [L.random_inputs(m, seed=s) for s in range(4)])
    x = L.random_inputs(m, seed=99)
    step, fused, x86 = resnet50_references(qm, x)
    got = next(iter(ptxc.compile(qm, target="cuda", layout=layout).run(x).values()))
    assert_near_fused_run(got, fused, x86, step, f"cuda {layout}")
