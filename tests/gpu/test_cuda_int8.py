"""INT8 on the cuda target (integer loops; the int8 tensor-core kernels are not there yet): the
QDQ small CNN (tests/qdq_models.py, quantized by onnxruntime) folded into int8 layers and run on
the GPU gives the cpu engine's logits and stays within one logit step of onnxruntime; one-node
QLinearConv/QLinearMatMul/Q/DQ models equal onnxruntime bit for bit. Skipped without a GPU."""

import numpy as np
import onnxruntime as ort
import pytest

import ptxc
from qdq_models import quantize_qdq, small_cnn
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
