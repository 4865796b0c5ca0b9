"""Streaming reductions on cuda: lower-tensor-to-loop's ``jam-min-points`` (tensor_to_loop/nest.py,
"Unroll-and-jam"), which the cuda pipeline sets so that a pool or a Reduce* too small to fill the
GPU when unrolled and jammed by 8 gets one point (one thread) per output.

ResNet-50 b32's global average pool (channels-last, the last residual add and ReLU inlined) is
mapped to 65536 threads in blocks of 256 (8192 in blocks of 32 before), its loads walking the
contiguous channel dim across neighbouring threads; the mapped program, interpreted, gives the
same bits as the CPU pipeline's jammed nest and matches numpy; the cpu target's nests and every
contraction's (matmul, conv, depthwise conv) are unchanged."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ptxc import interpret
from ptxc.compiler import as_module, run_stages
from ptxc.dialects.func import func_body, get_func
from ptxc.ir import print_ir
from ptxc.lower.tensor_to_loop import LowerTensorToLoop
from ptxc.ptx.ptxas import ptxas_path
from ptxc.rewrite import PassManager, get_pass

from support.one_node import make_model, rand

needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas is not installed here")


def pool_model(n, hw, c, residual=True, op="GlobalAveragePool"):
    """ResNet's tail: ``y = flatten(pool(relu(r + s)))`` over channels-last inputs ``r``, ``s``
    ``[n, hw, hw, c]`` (a transpose to NCHW in front of the pool, which the channels-last
    passes cancel); ``residual=False``: the pool of ``r`` alone."""
    def vi(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
    ins = [vi("r", [n, hw, hw, c])] + ([vi("s", [n, hw, hw, c])] if residual else [])
    nodes, src = [], "r"
    if residual:
        nodes += [helper.make_node("Add", ["r", "s"], ["a"]),
                  helper.make_node("Relu", ["a"], ["b"])]
        src = "b"
    nodes += [helper.make_node("Transpose", [src], ["t"], perm=[0, 3, 1, 2]),
              helper.make_node(op, ["t"], ["p"], **({"kernel_shape": [hw, hw]}
                                                     if op == "AveragePool" else {})),
              helper.make_node("Flatten", ["p"], ["y"])]
    g = helper.make_graph(nodes, "pool", ins, [vi("y", [n, c])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def top_ops(module, name):
    return [o for o in func_body(get_func(module, "main")).ops if o.name == name]


def loop_stage(model, target, precision="fp16"):
    return run_stages(as_module(model), "loop", target=target, precision=precision,
                      layout="nhwc")


def mapping(module):
    return [(o.attributes["schedule"], tuple(o.attributes["grid"]), tuple(o.attributes["block"]))
            for o in top_ops(module, "gpu.launch")]


# ---- the ResNet-50 shape ----------------------------------------------------------------------

@pytest.mark.parametrize("residual,op", [(True, "GlobalAveragePool"),
                                         (False, "GlobalAveragePool"), (True, "AveragePool")])
def test_resnet50_global_pool_has_a_thread_per_output(residual, op):
    """torchvision's export ends in GlobalAveragePool, onnx's light model in a 7x7 AveragePool
    (an ``ordered`` window: the same nest, its sum in window order either way)."""
    m = loop_stage(pool_model(32, 7, 2048, residual, op), "cuda")
    (launch,) = top_ops(m, "gpu.launch")
    grid, block = launch.attributes["grid"], launch.attributes["block"]
    assert launch.attributes["schedule"] == "pointwise"
    assert block == (256, 1, 1) and grid == (256, 1, 1)   # 65536 threads (8192 x 32 before)
    assert grid[0] * block[0] == 32 * 2048
    # each thread sums its 49 pixels in one unrolled loop: its loads all in flight together
    loops = [o for o in launch.walk() if o.name == "loop.for"]
    assert len(loops) == 1 and loops[0].attr("upper") == 49 and loops[0].attr("unroll")
    # every load reads one element; the channel (the contiguous dim) varies fastest across
    # threads: the nest's innermost dim, which pointwise puts on the low bits of the thread index
    loads = [o for o in launch.walk() if o.name == "loop.load"]
    assert len(loads) == (2 if residual else 1)
    assert all(ld.operands[0].type.shape[-1] == 2048 for ld in loads)


def test_cpu_pipeline_still_jams():
    m = loop_stage(pool_model(32, 7, 2048), "cpu")
    (par,) = top_ops(m, "loop.parallel")
    assert par.attr("step") == (1, 8) and par.attr("upper") == (32, 2048)
    (red,) = [o for o in par.regions[0].blocks[0].ops if o.name == "loop.for"]
    assert len(red.results) == 8


def test_cuda_pipeline_sets_the_option():
    """On cuda, jam-min-points is the threads the target's GPU holds at once (an H100 SXM or
    H200: 132 SMs x 2048); on cpu it keeps its default (always jam)."""
    from ptxc.pipeline import CompileOptions, build_pipeline

    def lowering(**kw):
        (p,) = [p for p in build_pipeline(CompileOptions.make(**kw), "loop")
                if isinstance(p, LowerTensorToLoop)]
        return p
    assert lowering(target="cuda", arch="sm_90").jam_min_points == 132 * 2048
    assert lowering(target="cuda", arch="h100-pcie").jam_min_points == 114 * 2048
    assert lowering(target="cuda", arch="sm_89").jam_min_points == 58 * 1536   # an L4
    assert lowering(target="cpu").jam_min_points == LowerTensorToLoop().jam_min_points == 0


@needs_ptxas
def test_resnet50_global_pool_ptx_assembles():
    from ptxc.codegen import lower_to_ptx
    from ptxc.ptx.ptxas import assemble
    m = loop_stage(pool_model(32, 7, 2048), "cuda")
    rep = assemble(lower_to_ptx(m, arch="sm_90").ptx, "sm_90")
    (k,) = rep.kernels.values()
    assert k.spill_stores == 0 and k.spill_loads == 0
    assert k.registers <= 64


# ---- numerics: the same bits as the jammed nest, and numpy's -------------------------------

@pytest.mark.parametrize("residual,op", [(True, "GlobalAveragePool"),
                                         (False, "GlobalAveragePool"), (True, "AveragePool")])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_mapped_pool_equals_the_jammed_nest_bit_for_bit(residual, op, precision):
    model = pool_model(2, 7, 40, residual, op)   # 40 channels: 5 points jammed by 8
    rng = np.random.default_rng(1)
    inputs = {k: rng.standard_normal((2, 7, 7, 40)).astype(np.float32)
              for k in (["r", "s"] if residual else ["r"])}
    cuda = loop_stage(model, "cuda", precision)
    cpu = loop_stage(model, "cpu", precision)
    (par,) = top_ops(cpu, "loop.parallel")
    assert par.attr("step") == (1, 8)                        # the cpu's nest is jammed
    assert mapping(cuda) == [("pointwise", (3, 1, 1), (32, 1, 1))]   # 80 outputs, 80 threads
    got, want = interpret(cuda, inputs)["y"], interpret(cpu, inputs)["y"]
    np.testing.assert_array_equal(got, want)
    x = np.maximum(inputs["r"] + inputs["s"], 0) if residual else inputs["r"]
    np.testing.assert_allclose(got, x.mean(axis=(1, 2)), rtol=2e-3 if precision == "fp16"
                               else 1e-6, atol=2e-3 if precision == "fp16" else 1e-6)


@pytest.mark.parametrize("op,axes,shape,launches", [
    ("ReduceSum", [1], (6, 301), [("reduction", (6, 1, 1), (128, 1, 1))]),  # 1 block jammed
    ("ReduceMax", [0], (300, 20), [("reduction", (20, 1, 1), (128, 1, 1))]),  # strided axis
    ("ReduceMean", [2], (3, 4, 257), [("reduction", (12, 1, 1), (128, 1, 1))]),
])
def test_reductions_unjammed_match(op, axes, shape, launches):
    """Reductions with few points go to the reduction schedule, a block per output now (one
    per 8 outputs jammed); the interpreted results match the cpu's jammed nests."""
    x = rand(*shape)
    model = make_model(op, [("x", x), "axes"], consts={"axes": np.array(axes)}, keepdims=1)
    cuda = run_stages(as_module(model), "loop", target="cuda")
    cpu = run_stages(as_module(model), "loop", target="cpu")
    assert mapping(cuda) == launches
    got, want = interpret(cuda, {"x": x}), interpret(cpu, {"x": x})
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)


