"""The wgmma kernels' staged epilogue (map-to-gpu's ``wgmma-epilogue=staged``; wgmma.py,
"Epilogue"): each warp's 16 x BN accumulators go through the mma schedule's warp-private
staging region (mma_epilogue.py) and come back row-major. Each mapped module runs in the
lockstep interpreter and must equal the unmapped nest (f16: closely; int8: bit for bit, and
the graph interpreter too); the region must not cost a CTA per SM (a stage is given up
instead); the PTX assembles without spills and stores whole runs of a row. On the GPU:
test_gpu_map_wgmma.py's int8 test runs both epilogues.
"""

import re

import attrs
import pytest

from support.contraction_ir import loop_module, matmul_model
from ptxc.dialects.loop import run_main
from ptxc.lower.gpu_map import MapToGpu, mma_epilogue, wgmma
from ptxc.ptx import assemble, ptxas_path
from ptxc.codegen import lower_to_ptx
from ptxc.rewrite import PassManager
from ptxc.target import Target
from test_gpu_map_mma import check_close, launches
from test_gpu_map_wgmma import INT8_GEMMS, INT8_ROWS64, MATMULS, _contraction, _int8_mapped, \
    _Opts, mapped

SM90 = Target.preset("sm_90")    # an H100 SXM: 132 SMs, 227 KiB of shared memory per block

needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas is not installed here")


def _wgmma_launch(m):
    (launch,) = [o for o in launches(m) if o.attributes["schedule"] == "wgmma"]
    return launch


def _staging(launch):
    """The staging region's type: the launch's one gpu.shared of 32-bit accumulators."""
    (t,) = [o.results[0].type for o in launch.walk() if o.name == "gpu.shared"
            and o.results[0].type.element.name in ("f32", "i32")]
    return t


@pytest.mark.parametrize("case, tiles", [("edges_130x96x72", ""), ("long_k_no_bias", ""),
                                         ("batched_2", ""), ("n256_k40", "[64x256]"),
                                         ("edges_130x96x72", "[64x64]"),
                                         ("128x128x128", "[64x128]")])
