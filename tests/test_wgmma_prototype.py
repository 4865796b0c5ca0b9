"""bench/wgmma_gemm.py, the wgmma (sm_90a) GEMM prototype, keeps assembling: its LLVM IR parses,
NVPTX emits the wgmma chain with nothing moved between the asynchronous multiplies and their
wait, and ptxas takes it without spills (timed and checked against cuBLAS on the GPU machine:
``python3 bench/wgmma_gemm.py``)."""

import pytest

from ptxc.ptx import ptxas_path

from support import bench_scripts

needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas is not installed here")


@pytest.mark.slow
@needs_ptxas
def test_wgmma_prototype_assembles_without_spills():
    from ptxc.ptx import assemble
    w = bench_scripts.load("wgmma_gemm")
    ptx = w.kernel_ptx(128, 4, 512, 512, 256)
    lines = ptx.splitlines()
    mma = [i for i, ln in enumerate(lines) if "wgmma.mma_async" in ln]
    wait = [i for i, ln in enumerate(lines) if "wgmma.wait_group" in ln]
    assert len(mma) == 4 and len(wait) == 1 and mma[-1] < wait[0]
    # an accumulator register copied while a multiply is in flight would read garbage
    assert not [ln for ln in lines[mma[0]:wait[0]] if ln.strip().startswith("mov")]
    rep = assemble(ptx, w.ARCH).kernels["wgmma_gemm"]
    assert rep.spill_stores == 0 and rep.spill_loads == 0, rep
