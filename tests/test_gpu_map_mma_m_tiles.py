"""M tiles (ptxc/lower/gpu_map/mma.py, ``Config.m_tiles``; map-to-gpu's ``mma-m-tiles``): an
mma.sync CTA computes several output tiles along M in turn, its K tiles flattened over them, so
that the copies of the next tile (operands, and the epilogue tiles of mma_prefetch.py in their
slots) are in flight while this tile's epilogue runs. The mapped launches, run in the lockstep
interpreter, must equal the unmapped nest (int8: bit for bit; fp16: as the fragment epilogue
does), with the grid's last CTA past M, several K tiles per output tile, and more than one slot
of epilogue tiles. Their PTX assembles without spills; on a GPU (``gpu`` marker) they give the
interpreter's answer.
"""

import attrs
import numpy as np
import pytest

from support import contraction_ir
from support import int8_ir
from ptxc.dialects.loop import run_main
from ptxc.lower.gpu_map import mma_config, mma_kernel, mma_prefetch
from ptxc.ptx import assemble, ptxas_path
from ptxc.codegen import lower_to_ptx
from ptxc.rewrite import PassManager
from ptxc.target import Target
from test_gpu_map_mma_epilogue import epilogue_tiles, mma_tiles, nhwc_loop, residual_conv_fp32

SM90 = Target.preset("sm_90")    # an H100 SXM: 132 SMs, 227 KiB of shared memory per block

needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas is not installed here")


@pytest.fixture(autouse=True)
def small_grids(monkeypatch):
    """Epilogue tiles for every qualifying load and M tiles on any grid, small ones included
    (the tests' sizes)."""
    monkeypatch.setattr(mma_prefetch, "MIN_WAVES", 0)
    monkeypatch.setattr(mma_config, "M_TILES_MIN_CTAS", 0)


def _int8_conv(N=2, H=10, W=10):
    """ResNet's identity block in small, int8: M = N H W = 200 rows (7 tiles of 32)."""
    model = residual_conv_fp32(N=N, C=64, H=H, W=W, first_conv=True)
    rng = np.random.default_rng(4)
    x = {"x": rng.standard_normal((N, 64, H, W)).astype(np.float32)}
    return (lambda: nhwc_loop(model, "int8")), x


def _int8_gemm():
    model = int8_ir.gemm_model(130, 96, 72, zx=7, residual=True)   # K = 96: two int8 K tiles
    return (lambda: int8_ir.loop_module(model)), int8_ir.inputs_for(model)


def _fp16_matmul():
    model = contraction_ir.matmul_model(M=130, K=96, N=72)          # three f16 K tiles
    return (lambda: contraction_ir.loop_module(model)), contraction_ir.inputs_for(model)


#: name: (case, forced config: 32-row tiles so that M spans several, m_tiles, stages)
CASES = {
    "int8_conv_1_k_tile_2_slots": (_int8_conv, dict(bm=32, bn=64, warps_m=1, warps_n=2, bk=64,
                                                    stages=2, m_tiles=3)),
    "int8_conv_1_k_tile_3_slots": (_int8_conv, dict(bm=32, bn=64, warps_m=1, warps_n=2, bk=64,
                                                    stages=3, m_tiles=4)),
    "int8_gemm_2_k_tiles": (_int8_gemm, dict(bm=32, bn=32, warps_m=1, warps_n=2, bk=64,
                                             stages=3, m_tiles=2)),
    "fp16_3_k_tiles": (_fp16_matmul, dict(bm=32, bn=32, warps_m=1, warps_n=2, bk=32,
                                          stages=3, m_tiles=4)),
}


def _mapped(case, epilogue):
    make, x = CASES[case][0]()
    cfg = mma_config.Config(**CASES[case][1], epilogue=epilogue)
    m = make()
    assert mma_kernel.build_all(m, cfg, SM90) >= 1
    PassManager(f"map-to-gpu{{mma-epilogue={epilogue}}}").run(m)
    return m, x, make


