"""The wgmma form of the mma schedule (ptxc/lower/gpu_map/wgmma.py) and its ops
(ptxc/dialects/gpu_wgmma.py): fp16 GEMMs with K-major operands on Hopper's warpgroup MMA.
Each mapped module runs in the lockstep interpreter (the ops read the shared tiles through
the 128-byte swizzle and hand out accumulators in wgmma's D layout) and must match the unmapped
nest; the protocol (fence, commit, wait) is checked there too; the choice follows the size,
the operands' layout, the arch and map-to-gpu's ``wgmma`` option; the PTX (sm_90a) assembles
with ptxas without spills.
"""

import re

import numpy as np
import pytest

from support.contraction_ir import inputs_for, loop_module, matmul_model
from ptxc.dialects.gpu_wgmma import accumulator_layout, swizzled_column
from ptxc.dialects.loop import run_main
from ptxc.errors import CompileError, VerifyError
from ptxc.ir.verifier import verify
from ptxc.lower.gpu_map import contraction, wgmma
from ptxc.ptx import assemble, kernels_arch, ptxas_path
from ptxc.codegen import lower_to_ptx
from ptxc.rewrite import PassManager
import test_gpu_map_mma as mma_tests
from test_gpu_map_mma import check_close, launches

needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas is not installed here")


def mapped(model, options="{wgmma=on}"):
    return mma_tests.mapped(model, options)


#: K-major operands (b given [N, K]: a weight as ptxc stores a Gemm's)
MATMULS = {
    "128x128x128": dict(M=128, K=128, N=128),
    "edges_130x96x72": dict(M=130, K=96, N=72),          # M, N overhang; K not a multiple of 64
    "n256_k40": dict(M=64, K=40, N=256),                 # BN 256, one K tile zero-filled
    "batched_2": dict(M=64, K=64, N=64, batch=(2,)),
    "long_k_no_bias": dict(M=128, K=512, N=64, bias=False, relu=False),   # K tiles > stages
}


@pytest.mark.parametrize("case", sorted(MATMULS))
def test_wgmma_kernel_matches_the_nest(case):
    model = matmul_model(trans_b=True, **MATMULS[case])
    m, x, want = mapped(model)
    assert "wgmma" in [o.attributes["schedule"] for o in launches(m)]
    check_close(run_main(m, x), want)


def test_tile_string_and_shared_alignment():
    m, _, _ = mapped(matmul_model(M=128, K=128, N=256, trans_b=True))
    (launch,) = launches(m)
    # alone on its SM, BN 256 would lose a stage to the staged region: fragment
    assert launch.attributes["tile"] == "f16 wgmma 128x256x64 stages 4"
    assert launch.attributes["block"] == (256, 1, 1)
    shared = [o for o in launch.walk() if o.name == "gpu.shared"]
    assert [o.results[0].type.shape for o in shared] == [(4, 128, 64), (4, 256, 64)]
    assert all(o.attr("align") == 1024 for o in shared)


def _drop(m, name):
    op = next(o for o in m.walk() if o.name == name)
    op.erase()


@pytest.mark.parametrize("name, why", [("gpu.wgmma_fence", "no gpu.wgmma_fence"),
                                       ("gpu.wgmma_commit", "never committed")])
def test_the_interpreter_checks_the_protocol(name, why):
    model = matmul_model(M=64, K=64, N=64, trans_b=True)
    m, x, _ = mapped(model)
    _drop(m, name)
    with pytest.raises(CompileError, match=why):
        run_main(m, x)


def test_a_result_read_before_the_wait_is_refused():
    m, _, _ = mapped(matmul_model(M=64, K=64, N=64, trans_b=True))
    wait = next(o for o in m.walk() if o.name == "gpu.wgmma_wait")
    # read the last wgmma's results directly: skip the wait
    for old, new in zip(wait.results, wait.operands):
        old.replace_all_uses_with(new)
    wait.erase()
    with pytest.raises(VerifyError, match="before a gpu.wgmma_wait"):
        verify(m)


