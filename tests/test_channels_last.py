"""Channels-last (to-channels-last, graph/layout.py, compile(layout=...)): the pass keeps the
interpreter's outputs (check-numerics) on small graphs of every op it rewrites; it leaves
transposes only at the boundary and around ops that need channels-first; channel padding;
channels-last convs and pools lower to tensor.conv/tensor.pool with layout NHWC and then to a
loop nest over (n, p, q, k) with one reduction nest over (r, s, c); compiled cpu engines match
onnxruntime; cuda kernels map to the tiled schedule and assemble with ptxas; errors are typed."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ptxc
from ptxc.compiler import as_module, run_stages
from ptxc.dialects.func import func_body, get_func
from ptxc.errors import CompileError, VerifyError
from ptxc.ir import interpret, parse_ir, verify
from ptxc.rewrite import PassManager

LAYOUT = "to-channels-last,cancel-transposes,eliminate-concat,dce"
RNG = np.random.default_rng(0)


def w(*shape):
    """He-normal weights (activations stay in range, so float rounding stays small)."""
    fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return (RNG.standard_normal(shape) * np.sqrt(2.0 / fan)).astype(np.float32)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                       for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                           for n in outputs],
                          [numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    return onnx.shape_inference.infer_shapes(m)


def channels_last(m, pipeline="graph-opt", layout=LAYOUT):
    """Import ``m``, run ``pipeline`` then the layout passes with check-numerics on (the pass
    manager interprets before and after each pass); returns the module."""
    module = ptxc.import_onnx(m)
    PassManager(pipeline).run(module)
    PassManager(layout, check_numerics=True).run(module)
    return module


def ops(module):
    return [op for op in func_body(get_func(module)).ops]


def names(module):
    return [op.name for op in ops(module)]


def layouts(module):
    return {op.attr("layout") for op in ops(module) if op.name in (
        "graph.conv", "graph.fused_conv", "graph.max_pool", "graph.average_pool")}


# ---- the pass ---------------------------------------------------------------------------------

def classifier():
    """conv+bias+relu, max pool, conv + residual + relu, average pool, global average pool,
    flatten, gemm, softmax: one transpose at the input, none inside."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "p1"], ["s2"]),
        helper.make_node("Relu", ["s2"], ["r2"]),
        helper.make_node("AveragePool", ["r2"], ["p2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         strides=[1, 1]),
        helper.make_node("GlobalAveragePool", ["p2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"]),
    ]
    return model(nodes, [("x", (2, 3, 12, 12))], ["y"],
                 [("w1", w(8, 3, 3, 3)), ("b1", f32(8)), ("w2", w(8, 8, 3, 3)),
                  ("wf", w(10, 8)), ("bf", f32(10))])


@pytest.mark.slow
def test_classifier_has_one_transpose_at_the_input():
    module = channels_last(classifier())
    n = names(module)
    assert n.count("graph.transpose") == 1
    first = ops(module)[[i for i, x in enumerate(n) if x == "graph.transpose"][0]]
    assert first.operands[0] is func_body(get_func(module)).args[0]
    assert tuple(first.attr("perm")) == (0, 2, 3, 1)
    assert layouts(module) == {"NHWC"}
    assert "graph.reduce_mean" in n and "graph.global_average_pool" not in n
    conv = next(op for op in ops(module) if op.name == "graph.fused_conv")
    assert conv.operands[1].type.shape == (8, 3, 3, 3)  # KRSC: (M, R, S, C)
    assert conv.results[0].type.shape == (2, 12, 12, 8)


def test_krsc_weights_are_the_filter_transposed():
    m = classifier()
    module = channels_last(m)
    conv = [op for op in ops(module) if op.name in ("graph.conv", "graph.fused_conv")][1]
    src = ptxc.import_onnx(m)
    w2 = next(op for op in ops(src) if op.name == "graph.constant" and
              op.results[0].type.shape == (8, 8, 3, 3)).attributes["value"].array
    got = conv.operands[1].op.attributes["value"].array
    np.testing.assert_array_equal(got, w2.transpose(0, 2, 3, 1))


def test_function_signature_and_outputs_unchanged():
    m = classifier()
    x = f32(2, 3, 12, 12)
    ref = interpret(ptxc.import_onnx(m), {"x": x})
    module = channels_last(m)
    got = interpret(module, {"x": x})
    np.testing.assert_allclose(got["y"], ref["y"], rtol=1e-5, atol=1e-6)
    ft = get_func(module).attributes["function_type"]
    assert ft.inputs[0].shape == (2, 3, 12, 12) and ft.results[0].shape == (2, 10)


def test_layout_agnostic_ops_follow():
    """concat (axis remapped), pad and slice (per-axis lists), resize (scales), softmax over
    channels (axis), reduce_mean keepdims 0 and 1 (axes), a per-channel constant and a
    lower-rank run-time operand broadcast, max pool, a transpose absorbed."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "w2"], ["b"]),
        helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
        helper.make_node("Mul", ["cat", "scale"], ["m"]),
        helper.make_node("Pad", ["m", "pads"], ["p"]),
        helper.make_node("Slice", ["p", "st", "en", "ax"], ["s"]),
        helper.make_node("Resize", ["s", "", "scales"], ["r"], mode="nearest"),
        helper.make_node("Softmax", ["r"], ["sm"], axis=1),
        helper.make_node("ReduceMean", ["sm", "rax"], ["red"], keepdims=1),
        helper.make_node("Sub", ["sm", "red"], ["d"]),
        helper.make_node("ReduceSum", ["d", "rax2"], ["y0"], keepdims=0),
        helper.make_node("Transpose", ["d"], ["y1"], perm=[0, 2, 3, 1]),
    ]
    m = model(nodes, [("x", (1, 4, 6, 6))], ["y0", "y1"], [
        ("w1", w(4, 4, 3, 3)), ("w2", w(2, 4, 1, 1)), ("scale", f32(6, 1, 1)),
        ("pads", np.array([0, 0, 1, 0, 0, 1, 0, 2], np.int64)),
        ("st", np.array([1, 0], np.int64)), ("en", np.array([5, 5], np.int64)),
        ("ax", np.array([2, 3], np.int64)),
        ("scales", np.array([1, 1, 2, 2], np.float32)),
        ("rax", np.array([2, 3], np.int64)), ("rax2", np.array([1], np.int64))])
    module = channels_last(m, pipeline="fold-constants")
    n = names(module)
    # the input only: y0 sums over the channels (its (1, H, W) result has no channel dim) and
    # y1, the NHWC transpose of channels-last data, is that data as it lies in memory
    assert n.count("graph.transpose") == 1, n
    cat = next(op for op in ops(module) if op.name == "graph.concat")
    assert cat.attr("axis") == 3
    sm = next(op for op in ops(module) if op.name == "graph.softmax")
    assert sm.attr("axis") == 3
    y1 = func_body(get_func(module)).last_op.operands[1]
    assert y1.op.name == "graph.sub"  # no copy for y1


def test_value_needed_both_ways_is_transposed_once():
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Relu", ["a"], ["y0"]),
             helper.make_node("Sigmoid", ["a"], ["y1"]),
             helper.make_node("Conv", ["a", "w2"], ["y2"])]
    m = model(nodes, [("x", (1, 4, 5, 5))], ["y0", "y1", "y2"],
              [("w1", w(4, 4, 1, 1)), ("w2", w(4, 4, 1, 1))])
    module = channels_last(m, pipeline="")
    # x in; y0, y1, y2 out (y0 and y1 computed channels-last, each transposed back once)
    assert names(module).count("graph.transpose") == 4


def test_ops_that_need_channels_first_get_it():
    """Batch norm and a reshape mixing channels with pixels read channels-first: the pass
    transposes back before them, and the numbers do not move; LRN runs channels-last."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("LRN", ["a"], ["l"], size=3),
             helper.make_node("BatchNormalization", ["l", "s", "b", "mu", "var"], ["bn"]),
             helper.make_node("Conv", ["bn", "w2"], ["c"]),
             helper.make_node("Reshape", ["c", "shape"], ["y"])]
    m = model(nodes, [("x", (1, 4, 5, 5))], ["y"], [
        ("w1", w(4, 4, 1, 1)), ("w2", w(4, 4, 1, 1)), ("s", f32(4)), ("b", f32(4)),
        ("mu", f32(4)), ("var", np.abs(f32(4)) + 0.5),
        ("shape", np.array([1, 2, 2, 25], np.int64))])
    module = channels_last(m, pipeline="")
    lrn = next(op for op in ops(module) if op.name == "graph.lrn")
    assert lrn.attr("layout") == "NHWC"
    bn = next(op for op in ops(module) if op.name == "graph.batch_normalization")
    assert bn.operands[0].op.name == "graph.transpose"
    # x in; before and after the batch norm; before the reshape (its (2, 2) split of C x H*W)
    assert names(module).count("graph.transpose") == 4


