"""map-to-gpu's tiled schedule (ptxc/lower/gpu_map/tiled.py): which nests it takes, the launch it
builds (block, grid, shared bytes under 48 KiB), and that the interpreter gives the same numbers
before and after (lockstep semantics of gpu.launch/gpu.shared/loop.if) for the nests
lower-tensor-to-loop makes from MatMul (tile multiples and not, batched), Gemm with a bias and a
ReLU, Conv (3x3 pad 1 stride 1 and 2, 1x1, 7x7 stride 2, grouped, depthwise, ResNet-like
shapes), and for handwritten nests: a non-unit-step reduction with a tail chunk, offsets, and the
nests it must decline (no reuse, a gather, a reduction reading what the nest writes, a footprint
that cannot fit)."""

import numpy as np
import pytest
from support.loop_ir import const, load, module, op
from support.one_node import make_model, rand
from onnx import TensorProto, helper, numpy_helper

from ptxc.compiler import as_module, run_stages
from ptxc.dialects.func import func_body, get_func
from ptxc.dialects.gpu import shared_bytes
from ptxc.dialects.loop import for_loop, parallel_loop, run_main
from ptxc.ir import verify
from ptxc.ir.types import F32, INDEX, BufferType
from ptxc.lower.gpu_map import tiled as T, tiled_nest
from ptxc.target import Target

SM90 = Target.preset("sm_90")    # an H100 SXM: 132 SMs, 227 KiB of shared memory per block


# ---- helpers ------------------------------------------------------------------------------

def kernels(module):
    return list(func_body(get_func(module, "main")).ops)


def map_tiled(module):
    """Apply the tiled schedule to every top-level nest (as map-to-gpu does for this schedule),
    with ``tiled-min-reduction=0`` (every nest it can take: the depthwise convs below too,
    which map-to-gpu's default leaves to the pointwise schedule); returns the launches it built
    and the number of nests it declined."""
    from ptxc.lower.gpu_map import MapToGpu
    take_all = MapToGpu(tiled_min_reduction=0)
    launches, declined = [], 0
    for op in kernels(module):
        if op.name not in ("loop.parallel", "loop.for", "loop.copy"):
            continue
        launch = T.schedule(op, take_all)
        if launch is None:
            declined += 1
            continue
        op.erase()
        launches.append(launch)
    verify(module)
    return launches, declined


def check_launch(launch):
    assert launch.attributes["schedule"] == "tiled"
    bx, by, bz = launch.attributes["block"]
    assert bz == 1 and bx * by <= 1024
    assert 0 < shared_bytes(launch) <= 48 * 1024
    ops = [o.name for o in launch.walk()]
    assert "gpu.barrier" in ops and "gpu.shared" in ops


def model_inputs(model):
    return {i.name: rand(*[d.dim_value for d in i.type.tensor_type.shape.dim])
            for i in model.graph.input}


def check_model(model, min_launches=1, max_declined=None, rtol=1e-5):
    """Lower ``model`` to loops, tile what applies; the numbers must not move (the tiled nest
    sums the same products in the same order: equal up to rtol, in practice bit-identical)."""
    module = run_stages(as_module(model), "loop")
    inputs = model_inputs(model)
    before = run_main(module, inputs)
    launches, declined = map_tiled(module)
    assert len(launches) >= min_launches
    if max_declined is not None:
        assert declined <= max_declined
    for launch in launches:
        check_launch(launch)
    after = run_main(module, inputs)
    assert before.keys() == after.keys()
    for k in before:
        scale = float(np.max(np.abs(before[k])))
        np.testing.assert_allclose(after[k], before[k], rtol=rtol, atol=rtol * scale)
    return launches, declined


def conv(n=1, c=8, h=10, w=10, oc=16, k=3, pad=1, stride=1, group=1, bias=True):
    consts = {"w": rand(oc, c // group, k, k)}
    names = [("x", rand(n, c, h, w)), "w"]
    if bias:
        consts["bias"] = rand(oc)
        names.append("bias")
    return make_model("Conv", names, consts=consts, pads=[pad] * 4, strides=[stride] * 2,
                      group=group)


def gemm_relu(m, k, n, trans_b):
    b = rand(n, k) if trans_b else rand(k, n)
    nodes = [helper.make_node("Gemm", ["a", "b", "c"], ["g"], transB=trans_b),
             helper.make_node("Relu", ["g"], ["y"])]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, (m, k))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (m, n))],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(rand(n), "c")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


