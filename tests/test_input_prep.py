"""A pad along the innermost dim folded into the elementwise nest that produces its source, and
the short innermost dim of an all-parallel nest computed whole by each point
(lower-tensor-to-loop: tensor_to_loop/plan.py ``_try_pad_into``, nest_spec.py ``PadFill``,
nest.py ``whole_run``; lower-precision's ``hoist_casts_above_pads`` for fp16).

The case that asked for it: a network input (NCHW f32) that a channels-last stem conv reads
quantized (int8) or converted (fp16), its 3 channels padded to 4 (``channel-multiple=4``) and
spatially padded. It was three kernels of one thread per element (the transpose, the pad
channel's fill, the spatial border; fp16 four); now one thread per pixel computes its 3
channels and stores 4 bytes (8 in fp16) at once, plus the spatial border.

Numbers are checked against the tensor-stage interpreter, the loop interpreter and the CPU JIT
(three_ways) for hand-built pads over every element type and shape kind, against onnxruntime
for the compiled stem (cpu engine of the cuda loop IR, and the mapped kernels in the
interpreter); the structure on the loop IR (nests, launches, threads) and in the PTX (one
32-bit or 64-bit store per pixel, no byte stores)."""

import re

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import ptxc
from ptxc import compiler
from ptxc.dialects.tensor.maps import identity_map
from ptxc.ir.types import F16, F32, I8, INDEX
from test_tensor_to_loop import empty, f32, generic, three_ways, top

TYPES = {"f32": (F32, np.float32), "f16": (F16, np.float16), "i8": (I8, np.int8)}


def _top_nests(m):
    return [o for o in m.walk() if o.name == "loop.parallel"
            and o.parent_op is not None and o.parent_op.name == "func.func"]


def _convert_body(el):
    """x (f32) -> |x| * 3 converted to ``el`` (an elementwise body that changes the type)."""
    def body(bb, a):
        v = bb.create("math.abs", [a[0]]).result
        k = bb.create("arith.constant", [], {"value": 3.0, "type": F32}).result
        v = bb.create("arith.mul", [v, k]).result
        if el != F32:
            if el == I8:
                lo = bb.create("arith.constant", [], {"value": 127.0, "type": F32}).result
                v = bb.create("arith.min", [v, lo]).result
                v = bb.create("math.roundeven", [v]).result
            v = bb.create("arith.cast", [v], {"to": el}).result
        return [v]
    return body


def _nchw_to_nhwc_pad(shape, el, low, high, value=0, operand=False, index_body=False):
    """x (NCHW f32) -> converted and transposed to NHWC (one generic) -> tensor.pad."""
    n, c, h, w = shape
    tmap = ((1, 0, 0, 0, 0), (0, 0, 0, 1, 0), (0, 1, 0, 0, 0), (0, 0, 1, 0, 0))
    body = _convert_body(el)
    if index_body:   # the value depends on the channel index too (tensor.index is clamped)
        inner = body

        def body(bb, a):
            (v,) = inner(bb, a)
            c_ = bb.create("tensor.index", [], {"dim": 3}).result
            ci = bb.create("arith.cast", [c_], {"to": el}).result
            return [bb.create("arith.add", [v, ci]).result]

    def build(b, a):
        x, v = a
        t = generic(b, [x], [empty(b, (n, h, w, c), el)], (n, h, w, c),
                    [tmap, identity_map(4)], ["parallel"] * 4, body).result
        if operand:
            zero = b.create("arith.constant", [], {"value": 0, "type": INDEX}).result
            s = b.create("tensor.extract", [v, zero]).result
            return b.create("tensor.pad", [t, s], {"low": list(low), "high": list(high)}).result
        return b.create("tensor.pad", [t], {"low": list(low), "high": list(high),
                                            "value": value}).result
    return build


@pytest.mark.parametrize("ty", list(TYPES))
def test_channel_pad_is_one_nest_storing_whole_pixels(ty):
    """3 channels padded to 4: one nest over (h, n, w), each point computing channels 0-2 and
    storing them with the pad value as 4 adjacent elements; no fill nest."""
    el, dt = TYPES[ty]
    value = -2 if ty == "i8" else -2.5
    m, got = three_ways({"x": f32(2, 3, 5, 6), "v": np.zeros(1, dt)},
                        _nchw_to_nhwc_pad((2, 3, 5, 6), el, (0, 0, 0, 0), (0, 0, 0, 1), value),
                        rtol=1e-3, atol=1e-3)
    (nest,) = _top_nests(m)
    assert len(nest.regions[0].blocks[0].args) == 3          # h, n, w: no channel loop
    stores = [o for o in nest.walk() if o.name == "loop.store"]
    assert len(stores) == 4
    assert (got["y0"][..., 3] == dt(value)).all()


