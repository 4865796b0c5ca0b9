"""map-to-gpu: every top-level kernel becomes a gpu.launch computing the same thing.

Unit nests (offsets and steps, copies, rank 0, sequential loops, nested parallels, empty nests,
block sizes and the grid limit), one-node ONNX models and the nine light models lowered from the
graph, and random graphs from the shared strategy: each is interpreted before and after the pass
(``check_numerics``) and must be equal; afterwards no top-level loop.parallel/for/copy remains
and every launch is within CUDA's limits."""

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from support import light_models as lm
import ptxc
from ptxc import interpret
from ptxc.dialects.func import func_body, functions
from ptxc.dialects.gpu import check_dims
from ptxc.dialects.loop import for_loop, parallel_loop
from ptxc.errors import CompileError
from ptxc.ir import parse_ir, print_ir, verify
from ptxc.ir.types import F32, INDEX, BufferType
from ptxc.lower.gpu_map import SCHEDULES, MapToGpu
from ptxc.lower.gpu_map.common import block_size, delinearize, grid_size
from ptxc.rewrite import PassManager, get_pass

from support.loop_ir import const, load, module, op, store
from support.one_node import make_model, rand
from property.strategies import graphs

TO_LOOP = "lower-graph-to-tensor,fuse-tensor-elementwise,lower-tensor-to-loop"


def launches(module):
    return [op for op in module.walk() if op.name == "gpu.launch"]


def assert_mapped(module):
    """No top-level kernel left; launches only at the top level, within CUDA's limits."""
    for f in functions(module):
        top = [op.name for op in func_body(f).ops]
        left = [n for n in top if n in ("loop.parallel", "loop.for", "loop.copy")]
        assert not left, left
    for launch in launches(module):
        assert launch.parent_op.name == "func.func"
        assert check_dims(launch.attributes["grid"], launch.attributes["block"]) is None
        assert launch.attributes["schedule"] in {name for name, _ in SCHEDULES} | {"sequential"}


def map_and_check(module, inputs=None, **options):
    """map-to-gpu under check_numerics (random inputs), and, with ``inputs``, the interpreter's
    outputs before and after compared on them too; returns the outputs after. Floats within
    rtol 1e-5 (the reduction and tiled schedules reassociate sums), integers exactly."""
    before = interpret(module, inputs) if inputs is not None else None
    PassManager([get_pass("map-to-gpu", **options)], check_numerics=True).run(module)
    assert_mapped(module)
    verify(parse_ir(print_ir(module)))  # the mapped module survives the text format
    if inputs is None:
        return None
    after = interpret(module, inputs)
    assert list(after) == list(before)
    for k in before:
        assert after[k].dtype == before[k].dtype and after[k].shape == before[k].shape, k
        if before[k].dtype.kind == "f":
            np.testing.assert_allclose(after[k], before[k], rtol=1e-5, atol=1e-5, err_msg=k)
        else:
            np.testing.assert_array_equal(after[k], before[k], err_msg=k)
    return after


# ---- unit nests --------------------------------------------------------------------------------

def buf(*shape):
    return BufferType(shape, F32)


def c(b, value, t=INDEX):
    return const(b, value, t)


def test_offsets_and_steps_become_induction_values():
    """y[i, j] = x[i, j] + i * 100 + j over i in range(1, 8, 2), j in range(2, 20, 3); the rest
    of y is zero (a first nest), so a wrong induction value shows."""
    def body(b, x, y):
        _, p, (i, j) = parallel_loop(b, (0, 0), (8, 20))
        store(p, c(p, 0.0, F32), y, i, j)
        _, p, (i, j) = parallel_loop(b, (1, 2), (8, 20), (2, 3), loc="strided")
        k = op(p, "arith.add", op(p, "arith.mul", i, c(p, 100)), j)
        store(p, op(p, "arith.add", load(p, x, i, j), op(p, "arith.cast", k, to=F32)), y, i, j)

    m = module({"x": buf(8, 20), "y": buf(8, 20)}, ["y"], body)
    x = np.random.default_rng(0).standard_normal((8, 20)).astype(np.float32)
    got = map_and_check(m, {"x": x})["y"]
    want = np.zeros((8, 20), np.float32)
    i, j = np.meshgrid(np.arange(1, 8, 2), np.arange(2, 20, 3), indexing="ij")
    want[i, j] = x[i, j] + (i * 100 + j).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    strided = [ln for ln in launches(m) if ln.loc == "strided"]
    assert len(strided) == 1 and strided[0].attributes["block"] == (32, 1, 1)  # 4 * 6 points


