"""The mma schedule's staged epilogue (ptxc/lower/gpu_map/mma_epilogue.py, map-to-gpu's
``mma-epilogue=staged``): accumulators go through shared memory so that the point program runs
with consecutive lanes on consecutive output columns. The staged launch sums exactly as the
fragment one (same mma instructions per element), so the two mapped modules, run in the
lockstep interpreter, must agree bit for bit; both must match the unmapped nest (fp16: the
tolerances of test_gpu_map_mma.py) or, for int8, equal the graph interpreter bit for bit. Its
PTX assembles without spills; on a GPU (``gpu`` marker) the staged kernels give the
interpreter's answer.
"""

import numpy as np
import pytest

from support import contraction_ir
from support import int8_ir
import ptxc
from ptxc.dialects.loop import run_main
from ptxc.lower.gpu_map import contraction, mma_config, mma_epilogue, mma_kernel
from ptxc.ptx import assemble, ptxas_path
from ptxc.codegen import lower_to_ptx
from ptxc.rewrite import PassManager
from ptxc.target import Target

SM90 = Target.preset("sm_90")    # an H100 SXM: 132 SMs, 227 KiB of shared memory per block

needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas is not installed here")
STAGED = "map-to-gpu{mma-epilogue=staged}"


def mma_tiles(m):
    return [o.attributes["tile"] for o in m.walk()
            if o.name == "gpu.launch" and o.attributes["schedule"] == "mma"]


def both(make_loop, x, cfg=None):
    """(unmapped outputs, fragment-mapped outputs, staged-mapped outputs, staged module) of the
    loop module ``make_loop()`` on inputs ``x``; ``cfg``: a forced tile (its epilogue set)."""
    m = make_loop()
    want = run_main(m, x)
    outs, mods = [], []
    for epi in mma_epilogue.EPILOGUES:
        m = make_loop()
        if cfg is not None:
            assert mma_kernel.build_all(m, mma_config.Config(**{**cfg, "epilogue": epi}), SM90) >= 1
        PassManager(f"map-to-gpu{{mma-epilogue={epi}}}").run(m)
        tiles = mma_tiles(m)
        assert tiles and all(t.endswith(f"epilogue {epi}") == (epi != "fragment")
                             for t in tiles)
        outs.append(run_main(m, x))
        mods.append(m)
    return want, outs[0], outs[1], mods[1]


def same_bits(a, b):
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        np.testing.assert_array_equal(a[k], b[k], err_msg=f"{k}: staged vs fragment")


def close(got, want, rtol=1e-5):
    for k in want:
        scale = max(1.0, float(np.abs(want[k]).max()))
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=rtol * scale, err_msg=k)


# ---- fp16 -----------------------------------------------------------------------------------

MATMULS = {   # name: (matmul_model kwargs, forced tile or None)
    "bias_relu_64x64x48": (dict(M=64, K=64, N=48), None),
    "edges_130x96x72": (dict(M=130, K=96, N=72), None),            # M, N not tile multiples
    "wn16_edges": (dict(M=50, K=64, N=40), dict(bm=32, bn=32, warps_m=1, warps_n=2, bk=32)),
    "wn48_edges": (dict(M=40, K=64, N=72), dict(bm=32, bn=96, warps_m=1, warps_n=2, bk=32)),
    "batched_2x3": (dict(M=32, K=32, N=16, batch=(2, 3)), None),
    "split_k": (dict(M=32, K=1024, N=32), None),
}


@pytest.mark.parametrize("case", sorted(MATMULS))
def test_staged_fp16_matmul_equals_fragment_and_matches(case):
    kw, cfg = MATMULS[case]
    model = contraction_ir.matmul_model(**kw)
    x = contraction_ir.inputs_for(model)
    want, frag, staged, m = both(lambda: contraction_ir.loop_module(model), x, cfg)
    same_bits(staged, frag)
    close(staged, want)
    if cfg is not None:   # the forced warp widths: a warp's row spans 16 or 48 columns
        assert "warps 1x2" in mma_tiles(m)[0]


def _shared_root(v):
    from ptxc.ir.core import OpResult
    while isinstance(v, OpResult) and v.op.name == "loop.view":
        v = v.op.operands[0]
    return v if isinstance(v, OpResult) and v.op.name == "gpu.shared" else None


