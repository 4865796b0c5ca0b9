"""The mma schedule's int8 form (``mma.m16n8k32.s8``, i32 accumulation): the int8 layers that
fold-qdq and the importer make (graph.qlinear_matmul / qlinear_conv, lowered to i8 x i8 -> i32
contractions with the requantization epilogue fused) mapped onto tensor cores. The mapped module
runs in the lockstep interpreter with the gpu dialect's reference semantics (lane-exact
fragments) and must equal, bit for bit, the graph-level int8 interpreter (onnxruntime's
numerics, tests/test_fold_qdq.py) and the unmapped loop nest. Layers with no int8 form keep the
integer loops. PTX assembles with ptxas without spills; on a GPU (``gpu`` marker) the kernels
give the interpreter's answer."""

import numpy as np
import pytest

import ptxc
from support.int8_ir import conv_model, gemm_model, inputs_for, loop_module, matmul_integer_model
from ptxc.dialects.loop import run_main
from ptxc.lower.gpu_map import contraction, mma_config
from ptxc.ptx import assemble, ptxas_path
from ptxc.codegen import lower_to_ptx
from ptxc.rewrite import PassManager
from ptxc.target import Target

SM90 = Target.preset("sm_90")    # an H100 SXM: 132 SMs, 227 KiB of shared memory per block

needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas is not installed here")

GEMMS = {
    "64x64x48": lambda: gemm_model(64, 64, 48),
    "edges_zx_residual": lambda: gemm_model(130, 96, 72, zx=7, residual=True),
    "k40_tail_8_byte_copy": lambda: gemm_model(48, 40, 32, zx=-3),       # K % 16 == 8
    "k36_tail_4_byte_copy": lambda: gemm_model(48, 36, 32, zx=-3),       # K % 8 == 4
    "k34_tail_scalar_copy": lambda: gemm_model(48, 34, 32, zx=-3),       # K % 4 != 0
    "matmul_integer": lambda: matmul_integer_model(64, 128, 32),
    "uint8_a_zero_point": lambda: matmul_integer_model(32, 64, 48, a_uint8=True, a_zero=131),
    "split_k": lambda: matmul_integer_model(32, 2048, 32),
}
CONVS = {
    "3x3_pad1": dict(N=1, C=16, H=8, W=8, K=32, R=3, S=3, pad=1, zx=-5),
    "1x1": dict(N=2, C=32, H=6, W=6, K=16, R=1, S=1, residual=True),
    "3x3_s2": dict(N=1, C=16, H=9, W=9, K=16, R=3, S=3, stride=2, pad=1, zx=4),
    "3x3_c8": dict(N=1, C=8, H=7, W=7, K=16, R=3, S=3, pad=1),
    "7x7_s2_c3_stem": dict(N=1, C=3, H=15, W=15, K=16, R=7, S=7, stride=2, pad=3),
}


def launches(m):
    return [o for o in m.walk() if o.name == "gpu.launch"]


def mapped(model, layout="nchw"):
    """(mapped module, inputs, the graph interpreter's outputs, the unmapped nest's)."""
    x = inputs_for(model)
    ref = ptxc.interpret(ptxc.import_onnx(model), x)
    m = loop_module(model, layout=layout, target="cuda" if layout == "nhwc" else "cpu")
    want = run_main(m, x)
    PassManager("map-to-gpu").run(m)
    return m, x, ref, want


def check_exact(got, ref, want):
    for k in ref:
        assert got[k].dtype == ref[k].dtype, k
        np.testing.assert_array_equal(want[k], ref[k], err_msg=f"{k}: loop nest vs interpreter")
        np.testing.assert_array_equal(got[k], ref[k], err_msg=f"{k}: mma vs interpreter")


def _contractions(m):
    return [c for c in (contraction.analyze(o) for o in m.walk() if o.name == "loop.parallel")
            if c is not None]


@pytest.mark.parametrize("case", [pytest.param(k, marks=pytest.mark.slow) if k == "split_k" else k
                                  for k in sorted(GEMMS)])
def test_int8_gemm_maps_to_mma_bit_exact(case):
    m, x, ref, want = mapped(GEMMS[case]())
    mm = [o for o in launches(m) if o.attributes["schedule"] == "mma"]
    assert len(mm) == 1 and mm[0].attributes["tile"].startswith("s8 ")
    check_exact(run_main(m, x), ref, want)