# ---- matmul / gemm ------------------------------------------------------------------------

def test_matmul_tile_multiple():
    # 64x128 @ 128x96: unrolled by 8 along j (12 points), 16 rows per block, K in 4 chunks
    (launch,), _ = check_model(make_model("MatMul", [("a", rand(64, 128)), "b"],
                                          consts={"b": rand(128, 96)}))
    assert launch.attributes["block"] == (12, 16, 1)
    assert launch.attributes["grid"] == (1, 4, 1)
    # A's tile 16 x 32 and B's 32 x 96 per chunk of 32
    assert shared_bytes(launch) == (16 * 32 + 32 * 96) * 4
    shapes = sorted(o.results[0].type.shape for o in launch.walk() if o.name == "gpu.shared")
    assert shapes == [(16, 32), (32, 96)]


def test_matmul_partial_tiles_and_tail_chunk():
    # 37 rows over blocks of 32 (a partial tile guarded), K = 45 = one chunk of 32 and a tail of
    # 13, N = 70 = 8 x 8 unrolled + a tail nest of 6 columns (a second launch)
    launches, declined = check_model(make_model("MatMul", [("a", rand(37, 45)), "b"],
                                                consts={"b": rand(45, 70)}), 2, 0)
    guards = [o for o in launches[0].walk() if o.name == "loop.if"]
    assert guards  # the epilogue and the edge copies are guarded
    fors = [o for o in launches[0].walk() if o.name == "loop.for" and o.results]
    assert {(o.attr("lower"), o.attr("upper")) for o in fors} >= {(0, 32), (0, 13)}


def test_matmul_both_operands_runtime():
    check_model(make_model("MatMul", [("a", rand(50, 40)), ("b", rand(40, 33))]), 1)


def test_batched_matmul():
    launches, _ = check_model(make_model("MatMul", [("a", rand(3, 33, 70)),
                                                    ("b", rand(3, 70, 45))]), 2, 0)
    # the batch is one block per value along grid.z
    assert all(l.attributes["grid"][2] == 3 for l in launches)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_bias_relu(trans_b):
    launches, _ = check_model(gemm_relu(37, 50, 70, trans_b), 2, 0)
    # the bias and the ReLU stay in the guarded epilogue
    for launch in launches:
        guard = [o for o in launch.walk() if o.name == "loop.if"][-1]
        names = [o.name for o in guard.walk()]
        assert "arith.max" in names and "loop.store" in names


def test_gemv_declined():
    # one row: no second parallel dim to tile; the reduction schedule's case
    check_model(make_model("MatMul", [("a", rand(1, 300)), "b"], consts={"b": rand(300, 64)}),
                0, None)
    module = run_stages(as_module(make_model("MatMul", [("a", rand(1, 300)), "b"],
                                             consts={"b": rand(300, 64)})), "loop")
    assert map_tiled(module)[0] == []


# ---- convolutions -------------------------------------------------------------------------

def test_conv3x3_pad1():
    launches, declined = check_model(conv(), 2)
    # the padding kernel (all of the border: one nest) and the copy of the input into the
    # padded scratch are not tiled
    assert declined == 2


def test_conv3x3_stride2():
    check_model(conv(c=4, oc=6, h=9, w=9, stride=2), 2)


def test_conv1x1():
    check_model(conv(c=16, oc=32, h=14, w=14, k=1, pad=0), 2, 0)


def test_conv1x1_stride2_no_bias():
    check_model(conv(c=16, oc=32, h=14, w=14, k=1, pad=0, stride=2, bias=False), 2, 0)


def test_conv7x7_stride2_stem():
    (launch,), _ = check_model(conv(c=3, oc=16, h=32, w=32, k=7, pad=3, stride=2), 1)
    # the 7x7 window's rows and columns are inside each chunk's input tile
    shapes = [o.results[0].type.shape for o in launch.walk() if o.name == "gpu.shared"]
    assert any(len(s) == 3 and s[1] >= 7 for s in shapes)


def test_grouped_conv():
    check_model(conv(n=2, c=8, oc=8, h=12, w=12, group=2), 2)