@pytest.mark.parametrize("rows,block", [(8192, 32), (132 * 256, 256), (64, 32)])
def test_nests_whose_threads_loop_spread_over_the_sms(rows, block):
    """y[i] = sum_j x[i, j]: each thread runs a loop over j; with fewer rows than 256 per SM
    (the target's SM count: 132 on the default sm_90 target) the blocks shrink, a warp at least, so the grid covers every SM (a global average
    pool of 8192 channel groups ran in 32 blocks of 256); plain nests keep 256."""
    def body(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), (rows,))
        f, fb, j, (acc,) = for_loop(p, 0, 3, inits=[c(p, 0.0, F32)])
        fb.create("loop.yield", [op(fb, "arith.add", acc, load(fb, x, i, j))])
        store(p, f.results[0], y, i)

    m = module({"x": buf(rows, 3), "y": buf(rows)}, ["y"], body)
    x = np.random.default_rng(5).standard_normal((rows, 3)).astype(np.float32)
    got = map_and_check(m, {"x": x} if rows <= 8192 else None)
    if got is not None:
        np.testing.assert_allclose(got["y"], x.sum(1), rtol=1e-5, atol=1e-5)
    (launch,) = launches(m)
    assert launch.attributes["block"] == (block, 1, 1)
    assert launch.attributes["grid"][0] * block >= rows


def _pool_program(rows, inner, outer=1, ordered=True):
    """y[i] = sum over (a, j) of x[i, a, j]**2, each thread looping over a (``outer``) and j
    (``inner``), the sum in iteration order."""
    def body(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), (rows,))
        fo, ob, a, (acc0,) = for_loop(p, 0, outer, inits=[c(p, 0.0, F32)])
        fi, ib, j, (acc,) = for_loop(ob, 0, inner, inits=[acc0])
        v = load(ib, x, i, a, j)
        ib.create("loop.yield", [op(ib, "arith.add", acc, op(ib, "arith.mul", v, v))])
        ob.create("loop.yield", [fi.results[0]])
        if ordered:
            fo.attributes["ordered"] = fi.attributes["ordered"] = True
        store(p, fo.results[0], y, i)

    return module({"x": buf(rows, outer, inner), "y": buf(rows)}, ["y"], body)


@pytest.mark.parametrize("outer,inner,unrolled,loops", [
    (1, 3, [3], 0), (7, 7, [49], 0), (2, 9, [18], 0), (16, 8, [8], 1), (1, 80, [], 2)])
def test_a_threads_short_loops_are_unrolled(outer, inner, unrolled, loops):
    """A thread's loops that load little (pointwise.UNROLL_TRIPS iterations, UNROLL_BYTES
    loaded) are unrolled: a perfect nest collapsed into one loop where that one fits (a 7 x 7
    pool window: 49), else the innermost alone; longer ones stay loops. The mapped program
    computes the same bits, and the nvptx lowering has one load per unrolled iteration,
    straight-line, the loads of all iterations before the squares, then the chain of adds."""
    rows = 64
    m = _pool_program(rows, inner, outer)
    x = np.random.default_rng(3).standard_normal((rows, outer, inner)).astype(np.float32)
    before = interpret(m, {"x": x})["y"]
    got = map_and_check(m, {"x": x})["y"]
    np.testing.assert_array_equal(got, before)  # the same adds, in the same order
    fors = [o for o in m.walk() if o.name == "loop.for"]
    assert sorted(o.attr("upper") for o in fors if o.attr("unroll")) == unrolled
    from ptxc.lower.loop_to_llvm import lower_loop_to_llvm
    text = lower_loop_to_llvm(m, target="nvptx").text
    headers = len(re.findall(r"^loop(\.\d+)?:", text, re.M))  # llvm_kernel.loop's blocks
    assert (text.count(" = load float"), headers) == (unrolled[0] if unrolled else 1, loops)
    if unrolled:
        assert text.rindex(" = load float") < text.index(" = fmul") < text.index(" = fadd")
        assert text.rindex(" = fmul") < text.index(" = fadd")


def test_an_unrolled_loop_runs_on_the_cpu_as_in_the_interpreter():
    """``loop.for {unroll}`` is the same loop to every lowering: the CPU JIT (which runs the
    loop IR before map-to-gpu, so the attribute set by hand) gives the interpreter's bits."""
    from ptxc.driver.cpu import CpuProgram
    m = _pool_program(5, 6, 3)
    for o in m.walk():
        if o.name == "loop.for":
            o.attributes["unroll"] = True
    verify(parse_ir(print_ir(m)))
    x = np.random.default_rng(4).standard_normal((5, 3, 6)).astype(np.float32)
    np.testing.assert_array_equal(CpuProgram.from_module(m)({"x": x})["y"],
                                  interpret(m, {"x": x})["y"])


