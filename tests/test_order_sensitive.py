"""Ops that differ only in the order of a list attribute, or of their operands, compute different
things, and every pass must keep them apart.

Two Transposes of one input with perms [0, 2, 1] and [1, 0, 2] (on a cube, so both results have
one type), two Pads with the same pads on opposite sides, two Slices with swapped starts, two
convolutions whose asymmetric pads are mirrored, ``sub(a, b)`` beside ``sub(b, a)``: CSE must not
merge them; cancel-transposes must compose perms in the right order; eliminate-noops must not
take a pad that adds on one side what it crops on the other for a no-op; a concat of a split's
results in another order is not the split's input. Each model runs through the pass alone, the
whole graph-opt pipeline, and the CPU target, against numpy written independently (and
onnxruntime for the convolutions).
"""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ptxc
from ptxc.rewrite import PassManager

RNG = np.random.default_rng(14)
F = np.float32


def graph_model(nodes, inputs, outputs, consts=None, opset=21):
    """A model of ``nodes``; ``inputs``/``outputs``: {name: shape} (float32), consts: arrays."""
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (consts or {}).items()]
    g = helper.make_graph(nodes, "g", vis, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return onnx.shape_inference.infer_shapes(m)


def check_everywhere(model, inputs, expected, passes, rtol=1e-5, atol=1e-5):
    """The model after ``passes`` alone (interpreted), after graph-opt (interpreted) and compiled
    for the CPU, each equal to ``expected`` (name -> array)."""
    results = {}
    for label, pipeline in ((passes, passes), ("graph-opt", "graph-opt")):
        module = ptxc.import_onnx(model)
        PassManager(pipeline).run(module)
        results[label] = ptxc.interpret(module, inputs)
    results["cpu"] = ptxc.compile(model, target="cpu").run(inputs)
    for label, got in results.items():
        for name, want in expected.items():
            np.testing.assert_allclose(got[name], want, rtol=rtol, atol=atol,
                                       err_msg=f"{name} after {label}")


def test_cse_keeps_transposes_with_different_perms_apart():
    x = RNG.standard_normal((3, 3, 3)).astype(F)
    model = graph_model(
        [helper.make_node("Transpose", ["x"], ["a"], perm=[0, 2, 1]),
         helper.make_node("Transpose", ["x"], ["b"], perm=[1, 0, 2]),
         helper.make_node("Sub", ["a", "b"], ["y"])], {"x": (3, 3, 3)}, ["y", "a", "b"])
    a, b = x.transpose(0, 2, 1), x.transpose(1, 0, 2)
    check_everywhere(model, {"x": x}, {"y": a - b, "a": a, "b": b}, "cse")


def test_cse_keeps_pads_on_opposite_sides_apart():
    x = RNG.standard_normal((2, 4)).astype(F)
    model = graph_model(
        [helper.make_node("Pad", ["x", "p1"], ["a"], mode="constant"),
         helper.make_node("Pad", ["x", "p2"], ["b"], mode="constant"),
         helper.make_node("Sub", ["a", "b"], ["y"])], {"x": (2, 4)}, ["y"],
        {"p1": np.array([0, 1, 0, 0], np.int64), "p2": np.array([0, 0, 0, 1], np.int64)})
    a = np.pad(x, [(0, 0), (1, 0)])
    b = np.pad(x, [(0, 0), (0, 1)])
    check_everywhere(model, {"x": x}, {"y": a - b}, "fold-constants,cse")


def test_cse_keeps_slices_with_swapped_starts_apart():
    x = RNG.standard_normal((4, 4)).astype(F)
    model = graph_model(
        [helper.make_node("Slice", ["x", "s1", "e1", "ax"], ["a"]),
         helper.make_node("Slice", ["x", "s2", "e2", "ax"], ["b"]),
         helper.make_node("Sub", ["a", "b"], ["y"])], {"x": (4, 4)}, ["y"],
        {"s1": np.array([0, 1], np.int64), "e1": np.array([3, 4], np.int64),
         "s2": np.array([1, 0], np.int64), "e2": np.array([4, 3], np.int64),
         "ax": np.array([0, 1], np.int64)})
    check_everywhere(model, {"x": x}, {"y": x[0:3, 1:4] - x[1:4, 0:3]}, "fold-constants,cse")


def test_cse_keeps_mirrored_conv_pads_apart():
    """One weight, pads [top, left, bottom, right] = [1, 0, 0, 1] and [0, 1, 1, 0]: same output
    shape, different windows (also: pads begin/end must not be swapped by the lowering)."""
    x = RNG.standard_normal((1, 2, 5, 5)).astype(F)
    w = RNG.standard_normal((3, 2, 2, 2)).astype(F)
    model = graph_model(
        [helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 0, 0, 1]),
         helper.make_node("Conv", ["x", "w"], ["b"], pads=[0, 1, 1, 0]),
         helper.make_node("Sub", ["a", "b"], ["y"])], {"x": x.shape}, ["y", "a"], {"w": w})
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    y, a = ref.run(None, {"x": x})
    check_everywhere(model, {"x": x}, {"y": y, "a": a}, "cse", rtol=1e-4, atol=1e-5)


