"""The wgmma form of the mma schedule on the GPU (ptxc/lower/gpu_map/wgmma.py; sm_90 only):
fp16 GEMMs whose operands are both K-major (ONNX Gemm with transB=1, the weight [N, K]: how
torch exports nn.Linear), compiled with ``ptxc.compile(target="cuda", precision="fp16")``,
against numpy in float64 (relative error below 1e-2 of the output's scale), and the kernel
table must name the wgmma tile. 4096^3 (BN 256) and 4096 x 512 x 768 (BN 128) take wgmma on
their own (map-to-gpu ``wgmma=auto``); 512^3 leaves SMs idle, so mma.sync would take it: it is
forced with ``pass_options={"map-to-gpu": {"wgmma": "on"}}``, as are the edge cases. (A MatMul whose weight is [K, N]
is N-major: it stays on mma.sync until wgmma's transposed-B descriptors are written.) Skipped without a GPU (marker
``gpu``) and on GPUs other than sm_90 (H100/H200)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ptxc

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def hopper():
    from ptxc.target import device_arch
    if device_arch() not in ("sm_90", "sm_90a"):
        pytest.skip(f"wgmma needs sm_90, the GPU is {device_arch()}")


def gemm_model(M, K, N, seed=0):
    """``y = x @ w^T + bias`` (ONNX Gemm, transB=1: the weight [N, K], K-major)."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((N, K)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "bias")
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "bias"], ["y"], transB=1)], "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [M, N])], [w, bias])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def compile_fp16(model, force: bool, options: dict | None = None):
    """``force``: map-to-gpu with ``wgmma=on`` and ``options``."""
    pass_options = {"map-to-gpu": {"wgmma": "on", **(options or {})}} if force else None
    return ptxc.compile(model, target="cuda", precision="fp16", cache=False,
                        pass_options=pass_options)


def check(engine, got, ref, tile):
    tiles = [k.tile for k in engine.kernels.kernels if k.schedule == "wgmma"]
    assert tiles == [tile], [(k.schedule, k.tile) for k in engine.kernels.kernels]
    assert engine.arch == "sm_90a"
    err = float(np.abs(got - ref).max() / np.abs(ref).max())
    assert err < 1e-2, err


@pytest.mark.parametrize("shape, tile", [
    ((512, 512, 512), "f16 wgmma 128x256x64 stages 4"),     # alone on its SM: fragment
    ((512, 512, 128), "f16 wgmma 128x128x64 stages 4 epilogue staged"),
    ((4096, 4096, 4096), "f16 wgmma 128x256x64 stages 4"),
    ((4096, 512, 768), "f16 wgmma 128x64x64 stages 3 epilogue staged")])
def test_gemm_fp16_on_wgmma(shape, tile):
    M, K, N = shape
    model = gemm_model(M, K, N)
    engine = compile_fp16(model, force=M < 4096)
    x = np.random.default_rng(1).standard_normal((M, K)).astype(np.float32)
    w = numpy_helper.to_array(model.graph.initializer[0]).astype(np.float64)
    bias = numpy_helper.to_array(model.graph.initializer[1]).astype(np.float64)
    ref = x.astype(np.float64) @ w.T + bias
    check(engine, engine.run({"x": x})["y"], ref, tile)


def test_edges_on_wgmma():
    """M, N off the tile, K not a multiple of 64: guards and zero-fill on the device."""
    model = gemm_model(200, 328, 136, seed=3)
    engine = compile_fp16(model, force=True)
    x = np.random.default_rng(4).standard_normal((200, 328)).astype(np.float32)
    w = numpy_helper.to_array(model.graph.initializer[0]).astype(np.float64)
    bias = numpy_helper.to_array(model.graph.initializer[1]).astype(np.float64)
    check(engine, engine.run({"x": x})["y"], x.astype(np.float64) @ w.T + bias,
          "f16 wgmma 128x256x64 stages 4")


@pytest.mark.parametrize("options, tile", [
    ({"wgmma_tiles": ["64x128"]}, "f16 wgmma 64x128x64 stages 4 epilogue staged"),
    ({"wgmma_copies": "after-wait"}, "f16 wgmma 128x256x64 stages 4 after-wait"),
    ({"wgmma_tiles": ["64x64"], "wgmma_copies": "after-wait"},
     "f16 wgmma 64x64x64 stages 4 after-wait epilogue staged"),
    ({"wgmma_epilogue": "fragment", "wgmma_tiles": ["64x64"]}, "f16 wgmma 64x64x64 stages 4")])
def test_wgmma_variants(options, tile):
    """Session 11's forms: 64-row tiles (one warpgroup), and the copies issued after the wait
    (the default, since session 12, issues them while the tensor core multiplies), on a GEMM
    with edges (M, N off the tile, K % 64 != 0)."""
    model = gemm_model(200, 328, 136, seed=5)
    engine = compile_fp16(model, force=True, options=options)
    x = np.random.default_rng(6).standard_normal((200, 328)).astype(np.float32)
    w = numpy_helper.to_array(model.graph.initializer[0]).astype(np.float64)
    bias = numpy_helper.to_array(model.graph.initializer[1]).astype(np.float64)
    check(engine, engine.run({"x": x})["y"], x.astype(np.float64) @ w.T + bias, tile)


def test_a_wgmma_plan_loads_and_runs_on_its_device(tmp_path):
    """A plan holding a wgmma kernel is built for sm_90a, the arch of the sm_90 device it runs
    on (the device reports sm_90): it loads, without recompiling, and gives the same outputs
    (until session 17 the plan's arch check refused it)."""
    model = gemm_model(4096, 512, 768)
    engine = ptxc.compile(model, target="cuda", precision="fp16", cache=False)
    assert engine.arch == "sm_90a"
    engine.save(tmp_path / "gemm.plan")
    loaded = ptxc.load(tmp_path / "gemm.plan")
    x = np.random.default_rng(7).standard_normal((4096, 512)).astype(np.float32)
    np.testing.assert_array_equal(loaded.run({"x": x})["y"], engine.run({"x": x})["y"])