def test_lrn_channels_last_lowers_and_matches_onnxruntime():
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("LRN", ["a"], ["y"], size=5, alpha=0.01, beta=0.75, bias=2.0)]
    m = model(nodes, [("x", (1, 4, 5, 5))], ["y"], [("w1", w(7, 4, 3, 3))])
    x = f32(1, 4, 5, 5)
    got = ptxc.compile(m, target="cpu", layout="nhwc").run({"x": x})["y"]
    np.testing.assert_allclose(got, ort(m, {"x": x})["y"], rtol=1e-4, atol=1e-5)


def test_channel_shuffle_costs_one_transpose_as_in_nchw():
    """reshape (N, C, H, W) -> (N, g, C/g, H, W), transpose (0, 2, 1, 3, 4), reshape back: the
    split is a reshape of NHWC data, the transpose is absorbed, and the merge needs the one real
    data movement a shuffle is."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Reshape", ["a", "s5"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "s4"], ["sh"]),
             helper.make_node("Conv", ["sh", "w2"], ["y"])]
    m = model(nodes, [("x", (2, 4, 3, 3))], ["y"], [
        ("w1", w(6, 4, 1, 1)), ("w2", w(4, 6, 1, 1)),
        ("s5", np.array([2, 2, 3, 3, 3], np.int64)), ("s4", np.array([2, 6, 3, 3], np.int64))])
    module = channels_last(m, pipeline="")
    assert names(module).count("graph.transpose") == 3  # x in, the shuffle, y out


def test_flatten_before_a_classifier_permutes_the_weights_instead():
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["a"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["g"], transB=1),
             helper.make_node("Relu", ["g"], ["r"]),
             helper.make_node("Gemm", ["r", "wg"], ["y"])]
    m = model(nodes, [("x", (2, 3, 6, 6))], ["y"], [
        ("w1", w(5, 3, 3, 3)), ("wf", w(7, 45)), ("bf", f32(7)), ("wg", w(7, 4))])
    module = channels_last(m)
    assert names(module).count("graph.transpose") == 1
    x = f32(2, 3, 6, 6)
    got = ptxc.compile(m, target="cpu", layout="nhwc").run({"x": x})["y"]
    np.testing.assert_allclose(got, ort(m, {"x": x})["y"], rtol=1e-4, atol=1e-5)


def _padded_convs():
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1])]
    return model(nodes, [("x", (1, 3, 6, 6))], ["y"],
                 [("w1", w(12, 3, 3, 3)), ("b1", f32(12)), ("w2", w(4, 12, 3, 3))])


def test_channel_padding_pads_input_and_weights():
    """Zero channels appended (pads at the end of the channel axis, weights zero there): the
    interpreter's outputs are unchanged (check-numerics across the pass)."""
    module = channels_last(_padded_convs(),
                           layout="to-channels-last{channel-multiple=8},cancel-transposes,dce")
    convs = [op for op in ops(module) if op.name in ("graph.conv", "graph.fused_conv")]
    assert [c.operands[1].type.shape for c in convs] == [(12, 3, 3, 8), (4, 3, 3, 16)]
    assert [c.operands[0].op.name for c in convs] == ["graph.pad", "graph.pad"]
    wide = convs[0].operands[1].op.attributes["value"].array
    assert not wide[..., 3:].any()
    pads = [c.operands[0].op.attr("pads") for c in convs]
    assert pads == [(0, 0, 0, 0, 0, 0, 0, 5), (0, 0, 0, 0, 0, 0, 0, 4)]