def test_layouts_and_split_k():
    m = loop_module(matmul_integer_model(32, 2048, 32))
    (c,) = _contractions(m)
    assert c.kind == "s8" and (c.M, c.N, c.K) == (32, 32, 2048)
    # A row-major, the constant B stored [N, K] (transpose_b): both K-major 16-byte copies
    assert mma_config.layout(c, c.a) == mma_config.layout(c, c.b) == mma_config.Layout(kmajor=True, vector=True)
    cfg = mma_config.choose(c, SM90)
    assert cfg.bk == 128 and cfg.splits > 1                # deep K tiles, split-K
    m2 = loop_module(gemm_model(48, 40, 32))
    (c2,) = _contractions(m2)
    assert mma_config.layout(c2, c2.a) == mma_config.Layout(kmajor=True, vector=True, chunk=8)  # K = 40 B
    m3 = loop_module(gemm_model(48, 36, 32))
    (c3,) = _contractions(m3)
    assert mma_config.layout(c3, c3.a) == mma_config.Layout(kmajor=True, vector=True, chunk=4)  # K = 36 B
    m4 = loop_module(gemm_model(48, 34, 32))
    (c4,) = _contractions(m4)
    assert mma_config.layout(c4, c4.a) == mma_config.Layout(kmajor=True, vector=False)   # K = 34 bytes


@pytest.mark.slow
def test_split_k_partials_are_i32_and_exact():
    m, x, ref, want = mapped(GEMMS["split_k"]())
    ls = launches(m)
    assert [o.attributes["schedule"] for o in ls] == ["mma", "pointwise"]
    assert ls[0].attributes["grid"][2] > 1
    ws = [o for o in m.walk() if o.name == "loop.alloc"]
    assert ws and all(o.results[0].type.element.name == "i32" for o in ws)
    check_exact(run_main(m, x), ref, want)


def test_no_int8_form_keeps_the_integer_loops():
    """uint8 weights past 127 have no int8 form: the i32 nest stays off the tensor cores and
    gives the same numbers."""
    m, x, ref, want = mapped(matmul_integer_model(32, 64, 32, w_uint8=True))
    assert "mma" not in [o.attributes["schedule"] for o in launches(m)]
    check_exact(run_main(m, x), ref, want)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CONVS))
def test_int8_conv_nchw_maps_to_mma_bit_exact(case):
    m, x, ref, want = mapped(conv_model(**CONVS[case]))
    assert "mma" in [o.attributes["schedule"] for o in launches(m)]
    check_exact(run_main(m, x), ref, want)


@pytest.mark.parametrize("case", [k if k == "3x3_pad1" else pytest.param(k, marks=pytest.mark.slow)
                                  for k in sorted(CONVS)])
def test_int8_conv_nhwc_maps_to_mma_with_cp_async_copies(case):
    """Channels-last (the cuda graph passes: input channels padded to a multiple of 4): the
    implicit GEMM reads NHWC activations and KRSC filters by cp.async, K = (r, s, c): 16 bytes
    where the channels come 16 at a time, 8 where 8, else 4 (the 3-channel stem, padded to 4)."""
    model = conv_model(**CONVS[case])
    m = loop_module(model, layout="nhwc", target="cuda")
    cs = _contractions(m)
    assert cs and all(c.kind == "s8" for c in cs)
    chunk = next(n for n in (16, 8, 4) if CONVS[case]["C"] % n == 0 or n == 4)
    assert all(mma_config.layout(c, x) == mma_config.Layout(kmajor=True, vector=True, chunk=chunk)
               for c in cs for x in (c.a, c.b))
    m, x, ref, want = mapped(model, layout="nhwc")
    assert "mma" in [o.attributes["schedule"] for o in launches(m)]
    check_exact(run_main(m, x), ref, want)


@pytest.mark.parametrize("case, stages", [("7x7_s2_c3_stem", 4), ("3x3_c8", 3), ("3x3_pad1", 3)])
def test_four_byte_gathers_take_four_stages(case, stages):
    """mma_config.default_stages: 4 cp.async stages where A is copied 4 bytes at a time (the int8 stem
    on its image padded to 4 channels), else 3; the launch's tile says so."""
    model = conv_model(**CONVS[case])
    m = loop_module(model, layout="nhwc", target="cuda")
    assert {mma_config.default_stages(c) for c in _contractions(m)} == {stages}
    PassManager("map-to-gpu").run(m)
    tiles = [o.attributes.get("tile") for o in launches(m) if o.attributes["schedule"] == "mma"]
    assert tiles and all(f"stages {stages}" in t for t in tiles), tiles


@needs_ptxas
@pytest.mark.slow
@pytest.mark.parametrize("case", ["edges_zx_residual", "split_k", "k40_tail_8_byte_copy",
                                  "k36_tail_4_byte_copy", "k34_tail_scalar_copy"])