def test_copies_rank_2_and_rank_0():
    def body(b, x, s, y, t):
        b.create("loop.copy", [x, y])
        b.create("loop.copy", [s, t])

    m = module({"x": buf(5, 70), "s": buf(), "y": buf(5, 70), "t": buf()}, ["y", "t"], body)
    x = np.random.default_rng(1).standard_normal((5, 70)).astype(np.float32)
    got = map_and_check(m, {"x": x, "s": np.float32(3.5)})
    np.testing.assert_array_equal(got["y"], x)
    assert got["t"] == np.float32(3.5)
    (big, small) = launches(m)
    assert big.attributes["grid"] == (2, 1, 1) and big.attributes["block"] == (256, 1, 1)
    assert small.attributes["grid"] == (1, 1, 1) and small.attributes["block"] == (1, 1, 1)


def test_top_level_for_runs_in_one_thread():
    """A sequential prefix sum (each step reads the previous one's store): only a single thread
    may run it."""
    def body(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), (1,))
        store(p, load(p, x, i), y, i)
        _, f, k, _ = for_loop(b, 1, 50)
        store(f, op(f, "arith.add", load(f, y, op(f, "arith.sub", k, c(f, 1))),
                    load(f, x, k)), y, k)

    m = module({"x": buf(50), "y": buf(50)}, ["y"], body)
    x = np.random.default_rng(2).standard_normal(50).astype(np.float32)
    got = map_and_check(m, {"x": x})["y"]
    np.testing.assert_allclose(got, np.cumsum(x), rtol=1e-5, atol=1e-5)
    assert [ln.attributes["schedule"] for ln in launches(m)] == ["pointwise", "sequential"]


def test_top_level_for_with_used_results_refused():
    def body(b, y):
        f, fb, k, (acc,) = for_loop(b, 0, 4, inits=[c(b, 0.0, F32)])
        fb.create("loop.yield", [acc])
        op(b, "arith.add", f.results[0], f.results[0])

    m = module({"y": buf(1)}, ["y"], body)
    with pytest.raises(CompileError, match="results of a top-level loop.for"):
        get_pass("map-to-gpu").run(m)


def test_zero_dim_and_nested_parallel_and_empty_nests():
    def body(b, x, y, z):
        _, p, () = parallel_loop(b, (), ())
        store(p, c(p, 7.0, F32), z)
        _, p, (i,) = parallel_loop(b, (0,), (33,))  # 33 rows; each thread runs a nested nest
        _, q, (j,) = parallel_loop(p, (0,), (6,))
        store(q, op(q, "arith.mul", load(q, x, i, j), c(q, 3.0, F32)), y, i, j)
        _, p, (i,) = parallel_loop(b, (5,), (5,))  # no points: erased
        store(p, c(p, 1.0, F32), z)

    m = module({"x": buf(33, 6), "y": buf(33, 6), "z": buf()}, ["y", "z"], body)
    x = np.random.default_rng(3).standard_normal((33, 6)).astype(np.float32)
    got = map_and_check(m, {"x": x})
    np.testing.assert_array_equal(got["y"], x * np.float32(3))
    assert got["z"] == 7.0
    assert len(launches(m)) == 2
    assert launches(m)[1].attributes["block"] == (64, 1, 1)


@pytest.mark.parametrize("points, max_block, block, grid", [
    (1, 256, 32, 1), (40, 256, 64, 1), (256, 256, 256, 1), (1000, 256, 256, 4),
    (1000, 128, 128, 8), (100, 1024, 128, 1), (5, 1, 1, 5)])
def test_launch_sizes(points, max_block, block, grid):
    assert block_size(points, max_block) == block
    assert grid_size(points, block) == grid


def test_grid_limit_refused():
    with pytest.raises(CompileError, match="grid.x"):
        grid_size(2 ** 31 * 256, 256, "nest")

    def body(b, y):
        parallel_loop(b, (0, 0), (2 ** 20, 2 ** 20), loc="huge")

    m = module({"y": buf(1)}, ["y"], body)
    with pytest.raises(CompileError, match="huge"):
        get_pass("map-to-gpu").run(m)


def test_block_size_option_and_exact_grid_has_no_guard():
    def body(b, x, y):
        _, p, (i, j) = parallel_loop(b, (0, 0), (4, 64))
        store(p, load(p, x, i, j), y, i, j)

    m = module({"x": buf(4, 64), "y": buf(4, 64)}, ["y"], body)
    x = np.random.default_rng(4).standard_normal((4, 64)).astype(np.float32)
    map_and_check(m, {"x": x}, block_size=128)
    (launch,) = launches(m)
    assert launch.attributes["grid"] == (2, 1, 1) and launch.attributes["block"] == (128, 1, 1)
    assert not [o for o in launch.walk() if o.name == "loop.if"]
    assert str(get_pass("map-to-gpu", block_size=128)) == "map-to-gpu{block-size=128}"
    with pytest.raises(CompileError, match="block-size"):
        get_pass("map-to-gpu", block_size=2048)


