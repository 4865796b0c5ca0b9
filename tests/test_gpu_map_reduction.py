"""map-to-gpu's reduction schedule (ptxc/lower/gpu_map/reduction.py): which nests it takes, the
launch it builds, and that the interpreter gives the same numbers before and after (lockstep
semantics of gpu.launch/loop.if/gpu.shared), for the reductions lower-tensor-to-loop makes from
ONNX models (softmax, ReduceSum/Mean/Max/Min kept and full, GlobalAveragePool, LayerNorm,
batch-1 MatMul/Gemm) and for handwritten nests covering each combiner, integer types, odd
lengths (tails), steps and offsets, nested chains and initial values other than the identity."""

import numpy as np
import pytest
from support.loop_ir import const, load, module, op
from support.one_node import make_model, rand
from onnx import helper

from ptxc.compiler import as_module, run_stages
from ptxc.dialects.func import func_body, get_func
from ptxc.dialects.loop import OUTPUTS_ATTR, for_loop, parallel_loop, run_main
from ptxc.errors import CompileError
from ptxc.ir import Builder, verify
from ptxc.ir.types import F32, I32, INDEX, BufferType
from ptxc.lower.gpu_map import reduction as R
from ptxc.target import Target

SM90 = Target.preset("sm_90")    # an H100 SXM: 132 SMs, 227 KiB of shared memory per block


# ---- helpers ------------------------------------------------------------------------------

def kernels(module):
    return list(func_body(get_func(module, "main")).ops)


def map_reductions(module, options=None):
    """Apply the reduction schedule to every top-level nest (as map-to-gpu does for this one
    schedule); returns the launches it built and the reasons it gave for the rest."""
    launches, declined = [], []
    for op in kernels(module):
        if op.name not in ("loop.parallel", "loop.for", "loop.copy"):
            continue
        launch = R.schedule(op, options)
        if launch is None:
            declined.append(R.analyze(op) if op.name == "loop.parallel" else op.name)
            continue
        op.erase()
        launches.append(launch)
    verify(module)
    return launches, declined


def assert_same(before, after, rtol=1e-5):
    assert before.keys() == after.keys()
    for k in before:
        a, b = np.asarray(before[k]), np.asarray(after[k])
        assert a.shape == b.shape and a.dtype == b.dtype
        if a.dtype.kind == "f":
            scale = float(np.nanmax(np.abs(a))) if a.size else 1.0
            np.testing.assert_allclose(b, a, rtol=rtol, atol=rtol * scale, err_msg=k)
        else:
            np.testing.assert_array_equal(b, a, err_msg=k)


def check_model(model, n_launches, declined=0):
    module = run_stages(as_module(model), "loop")
    inputs = {i.name: rand(*[d.dim_value for d in i.type.tensor_type.shape.dim],
                           dtype=helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type))
              for i in model.graph.input}
    before = run_main(module, inputs)
    launches, left = map_reductions(module)
    assert len(launches) == n_launches, left
    assert len(left) == declined, left
    for launch in launches:
        assert launch.attributes["schedule"] == "reduction"
        bx = launch.attributes["block"][0]
        assert launch.attributes["block"] == (bx, 1, 1) and bx % 32 == 0 and bx & (bx - 1) == 0
    assert_same(before, run_main(module, inputs))
    return launches


# ---- models -------------------------------------------------------------------------------

def test_softmax_rows():
    # max and sum are reductions (one point: 4 rows unrolled and jammed); the normalize is not
    launches = check_model(make_model("Softmax", [("x", rand(4, 1000))], axis=-1), 2, 1)
    assert [l.attributes["grid"] for l in launches] == [(1, 1, 1)] * 2
    assert [l.attributes["block"][0] for l in launches] == [256, 256]


def test_softmax_odd_row():
    check_model(make_model("Softmax", [("x", rand(3, 999))], axis=1), 2, 1)


def test_reduce_sum_keepdims_tail():
    x = rand(3, 4, 257)
    launches = check_model(make_model("ReduceSum", [("x", x), "axes"],
                                      consts={"axes": np.array([2])}, keepdims=1), 1)
    assert launches[0].attributes["grid"] == (3, 1, 1)  # 3 x (4 jammed rows)
    assert launches[0].attributes["block"] == (128, 1, 1)