def test_depthwise_conv():
    # one input channel per output channel: only the weights' reuse across pixels remains
    check_model(conv(c=8, oc=8, h=12, w=12, group=8), 2)


@pytest.mark.parametrize("c,oc,hw", [(64, 64, 14), (128, 128, 7)])
def test_resnet_like_3x3(c, oc, hw):
    launches, _ = check_model(conv(c=c, oc=oc, h=hw, w=hw), 2)
    # 64+ channels: the reduction runs in several chunks, and the tiles had to fit 48 KiB
    for launch in launches:
        assert any(o.name == "loop.for" and o.attr("step", 1) > 1 for o in launch.walk())


def test_resnet_like_bottleneck_1x1():
    check_model(conv(n=2, c=256, oc=64, h=7, w=7, k=1, pad=0), 2)


# ---- handwritten nests --------------------------------------------------------------------

def matmul_nest(m=10, k=40, n=24, red=(0, 40, 1), offset=0, gather=False, inplace=False,
                inner=None):
    """y[i, j] = sum over k in range(*red) of a[i, k + offset] * b[k, j] (+ an inner loop over
    ``inner`` extra terms of b's rows); ``gather``: a's column read through an index buffer;
    ``inplace``: the epilogue writes into b."""
    tb = BufferType((k + (inner or 0), n), F32)

    def body(bld, a, b, idx, y):
        _, p, (i, j) = parallel_loop(bld, (0, 0), (m, n))
        loop, fb, kk, (acc,) = for_loop(p, *red, inits=[const(p, 0.0)])
        kcol = op(fb, "arith.add", kk, const(fb, offset, INDEX)) if offset else kk
        if gather:
            kcol = op(fb, "arith.cast", load(fb, idx, kk), to=INDEX)
        x = load(fb, a, i, kcol)
        if inner:
            il, ib, r, (s,) = for_loop(fb, 0, inner, inits=[acc])
            row = op(ib, "arith.add", kk, r)
            ib.create("loop.yield", [op(ib, "arith.add", s,
                                        op(ib, "arith.mul", x, load(ib, b, row, j)))])
            fb.create("loop.yield", [il.results[0]])
        else:
            fb.create("loop.yield", [op(fb, "arith.add", acc,
                                        op(fb, "arith.mul", x, load(fb, b, kk, j)))])
        p.create("loop.store", [loop.results[0], b if inplace else y, [i, j]])

    ta = BufferType((m, k + offset), F32)
    ti = BufferType((k,), F32)
    return module({"a": ta, "b": tb, "idx": ti, "y": BufferType((m, n), F32)}, ["y"] + (
        ["b"] if inplace else []), body)


def run_both(m, inputs):
    before = run_main(m, inputs)
    launches, declined = map_tiled(m)
    after = run_main(m, inputs)
    for k in before:
        np.testing.assert_array_equal(after[k], before[k])
    return launches, declined


def test_handwritten_step_offset_tail():
    # reduction over k = 3, 5, ..., 39 (18 iterations: one chunk of 16 and a tail of 2) reading
    # a[i, k + 2]: the box origin follows the step and the offset
    m = matmul_nest(k=40, red=(3, 40, 2), offset=2)
    inputs = {"a": rand(10, 42), "b": rand(40, 24), "idx": rand(40)}
    (launch,), _ = run_both(m, inputs)
    check_launch(launch)


def test_handwritten_inner_loop():
    # an inner reduction loop of 5 inside the chunked one: its full range is in each tile
    m = matmul_nest(k=40, inner=5)
    inputs = {"a": rand(10, 40), "b": rand(45, 24), "idx": rand(40)}
    (launch,), _ = run_both(m, inputs)
    check_launch(launch)


def test_gather_declined():
    m = matmul_nest(gather=True)
    assert map_tiled(m) == ([], 1)


def test_reduction_reading_what_the_nest_writes_declined():
    m = matmul_nest(inplace=True)
    assert map_tiled(m) == ([], 1)


def test_footprint_too_big_stays_global():
    # the inner loop spans 20000 rows of b: no tile of b fits in 48 KiB, so the plan shrinks
    # until staging b no longer pays (box >= reads) and b stays in global memory; a is staged
    nest = tiled_nest.analyze(kernels(matmul_nest(k=4, red=(0, 4, 1), inner=20000, n=16, m=4))[0])
    p = T.plan(nest, SM90)
    assert p is not None and p.shared_bytes <= SM90.shared_per_block_static
    assert [box.group.buffer.type.shape for box in p.boxes] == [(4, 4)]


