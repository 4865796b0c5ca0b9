"""EyeLike, LpNormalization and OneHot (composed at import, ptxc/frontend/convert/
small_composites.py): interpreter and cpu against onnxruntime, cuda compiled with its PTX
assembled by ptxas."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from support.new_ops import check_model, graph_model
from support.one_node import rand

pytestmark = pytest.mark.slow  # each compiles for cpu (and cuda) and runs ptxas


def test_lp_normalization_with_a_zero_slice():
    x = rand(3, 4, 5)
    x[:, 1, :] = 0.0  # a zero norm along axis 1 for p = 2 on axis 2 and the guard's 0
    nodes = [helper.make_node("LpNormalization", ["x"], ["l2"], axis=-1, p=2),
             helper.make_node("LpNormalization", ["x"], ["l1"], axis=2, p=1)]
    check_model(graph_model(nodes, {"x": x}, ["l2", "l1"], opset=22), {"x": x})


def test_one_hot_and_eye_like():
    i = np.array([[0, -1, 3], [7, 2, -5]], np.int64)  # 7 is out of range: all off
    nodes = [helper.make_node("OneHot", ["i", "depth", "vals"], ["oh"], axis=1),
             helper.make_node("EyeLike", ["m"], ["eye"], k=1, dtype=TensorProto.INT32)]
    m = np.zeros((3, 5), np.float32)
    inits = [numpy_helper.from_array(np.array(5, np.int64), "depth"),
             numpy_helper.from_array(np.array([-1.0, 2.5], np.float32), "vals")]
    feeds = {"i": i, "m": m}
    want = check_model(graph_model(nodes, feeds, ["oh", "eye"], opset=21, inits=inits), feeds,
                       cuda=False)
    assert (want["oh"][1, :, 0] == -1.0).all()
    np.testing.assert_array_equal(want["eye"], np.eye(3, 5, 1, dtype=np.int32))
    check_model(graph_model([helper.make_node("OneHot", ["i", "depth", "vals"], ["oh"])],
                            {"i": i}, ["oh"], opset=21, inits=inits), {"i": i})


@pytest.mark.parametrize("dtype", ["int32", "uint8"])
def test_bitwise_ops(dtype):
    rng = np.random.default_rng(18)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, size=(3, 4), endpoint=True).astype(dtype)
    b = rng.integers(info.min, info.max, size=(4,), endpoint=True).astype(dtype)
    nodes = [helper.make_node(op, ["a", "b"], [op.lower()])
             for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor")]
    nodes.append(helper.make_node("BitwiseNot", ["a"], ["bitwisenot"]))
    feeds = {"a": a, "b": b}
    want = check_model(graph_model(nodes, feeds, [n.output[0] for n in nodes], opset=18), feeds,
                       cuda=dtype == "int32")
    np.testing.assert_array_equal(want["bitwisenot"], ~a)
    np.testing.assert_array_equal(want["bitwisexor"], a ^ b)


def test_compress_with_a_known_condition_and_a_runtime_one():
    """Compress's condition decides the output shape: known at import, it becomes a gather
    (data at run time); a runtime condition is a ShapeInputError naming it."""
    import ptxc
    x = rand(3, 4)
    cond = numpy_helper.from_array(np.array([True, False, True, True]), "cond")
    nodes = [helper.make_node("Compress", ["x", "cond"], ["y"], axis=1),
             helper.make_node("Compress", ["x", "cond"], ["flat"])]
    want = check_model(graph_model(nodes, {"x": x}, ["y", "flat"], opset=11, inits=[cond]),
                       {"x": x}, cuda=False)
    np.testing.assert_array_equal(want["y"], x[:, [0, 2, 3]])
    m = graph_model(nodes[:1], {"x": x, "cond": np.array([True, False, True, True])}, ["y"],
                    opset=11)
    with pytest.raises(ptxc.ShapeInputError, match="condition"):
        ptxc.import_onnx(m)