def test_reduce_mean_full():
    # a 0-dim parallel: the 3x4x257 chain collapses into one range of 3084 iterations
    launches = check_model(make_model("ReduceMean", [("x", rand(3, 4, 257))], keepdims=0), 1)
    assert launches[0].attributes["grid"] == (1, 1, 1)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_reduce_max_min(op):
    check_model(make_model(op, [("x", rand(5, 301)), "axes"], consts={"axes": np.array([1])},
                           keepdims=1), 2)


def test_reduce_max_int32():
    check_model(make_model("ReduceMax", [("x", rand(6, 333, dtype="int32")), "axes"],
                           consts={"axes": np.array([1])}, keepdims=0), 2)  # rows 0-3, 4-5


def test_global_average_pool():
    # 7x7 = 49 iterations x 8 jammed channels: the two-level chain collapses
    launches = check_model(make_model("GlobalAveragePool", [("x", rand(1, 64, 7, 7))]), 1)
    assert launches[0].attributes["grid"] == (8, 1, 1)
    assert launches[0].attributes["block"] == (32, 1, 1)


def test_windowed_average_pool_sum_keeps_its_order():
    """The same 7x7 sum from an AveragePool (a window, not a reduce) is ``ordered``: its window
    order is its semantics (onnxruntime's, which a QDQ model's next Q sees), so the reduction
    schedule leaves it to one thread per point, bit for bit the sequential loop."""
    model = make_model("AveragePool", [("x", rand(1, 64, 7, 7))], kernel_shape=[7, 7])
    module = run_stages(as_module(model), "loop")
    x = {"x": rand(1, 64, 7, 7)}
    before = run_main(module, x)
    launches, left = map_reductions(module)
    assert launches == [] and len(left) == 1 and "ordered" in left[0], left
    after = run_main(module, x)
    for k in before:
        np.testing.assert_array_equal(after[k], before[k])


def test_layer_norm():
    check_model(make_model("LayerNormalization", [("x", rand(2, 8, 768)), "s", "b"],
                           consts={"s": rand(768), "b": rand(768)}, axis=-1), 2, 1)


def test_matmul_batch1():
    launches = check_model(make_model("MatMul", [("x", rand(1, 2048)), "w"],
                                      consts={"w": rand(2048, 1000)}), 1)
    assert launches[0].attributes["grid"] == (125, 1, 1)  # 1000 outputs, 8 per point


def test_gemm_batch1_bias():
    check_model(make_model("Gemm", [("x", rand(1, 2048)), "w", "c"],
                           consts={"w": rand(1000, 2048), "c": rand(1000)}, transB=1), 1)


def test_many_short_reductions_declined():
    # 4096 rows of 16: pointwise already has thousands of threads, each with a short loop
    model = make_model("ReduceSum", [("x", rand(4096, 16)), "axes"],
                       consts={"axes": np.array([1])}, keepdims=1)
    module = run_stages(as_module(model), "loop")
    launches, why = map_reductions(module)
    assert launches == [] and "under 32" in why[0]


def test_many_points_declined():
    # 8192 points (rows jammed by 8): enough threads for pointwise
    model = make_model("ReduceSum", [("x", rand(8192 * 8, 64)), "axes"],
                       consts={"axes": np.array([1])}, keepdims=1)
    module = run_stages(as_module(model), "loop")
    launches, why = map_reductions(module)
    assert launches == [] and "fill the GPU" in why[0]


# ---- handwritten nests --------------------------------------------------------------------

def reduce_rows(comb, rows=(0, 5, 1), red=(0, 301, 1), el=F32, init=None, swap=False,
                epilogue=True):
    """y[i] = epilogue(comb over k in range(*red) of f(x[i, k])), for i in range(*rows); init is
    the identity constant (None) or ``"load"`` (the start value read from ``y0[i]``)."""
    n_rows, n_red = rows[1], red[1]
    t = BufferType((n_rows, n_red), el)
    o = BufferType((n_rows,), el)

    def body(b, x, y0, y):
        _, p, (i,) = parallel_loop(b, (rows[0],), (rows[1],), (rows[2],))
        start = (load(p, y0, i) if init == "load" else
                 const(p, R.identity(comb, el) if el.is_int else float(R.identity(comb, el)),
                       el))
        loop, fb, k, (a,) = for_loop(p, *red, inits=[start])
        v = load(fb, x, i, k)
        if el == F32:  # some math on the way, not just the load
            v = op(fb, "arith.mul", v, const(fb, 0.5))
        fb.create("loop.yield", [op(fb, comb, *((v, a) if swap else (a, v)))])
        r = loop.results[0]
        if epilogue and el == F32:
            r = op(p, "arith.add", r, const(p, 1.0))
        p.create("loop.store", [r, y, [i]])
    m = module({"x": t, "y0": o, "y": o}, ["y"], body)
    return m