@pytest.mark.parametrize("low,high", [((0, 0, 0, 0), (0, 0, 0, 1)),   # the stem: c 3 -> 4
                                      ((0, 0, 0, 2), (0, 0, 0, 3)),   # both ends, not a run
                                      ((0, 0, 0, 1), (0, 0, 0, 0)),   # low end only
                                      ((0, 1, 0, 0), (0, 2, 1, 1)),   # other dims padded too
                                      ((0, 0, 0, 0), (0, 0, 0, 5))])  # 3 -> 8
@pytest.mark.parametrize("ty", list(TYPES))
def test_innermost_pads_of_every_shape_and_type(ty, low, high):
    """Every border cell gets the pad value, every interior cell its producer's, on every path
    three_ways checks; the producer's nest writes the innermost dim's border (one nest more
    only when other dims are padded: their slabs)."""
    el, dt = TYPES[ty]
    value = 7 if ty == "i8" else 0.75
    shape = (2, 3, 4, 5)
    m, got = three_ways({"x": f32(*shape), "v": np.zeros(1, dt)},
                        _nchw_to_nhwc_pad(shape, el, low, high, value), rtol=1e-3, atol=1e-3)
    other = any(low[:-1]) or any(high[:-1])
    assert len(_top_nests(m)) == 1 + other
    assert top(m)["loop.copy"] == 0
    y = got["y0"]
    n, c, h, w = shape
    interior = (slice(None), slice(low[1], low[1] + h), slice(low[2], low[2] + w))
    inner = y[interior]
    mask = np.ones(inner.shape, bool)
    mask[..., low[3]:low[3] + c] = False
    assert (inner[mask] == dt(value)).all()


@pytest.mark.parametrize("ty", ["f32", "i8"])
def test_pad_value_operand_and_index_reading_body(ty):
    """A pad value computed at run time (a scalar operand) and a body reading its own channel
    index: on the dynamic path (an innermost extent that is no run) the value is computed at
    the point clamped into the source and selected, so no load or index leaves the source."""
    el, dt = TYPES[ty]
    v = np.array([5 if ty == "i8" else -1.25], dt)
    m, got = three_ways({"x": f32(2, 3, 4, 5), "v": v},
                        _nchw_to_nhwc_pad((2, 3, 4, 5), el, (0, 0, 0, 1), (0, 0, 0, 2),
                                          operand=True, index_body=True), rtol=1e-3, atol=1e-3)
    assert len(_top_nests(m)) == 1
    assert (got["y0"][..., [0, 4, 5]] == v[0]).all()
    assert any(o.name == "arith.select" for o in m.walk())


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_innermost_pads_property(data):
    """Random shapes, pads (both ends, other dims too), values and element types: the pad
    folded into its producer equals the interpreter's pad."""
    ty = data.draw(st.sampled_from(list(TYPES)))
    el, dt = TYPES[ty]
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=4, max_size=4)))
    low = tuple(data.draw(st.lists(st.integers(0, 2), min_size=4, max_size=4)))
    high = tuple(data.draw(st.lists(st.integers(0, 3), min_size=4, max_size=4)))
    low, high = (0,) + low[1:], (0,) + high[1:]
    if not (low[3] or high[3]):
        high = high[:3] + (1,)
    value = data.draw(st.integers(-5, 5))
    three_ways({"x": f32(*shape), "v": np.zeros(1, dt)},
               _nchw_to_nhwc_pad(shape, el, low, high, value if ty == "i8" else value / 4),
               rtol=1e-3, atol=1e-3)


def test_short_innermost_dim_of_elementwise_nest_is_computed_whole():
    """An all-parallel nest whose stored innermost dim is one 16-byte run (4 f32) computes it
    whole per point (no loop over it); a 6-wide one (24 bytes) keeps one point per element."""
    def build(shape):
        def b_(b, a):
            return generic(b, [a[0]], [empty(b, shape)], shape, [identity_map(2)] * 2,
                           ["parallel"] * 2,
                           lambda bb, s: [bb.create("math.abs", [s[0]]).result]).result
        return b_
    m, _ = three_ways({"x": f32(3, 4)}, build((3, 4)))
    (nest,) = _top_nests(m)
    assert len(nest.regions[0].blocks[0].args) == 1
    assert sum(o.name == "loop.store" for o in nest.walk()) == 4
    m, _ = three_ways({"x": f32(3, 6)}, build((3, 6)))
    (nest,) = _top_nests(m)
    assert len(nest.regions[0].blocks[0].args) == 2