def test_cse_keeps_sub_in_both_orders_apart():
    x = RNG.standard_normal((2, 3)).astype(F)
    z = RNG.standard_normal((2, 3)).astype(F)
    model = graph_model(
        [helper.make_node("Sub", ["x", "z"], ["a"]),
         helper.make_node("Sub", ["z", "x"], ["b"]),
         helper.make_node("Add", ["b", "one"], ["b2"]),
         helper.make_node("Div", ["a", "b2"], ["y"])], {"x": (2, 3), "z": (2, 3)}, ["y", "b"],
        {"one": np.array(3.0, F)})
    a, b = x - z, z - x
    check_everywhere(model, {"x": x, "z": z}, {"y": a / (b + 3), "b": b}, "cse")


@pytest.mark.parametrize("p1,p2", [([1, 2, 0], [0, 2, 1]), ([2, 0, 1], [1, 0, 2]),
                                   ([0, 2, 1], [2, 1, 0])])
def test_cancel_transposes_composes_in_order(p1, p2):
    x = RNG.standard_normal((2, 3, 4)).astype(F)
    model = graph_model(
        [helper.make_node("Transpose", ["x"], ["t"], perm=p1),
         helper.make_node("Transpose", ["t"], ["y"], perm=p2)], {"x": (2, 3, 4)}, ["y"])
    check_everywhere(model, {"x": x}, {"y": x.transpose(p1).transpose(p2)}, "cancel-transposes")


def test_a_pad_that_crops_what_it_adds_is_not_a_noop():
    x = RNG.standard_normal((2, 5)).astype(F)
    model = graph_model([helper.make_node("Pad", ["x", "p"], ["y"], mode="constant")],
                        {"x": (2, 5)}, ["y"], {"p": np.array([0, 2, 0, -2], np.int64)})
    want = np.concatenate([np.zeros((2, 2), F), x[:, :3]], axis=1)
    check_everywhere(model, {"x": x}, {"y": want}, "fold-constants,eliminate-noops")


def test_a_concat_of_split_results_in_another_order_is_not_the_input():
    x = RNG.standard_normal((2, 6)).astype(F)
    model = graph_model(
        [helper.make_node("Split", ["x", "sizes"], ["s0", "s1", "s2"], axis=1),
         helper.make_node("Concat", ["s1", "s0", "s2"], ["y"], axis=1),
         helper.make_node("Concat", ["s0", "s2", "s1"], ["z"], axis=1),
         helper.make_node("Concat", ["s0", "s1", "s2"], ["same"], axis=1)],
        {"x": (2, 6)}, ["y", "z", "same"], {"sizes": np.array([2, 3, 1], np.int64)})
    s0, s1, s2 = x[:, 0:2], x[:, 2:5], x[:, 5:6]
    want = {"y": np.concatenate([s1, s0, s2], axis=1), "z": np.concatenate([s0, s2, s1], axis=1),
            "same": x}
    check_everywhere(model, {"x": x}, want,
                     "fold-constants,eliminate-concat")


def test_a_slice_that_reverses_a_short_axis_is_not_a_noop():
    """A slice with step -1 keeps every element of an axis, but not in order: reversing an axis
    of two elements changes the tensor (only an axis of at most one element is a no-op)."""
    x = RNG.standard_normal((3, 2)).astype(F)
    big = np.iinfo(np.int64).min
    model = graph_model([helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])],
                        {"x": (3, 2)}, ["y"],
                        {"s": np.array([-1], np.int64), "e": np.array([big], np.int64),
                         "a": np.array([1], np.int64), "st": np.array([-1], np.int64)})
    check_everywhere(model, {"x": x}, {"y": x[:, ::-1]}, "fold-constants,eliminate-noops")