@pytest.mark.slow
def test_channel_padded_convs_compiled_for_the_cpu_match_onnxruntime():
    m = _padded_convs()
    x = f32(1, 3, 6, 6)
    got = ptxc.compile(as_module_with(m, "graph-opt,to-channels-last{channel-multiple=8},"
                                         "cancel-transposes,eliminate-concat,dce"),
                       target="cpu", graph_passes="").run({"x": x})["y"]
    np.testing.assert_allclose(got, ort(m, {"x": x})["y"], rtol=1e-4, atol=1e-5)


def as_module_with(m, pipeline):
    module = ptxc.import_onnx(m)
    PassManager(pipeline).run(module)
    return module


def ort(m, inputs):
    import onnxruntime as rt
    sess = rt.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names_ = [o.name for o in sess.get_outputs()]
    return dict(zip(names_, sess.run(names_, inputs)))


@pytest.mark.slow
def test_grouped_and_depthwise_convs():
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], group=2, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w2"], ["y"], group=8, pads=[1, 1, 1, 1],
                              strides=[2, 2])]
    m = model(nodes, [("x", (1, 4, 7, 7))], ["y"], [("w1", w(8, 2, 3, 3)),
                                                     ("w2", w(8, 1, 3, 3))])
    module = channels_last(m)
    assert layouts(module) == {"NHWC"}
    x = f32(1, 4, 7, 7)
    got = ptxc.compile(m, target="cpu", layout="nhwc").run({"x": x})["y"]
    np.testing.assert_allclose(got, ort(m, {"x": x})["y"], rtol=1e-4, atol=1e-5)


