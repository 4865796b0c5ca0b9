"""Wave-aware mma tiles (map-to-gpu's ``mma-wave-tiles``, opt-in: timed slower; mma.wave_cost,
mma.resident): among the tiles within PAD_SLACK, the one whose grid fills whole waves of the
CTAs an SM holds, instead of the largest. ResNet-50 b32's shapes, as int8 GEMMs."""

import attrs

from ptxc.dialects.loop import run_main
from ptxc.lower.gpu_map import MapToGpu, mma
from ptxc.rewrite import PassManager
from test_gpu_map_wgmma import _contraction, launches, loop_module


def _choose(c, waves):
    return mma.choose(c, waves=waves, epilogue="staged")


def test_layer3_conv3_takes_half_tiles_at_three_ctas_per_sm():
    """M = 6272 (32 x 14 x 14), N = 1024, K = 256: 392 CTAs of 128 x 128 at 2 per SM are 1.48
    waves; 784 of 128 x 64 at 3 per SM are 1.98."""
    from int8_ir import gemm_model
    c = _contraction(gemm_model(6272, 256, 1024))
    big, wave = _choose(c, False), _choose(c, True)
    assert (big.bm, big.bn, big.warps_m) == (128, 128, 4)          # eight_warps
    assert (wave.bm, wave.bn) == (128, 64)
    big, wave = (attrs.evolve(cfg, epilogue="staged") for cfg in (big, wave))
    assert mma.resident(c, big) == 2 and mma.resident(c, wave) == 3
    assert mma.wave_cost(c, wave) < mma.wave_cost(c, big)


def test_full_waves_and_small_tiles_keep_the_largest():
    """Layer 1 (M = 100352, N = 256): 1568 CTAs of 128 x 128 are already 3.96 waves. Layer 4
    (M = 1568, N = 2048): 32 x 64 tiles would fill the waves, but tiles under half the
    largest's area are not considered (they ran 26 us against 18 on the H200, PAD_SLACK)."""
    from int8_ir import gemm_model
    for m, k, n in ((100352, 64, 256), (1568, 512, 2048)):
        c = _contraction(gemm_model(m, k, n))
        assert _choose(c, True) == _choose(c, False), (m, k, n)


def test_equal_costs_keep_the_larger_tile():
    """M = 25088, N = 128, deep K: 196 CTAs of 128 x 128 (one wave at 2 per SM) or 392 of
    128 x 64 whose shared memory also holds 2 per SM (two waves of half the work): equal."""
    from int8_ir import gemm_model
    c = _contraction(gemm_model(25088, 1024, 128))
    assert (_choose(c, True).bm, _choose(c, True).bn) == (128, 128)


def test_the_option():
    assert MapToGpu().mma_wave_tiles is False
    import ptxc
    from contraction_ir import inputs_for
    from int8_ir import gemm_model
    from test_gpu_map_mma_int8 import check_exact
    model = gemm_model(300, 64, 96)
    x = inputs_for(model)
    ref = ptxc.interpret(ptxc.import_onnx(model), x)
    m = loop_module(model)
    want = run_main(m, x)
    PassManager("map-to-gpu{mma-wave-tiles=true}").run(m)
    assert [o.attributes["schedule"] for o in launches(m)] == ["mma"]
    check_exact(run_main(m, x), ref, want)