# ---- when the jam stays --------------------------------------------------------------------

def _lowered(model, min_points):
    module = as_module(model)
    PassManager("graph-opt,lower-graph-to-tensor,fuse-tensor-elementwise,"
                f"lower-tensor-to-loop{{jam-min-points={min_points}}}").run(module)
    return module


def _steps(module):
    return [o.attr("step") for o in top_ops(module, "loop.parallel")]


def test_threshold_counts_jammed_points():
    # 2 x 64 outputs: jammed, 16 points
    model = make_model("GlobalAveragePool", [("x", rand(2, 64, 7, 7))])
    assert _steps(_lowered(model, 16)) == [(1, 8)]     # 16 points jammed: enough
    assert _steps(_lowered(model, 17)) == [None]       # fewer than 17: one point per output
    assert _steps(_lowered(model, 0)) == [(1, 8)]      # 0: always (the default)


CONTRACTIONS = {
    "matmul": lambda: make_model("MatMul", [("a", rand(4, 16, 32)), ("b", rand(4, 32, 24))]),
    "matmul_batch1": lambda: make_model("MatMul", [("x", rand(1, 64)), "w"],
                                        consts={"w": rand(64, 40)}),
    "conv": lambda: make_model("Conv", [("x", rand(1, 8, 9, 9)), "w"],
                               consts={"w": rand(16, 8, 3, 3)}, pads=[1, 1, 1, 1]),
    "depthwise": lambda: make_model("Conv", [("x", rand(1, 16, 9, 9)), "w"],
                                    consts={"w": rand(16, 1, 3, 3)}, group=16, pads=[1, 1, 1, 1]),
}


