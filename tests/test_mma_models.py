"""Tensor cores end to end: models compiled with ``precision="fp16"`` for the cuda target put
their convolutions and matrix products on the mma schedule; its kernels assemble with ptxas
without spills; on a GPU (``gpu`` marker) the engines match onnxruntime in fp32 within the
issue's 2e-2 on the logits' scale.
"""

import numpy as np
import pytest

import ptxc
from support.contraction_ir import inputs_for
from ptxc.ptx import assemble, ptxas_path

needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas is not installed here")


def fc_model(M=256, K=512, N=384, seed=0):
    """MatMul + bias + ReLU + MatMul (fp32 ONNX; the compile lowers it to fp16)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((K, N)) / np.sqrt(K))
                                     .astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "b1"),
             numpy_helper.from_array((rng.standard_normal((N, 64)) / np.sqrt(N))
                                     .astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["t"], name="fc1"),
             helper.make_node("Add", ["t", "b1"], ["u"], name="bias1"),
             helper.make_node("Relu", ["u"], ["v"], name="relu1"),
             helper.make_node("MatMul", ["v", "w2"], ["y"], name="fc2")]
    g = helper.make_graph(nodes, "fc", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [M, K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [M, 64])],
                          inits)
    # IR version 8 (opset 17's): onnx 1.23 writes 14 by default, which onnxruntime 1.30 refuses
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _table(engine):
    """A cuda engine's kernel table (its CudaProgram keeps the PtxProgram's)."""
    return engine.program.table


def test_fp16_matmuls_take_the_mma_schedule():
    e = ptxc.compile(fc_model(), target="cuda", precision="fp16")
    kinds = [k.schedule for k in _table(e).kernels]
    assert kinds.count("mma") == 2, kinds
    assert all(k.tile.startswith("f16 ") for k in _table(e).kernels if k.schedule == "mma")


def test_fp32_stays_off_tensor_cores():
    e = ptxc.compile(fc_model(), target="cuda")
    assert "mma" not in [k.schedule for k in _table(e).kernels]


@needs_ptxas
@pytest.mark.slow
@pytest.mark.parametrize("name, epilogue", [
    ("resnet50", "fragment"),
    ("resnet50", "staged"),      # mma_epilogue.py: the accumulators staged in shared memory
    ("squeezenet", "fragment"),  # its 64-thread 32x64x32 tiles spilled until mma kernels said
])                               # .minnctapersm 1
def test_light_models_mma_kernels_do_not_spill(name, epilogue):
    from support import light_models as lm
    e = ptxc.compile(lm.path(name), target="cuda", precision="fp16", layout="nhwc",
                     pass_options={"map-to-gpu": {"mma_epilogue": epilogue}})
    table = _table(e)
    mma = [k.name for k in table.kernels if k.schedule == "mma"]
    assert mma, "no convolution took the mma schedule"
    assert all(k.tile.endswith("epilogue staged") == (epilogue == "staged")
               for k in table.kernels if k.schedule == "mma")
    rep = assemble(e.ptx, "sm_90")
    for name in mma:
        r = rep.kernels[name]
        assert r.spill_stores == 0 and r.spill_loads == 0, r


def _ort(model, x):
    import onnxruntime as ort
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, x)[0]


@pytest.mark.gpu
def test_fp16_engine_on_gpu_matches_onnxruntime():
    model = fc_model()
    x = inputs_for(model)
    e = ptxc.compile(model, target="cuda", precision="fp16")
    got = e.run(x)["y"]
    want = _ort(model, x)
    assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "squeezenet"])
def test_fp16_light_model_on_gpu_matches_onnxruntime(name):
    from support import light_models as lm
    model, x, ref = lm.fp16_friendly(name)  # the shipped weights overflow fp16 (6.8e9 logits)
    e = ptxc.compile(model, target="cuda", precision="fp16", layout="nhwc")
    assert "mma" in [k.schedule for k in _table(e).kernels]
    got = list(e.run(x).values())[0]
    want = list(ref.values())[0]
    assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()