def inputs_for(m, comb):
    f = get_func(m, "main")
    out = {}
    for name, a in zip(f.attributes["arg_names"], func_body(f).args):
        if name in f.attributes[OUTPUTS_ATTR]:
            continue
        x = rand(*a.type.shape, dtype=a.type.element.np_dtype)
        if comb == "arith.mul" and x.dtype.kind == "f":
            x = (2.0 + 0.02 * x).astype(x.dtype)  # x * 0.5 ~ 1: the product stays finite
        out[name] = x
    return out


def check_module(m, comb="arith.add", n_launches=1, rtol=1e-5):
    inputs = inputs_for(m, comb)
    before = run_main(m, inputs)
    launches, why = map_reductions(m)
    assert len(launches) == n_launches, why
    assert_same(before, run_main(m, inputs), rtol)
    return launches


@pytest.mark.parametrize("comb", R.COMBINERS)
@pytest.mark.parametrize("swap", [False, True])
def test_each_combiner(comb, swap):
    check_module(reduce_rows(comb, swap=swap), comb)


@pytest.mark.parametrize("comb", R.COMBINERS)
def test_each_combiner_int(comb):
    # random int32 products wrap; wrapping multiplication is still associative (mod 2**32)
    check_module(reduce_rows(comb, red=(0, 97, 1), el=I32), comb)


@pytest.mark.parametrize("comb", R.COMBINERS)
def test_initial_value_is_combined_once(comb):
    # the start value is read from memory, not the identity: thread 0 folds it in at the end
    launch, = check_module(reduce_rows(comb, init="load"), comb)
    text = [o.name for o in launch.walk()]
    assert text.count("loop.if") >= 2


@pytest.mark.parametrize("red", [(0, 64, 1), (0, 65, 1), (3, 300, 1), (2, 300, 3),
                                 (0, 1023, 1), (0, 1025, 1), (5, 5000, 7)])
def test_lengths_offsets_steps(red):
    check_module(reduce_rows("arith.add", red=red))


def test_parallel_offsets_and_steps():
    # rows 1, 3, 5 of 7: the block id maps back through lower and step
    check_module(reduce_rows("arith.max", rows=(1, 7, 2)))


def test_nested_chain_with_level_ops():
    """A two-level chain whose outer body computes an index the inner body uses (the outer level
    is collapsed with it: both ops are cloned per linear iteration)."""
    def body(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), (3,))
        z = const(p, 0.0)
        outer, ob, h, (a,) = for_loop(p, 1, 9, 2, inits=[z])   # h = 1, 3, 5, 7
        hh = op(ob, "arith.sub", h, const(ob, 1, INDEX))       # 0, 2, 4, 6
        inner, ib, w, (c,) = for_loop(ob, 0, 37, inits=[a])
        v = load(ib, x, i, hh, w)
        ib.create("loop.yield", [op(ib, "arith.add", c, v)])
        ob.create("loop.yield", list(inner.results))
        p.create("loop.store", [outer.results[0], y, [i]])
    m = module({"x": BufferType((3, 8, 37), F32), "y": BufferType((3,), F32)}, ["y"], body)
    launch, = check_module(m)
    assert launch.attributes["block"] == (64, 1, 1)  # 4 x 37 = 148 iterations


def test_several_carried_share_one_tree():
    """Sum and max of each row in one loop (two carried values, two combiners)."""
    def body(b, x, s, mx):
        _, p, (i,) = parallel_loop(b, (0,), (4,))
        loop, fb, k, (a, m) = for_loop(p, 0, 513, inits=[const(p, 0.0), const(p, -np.inf)])
        v = load(fb, x, i, k)
        fb.create("loop.yield", [op(fb, "arith.add", a, v), op(fb, "arith.max", m, v)])
        p.create("loop.store", [loop.results[0], s, [i]])
        p.create("loop.store", [loop.results[1], mx, [i]])
    m = module({"x": BufferType((4, 513), F32), "s": BufferType((4,), F32),
                "mx": BufferType((4,), F32)}, ["s", "mx"], body)
    launch, = check_module(m)
    shared = [o for o in launch.regions[0].blocks[0].ops if o.name == "gpu.shared"]
    assert len(shared) == 2
    barriers = [o for o in launch.walk() if o.name == "gpu.barrier"]
    assert len(barriers) == 8  # log2(256) steps, each barrier outside the guards
    assert all(b.parent_op is launch for b in barriers)