def test_pass_is_idempotent_on_channels_last_graphs():
    module = channels_last(classifier())
    assert PassManager("to-channels-last").run(module) is False


# ---- graph-dialect semantics and errors ----------------------------------------------------

CONV_NHWC = """
"builtin.module"() ({
  "func.func"() ({
  ^bb0(%x: tensor<1x5x5x4xf32>, %w: tensor<6x3x3x4xf32>):
    %y = "graph.conv"(%x, %w) {dilations = [1, 1], group = 1, kernel_shape = [3, 3], layout = "NHWC", pads = [1, 1, 1, 1], strides = [2, 2]} : (tensor<1x5x5x4xf32>, tensor<6x3x3x4xf32>) -> tensor<1x3x3x6xf32>
    "func.return"(%y) : (tensor<1x3x3x6xf32>) -> ()
  }) {arg_names = ["x", "w"], function_type = (tensor<1x5x5x4xf32>, tensor<6x3x3x4xf32>) -> (tensor<1x3x3x6xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
}) : () -> ()
"""


def test_nhwc_conv_reference_against_onnxruntime():
    x, wk = f32(1, 5, 5, 4), f32(6, 3, 3, 4)
    got = interpret(parse_ir(CONV_NHWC), {"x": x, "w": wk})["y"]
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])],
              [("x", (1, 4, 5, 5)), ("w", (6, 4, 3, 3))], ["y"])
    ref = ort(m, {"x": x.transpose(0, 3, 1, 2), "w": wk.transpose(0, 3, 1, 2)})["y"]
    np.testing.assert_allclose(got, ref.transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-5)


def test_bad_layout_is_a_typed_error():
    with pytest.raises(VerifyError, match="layout must be one of"):
        verify(parse_ir(CONV_NHWC.replace('layout = "NHWC"', 'layout = "NCWH"')))
    with pytest.raises(VerifyError):  # NHWC shapes read as NCHW do not fit
        verify(parse_ir(CONV_NHWC.replace('layout = "NHWC", ', '')))
    with pytest.raises(CompileError, match="unknown layout"):
        ptxc.compile(classifier(), target="cpu", layout="chw")
    with pytest.raises(CompileError, match="channel-multiple"):
        PassManager("to-channels-last{channel-multiple=0}").run(ptxc.import_onnx(classifier()))


# ---- lowering -------------------------------------------------------------------------------

def conv_model(n=1, c=16, k=32, h=10, kh=3, stride=1, pad=1):
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4,
                              strides=[stride] * 2),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1])]
    return model(nodes, [("x", (n, c, h, h))], ["y"],
                 [("w", w(k, c, kh, kh)), ("b", f32(k)), ("w2", w(8, k, 3, 3))])


