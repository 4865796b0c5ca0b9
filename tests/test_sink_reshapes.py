"""sink-collapse-reshapes (ptxc/lower/sink_reshapes.py): a reshape that merges dims between two
generics moves below the consumer, which iterates the unmerged dims, so the producer fuses into
it; a pad that leaves the merged dims alone lets the reshape through too. Results unchanged
(the interpreter before and after, and the cpu engine against onnxruntime); the kernels of a
space-to-depth stem on cuda (compiled here, no GPU) go from 2 preparation kernels to 1."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ptxc
from ptxc.compiler import as_module, run_stages
from ptxc.ir import interpret
from ptxc.lower.sink_reshapes import collapse_groups
from ptxc.rewrite import PassManager

from support.bench_scripts import load

WITH_SINK = "lower-graph-to-tensor,sink-collapse-reshapes,fuse-tensor-elementwise"


def s2d_model(n=2, c=3, hw=8, pad=True, scale_per_channel=False):
    """x -> SpaceToDepth(2) -> (x * per-channel scale) -> NHWC transpose -> [Pad] -> Relu."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("SpaceToDepth", ["x"], ["s"], blocksize=2)]
    inits = []
    src = "s"
    if scale_per_channel:
        inits.append(numpy_helper.from_array(
            rng.standard_normal((1, 4 * c, 1, 1)).astype(np.float32), "k"))
        nodes.append(helper.make_node("Mul", ["s", "k"], ["sk"]))
        src = "sk"
    nodes.append(helper.make_node("Transpose", [src], ["t"], perm=[0, 2, 3, 1]))
    src = "t"
    if pad:
        inits.append(numpy_helper.from_array(np.array([0, 2, 1, 0, 0, 1, 2, 0], np.int64), "p"))
        nodes.append(helper.make_node("Pad", ["t", "p"], ["tp"]))
        src = "tp"
    nodes.append(helper.make_node("Relu", [src], ["y"]))
    h = hw // 2 + (3 if pad else 0)
    g = helper.make_graph(nodes, "s2d", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [n, c, hw, hw])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [n, h, h, 4 * c])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def tensor_module(model):
    mod = as_module(model)
    run_stages(mod, "graph")
    PassManager("lower-graph-to-tensor").run(mod)
    return mod


def ops(mod):
    return [op.name for op in mod.walk() if op.name.startswith("tensor.")]


def test_collapse_groups():
    assert collapse_groups((1, 2, 2, 3, 5, 5), (1, 12, 5, 5)) == [[0], [1, 2, 3], [4], [5]]
    assert collapse_groups((2, 3, 1), (6,)) == [[0, 1, 2]]
    assert collapse_groups((6,), (2, 3)) is None           # a split, not a merge
    assert collapse_groups((2, 3, 4), (3, 8)) is None      # not consecutive products
    assert collapse_groups((2, 3), (2, 3)) is None         # nothing merged


@pytest.mark.parametrize("pad", [True, False])
@pytest.mark.parametrize("scale", [False, True])
def test_sinking_fuses_the_transpose_and_keeps_the_results(pad, scale):
    model = s2d_model(pad=pad, scale_per_channel=scale)
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    mod = tensor_module(model)
    PassManager("fuse-tensor-elementwise").run(mod)
    before = ops(mod)
    ref = interpret(mod, {"x": x})
    mod = tensor_module(model)
    PassManager("sink-collapse-reshapes,fuse-tensor-elementwise", check_numerics=True).run(mod)
    after = ops(mod)
    got = interpret(mod, {"x": x})
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])
    assert after.count("tensor.generic") < before.count("tensor.generic")
    if pad:   # the pad now reads the generic itself, the reshape after it
        names = [op for op in after if op in ("tensor.pad", "tensor.reshape", "tensor.generic")]
        assert names.index("tensor.pad") < max(i for i, o in enumerate(names)
                                               if o == "tensor.reshape")