@pytest.mark.parametrize("shape, per_point", [((3, 2, 2), 4),      # 2 x 2 f32: one 16-byte run
                                              ((3, 2, 2, 1), 4),   # a unit dim inside it
                                              ((3, 2, 3), 1)])     # 24 bytes: none
def test_short_innermost_dims_together_are_computed_whole(shape, per_point):
    """Several innermost store dims that make one dense 16-byte run together (a space-to-depth's
    (by, bx) block, its c as well in int8) are computed whole per point, though the innermost
    alone (8 bytes of f32 here) would not be a run of its own."""
    rank = len(shape)

    def build(b, a):
        return generic(b, [a[0]], [empty(b, shape)], shape, [identity_map(rank)] * 2,
                       ["parallel"] * rank,
                       lambda bb, s: [bb.create("math.abs", [s[0]]).result]).result
    m, _ = three_ways({"x": f32(*shape)}, build)
    (nest,) = _top_nests(m)
    points = int(np.prod([n for n in shape if n > 1]))
    assert sum(o.name == "loop.store" for o in nest.walk()) == per_point
    loops = len(nest.regions[0].blocks[0].args)
    assert loops == (1 if per_point > 1 else len([n for n in shape if n > 1]))
    assert points % per_point == 0


def test_pad_not_folded_when_its_source_has_other_readers():
    """The source also returned: it lives in its output, the pad copies it (as before)."""
    el = F32

    def build(b, a):
        (x,) = a
        t = generic(b, [x], [empty(b, (2, 3), el)], (2, 3), [identity_map(2)] * 2,
                    ["parallel"] * 2, _convert_body(el)).result
        return [t, b.create("tensor.pad", [t], {"low": [0, 0], "high": [0, 1],
                                                "value": 1.0}).result]
    m, got = three_ways({"x": f32(2, 3)}, build)
    np.testing.assert_array_equal(got["y1"][:, 3], 1.0)


# ---- the stem, compiled ------------------------------------------------------------------------

def stem(n=2, c=3, h=13, w=13, k=8):
    """A 7x7 stride-2 conv (pads 3) + relu on an NCHW image of ``c`` channels. An odd size (13,
    the default) keeps the 7x7 conv on cuda; an even one is rewritten by space-to-depth-stem
    (the tests at the end of this file)."""
    rng = np.random.default_rng(0)
    W = (rng.standard_normal((k, c, 7, 7)) * 0.1).astype(np.float32)
    B = (rng.standard_normal(k) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y0"], pads=[3, 3, 3, 3],
                              strides=[2, 2]),
             helper.make_node("Relu", ["y0"], ["y"])]
    g = helper.make_graph(nodes, "stem", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [n, c, h, w])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b")])
    return onnx.shape_inference.infer_shapes(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))


X = np.random.default_rng(1).standard_normal((2, 3, 13, 13)).astype(np.float32)
X12 = np.random.default_rng(1).standard_normal((2, 3, 12, 12)).astype(np.float32)


def _graph_module(prec, model=None, x=X):
    model = model or stem()
    if prec == "int8":
        from ptxc.calib import calibrate
        table = calibrate(model, [{"x": x}], "minmax", progress=False)
        mod, _ = compiler._quantize_int8(compiler.as_module(model), table, None, None, None,
                                         None)
        return mod, "fp32"
    return compiler.as_module(model), prec


def _loop(prec, mapped=True, model=None, x=X):
    mod, p = _graph_module(prec, model, x)
    want = ptxc.interpret(mod.clone(), {"x": x})["y"]
    compiler.run_stages(mod, "tensor", target="cuda", layout="nhwc", precision=p, arch="sm_90")
    from ptxc.rewrite import PassManager
    PassManager("lower-tensor-to-loop" + (",map-to-gpu{arch=sm_90}" if mapped else "")
                ).run(mod)
    return mod, want


def _launches(m):
    return [o for o in m.walk() if o.name == "gpu.launch"]