def shared_memory_hazards(launch) -> list:
    """The lockstep interpreter runs a race as one legal schedule and cannot see it
    (ptxc/dialects/gpu.py), so the barriers are checked statically: in program order, a store
    into a shared buffer after a load of it, or a load after a store, with no barrier (block or
    warp) between, where the two do not index with the same values (one thread's own element).
    Returns (kind, op) for each; loops are read once (a hazard carried to the next iteration
    is not looked for)."""
    seen, out = {}, []
    for op in launch.walk():
        if op.name in ("gpu.barrier", "gpu.warp_barrier"):
            seen.clear()
            continue
        if op.name == "loop.load":
            buf, idx, kind, other = _shared_root(op.operands[0]), op.operands[1:], "r", "w"
        elif op.name == "loop.store":
            buf, idx, kind, other = _shared_root(op.operands[1]), op.operands[2:], "w", "r"
        else:
            continue
        if buf is None:
            continue
        acc = seen.setdefault(buf, {"r": [], "w": []})
        if any(list(i) != list(idx) for i in acc[other]):
            out.append(("read after write" if kind == "r" else "write after read", op))
        acc[kind].append(idx)
    return out


@pytest.mark.parametrize("epi", mma_epilogue.EPILOGUES)
@pytest.mark.parametrize("case", sorted(MATMULS))
def test_the_epilogue_separates_what_lanes_share_by_barriers(case, epi):
    """Every slab of the staged epilogue is written after the warp read the previous one, and
    read after the warp wrote it (a barrier between each); the check finds the hazards when
    the barriers are taken out."""
    kw, cfg = MATMULS[case]
    m = contraction_ir.loop_module(contraction_ir.matmul_model(**kw))
    if cfg is not None:
        assert mma_kernel.build_all(m, mma_config.Config(**{**cfg, "epilogue": epi}), SM90) >= 1
    PassManager(f"map-to-gpu{{mma-epilogue={epi}}}").run(m)
    launches = [o for o in m.walk() if o.name == "gpu.launch"]
    assert any(o.attributes["schedule"] == "mma" for o in launches)
    for launch in launches:
        assert not shared_memory_hazards(launch), launch.attributes.get("tile")
    if epi == "staged":
        mma = next(o for o in launches if o.attributes["schedule"] == "mma")
        for op in [o for o in mma.walk() if o.name == "gpu.warp_barrier"]:
            op.erase()
        assert any(k == "write after read" for k, _ in shared_memory_hazards(mma))


def test_staged_region_is_counted_in_shared_bytes():
    from ptxc.dialects.gpu import shared_bytes
    model = contraction_ir.matmul_model(M=130, K=96, N=72)
    m = contraction_ir.loop_module(model)
    PassManager(STAGED).run(m)
    (launch,) = [o for o in m.walk() if o.name == "gpu.launch" and
                 o.attributes["schedule"] == "mma"]
    cfg = mma_config.Config(32, 64, 1, 2, 32, epilogue="staged")
    assert launch.attributes["tile"] == cfg.describe("f16")
    # 3 stages x (32 + 64) x 32 f16 + 2 warps x 8 x (32 + 8) f32
    assert shared_bytes(launch) == 3 * 96 * 32 * 2 + 2 * 8 * 40 * 4
    c = next(contraction.analyze(o) for o in contraction_ir.loop_module(model).walk()
             if o.name == "loop.parallel" and contraction.analyze(o) is not None)
    assert mma_config.shared_bytes(c, cfg, SM90) == shared_bytes(launch)


def test_bad_epilogue_option_is_a_compile_error():
    from ptxc.errors import CompileError
    with pytest.raises(CompileError, match="mma-epilogue must be one of fragment, staged"):
        PassManager("map-to-gpu{mma-epilogue=vector}")