def test_int8_mma_kernels_assemble_without_spills(case):
    m, _, _, _ = mapped(GEMMS[case]())
    p = lower_to_ptx(m, arch="sm_90")
    assert "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32" in p.ptx
    rep = assemble(p.ptx, "sm_90")
    for k in rep.kernels.values():
        assert k.spill_stores == 0 and k.spill_loads == 0 and k.stack_bytes == 0, k


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(GEMMS) + [f"conv_{k}" for k in sorted(CONVS)] +
                         [f"nhwc_{k}" for k in sorted(CONVS)])
def test_int8_mma_on_gpu_is_bit_exact(case):
    from test_ptx import run_on_gpu
    kind, _, name = case.partition("_")
    model = conv_model(**CONVS[name]) if kind in ("conv", "nhwc") else GEMMS[case]()
    m, x, ref, _ = mapped(model, layout="nhwc" if kind == "nhwc" else "nchw")
    got = run_on_gpu(lower_to_ptx(m), x)
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)


@pytest.fixture(scope="module")
def qdq_cnn():
    """tests/support/qdq_models.small_cnn quantized by onnxruntime (asymmetric int8 activations)."""
    from support.qdq_models import quantize_qdq, small_cnn
    rng = np.random.default_rng(3)
    return quantize_qdq(small_cnn(), [{"x": rng.standard_normal((1, 3, 16, 16)).astype(
        np.float32)} for _ in range(8)])


def _logit_step(model) -> float:
    from onnx import numpy_helper
    dq = [n for n in model.graph.node if n.op_type == "DequantizeLinear"][-1]
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return float(init[dq.input[1]])


@pytest.mark.slow
def test_qdq_cnn_on_cuda_runs_its_convs_on_int8_mma(qdq_cnn):
    """onnxruntime's QDQ CNN through the cuda pipeline (fold-qdq, channels-last, map-to-gpu):
    its three convs are s8 mma kernels (the batch-1 FC is a GEMV, M = 1: no mma tile; integer
    loops); the mapped module, interpreted, gives the
    graph interpreter's logits within one quantization step (the global average pool's float
    sum is reassociated by the reduction schedule, which can move a rounding)."""
    from ptxc.compiler import as_module, run_stages
    rng = np.random.default_rng(5)
    m = as_module(qdq_cnn)
    run_stages(m, "loop", target="cuda", layout="nhwc")
    tiles = [o.attributes.get("tile", "") for o in launches(m)
             if o.attributes["schedule"] == "mma"]
    assert len(tiles) == 3 and all(t.startswith("s8 ") for t in tiles), tiles
    step = _logit_step(qdq_cnn)
    for _ in range(2):
        x = {"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}
        want = ptxc.interpret(ptxc.import_onnx(qdq_cnn), x)["logits"]
        got = run_main(m, x)["logits"]
        assert np.abs(got - want).max() <= step * 1.001


@pytest.mark.gpu
def test_qdq_cnn_engine_on_gpu(qdq_cnn):
    rng = np.random.default_rng(6)
    engine = ptxc.compile(qdq_cnn, target="cuda", layout="nhwc")
    step = _logit_step(qdq_cnn)
    for _ in range(3):
        x = {"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}
        want = ptxc.interpret(ptxc.import_onnx(qdq_cnn), x)["logits"]
        assert np.abs(engine.run(x)["logits"] - want).max() <= step * 1.001


def _tensor_contractions(model):
    from ptxc.compiler import as_module, run_stages
    m = as_module(model)
    run_stages(m, "tensor")
    return [o for o in m.walk() if o.name in ("tensor.conv", "tensor.matmul")]


@pytest.mark.parametrize("kw, int8", [
    (dict(), True),                                      # symmetric int8 weights
    (dict(a_uint8=True, a_zero=131), True),              # ui8 activations moved down by 128
    (dict(w_uint8=True), False),                         # weights up to 255: no int8 form
])
def test_int8_form_where_it_exists(kw, int8):
    """qlinear ops lower to i8 x i8 -> i32 contractions where ``w - zw`` fits in int8 and the
    zero-point correction is a compile-time constant; else to the i32-shift form. Both give
    the interpreter's numbers (the graph op's reference)."""
    model = matmul_integer_model(32, 48, 16, **kw)
    (op,) = _tensor_contractions(model)
    els = [v.type.element.name for v in op.operands[:2]]
    assert els == (["i8", "i8"] if int8 else ["i32", "i32"])
    assert op.results[0].type.element.name == "i32"
    x = inputs_for(model)
    want = ptxc.interpret(ptxc.import_onnx(model), x)
    from ptxc.compiler import as_module, run_stages
    m = as_module(model)
    run_stages(m, "tensor")
    np.testing.assert_array_equal(ptxc.interpret(m, x)["y"], want["y"])