@pytest.mark.parametrize("name", sorted(CONTRACTIONS))
def test_contractions_keep_the_jam(name):
    """A load shared between points (the weights across pixels, A across columns): the same
    nests with the option as without, whatever their size."""
    model = CONTRACTIONS[name]()
    assert print_ir(_lowered(model, 1 << 30)) == print_ir(_lowered(model, 0))


def test_option_is_checked():
    assert get_pass("lower-tensor-to-loop").jam_min_points == 0
    assert get_pass("lower-tensor-to-loop", jam_min_points=5).jam_min_points == 5
    with pytest.raises(ValueError, match="jam-min-points"):
        LowerTensorToLoop(jam_min_points=-1)


# ---- int8: the dequantization inlined, per-channel scales read once per point -------------------

def int8_pool_model(n, hw, c, seed=0):
    """``y = flatten(gap(relu(DQ(r) + DQ(s))))``, ``r`` and ``s`` int8 ``[n, hw, hw, c]``,
    ``r`` with per-channel scales (a buffer indexed by the channel only), ``s`` per-tensor."""
    rng = np.random.default_rng(seed)
    inits = [helper.make_tensor("rs", TensorProto.FLOAT, [c],
                                (rng.uniform(0.5, 1.5, c) / 64).astype(np.float32)),
             helper.make_tensor("rz", TensorProto.INT8, [c], np.zeros(c, np.int8)),
             helper.make_tensor("ss", TensorProto.FLOAT, [], [0.02]),
             helper.make_tensor("sz", TensorProto.INT8, [], [3])]
    nodes = [helper.make_node("DequantizeLinear", ["r", "rs", "rz"], ["rf"], axis=3),
             helper.make_node("DequantizeLinear", ["s", "ss", "sz"], ["sf"]),
             helper.make_node("Add", ["rf", "sf"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Transpose", ["b"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node("GlobalAveragePool", ["t"], ["p"]),
             helper.make_node("Flatten", ["p"], ["y"])]
    ins = [helper.make_tensor_value_info(k, TensorProto.INT8, [n, hw, hw, c]) for k in "rs"]
    g = helper.make_graph(nodes, "pool_int8", ins,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, c])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_int8_resnet50_global_pool_has_a_thread_per_output():
    m = loop_stage(int8_pool_model(32, 7, 2048), "cuda", "fp32")
    assert mapping(m) == [("pointwise", (256, 1, 1), (256, 1, 1))]


def test_int8_pool_equals_the_jammed_nest_bit_for_bit():
    model = int8_pool_model(2, 7, 48)
    rng = np.random.default_rng(3)
    inputs = {k: rng.integers(-128, 128, (2, 7, 7, 48)).astype(np.int8) for k in "rs"}
    cuda, cpu = loop_stage(model, "cuda", "fp32"), loop_stage(model, "cpu", "fp32")
    assert [o.attr("step") for o in top_ops(cpu, "loop.parallel")] == [(1, 8)]
    got, want = interpret(cuda, inputs)["y"], interpret(cpu, inputs)["y"]
    np.testing.assert_array_equal(got, want)
    rs = numpy_helper.to_array(model.graph.initializer[0])
    x = np.maximum(inputs["r"].astype(np.float32) * rs
                   + (inputs["s"].astype(np.float32) - 3) * np.float32(0.02), 0)
    np.testing.assert_allclose(got, x.mean(axis=(1, 2)), rtol=1e-5, atol=1e-6)