def test_delinearize_is_row_major():
    """The index arithmetic alone, interpreted: lin -> (i, j, k) of a 3x1x7x5 space."""
    trips = (3, 1, 7, 5)

    def body(b, y):
        _, p, (lin,) = parallel_loop(b, (0,), (105,))
        for d, v in enumerate(delinearize(p, lin, trips)):
            store(p, op(p, "arith.cast", v, to=F32), y, lin, c(p, d))

    m = module({"y": buf(105, 4)}, ["y"], body)
    got = interpret(m, {})["y"]
    want = np.stack(np.unravel_index(np.arange(105), trips), axis=1)
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_pass_is_registered_with_docstring_example():
    assert type(get_pass("map-to-gpu")) is MapToGpu
    assert [name for name, _ in SCHEDULES][-1] == "pointwise"


# ---- from ONNX -----------------------------------------------------------------------------------

ONE_NODE = {
    "relu": lambda: make_model("Relu", [("x", rand(2, 3, 5, 7))]),
    "add_broadcast": lambda: make_model("Add", [("a", rand(4, 1, 6)), ("b", rand(3, 1))]),
    "matmul": lambda: make_model("MatMul", [("a", rand(2, 5, 9)), ("b", rand(9, 4))]),
    "gemm": lambda: make_model("Gemm", [("a", rand(3, 8)), "w", "c"],
                               {"w": rand(6, 8), "c": rand(6)}, transB=1),
    "conv": lambda: make_model("Conv", [("x", rand(1, 3, 9, 9)), "w", "b"],
                               {"w": rand(4, 3, 3, 3), "b": rand(4)}, pads=[1, 1, 1, 1],
                               strides=[2, 2]),
    "maxpool": lambda: make_model("MaxPool", [("x", rand(1, 2, 8, 8))], kernel_shape=[3, 3],
                                  strides=[2, 2]),
    "softmax": lambda: make_model("Softmax", [("x", rand(3, 17))], axis=-1),
    "reduce_all": lambda: make_model("ReduceSum", [("x", rand(4, 50))], keepdims=0),
    "transpose": lambda: make_model("Transpose", [("x", rand(2, 3, 4))], perm=[2, 0, 1]),
    "concat": lambda: make_model("Concat", [("a", rand(2, 3)), ("b", rand(2, 5))], axis=1),
    "global_avg_pool": lambda: make_model("GlobalAveragePool", [("x", rand(1, 6, 5, 5))]),
}


@pytest.mark.parametrize("name", sorted(ONE_NODE))
def test_one_node_models(name):
    model = ONE_NODE[name]()
    module = ptxc.import_onnx(model)
    inputs = {vi.name: rand(*[d.dim_value for d in vi.type.tensor_type.shape.dim])
              for vi in model.graph.input if vi.name not in {t.name for t in
                                                              model.graph.initializer}}
    PassManager(TO_LOOP).run(module)
    map_and_check(module, inputs)


# ---- the nine light models -----------------------------------------------------------------------
# Lockstep interpretation of a whole network costs about as much as the loop-level interpreter
# (tens of seconds for the big ones), so each model is interpreted once, after mapping, against
# an independent reference: the expected output shipped with onnx, and for two fast models with
# random weights (every channel counts) onnxruntime's output.

FAST = {"squeezenet", "shufflenet"}


def _mapped(model):
    module = ptxc.import_onnx(model)
    PassManager("graph-opt," + TO_LOOP + ",map-to-gpu").run(module)
    assert_mapped(module)
    return module


@pytest.mark.parametrize("name", sorted(FAST))
def test_light_models_with_random_weights_match_onnxruntime(name):
    model = lm.with_random_weights(lm.load(name), seed=1)
    inputs = lm.random_inputs(model, seed=2)
    ref = lm.onnxruntime_outputs(model, inputs)
    got = interpret(_mapped(model), inputs)
    assert list(got) == list(ref)
    for k in ref:
        lm.assert_matches_reference(got[k], ref[k])


@pytest.mark.slow
@pytest.mark.parametrize("name", lm.NAMES)
def test_light_models_match_expected_output(name):
    (out,) = interpret(_mapped(lm.load(name)), lm.dummy_inputs(lm.load(name))).values()
    np.testing.assert_allclose(out, lm.expected_output(name), rtol=1e-3, atol=1e-7)


# ---- random graphs -----------------------------------------------------------------------------

@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=graphs())
def test_random_graphs(case):
    module = case.network.to_module()
    PassManager("graph-opt," + TO_LOOP).run(module)
    map_and_check(module, case.inputs)
