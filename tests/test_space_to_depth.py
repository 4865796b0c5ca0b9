"""space-to-depth-stem (ptxc/rewrite/passes/space_to_depth.py): a stride-2 conv on a few
channels becomes a space-to-depth and a stride-1 conv on 4x the channels.

Checked: the rewritten graph against onnxruntime on the original model over stem geometries
(kernel, pads, sizes), the blocked filter holding every tap once, where the pass declines, the
int8 form (the quantize goes before the space-to-depth; bit-identical results in the graph
interpreter), and on cuda (compiled here, no GPU): the input's preparation is one kernel and
the border fill, storing a pixel's 16 int8 channels (12 padded to 16) in one 16-byte store,
and the cuda loop IR run on the CPU against onnxruntime."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import ptxc
from ptxc import compiler
from ptxc.compiler import as_module
from ptxc.rewrite import PassManager
from ptxc.rewrite.passes.space_to_depth import blocked_filter, geometry
from test_input_prep import X12, _kernel_stores, _launches, _loop, stem


def conv_model(c=3, h=16, w=16, k=5, r=7, s=7, pads=(3, 3, 3, 3), strides=(2, 2), group=1,
               dilations=(1, 1), seed=0):
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((k, c // group, r, s)).astype(np.float32)
    B = rng.standard_normal(k).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[r, s],
                            strides=list(strides), pads=list(pads), group=group,
                            dilations=list(dilations))
    g = helper.make_graph([node], "conv", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, c, h, w])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b")])
    return onnx.shape_inference.infer_shapes(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def rewritten(model):
    mod = as_module(model)
    changed = PassManager("space-to-depth-stem", check_numerics=True).run(mod)
    return mod, changed


def ort_run(model, x):
    return ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("r, pads, hw", [(7, (3, 3, 3, 3), 16), (3, (1, 1, 1, 1), 8),
                                         (5, (2, 2, 2, 2), 10), (4, (1, 1, 1, 1), 8),
                                         (7, (3, 2, 2, 3), 12), (3, (0, 0, 0, 0), 10),
                                         (6, (2, 3, 3, 2), 14)])
def test_rewrite_equals_onnxruntime(r, pads, hw):
    model = conv_model(r=r, s=r, pads=pads, h=hw, w=hw)
    mod, changed = rewritten(model)
    assert changed
    conv = next(o for o in mod.walk() if o.name == "graph.conv")
    assert tuple(conv.attr("strides")) == (1, 1) and conv.operands[0].type.shape[1] == 12
    x = np.random.default_rng(1).standard_normal((2, 3, hw, hw)).astype(np.float32)
    np.testing.assert_allclose(ptxc.interpret(mod, {"x": x})["y"], ort_run(model, x),
                               rtol=1e-4, atol=1e-4)


@settings(max_examples=25, deadline=None)
@given(r=st.integers(2, 7), lo=st.integers(0, 3), hi=st.integers(0, 3),
       half=st.integers(3, 8))
def test_geometry_keeps_every_output(r, lo, hi, half):
    """The blocked conv has the original's output size wherever geometry() accepts."""
    size = 2 * half
    if size + lo + hi < r:
        return
    g = geometry(size, r, lo, hi)
    if g is None:
        return
    s, k2, lo2, hi2 = g
    assert 2 * k2 >= r + s and (lo + s) % 2 == 0
    assert half + lo2 + hi2 - k2 + 1 == (size + lo + hi - r) // 2 + 1