@pytest.mark.parametrize("prec", ["int8", "fp16"])
def test_stem_input_prep_is_one_kernel_plus_border(prec):
    """Before the stem's conv kernel: the prep (one thread per pixel: n*h*w threads) and the
    spatial border; the mapped kernels in the interpreter match the graph's numbers."""
    m, want = _loop(prec)
    launches = _launches(m)
    first_mma = next(i for i, o in enumerate(launches) if o.attr("schedule") in
                     ("mma", "wgmma", "tiled"))
    assert first_mma == 2, [o.attr("schedule") for o in launches]
    prep = launches[0]
    grid, block = prep.attr("grid"), prep.attr("block")
    assert grid[0] * block[0] >= 2 * 13 * 13 and grid[0] * block[0] < 2 * 13 * 13 + block[0]
    stores = [o for o in prep.walk() if o.name == "loop.store"]
    assert len(stores) == 4
    got = ptxc.interpret(m, {"x": X})["y"]
    tol = 0.05 if prec == "fp16" else 0.15
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * float(np.abs(want).max()))


def _kernel_stores(ptx: str, name: str) -> list[str]:
    body = re.split(r"\.visible \.entry ", ptx)
    (k,) = [e for e in body[1:] if e.startswith(name + "(")]
    return [line.split()[0] for line in k.split("\n") if line.strip().startswith("st.global")]


@pytest.mark.parametrize("prec,store", [("int8", "st.global.b32"),
                                        ("fp16", "st.global.v2.b32")])
def test_stem_prep_ptx_stores_a_pixel_at_once(prec, store):
    """The prep kernel's PTX: one 4-byte (int8) or 8-byte (fp16) store per thread, no byte or
    half stores, and it assembles."""
    from ptxc.codegen import lower_to_ptx
    m, _ = _loop(prec)
    prog = lower_to_ptx(m, arch="sm_90")
    assert _kernel_stores(prog.ptx, "kernel_0") == [store]
    from ptxc.ptx.ptxas import assemble, ptxas_path
    if ptxas_path() is not None:
        assemble(prog.ptx, prog.arch)


@pytest.mark.parametrize("prec", ["int8", "fp16"])
def test_stem_cuda_loop_ir_runs_on_the_cpu(prec):
    """The same (unmapped) loop IR the cuda target maps, JIT-compiled for the CPU, against
    onnxruntime on the float model (int8 and fp16 within their tolerances)."""
    import onnxruntime as ort
    from ptxc.driver.cpu import CpuProgram
    m, want = _loop(prec, mapped=False)
    got = CpuProgram.from_module(m)({"x": X})["y"]
    interp = ptxc.interpret(m, {"x": X})["y"]
    np.testing.assert_allclose(got, interp, rtol=1e-5, atol=1e-5)
    sess = ort.InferenceSession(stem().SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, {"x": X})
    tol = 0.05 if prec == "fp16" else 0.15
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * float(np.abs(ref).max()))


def test_fp16_cast_moves_above_the_channel_pad():
    """lower-precision: the conv input's cast is above the channel pad (transpose -> cast ->
    pad), so that the tensor stage fuses the transpose and the cast into one generic."""
    mod, _ = _graph_module("fp16")
    compiler.run_stages(mod, "graph", target="cuda", layout="nhwc", precision="fp16")
    names = [o.name for o in mod.walk() if o.name.startswith("graph.")]
    assert names.index("graph.cast") < names.index("graph.pad")


def test_hoisted_cast_converts_a_pad_value_operand():
    """A Pad with a constant_value input (0.1: rounded by the conversion) read by an fp16 conv:
    the cast goes above the pad with the value converted to f16 at compile time; the f16 graph
    equals the f32 one within fp16's tolerance."""
    rng = np.random.default_rng(2)
    W = (rng.standard_normal((4, 3, 3, 3)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("Pad", ["x", "pads", "cv"], ["p"]),
             helper.make_node("Conv", ["p", "w"], ["y"])]
    g = helper.make_graph(nodes, "padconv", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 6, 6])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(W, "w"),
         numpy_helper.from_array(np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "pads"),
         numpy_helper.from_array(np.array(0.1, np.float32), "cv")])
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    want = ptxc.interpret(compiler.as_module(model), {"x": x})["y"]
    mod = compiler.as_module(model)
    compiler.run_stages(mod, "graph", target="cpu", layout="nchw", precision="fp16")
    names = [o.name for o in mod.walk() if o.name.startswith("graph.")]
    assert names.index("graph.cast") < names.index("graph.pad")
    (pad,) = [o for o in mod.walk() if o.name == "graph.pad"]
    assert pad.results[0].type.element == F16
    got = ptxc.interpret(mod, {"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
