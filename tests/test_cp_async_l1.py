"""map-to-gpu's ``cp-async-l1`` (opt-in until timed): the K-tile copies of an operand that other
copies read again (mma.rereads: a convolution's overlapping windows) keep their lines in L1
(gpu.cp_async ``l1``, PTX ``cp.async.ca``); a GEMM's or a 1 x 1 conv's stay L2-only
(``cp.async.cg``). A cache hint: the results are the same bits."""

import numpy as np
import pytest

import ptxc
from int8_ir import conv_model, gemm_model, inputs_for, loop_module
from ptxc.dialects.loop import run_main
from ptxc.lower.gpu_map import MapToGpu, contraction, mma
from ptxc.ptx import lower_to_ptx
from ptxc.rewrite import PassManager
from test_gpu_map_mma_int8 import check_exact

#: a 3 x 3 conv whose 16-channel rows are 16-byte copies (mma.sync), and one in the wgmma form
CONV3 = dict(N=2, C=16, H=8, W=8, K=32, R=3, S=3, pad=1, zx=-5)


def _contraction(m):
    return next(c for c in (contraction.analyze(o) for o in m.walk() if o.name == "loop.parallel")
                if c is not None)


def test_rereads_counts_the_windows():
    """A 3 x 3 pad-1 conv on 8 x 8 reads each pixel of the padded 10 x 10 image 9 x 64 / 100
    times; a GEMM's operands once each."""
    c = _contraction(loop_module(conv_model(**CONV3), layout="nhwc", target="cuda"))
    # (which of the filter and the image is the mma's A is the contraction analysis' choice)
    assert sorted(mma.rereads(c, x) for x in (c.a, c.b)) == pytest.approx([1, 9 * 64 / 100])
    g = _contraction(loop_module(gemm_model(128, 64, 96)))
    assert mma.rereads(g, g.a) == pytest.approx(1) and mma.rereads(g, g.b) == pytest.approx(1)


def _copies(m):
    return [o for o in m.walk() if o.name == "gpu.cp_async"]


@pytest.mark.parametrize("options", ["", " wgmma=on"])
def test_the_windows_copies_cache_in_l1_and_stay_exact(options):
    model = conv_model(**CONV3)
    x = inputs_for(model)
    ref = ptxc.interpret(ptxc.import_onnx(model), x)
    m = loop_module(model, layout="nhwc", target="cuda")
    want = run_main(m, x)
    PassManager(f"map-to-gpu{{cp-async-l1=true{options}}}").run(m)
    if options:
        assert "wgmma" in [o.attributes["schedule"] for o in m.walk() if o.name == "gpu.launch"]
    copies = _copies(m)
    cached = [o for o in copies if o.attr("l1")]
    # the image's copies (each pixel read 5.76 times over) cache; the filter's do not
    assert cached and len(cached) < len(copies)
    check_exact(run_main(m, x), ref, want)
    ptx = lower_to_ptx(m, arch="sm_90").ptx
    assert "cp.async.ca.shared.global" in ptx and "cp.async.cg.shared.global" in ptx


def test_off_by_default_and_gemms_never_cache():
    assert MapToGpu().cp_async_l1 is False
    m = loop_module(conv_model(**CONV3), layout="nhwc", target="cuda")
    PassManager("map-to-gpu").run(m)
    assert _copies(m) and not any(o.attr("l1") for o in _copies(m))
    g = loop_module(gemm_model(128, 64, 96), layout="nhwc", target="cuda")
    PassManager("map-to-gpu{cp-async-l1=true}").run(g)
    assert _copies(g) and not any(o.attr("l1") for o in _copies(g))


@pytest.mark.gpu
def test_cached_copies_on_gpu_are_bit_exact():
    from test_ptx import run_on_gpu
    model = conv_model(**CONV3)
    x = inputs_for(model)
    ref = ptxc.interpret(ptxc.import_onnx(model), x)
    m = loop_module(model, layout="nhwc", target="cuda")
    PassManager("map-to-gpu{cp-async-l1=true}").run(m)
    assert any(o.attr("l1") for o in _copies(m))
    got = run_on_gpu(lower_to_ptx(m), x)
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