def test_f16_staged_kernel_matches_the_nest(case, tiles):
    extra = f" wgmma-tiles={tiles}" if tiles else ""
    m, x, want = mapped(matmul_model(trans_b=True, **MATMULS[case]),
                        f"{{wgmma=on wgmma-epilogue=staged{extra}}}")
    launch = _wgmma_launch(m)
    assert launch.attributes["tile"].endswith("epilogue staged")
    bm, bn = (int(v) for v in launch.attributes["tile"].split()[2].split("x")[:2])
    t = _staging(launch)
    assert t.shape == (bm // 16, mma_epilogue.ROWS, bn + mma_epilogue.PAD)
    assert any(o.name == "gpu.warp_barrier" for o in launch.walk())
    check_close(run_main(m, x), want)


#: int8 cases with the staged epilogue: (case, wgmma-tiles); 128 x 256 stays fragment
STAGED_INT8 = [(c, "") for c in sorted(INT8_GEMMS) if c != "n256_long_k"] + \
    sorted(INT8_ROWS64.items())


@pytest.mark.parametrize("case, tiles", STAGED_INT8)
def test_int8_staged_kernel_is_bit_exact(case, tiles):
    """int8 GEMMs with the requantizing epilogue (a fused residual, edges, 64-row tiles, BN 256)
    through the staging region: the mapped kernel equals the nest and the graph interpreter
    bit for bit; the region holds i32 sums, whose reads carry the accumulator bound."""
    from support.int8_ir import gemm_model
    from test_gpu_map_mma_int8 import check_exact
    model = gemm_model(**INT8_GEMMS[case])
    m, x, ref, want = _int8_mapped(model, tiles)
    launch = _wgmma_launch(m)               # the default epilogue
    assert launch.attributes["tile"].endswith("epilogue staged")
    assert _staging(launch).element.name == "i32"
    staged_reads = [o for o in launch.walk() if o.name == "loop.load"
                    and getattr(o.operands[0], "op", None) is not None
                    and o.operands[0].op.name == "gpu.shared"
                    and o.operands[0].type.element.name == "i32"]
    assert staged_reads and all("bound" in o.attributes for o in staged_reads)
    check_exact(run_main(m, x), ref, want)


def test_the_staged_region_does_not_cost_a_cta_per_sm():
    """wgmma.with_epilogue: 128 x 64 at 4 stages (96 KiB) holds two CTAs per SM; with its
    18 KiB region (8 warps x 8 rows x 72 words) two would need 230 KiB of the 228: it gives up
    a stage. 64 x 64 (64 + 9 KiB) keeps its 4 stages and three CTAs. 128 x 256 (192 KiB, one
    CTA) cannot add 66 KiB at 4 stages and, alone on its SM, gives up no stage: it stays
    fragment. The pass's default is staged; a bad value is refused."""
    cfg = wgmma.Config(64, bk=128)
    assert wgmma.blocks_per_sm(cfg, SM90) == 2
    assert wgmma.shared_bytes(wgmma.Config(64, bk=128, epilogue="staged")) == \
        98304 + 8 * 8 * 72 * 4
    assert wgmma.with_epilogue(cfg, "staged", SM90) == wgmma.Config(64, bk=128, stages=3,
                                                              epilogue="staged")
    small = wgmma.Config(64, bk=128, bm=64)
    assert wgmma.with_epilogue(small, "staged", SM90) == attrs.evolve(small, epilogue="staged")
    assert wgmma.blocks_per_sm(wgmma.with_epilogue(small, "staged", SM90), SM90) == 3
    wide = wgmma.Config(256, bk=128)     # alone on its SM: keeps its 4 stages, so fragment
    assert wgmma.blocks_per_sm(wide, SM90) == 1
    assert wgmma.with_epilogue(wide, "staged", SM90) is wide
    one = wgmma.Config(128, bk=128)        # 128 KiB + 34 KiB staged: still one CTA, 4 stages
    assert wgmma.with_epilogue(one, "staged", SM90) == attrs.evolve(one, epilogue="staged")
    assert wgmma.with_epilogue(cfg, "fragment", SM90) is cfg
    # through choose: the option reaches the config
    layer1 = _contraction(matmul_model(M=100352, K=576, N=64, trans_b=True))
    opts = _Opts()
    opts.wgmma_epilogue = "fragment"
    assert wgmma.choose(layer1, opts).epilogue == "fragment"
    opts.wgmma_epilogue = "staged"
    assert wgmma.choose(layer1, opts).epilogue == "staged"
    assert MapToGpu().wgmma_epilogue == "staged"        # the default (timed: wgmma.py)
    assert MapToGpu(wgmma_epilogue="staged").wgmma_epilogue == "staged"
    with pytest.raises(ValueError, match="wgmma-epilogue"):
        MapToGpu(wgmma_epilogue="wide")


@needs_ptxas
@pytest.mark.parametrize("tiles, store", [("[64x64]", "b32"), ("", "v2.b32")])
def test_int8_staged_kernel_assembles_and_stores_runs(tiles, store):
    """In the PTX (sm_90a): no spills; each lane stores its BN / 16 consecutive int8 of a row
    as one store (16 lanes across a row: 4 bytes at BN 64, 8 at BN 128) where the fragment
    epilogue stores byte pairs."""
    from support.int8_ir import gemm_model
    model = gemm_model(M=256, K=256, N=128)
    stores = {}
    for epi in ("fragment", "staged"):
        m = loop_module(model)
        extra = f" wgmma-tiles={tiles}" if tiles else ""
        PassManager(f"map-to-gpu{{wgmma=on arch=sm_90 wgmma-epilogue={epi}{extra}}}").run(m)
        p = lower_to_ptx(m, arch="sm_90")
        for k in assemble(p.ptx, p.arch).kernels.values():
            assert k.spill_stores == 0 and k.spill_loads == 0, k
        stores[epi] = set(re.findall(r"st\.global(?:\.v\d)?\.b\d+", p.ptx))
    assert "st.global.v2.b8" in stores["fragment"]
    assert stores["staged"] == {"st.global." + store}