def test_tensor_stage_has_channels_last_named_ops():
    module = as_module(conv_model())
    run_stages(module, "tensor", layout="nhwc", check_numerics=True)
    convs = [op for op in module.walk() if op.name == "tensor.conv"]
    assert len(convs) == 2 and all(op.attr("layout") == "NHWC" for op in convs)
    assert convs[0].operands[1].type.shape == (32, 3, 3, 16)


def _conv_nests(module):
    """Top-level loop.parallel nests holding a loop.for, with their reduction chains."""
    out = []
    for op in func_body(get_func(module)).ops:
        if op.name != "loop.parallel":
            continue
        fors = [o for o in op.regions[0].blocks[0].ops if o.name == "loop.for"]
        if not fors:
            continue
        chain, cur = [], fors[0]
        while cur is not None:
            chain.append(cur)
            inner = [o for o in cur.regions[0].blocks[0].ops if o.name == "loop.for"]
            cur = inner[0] if inner else None
        out.append((op, fors, chain))
    return out


@pytest.mark.slow
def test_loop_nest_is_npqk_parallel_with_one_rsc_reduction():
    """The first conv (its result feeds the second conv, channels-last): one loop.parallel over
    (p, q, k) (n = 1 is dropped) whose body holds one loop.for nest over (r, s, c), C innermost,
    carrying the accumulators, then the epilogue and the stores."""
    module = as_module(conv_model())
    run_stages(module, "loop", layout="nhwc", check_numerics=True)
    nests = _conv_nests(module)
    par, fors, chain = nests[0]
    assert len(fors) == 1
    assert list(par.attr("upper"))[-1] == 32 and list(par.attr("upper"))[:2] == [10, 10]
    assert [(c.attr("lower"), c.attr("upper")) for c in chain] == [(0, 3), (0, 3), (0, 16)]
    body = list(par.regions[0].blocks[0].ops)
    assert any(o.name == "loop.store" for o in body[body.index(fors[0]):])


@pytest.mark.slow
def test_cuda_convs_map_to_the_tiled_schedule_and_assemble():
    module = as_module(conv_model(c=16, k=32, h=12))
    run_stages(module, "loop", layout="nhwc", target="cuda", check_numerics=True)
    launches = [op for op in func_body(get_func(module)).ops if op.name == "gpu.launch"]
    assert sum(op.attr("schedule") == "tiled" for op in launches) >= 2
    ptx = pytest.importorskip("ptxc.ptx")
    if ptx.ptxas_path() is None:
        pytest.skip("no ptxas")
    prog = ptxc.codegen.lower_to_ptx(module, arch="sm_90")
    report = ptx.assemble(prog.ptx, "sm_90")
    for k in prog.table.kernels:
        assert k.name in report.kernels


@pytest.mark.slow
def test_cpu_engine_matches_onnxruntime_and_nchw():
    m = conv_model(n=2, c=3, k=16, h=11, kh=7, stride=2, pad=3)
    x = f32(2, 3, 11, 11)
    ref = ort(m, {"x": x})["y"]
    for layout in ("nhwc", "auto"):
        got = ptxc.compile(m, target="cpu", layout=layout).run({"x": x})["y"]
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_auto_policy():
    """layout="auto" (the default): channels-last on cuda for conv-heavy graphs in a tensor-core
    precision, channels-first elsewhere."""
    from ptxc.compiler import resolve_layout
    few = ptxc.import_onnx(conv_model())
    assert resolve_layout("auto", few, "cuda", "fp16") == "nchw"  # two convs: not conv-heavy
    assert resolve_layout("auto", few, "cpu", "fp16") == "nchw"
    many = ptxc.import_onnx(model(
        [helper.make_node("Conv", [f"x{i}", "w"], [f"x{i + 1}"], pads=[1, 1, 1, 1])
         for i in range(4)], [("x0", (1, 4, 6, 6))], ["x4"], [("w", w(4, 4, 3, 3))]))
    for precision in ("fp16", "tf32", "int8"):   # the mma schedule's precisions
        assert resolve_layout("auto", many, "cuda", precision) == "nhwc"
    assert resolve_layout("auto", many, "cuda") == "nchw"   # fp32: the tiled schedule
    assert resolve_layout("auto", many, "cpu", "fp16") == "nchw"
    assert resolve_layout("nhwc", few, "cpu") == "nhwc"
    assert resolve_layout("nchw", many, "cuda", "fp16") == "nchw"
    # a model quantized explicitly (Q/DQ) is int8 whatever precision= says
    q = helper.make_node("QuantizeLinear", ["x0", "s", "z"], ["xq"])
    dq = helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"])
    convs = [helper.make_node("Conv", [f"x{i}" if i else "xd", "w"], [f"x{i + 1}"],
                              pads=[1, 1, 1, 1]) for i in range(4)]
    qdq = ptxc.import_onnx(model([q, dq] + convs, [("x0", (1, 4, 6, 6))], ["x4"],
                                 [("w", w(4, 4, 3, 3)), ("s", np.float32(0.1)),
                                  ("z", np.int8(0))]))
    assert resolve_layout("auto", qdq, "cuda") == "nhwc"
    assert resolve_layout("auto", qdq, "cpu") == "nchw"