@pytest.mark.parametrize("case", ["long_k_no_bias", "edges_130x96x72"])
def test_copies_overlapping_the_multiply_match_the_nest(case):
    """``wgmma-copies=overlap``: tile kt + S - 1's copies go between the commit and the wait
    (into stage (kt - 1) % S, which no wgmma in flight reads: the interpreter would refuse
    it); the kernel still equals the nest."""
    m, x, want = mapped(matmul_model(trans_b=True, **MATMULS[case]),
                        "{wgmma=on wgmma-copies=overlap wgmma-epilogue=fragment}")
    (launch,) = [o for o in launches(m) if o.attributes["schedule"] == "wgmma"]
    assert launch.attributes["tile"].endswith("stages 4")          # overlap: the default
    body = next(o for o in launch.walk() if o.name == "loop.for").regions[0].blocks[0].ops
    names = [o.name for o in body]
    assert names.index("gpu.wgmma_commit") < names.index("loop.if") < \
        names.index("gpu.wgmma_wait")
    check_close(run_main(m, x), want)
    m2, _, _ = mapped(matmul_model(trans_b=True, **MATMULS[case]),
                      "{wgmma=on wgmma-copies=after-wait wgmma-epilogue=fragment}")
    (launch,) = [o for o in launches(m2) if o.attributes["schedule"] == "wgmma"]
    assert launch.attributes["tile"].endswith("stages 4 after-wait")
    from ptxc.lower.gpu_map import MapToGpu
    assert MapToGpu().wgmma_copies == "overlap"
    with pytest.raises(ValueError, match="wgmma-copies"):
        MapToGpu(wgmma_copies="early")


def test_a_copy_into_a_tile_an_unwaited_wgmma_reads_is_refused():
    """The race the wait exists for: with the copies before the wait, point them at the stage
    the wgmmas in flight read (kt % S, not (kt + S - 1) % S): the interpreter refuses it."""
    m, x, _ = mapped(matmul_model(trans_b=True, **MATMULS["long_k_no_bias"]),
                     "{wgmma=on wgmma-copies=overlap}")
    loop = next(o for o in m.walk() if o.name == "loop.for" and any(
        p.name == "gpu.wgmma" for p in o.walk()))
    stage = next(o for o in loop.walk() if o.name == "gpu.wgmma").operands[1]  # a's stage
    copies = [o for o in loop.walk() if o.name == "gpu.cp_async"]
    assert copies
    for cp in copies:   # operands: source, src_indices, dest, dst_indices (stage first), pred
        dest = next(i for i, v in enumerate(cp.operands) if v.op is not None and
                    v.op.name == "gpu.shared")
        cp.set_operand(dest + 1, stage)
    with pytest.raises(CompileError, match="still reads"):
        run_main(m, x)


