"""Flat row addressing in the mma epilogue (map-to-gpu's ``mma-flat-m``; mma_kernel.m_linear_accesses,
contraction.rows_in_memory_order): the M dims go in the output's memory order, and a point
program's load or store whose offset is linear in the row ``m`` takes one linear index into a
flat view of its buffer instead of ``m``'s ``(n, p, q)``. The mapped launches must equal the
unmapped nest (int8 bit for bit), accesses that are not linear in ``m`` (a zero-padded output)
must keep their indices, and the PTX must lose the per-row address arithmetic."""

import numpy as np
import pytest

from ptxc.dialects.loop import run_main
from ptxc.lower.gpu_map import mma_kernel, mma_prefetch
from ptxc.lower.gpu_map.contraction import analyze, rows_in_memory_order
from ptxc.ptx import assemble, ptxas_path
from ptxc.codegen import lower_to_ptx
from ptxc.rewrite import PassManager
from test_gpu_map_mma_epilogue import mma_tiles, nhwc_loop, residual_conv_fp32

needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas is not installed here")
FLAT = "map-to-gpu{{mma-epilogue={} mma-flat-m=true}}"


@pytest.fixture(autouse=True)
def tiles_everywhere(monkeypatch):
    monkeypatch.setattr(mma_prefetch, "MIN_WAVES", 0)


def _conv(precision, N=2, H=10, W=10):
    model = residual_conv_fp32(N=N, C=64, H=H, W=W, first_conv=True)
    rng = np.random.default_rng(4)
    x = {"x": rng.standard_normal((N, 64, H, W)).astype(np.float32)}
    return (lambda: nhwc_loop(model, precision)), x


def _check(got, want, precision):
    """int8: bit for bit; fp16: within an f16 rounding of the output."""
    for k in want:
        if precision == "int8":
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
        else:
            scale = max(1.0, float(np.abs(want[k]).max()))
            np.testing.assert_allclose(got[k], want[k], rtol=2e-3, atol=2e-3 * scale, err_msg=k)


def _contractions(m):
    return [c for op in m.walk() if op.name == "loop.parallel" and (c := analyze(op))]


def test_rows_go_in_the_outputs_memory_order_and_accesses_go_flat():
    make, _ = _conv("int8")
    cs = _contractions(make())
    assert cs
    for c in cs:
        r = rows_in_memory_order(c)
        assert sorted(r.m_dims) == sorted(c.m_dims)
        flat = mma_kernel.m_linear_accesses(r)
        if len(c.m_dims) > 1:   # the NHWC output [n][p][q][c]: one index in m
            assert any(o.name == "loop.store" for o, _ in flat), c.m_dims
        for _, x in flat:       # coefficients chained by the extents
            k = [x.coef(("p", d)) for d in r.m_dims]
            assert all(k[i] == r.extent(r.m_dims[i + 1]) * k[i + 1] for i in range(len(k) - 1))


@pytest.mark.parametrize("epilogue", ["fragment", "staged"])
@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_flat_rows_equal_the_nest(precision, epilogue):
    make, x = _conv(precision)
    want = run_main(make(), x)
    m = make()
    PassManager(FLAT.format(epilogue)).run(m)
    assert mma_tiles(m)
    flat_views = [o for o in m.walk() if o.name == "loop.view" and len(o.attributes["shape"]) == 1]
    assert flat_views
    _check(run_main(m, x), want, precision)


def test_a_padded_output_keeps_its_indices():
    """A 1x1 conv whose output is the next 3x3 conv's zero-padded input: rows of q are 2 pixels
    apart from p's, not linear in m: that store keeps (n, p, q) (and the result is exact)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((64, 64, 1, 1)) / 8).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32), "w2")
    vi = helper.make_tensor_value_info
    g = helper.make_graph([
        helper.make_node("Conv", ["x", "w1"], ["t"], name="c1"),
        helper.make_node("Relu", ["t"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["y"], name="c2", pads=[1, 1, 1, 1])], "g",
        [vi("x", TensorProto.FLOAT, [2, 64, 8, 8])], [vi("y", TensorProto.FLOAT, [2, 64, 8, 8])],
        [w1, w2])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    make = lambda: nhwc_loop(model, "fp16")  # noqa: E731
    padded = [c for c in _contractions(make()) if len(c.m_dims) > 1]
    stores = [o for c in padded for o, _ in mma_kernel.m_linear_accesses(rows_in_memory_order(c))
              if o.name == "loop.store"]
    assert len(stores) < len(padded)          # the padded output's store is not linear in m
    x = {"x": rng.standard_normal((2, 64, 8, 8)).astype(np.float32)}
    want = run_main(make(), x)
    m = make()
    PassManager(FLAT.format("staged")).run(m)
    got = run_main(m, x)
    scale = max(1.0, float(np.abs(want["y"]).max()))
    np.testing.assert_allclose(got["y"], want["y"], rtol=2e-3, atol=2e-3 * scale)


@needs_ptxas
def test_flat_rows_drop_the_row_address_arithmetic():
    """The int8 conv + residual kernel: fewer 64-bit integer instructions, no spills (flat rows
    are the default; ``mma-flat-m=false`` keeps ``(n, p, q)``). Both with 64-bit index
    arithmetic (``index32=false``: with it the unflattened kernel's would be 32-bit)."""
    make, _ = _conv("int8", N=4, H=16, W=16)
    counts = []
    for opts in ("map-to-gpu{mma-epilogue=staged mma-flat-m=false index32=false}",
                 "map-to-gpu{mma-epilogue=staged mma-flat-m=true index32=false}"):
        m = make()
        PassManager(opts).run(m)
        p = lower_to_ptx(m, arch="sm_90")
        rep = assemble(p.ptx, "sm_90")
        assert all(k.spill_stores == 0 and k.spill_loads == 0 for k in rep.kernels.values())
        counts.append(sum(p.ptx.count(i) for i in ("add.s64", "mul.hi.u32", "mad.lo.s64")))
    assert counts[1] < counts[0], counts


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_flat_rows_on_gpu(precision):
    from test_ptx import run_on_gpu
    make, x = _conv(precision, N=4, H=14, W=14)
    m = make()
    PassManager(FLAT.format("staged")).run(m)
    want = run_main(m, x)
    _check(run_on_gpu(lower_to_ptx(m), x), want, precision)
