"""Issue 9's numerics bar for the benchmark models (bench/gpu.py: torchvision ResNet-50 and
MobileNetV2 with non-trivial batch norms, a BERT-base encoder layer; fixed random weights): in
fp16 each is within 2e-2, relative to its largest logit, of onnxruntime's fp32 run of the same
exported ONNX model, on ptxc's cpu target and on its cuda target (marker gpu: the builders need
torch and a CUDA device, so both targets run on the GPU machine)."""

import numpy as np
import pytest

import ptxc

from support import bench_scripts

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@pytest.fixture(scope="module", params=["resnet50", "mobilenet_v2", "bert_layer"])
def exported(request, tmp_path_factory):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    import onnxruntime as ort
    g = bench_scripts.load("gpu")
    model, x = g.build_model(request.param, 1)
    proto, _ = g.export_onnx(model, x, str(tmp_path_factory.mktemp("m") / "m.onnx"))
    proto.ir_version = min(proto.ir_version, 8)      # onnxruntime 1.30 refuses IR 14
    xn = x.cpu().numpy()
    s = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return request.param, proto, xn, s.run(None, {"x": xn})[0]


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_benchmark_model_fp16_within_2e_2_of_onnxruntime_fp32(exported, target):
    name, proto, x, ref = exported
    got = ptxc.compile(proto, target=target, precision="fp16").run({"x": x})["y"]
    err = float(np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max())
    assert err <= 2e-2, (name, target, err)