def test_the_layouts_are_the_prototypes():
    """The accumulator layout is bench/wgmma_gemm.py's epilogue (warp w: rows 16 w + l / 4
    (+8), columns 8 j + 2 (l % 4) (+1) for value 4 j + 2 h + e) and the swizzle its copies'."""
    rows, cols = accumulator_layout(256)
    t = np.arange(128)
    w, lane = t // 32, t % 32
    for j in range(32):
        for h in (0, 1):
            for e in (0, 1):
                i = 4 * j + 2 * h + e
                assert (rows[i] == 16 * w + lane // 4 + 8 * h).all()
                assert (cols[i] == 8 * j + 2 * (lane % 4) + e).all()
    # every (row, col) of the 64 x 256 tile exactly once
    assert len({(r, c) for r, c in zip(rows.ravel(), cols.ravel())}) == 64 * 256
    r = np.arange(16)[:, None]
    c = np.arange(64)[None, :]
    assert (swizzled_column(r, c) * 2 == (((c // 8) ^ (r % 8)) * 16 + (c % 8) * 2)).all()


def _contraction(model):
    m = loop_module(model)
    return next(contraction.analyze(o) for o in m.walk()
                if o.name == "loop.parallel" and contraction.analyze(o) is not None)


class _Opts:
    """map-to-gpu's options for wgmma.choose: the tile rules here, the fragment epilogue (the
    staged one, which can cost a stage: test_wgmma_staged_epilogue.py)."""
    wgmma_epilogue = "fragment"

    def __init__(self, wgmma="auto", arch="sm_90"):
        self.wgmma, self.arch = wgmma, arch


def test_when_the_wgmma_form_is_chosen():
    big = _contraction(matmul_model(M=4096, K=2048, N=4096, trans_b=True))
    assert wgmma.choose(big, _Opts()) == wgmma.Config(256)
    assert wgmma.choose(big, _Opts(arch="sm_90a")) == wgmma.Config(256)
    # 4096 x 768: 32 x 3 tiles of 256 and 32 x 6 of 128 give under two CTAs per SM (WAVES),
    # 32 x 12 of 128 x 64 do not
    mid = _contraction(matmul_model(M=4096, K=2048, N=768, trans_b=True))
    assert wgmma.choose(mid, _Opts()) == wgmma.Config(64)
    # no tile gives two waves: the one with the most CTAs (64 x 64: 25 x 8 = 200 >= 132 SMs)
    few = _contraction(matmul_model(M=1568, K=4608, N=512, trans_b=True))
    assert wgmma.choose(few, _Opts()) == wgmma.Config(64, bm=64)
    # N = 64: 128-wide tiles would be half padding; 128 x 64 (784 CTAs)
    narrow = _contraction(matmul_model(M=100352, K=576, N=64, trans_b=True))
    assert wgmma.choose(narrow, _Opts()) == wgmma.Config(64)
    # K too short for BN 256's pipeline (MIN_K): 128; shorter still: mma.sync
    assert wgmma.choose(_contraction(matmul_model(M=4096, K=512, N=4096, trans_b=True)),
                        _Opts()) == wgmma.Config(128)
    shallow = _contraction(matmul_model(M=4096, K=256, N=4096, trans_b=True))
    assert wgmma.choose(shallow, _Opts()) is None
    assert wgmma.choose(shallow, _Opts(wgmma="on")) == wgmma.Config(256)
    assert wgmma.choose(big, _Opts(wgmma="off")) is None
    for arch in ("sm_80", "sm_89", "sm_100"):     # wgmma is Hopper's
        assert wgmma.choose(big, _Opts(arch=arch)) is None
        assert wgmma.choose(big, _Opts(wgmma="on", arch=arch)) is None
    small = _contraction(matmul_model(M=128, K=64, N=128, trans_b=True))
    assert wgmma.choose(small, _Opts()) is None                # mma.sync (and split-K)
    assert wgmma.choose(small, _Opts(wgmma="on")) == wgmma.Config(128)
    # b [K, N] (N contiguous): not K-major, mma.sync's ldmatrix.trans takes it
    nmajor = _contraction(matmul_model(M=4096, K=256, N=4096))
    assert not wgmma.takes(nmajor) and wgmma.choose(nmajor, _Opts(wgmma="on")) is None


def test_map_to_gpu_options():
    from ptxc.lower.gpu_map import MapToGpu
    assert MapToGpu().wgmma == "auto" and MapToGpu().arch == ""
    with pytest.raises(ValueError, match="wgmma must be one of"):
        MapToGpu(wgmma="maybe")
    with pytest.raises(ValueError, match="arch"):
        MapToGpu(arch="gfx90a")
    m, _, _ = mapped(matmul_model(M=64, K=64, N=64, trans_b=True), "{wgmma=on arch=sm_80}")
    assert [o.attributes["schedule"] for o in launches(m)] == ["mma"]


#: 64-row tiles (one warpgroup, 128 threads): what wgmma-tiles adds for GEMMs of a few
#: thousand rows (ResNet-50 b32's layer-3/4 3x3 convs)
ROWS64 = {"edges_130x96x72": "64x64", "long_k_no_bias": "64x64", "batched_2": "64x64",
          "128x128x128": "64x128"}


@pytest.mark.parametrize("case", sorted(ROWS64))
def test_64_row_wgmma_kernel_matches_the_nest(case):
    """One warpgroup per CTA: the copies spread over 128 threads, A's stage holds 64 rows, the
    accumulators' rows start at the warpgroup's 0; the lockstep interpreter equals the nest."""
    tile = ROWS64[case]
    m, x, want = mapped(matmul_model(trans_b=True, **MATMULS[case]),
                        f"{{wgmma=on wgmma-tiles=[{tile}]}}")
    (launch,) = [o for o in launches(m) if o.attributes["schedule"] == "wgmma"]
    assert launch.attributes["tile"] == f"f16 wgmma {tile}x64 stages 4 epilogue staged"
    assert launch.attributes["block"] == (128, 1, 1)
    shared = [o.results[0].type.shape for o in launch.walk() if o.name == "gpu.shared"]
    bn = int(tile.split("x")[1])
    assert shared == [(4, 64, 64), (4, bn, 64), (4, 8, bn + 8)]   # the staging region last
    check_close(run_main(m, x), want)


def test_wgmma_tiles_option():
    """``wgmma-tiles`` replaces the tiles ``auto`` tries. A 6272 x 2304 x 256 GEMM (ResNet-50
    b32's layer-3 3x3 conv) takes 64 x 64 by default (392 CTAs: the first tile with two per
    SM); without 64 x 64 in the list no tile gives two waves and the one with the most CTAs,
    64 x 128 (196), is taken; with only 128-row tiles (98 CTAs at BN 128) the SMs are not
    covered: mma.sync. Bad tiles are refused when the pass is built."""
    from ptxc.lower.gpu_map import MapToGpu
    layer3 = _contraction(matmul_model(M=6272, K=2304, N=256, trans_b=True))
    assert wgmma.choose(layer3, _Opts()) == wgmma.Config(64, bm=64)
    opts = _Opts()
    opts.wgmma_tiles = ("128x256", "128x128", "64x128")
    assert wgmma.choose(layer3, opts) == wgmma.Config(128, bm=64)
    opts.wgmma_tiles = ("128x256", "128x128")
    assert wgmma.choose(layer3, opts) is None
    opts.wgmma_tiles = ("128x256", "128x128", "64x128", "64x64")
    # K too short for any BN (MIN_K; BN 64 takes BN 128's): mma.sync
    assert wgmma.choose(_contraction(matmul_model(M=6272, K=256, N=256, trans_b=True)),
                        opts) is None
    assert wgmma.parse_tiles(()) == wgmma.TILES
    assert wgmma.parse_tiles(["64x256", " 128x64"]) == ((64, 256), (128, 64))
    assert MapToGpu(wgmma_tiles=["64x128"]).wgmma_tiles == ("64x128",)
    for bad in (["32x128"], ["64x96"], ["64"], ["axb"], ["64x128x2x2"]):
        with pytest.raises(ValueError, match="wgmma-tiles"):
            MapToGpu(wgmma_tiles=bad)
    m = loop_module(matmul_model(M=6272, K=2304, N=256, trans_b=True))
    PassManager("map-to-gpu{arch=sm_90 wgmma-tiles=[128x128,64x128]}").run(m)
    assert [o.attributes["tile"] for o in launches(m)] == \
        ["f16 wgmma 64x128x64 stages 4 epilogue staged"]


def test_a_compile_for_another_arch_keeps_mma_sync():
    """A compile's map-to-gpu builds for the compile's arch (its target's), unless the pass
    names its own."""
    from ptxc.pipeline import CompileOptions, build_pipeline
    from ptxc.target import Target

    def mapping(arch, **options):
        loop = build_pipeline(CompileOptions.make("cuda", arch, **options), "loop")
        (p,) = [p for p in loop if p.name == "map-to-gpu"]
        return p
    assert mapping("sm_80").arch == "sm_80"
    own = {"loop": "lower-tensor-to-loop,map-to-gpu{arch=sm_90}"}
    assert mapping("sm_80", stage_passes=own).arch == "sm_90"
    assert mapping(None).arch == Target.resolve().arch


def test_wgmma_programs_build_for_sm_90a_only():
    class K:
        def __init__(self, schedule):
            self.schedule, self.name = schedule, "kernel_0"
    assert kernels_arch([K("mma"), K("wgmma")], "sm_90") == "sm_90a"
    assert kernels_arch([K("wgmma")], "sm_90a") == "sm_90a"
    assert kernels_arch([K("mma")], "sm_90") == "sm_90"
    with pytest.raises(CompileError, match="sm_90 only"):
        kernels_arch([K("wgmma")], "sm_80")


@needs_ptxas
@pytest.mark.parametrize("case", ["edges_130x96x72", "batched_2"])
def test_small_wgmma_kernels_assemble(case):
    m, _, _ = mapped(matmul_model(trans_b=True, **MATMULS[case]))
    p = lower_to_ptx(m, arch="sm_90")
    assert p.arch == "sm_90a" and ".target sm_90a" in p.ptx
    assert "wgmma.mma_async.sync.aligned.m64n" in p.ptx
    rep = assemble(p.ptx, p.arch)
    for k in rep.kernels.values():
        assert k.spill_stores == 0 and k.spill_loads == 0, k


@needs_ptxas
@pytest.mark.slow
@pytest.mark.parametrize("shape, tile", [
    ((4096, 4096, 4096), "f16 wgmma 128x256x64 stages 4"),
    ((4096, 4096, 768), "f16 wgmma 128x64x64 stages 3 epilogue staged")])
def test_large_wgmma_kernel_assembles_without_spills(shape, tile):
    M, K, N = shape
    m = loop_module(matmul_model(M=M, K=K, N=N, trans_b=True, bias=False, relu=False))
    PassManager("map-to-gpu{arch=sm_90}").run(m)
    (launch,) = launches(m)
    assert launch.attributes["tile"] == tile
    p = lower_to_ptx(m, arch="sm_90")
    assert ".extern .shared .align 1024" in p.ptx
    (k,) = p.table.kernels
    bn, staged = int(tile.split("x")[1]), tile.endswith("staged")
    stages = int(tile.split()[4])   # the tiles' stages, then the staging region (f32)
    assert k.dynamic_shared == stages * (128 + bn) * 64 * 2 + staged * 8 * 8 * (bn + 8) * 4
    r = assemble(p.ptx, p.arch).kernels[k.name]
    assert r.spill_stores == 0 and r.spill_loads == 0, r


# ---- int8: wgmma .m64nNk32.s32.s8.s8 ----------------------------------------------------------

def _int8_mapped(model, tiles="", options=""):
    """(mapped with wgmma on, inputs, the graph interpreter's outputs, the unmapped nest's);
    ``tiles``: map-to-gpu's wgmma-tiles, e.g. ``[64x64]``; ``options``: more of its options,
    e.g. ``wgmma-epilogue=fragment``."""
    import ptxc
    from support.contraction_ir import inputs_for
    x = inputs_for(model)
    ref = ptxc.interpret(ptxc.import_onnx(model), x)
    m = loop_module(model)
    want = run_main(m, x)
    extra = (f" wgmma-tiles={tiles}" if tiles else "") + (f" {options}" if options else "")
    PassManager(f"map-to-gpu{{wgmma=on arch=sm_90{extra}}}").run(m)
    return m, x, ref, want


INT8_GEMMS = {
    "128x256x128": dict(M=128, K=256, N=128),                       # two K tiles of 128
    "edges_zx_residual": dict(M=130, K=96, N=72, zx=7, residual=True),   # K tile zero-filled
    "n256_long_k": dict(M=64, K=640, N=256),                        # K tiles > stages, BN 256
}


@pytest.mark.parametrize("case", sorted(INT8_GEMMS))
def test_int8_wgmma_kernel_is_bit_exact(case):
    """An int8 GEMM (requantization epilogue fused) in the wgmma form: 128-byte rows of 128
    int8 (the same swizzle, 16 elements per chunk), four k32 wgmmas per K tile, i32 sums: the
    mapped kernel equals the nest and the graph interpreter bit for bit."""
    from support.int8_ir import gemm_model
    from test_gpu_map_mma_int8 import check_exact
    m, x, ref, want = _int8_mapped(gemm_model(**INT8_GEMMS[case]))
    (launch,) = [o for o in launches(m) if o.attributes["schedule"] == "wgmma"]
    assert re.fullmatch(r"s8 wgmma 128x(128x128 stages 4 epilogue staged|256x128 stages 4)",
                        launch.attributes["tile"])
    shared = [o.results[0].type for o in launch.walk() if o.name == "gpu.shared"]
    assert all(t.element.name == "i8" and t.shape[-1] == 128 for t in shared[:2])
    shapes = {o.attributes["shape"] for o in launch.walk() if o.name == "gpu.wgmma"}
    assert shapes and all(s.endswith("k32") for s in shapes)
    check_exact(run_main(m, x), ref, want)


#: int8 GEMMs in 64-row tiles: (case, wgmma-tiles)
INT8_ROWS64 = {"edges_zx_residual": "[64x64]", "n256_long_k": "[64x256]"}


@pytest.mark.parametrize("case", sorted(INT8_ROWS64))
def test_int8_64_row_wgmma_kernel_is_bit_exact(case):
    from support.int8_ir import gemm_model
    from test_gpu_map_mma_int8 import check_exact
    m, x, ref, want = _int8_mapped(gemm_model(**INT8_GEMMS[case]), INT8_ROWS64[case])
    (launch,) = [o for o in launches(m) if o.attributes["schedule"] == "wgmma"]
    assert launch.attributes["tile"] == \
        f"s8 wgmma {INT8_ROWS64[case][1:-1]}x128 stages 4 epilogue staged"
    assert launch.attributes["block"] == (128, 1, 1)
    check_exact(run_main(m, x), ref, want)


def test_when_int8_takes_the_wgmma_form():
    """s8 takes the wgmma form under ``auto`` (AUTO_KINDS, timed in session 12) with its own
    depths (MIN_K_TILES, session 22): BN 64 and 128 from two 128-byte K tiles (K > 128), BN 256
    from 32 as f16. f16 keeps 8 tiles at BN 128 and 64, but a 64-wide tile spanning N takes
    f16 from one (NARROW_MIN_K_TILES). ``wgmma-kinds=[f16]`` keeps int8 on mma.sync."""
    from support.int8_ir import gemm_model
    deep = _contraction(gemm_model(4096, 1024, 1024))
    assert deep.kind == "s8" and wgmma.takes(deep)
    # 128 x 128: 32 x 8 = 256 CTAs, under two per SM; 128 x 64: 512
    assert wgmma.choose(deep, _Opts()) == wgmma.Config(64, bk=128)
    assert wgmma.choose(deep, _Opts(wgmma="on")) == wgmma.Config(128, bk=128)
    f16_only = _Opts()
    f16_only.wgmma_kinds = ("f16",)          # map-to-gpu{wgmma-kinds=[f16]}
    assert wgmma.choose(deep, f16_only) is None
    # two K tiles and more (K = 256, 512; ResNet-50's int8 1x1 convs and stem): wgmma; BN 256
    # is too wide for that depth, 128 x 128 gives 256 CTAs: 128 x 64
    for k in (256, 512):
        assert wgmma.choose(_contraction(gemm_model(4096, k, 1024)), _Opts()) == \
            wgmma.Config(64, bk=128)
    assert wgmma.choose(_contraction(gemm_model(100352, 576, 128)), _Opts()) == \
        wgmma.Config(128, bk=128)
    assert wgmma.choose(_contraction(gemm_model(100352, 256, 64)), _Opts()) == \
        wgmma.Config(64, bk=128)
    # one K tile (K <= 128: ResNet-50's layer-1 conv1 of K = 64): mma.sync
    for k in (64, 128):
        assert wgmma.choose(_contraction(gemm_model(100352, k, 64)), _Opts()) is None
        assert wgmma.choose(_contraction(gemm_model(100352, k, 256)), _Opts()) is None
    # f16: 1x1 convs of N = 64 in a 64-wide tile from one K tile; N = 128 from 8
    for k in (64, 256):
        assert wgmma.choose(_contraction(matmul_model(M=100352, K=k, N=64, trans_b=True)),
                            _Opts()) == wgmma.Config(64)
    assert wgmma.choose(_contraction(matmul_model(M=100352, K=256, N=128, trans_b=True)),
                        _Opts()) is None
    from ptxc.lower.gpu_map import MapToGpu
    assert MapToGpu(wgmma_kinds=["f16", "s8"]).wgmma_kinds == ("f16", "s8")
    with pytest.raises(ValueError, match="wgmma-kinds"):
        MapToGpu(wgmma_kinds=["tf32"])
    m = loop_module(gemm_model(4096, 1024, 1024))
    PassManager("map-to-gpu{arch=sm_90}").run(m)
    assert [o.attributes["tile"] for o in launches(m)] == \
        ["s8 wgmma 128x64x128 stages 3 epilogue staged"]
    # on: the first tile whose grid covers the SMs (64 x 64: 64 x 4 = 256 CTAs)
    assert wgmma.choose(_contraction(gemm_model(4096, 512, 256)), _Opts(wgmma="on")) == \
        wgmma.Config(64, bk=128, bm=64)
    # wgmma-min-k-tiles (timing runs): every tile from that many K tiles
    opts = _Opts()
    opts.wgmma_min_k_tiles = 1
    assert wgmma.choose(_contraction(gemm_model(100352, 64, 256)), opts) == \
        wgmma.Config(256, bk=128)
    assert MapToGpu(wgmma_min_k_tiles=4).wgmma_min_k_tiles == 4
    with pytest.raises(ValueError, match="wgmma-min-k-tiles"):
        MapToGpu(wgmma_min_k_tiles=-1)


@needs_ptxas
@pytest.mark.parametrize("tiles, shape", [("", "m64n128k32"), ("[64x64]", "m64n64k32")])
def test_int8_wgmma_kernel_assembles(tiles, shape):
    from support.int8_ir import gemm_model
    m, _, _, _ = _int8_mapped(gemm_model(**INT8_GEMMS["edges_zx_residual"]), tiles)
    p = lower_to_ptx(m, arch="sm_90")
    assert p.arch == "sm_90a"
    assert f"wgmma.mma_async.sync.aligned.{shape}.s32.s8.s8" in p.ptx
    rep = assemble(p.ptx, p.arch)
    for k in rep.kernels.values():
        assert k.spill_stores == 0 and k.spill_loads == 0, k


@pytest.mark.gpu
@pytest.mark.parametrize("epilogue", ["staged", "fragment"])
@pytest.mark.parametrize("case, tiles", [(c, "") for c in sorted(INT8_GEMMS)] +
                         sorted(INT8_ROWS64.items()))
def test_int8_wgmma_on_gpu_is_bit_exact(case, tiles, epilogue):
    """The int8 wgmma kernels (also in 64-row tiles), with either epilogue (staged, the
    default, where it fits: test_wgmma_staged_epilogue.py), on an sm_90 GPU give the
    interpreter's answer bit for bit."""
    from support.int8_ir import gemm_model
    from ptxc.target import device_arch
    from test_ptx import run_on_gpu
    if device_arch() not in ("sm_90", "sm_90a"):
        pytest.skip(f"wgmma needs sm_90, the GPU is {device_arch()}")
    m, x, ref, _ = _int8_mapped(gemm_model(**INT8_GEMMS[case]), tiles,
                                f"wgmma-epilogue={epilogue}")
    got = run_on_gpu(lower_to_ptx(m, arch="sm_90"), x)
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