@settings(max_examples=30, deadline=None)
@given(c=st.integers(1, 4), r=st.integers(3, 7), s=st.integers(3, 7),
       pads=st.tuples(*[st.integers(0, 3)] * 4), h=st.integers(2, 6), w=st.integers(2, 6),
       k=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_random_stems_equal_onnxruntime(c, r, s, pads, h, w, k, seed):
    """Random stride-2 convs on 1-4 channels of even-sized images: where the pass rewrites, the
    interpreter on the rewritten graph equals onnxruntime on the original (the pass checks its
    own numbers too: check-numerics)."""
    h, w = 2 * h, 2 * w
    if h + pads[0] + pads[2] < r or w + pads[1] + pads[3] < s:
        return
    model = conv_model(c=c, h=h, w=w, k=k, r=r, s=s, pads=pads, seed=seed)
    mod, changed = rewritten(model)
    if not changed:
        return
    x = np.random.default_rng(seed).standard_normal((2, c, h, w)).astype(np.float32)
    np.testing.assert_allclose(ptxc.interpret(mod, {"x": x})["y"], ort_run(model, x),
                               rtol=1e-4, atol=1e-4)


def test_blocked_filter_places_every_tap_once():
    w = np.arange(2 * 3 * 49, dtype=np.float32).reshape(2, 3, 7, 7) + 1
    wb = blocked_filter(w, (1, 1), (4, 4))
    assert wb.shape == (2, 12, 4, 4)
    assert sorted(wb[wb != 0].tolist()) == sorted(w.ravel().tolist())
    # channel 4 c + 2 by + bx: the tap (r, s) = (2 i + by - 1, 2 j + bx - 1)
    assert wb[0, 4 * 2 + 2 * 1 + 0, 1, 2] == w[0, 2, 2, 3]


@pytest.mark.parametrize("kw", [dict(c=5), dict(h=15, w=15), dict(strides=(1, 1)),
                                dict(c=3, k=3, group=3), dict(dilations=(2, 2)),
                                dict(r=1, s=1, pads=(0, 0, 0, 0))])
def test_declined(kw):
    """More than 4 channels, an odd size, stride 1, grouped, dilated, a 1x1 kernel: kept."""
    _, changed = rewritten(conv_model(**kw))
    assert not changed


def test_int8_filter_with_a_nonzero_zero_point_is_declined():
    """An explicit int8 conv (QDQ, folded to graph.qlinear_conv) is rewritten where its filter's
    zero point is 0, and kept where it is not (an inserted zero tap would add ``-zw * x``)."""
    from support import int8_ir

    def graph(zw):
        model = int8_ir.conv_model(N=1, C=3, H=8, W=8, K=4, R=3, S=3, stride=2, pad=1)
        for t in model.graph.initializer:
            if t.name == "wz":
                t.CopyFrom(numpy_helper.from_array(np.full(4, zw, np.int8), "wz"))
        mod = as_module(model)
        PassManager("graph-opt").run(mod)
        assert any(o.name == "graph.qlinear_conv" for o in mod.walk())
        return mod
    assert PassManager("space-to-depth-stem").run(graph(0))
    assert not PassManager("space-to-depth-stem").run(graph(3))


def _int8_graph(model, x):
    from ptxc.calib import calibrate
    table = calibrate(model, [{"x": x}], "minmax", progress=False)
    mod, _ = compiler._quantize_int8(as_module(model), table, None, None, None, None)
    PassManager("graph-opt").run(mod)
    return mod


def test_int8_quantizes_after_the_space_to_depth_and_is_bit_identical():
    model = stem(h=12, w=12)
    mod = _int8_graph(model, X12)
    want = ptxc.interpret(mod.clone(), {"x": X12})["y"]
    assert PassManager("space-to-depth-stem").run(mod)
    q = next(o for o in mod.walk() if o.name == "graph.quantize_linear")
    assert q.operands[0].op.name == "graph.reshape"      # quantize(space_to_depth(x))
    assert q.results[0].type.shape == (2, 12, 6, 6)
    conv = next(o for o in mod.walk() if o.name == "graph.qlinear_conv")
    assert conv.operands[0] is q.results[0] and tuple(conv.attr("kernel_shape")) == (4, 4)
    np.testing.assert_array_equal(ptxc.interpret(mod, {"x": X12})["y"], want)


@pytest.mark.parametrize("prec, threads, store", [
    ("int8", 2 * 6 * 6, "st.global.v4.b32"),       # a pixel's 16 channels (12 + 4 zeros)
    ("fp16", 2 * 6 * 6 * 3, "st.global.v2.b32")])  # a (by, bx) block of one c: 4 halves
def test_cuda_stem_prep_is_one_kernel_plus_border(prec, threads, store):
    """On cuda the stem's input preparation is one kernel (the space-to-depth's moves, the
    quantize or cast, the channel pad) and the spatial border's fill; the mapped kernels in the
    interpreter match the graph's numbers; the prep's PTX stores whole runs."""
    m, want = _loop(prec, model=stem(h=12, w=12), x=X12)
    launches = _launches(m)
    first = next(i for i, o in enumerate(launches) if o.attr("schedule") in ("mma", "wgmma"))
    assert first == 2, [o.attr("schedule") for o in launches]
    grid, block = launches[0].attr("grid"), launches[0].attr("block")
    assert threads <= grid[0] * block[0] < threads + block[0]
    got = ptxc.interpret(m, {"x": X12})["y"]
    tol = 0.05 if prec == "fp16" else 0.15
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * float(np.abs(want).max()))
    from ptxc.codegen import lower_to_ptx
    prog = lower_to_ptx(m, arch="sm_90")
    assert _kernel_stores(prog.ptx, "kernel_0") == [store]


@pytest.mark.parametrize("prec", ["int8", "fp16"])
def test_cuda_stem_loop_ir_on_the_cpu_equals_onnxruntime(prec):
    from ptxc.driver.cpu import CpuProgram
    model = stem(h=12, w=12)
    m, _ = _loop(prec, mapped=False, model=model, x=X12)
    got = CpuProgram.from_module(m)({"x": X12})["y"]
    ref = ort_run(model, X12)
    tol = 0.05 if prec == "fp16" else 0.15
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * float(np.abs(ref).max()))