def residual_conv_fp32(N=2, C=64, H=6, W=6, seed=0, first_conv=False):
    """conv1x1(relu(conv1x1(x, w) + b + x), w2): ResNet's identity shortcut (the residual is
    the conv's own input, channels-last f16 inside, as between layers) and the next 1x1 conv;
    an fp32 ONNX model. ``first_conv``: x is a 1x1 conv + relu of the input (so that in int8
    the residual is a channels-last layer output, as in ResNet, not the NCHW model input)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((C, C, 1, 1)) / np.sqrt(C))
                                     .astype(np.float32), name) for name in ("w", "w2", "w0")]
    inits.append(numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), "b"))
    x = "x"
    nodes = []
    if first_conv:
        nodes += [helper.make_node("Conv", ["x", "w0"], ["x0"], name="conv0"),
                  helper.make_node("Relu", ["x0"], ["x1"], name="relu0")]
        x = "x1"
    nodes += [helper.make_node("Conv", [x, "w", "b"], ["t"], name="conv"),
              helper.make_node("Add", ["t", x], ["u"], name="residual"),
              helper.make_node("Relu", ["u"], ["v"], name="relu"),
              helper.make_node("Conv", ["v", "w2"], ["y"], name="conv2")]
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [N, C, H, W])],
                          [vi("y", TensorProto.FLOAT, [N, C, H, W])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def nhwc_loop(model, precision="fp16", seed=5):
    """``model`` at the loop stage with the cuda graph passes (nhwc, ``precision``), nothing
    mapped; int8: quantized first, calibrated on one random input."""
    from ptxc import compiler
    if precision == "int8":
        from ptxc.compiler import _quantize_int8
        rng = np.random.default_rng(seed)
        shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        m, _ = _quantize_int8(model, [{"x": rng.standard_normal(shape).astype(np.float32)}],
                              None, None, None, None)
    else:
        m = ptxc.compiler.as_module(model)
    compiler.run_stages(m, "loop", target="cuda", layout="nhwc", precision=precision,
                        stage_passes=int8_ir.UNMAPPED)
    return m


def test_staged_fp16_nhwc_1x1_conv_with_residual():
    """The fused residual add is a load in the point program: staged, it reads a row's 32
    consecutive channels per warp instruction; the results equal the fragment epilogue's."""
    model = residual_conv_fp32()
    rng = np.random.default_rng(2)
    x = {"x": rng.standard_normal((2, 64, 6, 6)).astype(np.float32)}
    want, frag, staged, _ = both(lambda: nhwc_loop(model, "fp16"), x)
    same_bits(staged, frag)
    close(staged, want, rtol=2e-3)   # the output is f16 inside: one f16 rounding may move
    ref = ptxc.interpret(ptxc.import_onnx(model), x)["y"]
    assert np.abs(staged["y"] - ref).max() <= 2e-2 * np.abs(ref).max()


# ---- int8 -----------------------------------------------------------------------------------

def epilogue_tiles(m):
    """The shared tiles of epilogue loads (mma_prefetch.py) in ``m``'s mma launches: the 2-D
    ``gpu.shared`` buffers (pipeline stages and staging regions are 3-D)."""
    return [o.results[0].type for launch in m.walk() if launch.name == "gpu.launch"
            and launch.attributes["schedule"] == "mma" for o in launch.walk()
            if o.name == "gpu.shared" and o.results[0].type.rank == 2]


def test_epilogue_tiles_only_where_they_paid_on_the_h200():
    """mma_prefetch.worth_it: ResNet-50 b32's layer-1 conv3 (M = 100352, K = 64: one int8 K
    tile, two f16 ones, 1568 CTAs) takes the residual tile; layer 3's (M = 6272, K = 256) and
    split-K kernels do not."""
    from types import SimpleNamespace as C
    from ptxc.lower.gpu_map import mma_prefetch
    layer1 = C(M=100352, N=256, K=64, batches=1)
    layer3 = C(M=6272, N=1024, K=256, batches=1)
    for bk in (64, 32):          # int8, f16
        assert mma_prefetch.worth_it(layer1, mma_config.Config(128, 128, 2, 2, bk), SM90)
        assert not mma_prefetch.worth_it(layer3, mma_config.Config(128, 128, 2, 2, bk), SM90)
    assert not mma_prefetch.worth_it(layer1, mma_config.Config(128, 128, 2, 2, 64, splits=2), SM90)


@pytest.mark.usefixtures("tiles_everywhere")
def test_epilogue_tiles_can_be_turned_off():
    """``map-to-gpu{mma-epilogue-tiles=false}`` (timing runs): no shared tiles where the
    default takes one, the residual read by global loads, the same bits."""
    model = residual_conv_fp32(N=2, C=64, H=6, W=6, first_conv=True)
    x = {"x": np.random.default_rng(7).standard_normal((2, 64, 6, 6)).astype(np.float32)}
    for opts, tiled in (("", True), (" mma-epilogue-tiles=false", False)):
        m = nhwc_loop(model, "int8")
        want = run_main(m, x)
        PassManager(f"map-to-gpu{{mma-epilogue=staged{opts}}}").run(m)
        assert mma_tiles(m) and bool(epilogue_tiles(m)) == tiled
        got = run_main(m, x)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.fixture