def test_nan_propagates_through_max():
    m = reduce_rows("arith.max", red=(0, 300, 1))
    inputs = inputs_for(m, "arith.max")
    inputs["x"][2, 123] = np.nan
    before = run_main(m, inputs)
    map_reductions(m)
    after = run_main(m, inputs)
    assert np.isnan(before["y"][2]) and np.isnan(after["y"][2])
    assert_same(before, after)


# ---- what it declines ---------------------------------------------------------------------

def declined(m):
    (nest,) = [o for o in kernels(m) if o.name == "loop.parallel"]
    assert R.schedule(nest, None) is None
    assert [o.name for o in kernels(m)].count("gpu.launch") == 0
    return R.analyze(nest)


def test_declines_store_in_reduction_body():
    def body(b, x, y, t):
        _, p, (i,) = parallel_loop(b, (0,), (4,))
        loop, fb, k, (a,) = for_loop(p, 0, 300, inits=[const(p, 0.0)])
        v = load(fb, x, i, k)
        s = op(fb, "arith.add", a, v)
        fb.create("loop.store", [s, t, [i, k]])  # a running sum, stored per step
        fb.create("loop.yield", [s])
        p.create("loop.store", [loop.results[0], y, [i]])
    m = module({"x": BufferType((4, 300), F32), "y": BufferType((4,), F32),
                "t": BufferType((4, 300), F32)}, ["y", "t"], body)
    assert "not combined" in declined(m) or "side-effect" in declined(m)


def test_declines_non_combiner():
    def body(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), (4,))
        loop, fb, k, (a,) = for_loop(p, 0, 300, inits=[const(p, 0.0)])
        v = load(fb, x, i, k)
        fb.create("loop.yield", [op(fb, "arith.sub", a, v)])  # not associative
        p.create("loop.store", [loop.results[0], y, [i]])
    m = module({"x": BufferType((4, 300), F32), "y": BufferType((4,), F32)}, ["y"], body)
    assert "not combined" in declined(m)


def test_declines_recurrence():
    """a' = a * 0.5 + x: the carried value is used twice (a linear recurrence, not a reduction)."""
    def body(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), (4,))
        loop, fb, k, (a,) = for_loop(p, 0, 300, inits=[const(p, 0.0)])
        h = op(fb, "arith.mul", a, const(fb, 0.5))
        fb.create("loop.yield", [op(fb, "arith.add", h, load(fb, x, i, k))])
        p.create("loop.store", [loop.results[0], y, [i]])
    m = module({"x": BufferType((4, 300), F32), "y": BufferType((4,), F32)}, ["y"], body)
    assert "not combined" in declined(m)


def test_declines_pointwise_nest():
    def body(b, x, y):
        _, p, (i, j) = parallel_loop(b, (0, 0), (4, 300))
        p.create("loop.store", [load(p, x, i, j), y, [i, j]])
    m = module({"x": BufferType((4, 300), F32), "y": BufferType((4, 300), F32)}, ["y"], body)
    assert "0 loop.for" in declined(m)


def test_thresholds_from_options():
    class Options:
        reduction_min_trip = 1000
    m = reduce_rows("arith.add")
    (nest,) = [o for o in kernels(m) if o.name == "loop.parallel"]
    assert R.schedule(nest, Options()) is None


def test_block_size():
    # many points: 4+ iterations per thread, a power of two in [32, 256]
    assert [R.block_size(n, 1000, SM90) for n in (32, 49, 128, 257, 768, 1000, 100000)] == \
        [32, 32, 32, 128, 256, 256, 256]
    # fewer points than SMs: up to 1024 threads, as long as the partials fit in 48 KiB
    assert R.block_size(100000, 1, SM90) == 1024
    assert R.block_size(100000, 1, SM90, partial_bytes=8 * 8) == 512
    assert R.block_size(2048, 125, SM90) == 512


def test_block_must_halve_evenly():
    m = reduce_rows("arith.add")
    (nest,) = [o for o in kernels(m) if o.name == "loop.parallel"]
    with pytest.raises(CompileError, match="power of two"):
        R.build(R.analyze(nest), Builder.before_op(nest), SM90, block=96)


def test_full_reduction_uses_a_wide_block():
    launch, = check_model(make_model("ReduceSum", [("x", rand(20, 500))], keepdims=0), 1)
    assert launch.attributes["grid"] == (1, 1, 1) and launch.attributes["block"] == (1024, 1, 1)