@pytest.mark.parametrize("epilogue", ["fragment", "staged"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_m_tiles_equal_the_nest(case, epilogue):
    m, x, make = _mapped(case, epilogue)
    tiles = mma_tiles(m)
    assert tiles and all(f"m-tiles {CASES[case][1]['m_tiles']}" in t for t in tiles), tiles
    want = run_main(make(), x)
    got = run_main(m, x)
    for k in want:
        if case.startswith("int8"):   # i32 sums: exact
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
        else:   # reassociated f32 sums, as every mma launch
            scale = max(1.0, float(np.abs(want[k]).max()))
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5 * scale,
                                       err_msg=k)


def test_int8_conv_reads_its_residual_from_slots():
    """The residual tile has one slot per output tile in flight: [slots x BM][BN]."""
    m, _, _ = _mapped("int8_conv_1_k_tile_3_slots", "staged")
    shapes = [t.shape for t in epilogue_tiles(m)]
    assert shapes == [(3 * 32, 64)], shapes


def _contractions(m):
    """The contractions (contraction.analyze) of loop module ``m``'s nests."""
    from ptxc.lower.gpu_map.contraction import analyze
    return [c for op in m.walk() if op.name == "loop.parallel" and (c := analyze(op))]


def test_with_m_tiles_cuts_stages_and_leaves_split_k():
    make, _ = _int8_conv(N=4, H=16, W=16)   # M = 1024: 8 tiles of 128; K = 64: one K tile
    c = next(c for c in _contractions(make()) if c.M == 1024)
    assert c.K == 64
    cfg = mma_config.Config(128, 64, 2, 2, 64, stages=3, epilogue="staged")
    got = mma_config.with_m_tiles(c, cfg, 4, SM90)
    assert (got.m_tiles, got.stages) == (4, 2)
    assert got.describe("s8").endswith("epilogue staged m-tiles 4")
    assert mma_config.with_m_tiles(c, cfg, 16, SM90).m_tiles == 8            # at most M's tiles
    split = attrs.evolve(cfg, splits=2)
    assert mma_config.with_m_tiles(c, split, 4, SM90) == split
    assert mma_config.with_m_tiles(c, cfg, 1, SM90) == cfg


def test_m_tiles_keep_two_ctas_per_sm(monkeypatch):
    """At ResNet-50 layer 1's size (M = 32 x 56 x 56 = 100352: 784 tiles of 128; N = 64: one
    tile) 4 tiles per CTA would leave 196 CTAs for 132 SMs: 2 per CTA (392) keep two per SM.
    At M = 6272 (49 tiles) any M tiles would leave fewer: none."""
    monkeypatch.setattr(mma_config, "M_TILES_MIN_CTAS", 2)
    cfg = mma_config.Config(128, 64, 2, 2, 32, stages=3, epilogue="staged")
    for n, want in ((32, 2), (2, 1)):
        model = residual_conv_fp32(N=n, C=64, H=56, W=56)
        c = next(c for c in _contractions(nhwc_loop(model, "fp16")) if c.M == n * 56 * 56)
        assert mma_config.with_m_tiles(c, cfg, 4, SM90).m_tiles == want, n


def test_map_to_gpu_option_sets_m_tiles():
    make, x = _int8_conv(N=4, H=16, W=16)   # M = 1024: 8 tiles of 128
    m = make()
    PassManager("map-to-gpu{mma-m-tiles=3}").run(m)
    tiles = mma_tiles(m)
    assert any(t.endswith("m-tiles 3") for t in tiles), tiles
    want = run_main(make(), x)
    got = run_main(m, x)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.mark.parametrize("bad", [-1, 17, "2"])
def test_m_tiles_option_is_checked(bad):
    from ptxc.lower.gpu_map import MapToGpu
    with pytest.raises(ValueError, match="mma-m-tiles"):
        MapToGpu(mma_m_tiles=bad)


@needs_ptxas
@pytest.mark.parametrize("case", ["int8_conv_1_k_tile_2_slots", "fp16_3_k_tiles"])
def test_m_tiles_kernels_assemble_without_spills(case):
    m, _, _ = _mapped(case, "staged")
    rep = assemble(lower_to_ptx(m, arch="sm_90").ptx, "sm_90")
    for k in rep.kernels.values():
        assert k.spill_stores == 0 and k.spill_loads == 0 and k.stack_bytes == 0, k


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_m_tiles_on_gpu_give_the_interpreters_answer(case):
    from test_ptx import run_on_gpu
    m, x, _ = _mapped(case, "staged")
    want = run_main(m, x)
    got = run_on_gpu(lower_to_ptx(m), x)
    for k in want:
        if case.startswith("int8"):
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
        else:
            scale = max(1.0, float(np.abs(want[k]).max()))
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5 * scale,
                                       err_msg=k)