def test_cpu_engine_with_the_pass_equals_onnxruntime():
    model = s2d_model(scale_per_channel=True)
    x = np.random.default_rng(2).standard_normal((2, 3, 8, 8)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})[0]
    engine = ptxc.compile(model, target="cpu", stage_passes={"tensor": WITH_SINK})
    got = engine.run({"x": x})["y"]
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_a_pad_of_the_merged_dim_keeps_the_reshape_above_it():
    """Channels 12 -> 16 pads the dim the reshape merged: the pad is not moved."""
    model = s2d_model(pad=False)
    g = model.graph
    g.initializer.append(numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 0, 0, 4], np.int64),
                                                 "p4"))
    g.node.insert(len(g.node) - 1, helper.make_node("Pad", ["t", "p4"], ["t4"]))
    g.node[-1].input[0] = "t4"
    g.output[0].type.tensor_type.shape.dim[3].dim_value = 16
    mod = tensor_module(model)
    PassManager("sink-collapse-reshapes,fuse-tensor-elementwise", check_numerics=True).run(mod)
    names = [o for o in ops(mod) if o in ("tensor.pad", "tensor.reshape")]
    assert names.index("tensor.pad") > names.index("tensor.reshape")


def crd_model(high, low=0, n=2, c=3, hw=8):
    """A space-to-depth whose channels are (c, by, bx) (Reshape, Transpose, Reshape), NHWC,
    then a Pad of 1 pixel and of channels ``low`` / ``high``, then Relu."""
    h = hw // 2
    shapes = {"s1": [n, c, h, 2, h, 2], "s2": [n, 4 * c, h, h]}
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in shapes.items()]
    inits.append(numpy_helper.from_array(np.array([0, 1, 1, low, 0, 1, 1, high], np.int64), "p"))
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["r1"]),
             helper.make_node("Transpose", ["r1"], ["t1"], perm=[0, 1, 3, 5, 2, 4]),
             helper.make_node("Reshape", ["t1", "s2"], ["r2"]),
             helper.make_node("Transpose", ["r2"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Pad", ["t", "p"], ["tp"]),
             helper.make_node("Relu", ["tp"], ["y"])]
    g = helper.make_graph(nodes, "crd", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [n, c, hw, hw])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [n, h + 2, h + 2, 4 * c + low + high])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("low,high,moves", [(0, 4, True), (4, 8, True), (0, 2, False)])
def test_a_pad_of_whole_rows_of_the_outermost_merged_dim_moves(low, high, moves):
    """Channels (c, by, bx) padded by whole multiples of 4 are c padded: the pad goes above the
    reshape, onto c, and the transposes' generic writes its interior; a pad of 2 does not."""
    model = crd_model(high, low)
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})[0]
    mod = tensor_module(model)
    PassManager("sink-collapse-reshapes,fuse-tensor-elementwise", check_numerics=True).run(mod)
    np.testing.assert_array_equal(interpret(mod, {"x": x})["y"], ref)
    names = [o for o in ops(mod) if o in ("tensor.pad", "tensor.reshape")]
    last_reshape = max(i for i, o in enumerate(names) if o == "tensor.reshape")
    assert (names.index("tensor.pad") < last_reshape) == moves
    if moves:
        pad = next(op for op in mod.walk() if op.name == "tensor.pad")
        c = pad.operands[0].type.shape.index(3)       # c, before by and bx
        assert pad.attr("low")[c] == low // 4 and pad.attr("high")[c] == high // 4


def test_space_to_depth_stem_prepares_its_input_in_one_kernel():
    """bench/stem_space_to_depth.py's shifted stem on cuda (channels-last fp16): without the
    pass the space-to-depth's transpose is a kernel of its own and the padded input a copy;
    with it one kernel transposes, casts and writes the padded input's interior (and one fills
    its border)."""
    s2d = load("stem_space_to_depth")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 7, 7)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[7, 7], strides=[2, 2],
                          pads=[3, 3, 3, 3]),
         helper.make_node("Relu", ["c"], ["y"])], "stem",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        [numpy_helper.from_array(w, "w")])
    model = s2d.rewrite(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))

    def prep_kernels(**options):
        eng = ptxc.compile(model, target="cuda", layout="nhwc", precision="fp16", arch="sm_90",
                           **options)
        ks = eng.kernels.kernels
        first_mma = next(i for i, k in enumerate(ks) if k.schedule in ("mma", "wgmma"))
        return ks[:first_mma]
    assert len(prep_kernels()) == 2        # one kernel and the fill (cuda runs the pass)
    without = {"tensor": "lower-graph-to-tensor,fuse-tensor-elementwise"}
    assert len(prep_kernels(stage_passes=without)) == 3        # transpose, transpose + cast into the pad, fill