def test_no_reuse_declined():
    # pooling-like: every thread reads its own window, no operand is shared across threads
    def body(bld, x, y):
        _, p, (i, j) = parallel_loop(bld, (0, 0), (6, 6))
        loop, fb, kk, (acc,) = for_loop(p, 0, 3, inits=[const(p, 0.0)])
        row = op(fb, "arith.add", op(fb, "arith.mul", i, const(fb, 2, INDEX)), kk)
        fb.create("loop.yield", [op(fb, "arith.max", acc, load(fb, x, row, j))])
        p.create("loop.store", [loop.results[0], y, [i, j]])
    m = module({"x": BufferType((13, 6), F32), "y": BufferType((6, 6), F32)}, ["y"], body)
    assert map_tiled(m) == ([], 1)


@pytest.mark.parametrize("model", [
    make_model("Softmax", [("x", rand(4, 100))], axis=-1),
    make_model("MaxPool", [("x", rand(1, 4, 9, 9))], kernel_shape=[3, 3], strides=[2, 2]),
    make_model("Relu", [("x", rand(3, 50))]),
], ids=["softmax", "maxpool", "relu"])
def test_other_nests_declined(model):
    module = run_stages(as_module(model), "loop")
    launches, _ = map_tiled(module)
    assert launches == []


def test_ptx_assembles():
    # the tiled kernels go through NVPTX and ptxas (skipped where either is missing)
    ptx = pytest.importorskip("ptxc.ptx")
    if ptx.ptxas_path() is None:
        pytest.skip("no ptxas")
    from ptxc.codegen import lower_to_ptx
    from ptxc.lower.gpu_map import map_to_gpu
    module = run_stages(as_module(conv(c=16, oc=32, h=12, w=12)), "loop")
    launches, _ = map_tiled(module)
    map_to_gpu(module)  # the padding kernels: the other schedules
    prog = lower_to_ptx(module, arch="sm_90")
    report = ptx.assemble(prog.ptx, "sm_90")
    tiled = [k for k in prog.table.kernels if k.schedule == "tiled"]
    assert len(tiled) == len(launches) == 2
    for k in tiled:
        res = report.kernels[k.name]
        assert res.shared_bytes == k.shared_bytes > 0 and res.spill_stores == 0


@pytest.mark.parametrize("model,want", [
    (conv(c=8, oc=8, h=12, w=12, group=8), "pointwise"),   # depthwise: 9 reduction points
    (conv(c=8, oc=16, h=10, w=10), "tiled"),               # 8 channels x 3 x 3 = 72 points
])
def test_min_reduction_leaves_short_reductions_to_pointwise(model, want):
    """map-to-gpu{tiled-min-reduction=16} (the default): a nest with fewer reduction points is
    declined by the tiled schedule and mapped pointwise; the numbers do not move."""
    from ptxc.rewrite import PassManager
    module = run_stages(as_module(model), "loop")
    inputs = model_inputs(model)
    before = run_main(module, inputs)
    nests = [tiled_nest.analyze(o) for o in kernels(module) if o.name == "loop.parallel"]
    points = {tiled_nest.reduction_points(n) for n in nests if n is not None}
    assert points and all((p < 16) == (want == "pointwise") for p in points), points
    PassManager("map-to-gpu{tiled-min-reduction=16}").run(module)
    schedules = [o.attributes["schedule"] for o in kernels(module) if o.name == "gpu.launch"]
    # with tiled-min-reduction=0 both convs map tiled (test_depthwise_conv, test_grouped_conv)
    assert ("tiled" in schedules) == (want == "tiled"), schedules
    after = run_main(module, inputs)
    for k in before:
        np.testing.assert_allclose(after[k], before[k], rtol=1e-5,
                                   atol=1e-5 * float(np.max(np.abs(before[k]))))


def test_bad_min_reduction_option_is_a_compile_error():
    from ptxc.errors import CompileError
    from ptxc.rewrite import PassManager
    with pytest.raises(CompileError, match="tiled-min-reduction must be"):
        PassManager("map-to-gpu{tiled-min-reduction=-1}")