def test_explore_report_counts_the_transposes():
    text = ptxc.explore(classifier(), stage="graph", report=True, layout="nhwc")
    row = [line for line in text.splitlines() if line.startswith("// graph.transpose")]
    assert row and row[0].split()[-1] == "1"
    text = ptxc.explore(classifier(), stage="graph", report=True)  # nchw: none
    assert not [line for line in text.splitlines() if line.startswith("// graph.transpose")]


def f16_convs(c=3, k=32, h=10):
    """conv 3x3 (c -> k) + relu + conv 3x3 (k -> k), all f16 (what the precision pass will
    hand the mma schedule)."""
    r = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1])]
    g = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, (1, c, h, h))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)],
        [numpy_helper.from_array((r.standard_normal((k, c, 3, 3)) * 0.1).astype(np.float16),
                                 "w"),
         numpy_helper.from_array((r.standard_normal((k, k, 3, 3)) * 0.1).astype(np.float16),
                                 "w2")])
    return onnx.shape_inference.infer_shapes(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))


@pytest.mark.slow
def test_f16_channels_last_convs_feed_the_mma_schedule_with_cp_async():
    """With NHWC activations and KRSC filters the mma schedule stages both operands with 16-byte
    cp.async copies (the first conv's 3 channels padded to 8 on cuda); channels-first, the same
    convs need scalar copies (no 16-byte runs along the reduction). The kernels assemble."""
    def mma_launches(layout):
        module = as_module(f16_convs())
        run_stages(module, "loop", target="cuda", layout=layout)
        return module, [op for op in func_body(get_func(module)).ops
                        if op.name == "gpu.launch" and op.attr("schedule") == "mma"]

    _, nchw = mma_launches("nchw")
    module, nhwc = mma_launches("nhwc")
    assert len(nhwc) >= 2
    for launch in nhwc:
        kinds = [o.name for o in launch.walk()]
        # no scalar load of global memory; the staged epilogue reads its shared staging region
        global_loads = [o for o in launch.walk() if o.name == "loop.load"
                        and getattr(o.operands[0].owner, "name", None) != "gpu.shared"]
        assert "gpu.cp_async" in kinds and not global_loads, global_loads
    assert all("gpu.cp_async" not in [o.name for o in launch.walk()] for launch in nchw)
    assert all(any(o.name == "loop.load" and getattr(o.operands[0].owner, "name", None)
                   != "gpu.shared" for o in launch.walk()) for launch in nchw)  # scalar copies
    ptx = pytest.importorskip("ptxc.ptx")
    if ptx.ptxas_path() is None:
        pytest.skip("no ptxas")
    prog = ptxc.codegen.lower_to_ptx(module, arch="sm_90")
    report = ptx.assemble(prog.ptx, "sm_90")
    for k in prog.table.kernels:
        assert k.name in report.kernels


def test_cli_layout_option(tmp_path, capsys):
    from ptxc.cli import main
    path = tmp_path / "m.onnx"
    onnx.save(classifier(), str(path))
    assert main(["explore", str(path), "--layout", "nhwc"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[-1] for line in out.splitlines()
            if line.startswith("// graph.transpose")] == ["1"]
    assert 'layout = "NHWC"' in out
    with pytest.raises(SystemExit):  # argparse refuses an unknown layout
        main(["explore", str(path), "--layout", "hwcn"])
    assert main(["run", str(path), "--target", "cpu", "--layout", "nhwc"]) == 0
