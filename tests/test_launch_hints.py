"""What the NVPTX emission tells LLVM and ptxas about a launch: the ids' ranges (so the index
arithmetic of a pointwise kernel runs in 32 bits) and the blocks per SM an mma kernel asks for
(map-to-gpu's ``mma-min-blocks``)."""

import pytest

from support.contraction_ir import loop_module, matmul_model
from ptxc.dialects.loop import parallel_loop
from ptxc.ir.types import F32
from ptxc.codegen import lower_to_ptx
from ptxc.rewrite.pass_manager import PassManager
from test_loop_dialect import buf, load, module, op, store


def _pointwise_ptx(shape=(32, 230, 230, 16)) -> str:
    """A copy over a 4-D buffer of 27M points: delinearizing the thread's index takes divisions
    by 230 and 16."""
    def body(b, xb, yb):
        _, p, ivs = parallel_loop(b, (0,) * len(shape), shape)
        store(p, op(p, "arith.mul", load(p, xb, *ivs), op(p, "arith.constant", value=2.0,
                                                             type=F32)), yb, *ivs)
    m = module({"x": buf(shape, F32), "y": buf(shape, F32)}, ["y"], body)
    PassManager("map-to-gpu").run(m)
    return lower_to_ptx(m).ptx


def test_thread_and_block_ids_carry_their_ranges():
    """``ctaid.x`` < grid and ``tid.x`` < block: the linear index fits 32 bits and LLVM divides
    it by constants with 32-bit ``mul.hi`` (64-bit ones are emulated on the GPU)."""
    ptx = _pointwise_ptx()
    assert "mul.hi.u32" in ptx
    assert "mul.hi.u64" not in ptx and "mul.hi.s64" not in ptx


@pytest.mark.parametrize("blocks", [0, 1, 3])
@pytest.mark.parametrize("tile,rule", [("64x64x2x2", 3), ("128x128x2x2", 1)])
def test_mma_min_blocks_is_the_kernels_minnctapersm(blocks, tile, rule):
    """0: mma_config.min_blocks decides: 3 for a 32 x 32 warp tile (32 accumulators a thread), 1
    (ptxas's choice) for 64 x 64; an explicit count wins."""
    m = loop_module(matmul_model(M=256, K=256, N=128))
    PassManager(f"map-to-gpu{{mma-min-blocks={blocks} mma-tiles=[{tile}]}}").run(m)
    (launch,) = [o for o in m.walk() if o.name == "gpu.launch"]
    assert launch.attributes["schedule"] == "mma"
    want = blocks or rule
    assert launch.attributes.get("min_blocks", 1) == want
    ptx = lower_to_ptx(m).ptx
    assert (".minnctapersm 3" in ptx) == (want == 3)


@pytest.mark.parametrize("K,N,warps,blocks", [(128, 512, "4x2", 2),    # 4 base K tiles
                                              (32, 512, "2x2", 1),     # one K tile
                                              (512, 512, "2x2", 1)])   # deep K tiles
def test_a_128x128_tile_of_several_base_k_tiles_takes_eight_warps(K, N, warps, blocks):
    """mma_config.eight_warps: 4 x 2 warps of 32 x 64 (two CTAs per SM: minnctapersm 2) where the
    128 x 128 tile's K loop has two base-depth tiles or more; four warps otherwise."""
    m = loop_module(matmul_model(M=8192, K=K, N=N))
    PassManager("map-to-gpu{wgmma=off}").run(m)
    (launch,) = [o for o in m.walk() if o.name == "gpu.launch"]
    assert "128x128x" in launch.attributes["tile"]
    assert f"warps {warps} " in launch.attributes["tile"], launch.attributes["tile"]
    assert launch.attributes.get("min_blocks", 1) == blocks
    assert launch.attributes["block"] == ((256 if warps == "4x2" else 128), 1, 1)


def test_bad_min_blocks_is_an_error():
    from ptxc.errors import CompileError
    with pytest.raises((CompileError, ValueError), match="mma-min-blocks"):
        PassManager("map-to-gpu{mma-min-blocks=-1}")


def _mma_tiles(options: str) -> list:
    m = loop_module(matmul_model(M=8192, K=128, N=512))
    PassManager(f"map-to-gpu{{{options}}}" if options else "map-to-gpu{wgmma=off}").run(m)
    return [o.attributes["tile"] for o in m.walk() if o.name == "gpu.launch"]


def test_mma_tiles_and_stages_options_choose_the_kernels_tile():
    """``mma-tiles`` replaces the tile list the heuristic picks from, ``mma-stages`` the
    cp.async stage count (tuning runs: bench/resnet50_int8.py --variant); the pipeline text
    round-trips."""
    from ptxc.rewrite.pipeline import format_pipeline, parse_pipeline
    # the default tiles: 128 x 128 with 4 K tiles takes eight warps (mma_config.eight_warps)
    assert _mma_tiles("") == ["f16 128x128x32 warps 4x2 stages 3 epilogue staged"]
    assert _mma_tiles("wgmma=off mma-tiles=[128x128x2x4,64x64x2x2] mma-stages=4") == [
        "f16 128x128x32 warps 2x4 stages 4 epilogue staged"]
    assert _mma_tiles("wgmma=off mma-tiles=[64x64x2x2]") == [
        "f16 64x64x32 warps 2x2 stages 3 epilogue staged"]
    text = "map-to-gpu{mma-stages=4 mma-tiles=[128x128x2x4,64x64x2x2]}"
    assert format_pipeline(parse_pipeline(text)) == text


@pytest.mark.parametrize("options", ["mma-tiles=[128x12]", "mma-tiles=[0x64x2x2]",
                                     "mma-stages=1", "mma-stages=9"])
def test_bad_tiles_or_stages_are_errors(options):
    from ptxc.errors import CompileError
    with pytest.raises((CompileError, ValueError), match=options.split("=")[0]):
        PassManager(f"map-to-gpu{{{options}}}")