def tiles_everywhere(monkeypatch):
    """Epilogue tiles for every qualifying load, small grids included (the tests' sizes)."""
    from ptxc.lower.gpu_map import mma_prefetch
    monkeypatch.setattr(mma_prefetch, "MIN_WAVES", 0)


@pytest.mark.usefixtures("tiles_everywhere")
def test_int8_residual_is_read_from_a_shared_tile_bit_exactly():
    """ResNet's identity shortcut in int8 (conv -> + x -> relu -> Q, channels-last int8
    between layers, then the next conv): the residual tile is copied into shared memory by
    cp.async while the main loop runs (mma_prefetch.py), and both epilogues reading it equal
    the unmapped nest bit for bit."""
    model = residual_conv_fp32(N=2, C=64, H=8, W=8, first_conv=True)
    rng = np.random.default_rng(4)
    x = {"x": rng.standard_normal((2, 64, 8, 8)).astype(np.float32)}
    want, frag, staged, m = both(lambda: nhwc_loop(model, "int8"), x)
    tiles = epilogue_tiles(m)
    assert tiles and all(t.element.name == "i8" for t in tiles), tiles
    same_bits(staged, frag)
    for k in want:
        np.testing.assert_array_equal(staged[k], want[k], err_msg=k)



INT8 = {
    "gemm_edges_zx_residual": lambda: int8_ir.gemm_model(130, 96, 72, zx=7, residual=True),
    "conv1x1_nhwc_residual": lambda: int8_ir.conv_model(N=2, C=32, H=6, W=6, K=16, R=1, S=1,
                                                        residual=True),
}


@pytest.mark.parametrize("case", sorted(INT8))
def test_staged_int8_requantization_is_bit_exact(case):
    model = INT8[case]()
    x = int8_ir.inputs_for(model)
    ref = ptxc.interpret(ptxc.import_onnx(model), x)
    nhwc = "nhwc" in case
    make = (lambda: int8_ir.loop_module(model, layout="nhwc", target="cuda")) if nhwc else \
        (lambda: int8_ir.loop_module(model))
    want, frag, staged, m = both(make, x)
    assert all(t.startswith("s8 ") for t in mma_tiles(m))
    for k in ref:
        assert staged[k].dtype == ref[k].dtype == np.int8, k
        np.testing.assert_array_equal(want[k], ref[k], err_msg=f"{k}: nest vs interpreter")
        np.testing.assert_array_equal(staged[k], ref[k], err_msg=f"{k}: staged vs interpreter")
    same_bits(staged, frag)


# ---- ptxas and the GPU ----------------------------------------------------------------------

@needs_ptxas
@pytest.mark.slow
@pytest.mark.parametrize("epi", ["staged"])
@pytest.mark.parametrize("case", ["edges_130x96x72", "wn48_edges", "split_k"])
def test_staged_kernels_assemble_without_spills(case, epi):
    kw, cfg = MATMULS[case]
    m = contraction_ir.loop_module(contraction_ir.matmul_model(**kw))
    if cfg is not None:
        mma_kernel.build_all(m, mma_config.Config(**cfg, epilogue=epi), SM90)
    PassManager(f"map-to-gpu{{mma-epilogue={epi}}}").run(m)
    rep = assemble(lower_to_ptx(m, arch="sm_90").ptx, "sm_90")
    for k in rep.kernels.values():
        assert k.spill_stores == 0 and k.spill_loads == 0 and k.stack_bytes == 0, k


def _gpu_case(case, epi="staged"):
    if case in MATMULS:
        kw, cfg = MATMULS[case]
        model = contraction_ir.matmul_model(**kw)
        m = contraction_ir.loop_module(model)
        x = contraction_ir.inputs_for(model)
        if cfg is not None:
            mma_kernel.build_all(m, mma_config.Config(**cfg, epilogue=epi), SM90)
    else:
        model = INT8[case]()
        nhwc = "nhwc" in case
        m = int8_ir.loop_module(model, layout="nhwc" if nhwc else "nchw",
                                target="cuda" if nhwc else "cpu")
        x = int8_ir.inputs_for(model)
    PassManager(f"map-to-gpu{{mma-epilogue={epi}}}").run(m)
    return m, x


@pytest.mark.gpu
@pytest.mark.parametrize("epi", ["staged"])
@pytest.mark.parametrize("case", sorted(MATMULS) + sorted(INT8))
def test_staged_epilogue_on_gpu_gives_the_interpreters_answer(case, epi):
    from test_ptx import run_on_gpu
    m, x = _gpu_case(case, epi)
    assert all(t.endswith(f"epilogue {epi}") for t in mma_tiles(m))
    want = run_main(m, x)
    got = run_on_gpu(lower_to_ptx(m), x)
    if case in INT8:
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    else:
        close(got, want)


@pytest.mark.gpu
def test_staged_fp16_nhwc_residual_conv_on_gpu():
    model = residual_conv_fp32(N=4, C=256, H=14, W=14)
    rng = np.random.default_rng(4)
    x = {"x": rng.standard_normal((4, 256, 14, 14)).astype(np.float32)}
    m = nhwc_loop(model, "fp16")
    PassManager(STAGED).run(m)
    from test_ptx import run_on_gpu
    want = run_main(m, x)
    close(run_on_gpu(lower_to_ptx(m), x), want, rtol=2e-3)


@pytest.mark.gpu
@pytest.mark.usefixtures("tiles_everywhere")
def test_int8_residual_tile_on_gpu():
    """The int8 residual read from its cp.async tile (mma_prefetch.py) with 128 channels (K =
    128: two int8 K tiles, within worth_it) and M = 4 x 14 x 14 (rows past M zero-filled): the
    kernels give the interpreter's int8 answer bit for bit."""
    model = residual_conv_fp32(N=4, C=128, H=14, W=14, first_conv=True)
    rng = np.random.default_rng(4)
    x = {"x": rng.standard_normal((4, 128, 14, 14)).astype(np.float32)}
    m = nhwc_loop(model, "int8")
    want = run_main(m, x)
    PassManager(STAGED).run(m)
    assert epilogue_tiles(m)
    from test_ptx import run_on_gpu
    got = run_on_gpu(lower_to_ptx(m), x)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def stem_conv_fp32(N=1, H=15, W=15, K=16, seed=0):
    """ResNet's first layer in small: a 7x7 stride-2 conv of a 3-channel image (fp32 ONNX)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((K, 3, 7, 7)) / 12).astype(np.float32), "w")
    vi = helper.make_tensor_value_info
    P = (H + 6 - 7) // 2 + 1
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv1",
                                            strides=[2, 2], pads=[3, 3, 3, 3])], "g",
                          [vi("x", TensorProto.FLOAT, [N, 3, H, W])],
                          [vi("y", TensorProto.FLOAT, [N, K, P, P])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_fp16_stem_reads_its_4_channel_input_by_8_byte_copies():
    """ResNet's 3-channel image, channels-last on cuda: padded to 4 halves (not 8), so the
    implicit GEMM's A rows are 8 bytes per filter tap and its copies 8-byte cp.asyncs (half
    the padded work of 8 channels); the filter (K-major, 4 halves a tap) too. The mapped
    launch matches the nest."""
    model = stem_conv_fp32()
    m = nhwc_loop(model, "fp16")
    (c,) = [c for c in (contraction.analyze(o) for o in m.walk() if o.name == "loop.parallel")
            if c is not None]
    assert c.kind == "f16" and c.K == 7 * 7 * 4
    assert mma_config.layout(c, c.a) == mma_config.Layout(kmajor=True, vector=True, chunk=8)
    x = {"x": np.random.default_rng(3).standard_normal((1, 3, 15, 15)).astype(np.float32)}
    want = run_main(m, x)
    PassManager(STAGED).run(m)
    assert {o.attributes["bytes"] for o in m.walk() if o.name == "gpu.cp_async"} == {8}
    got = run_main(m, x)
    close(got, want, rtol=2e-3)    # the tensor core sums in another order
    ref = ptxc.interpret(ptxc.import_onnx(model), x)["y"]
    assert np.abs(got["y"] - ref).max() <= 2e-2 * np.abs(ref).max()
