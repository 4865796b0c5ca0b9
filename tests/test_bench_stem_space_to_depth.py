"""bench/stem_space_to_depth.py's rewrites are exact: a 7x7 stride-2 stem convolution and its
space-to-depth forms give the same outputs (onnxruntime, float64 reference tolerance)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from support.bench_scripts import load

s2d = load("stem_space_to_depth")


def stem_model(c=3, hw=16, o=5, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((o, c, 7, 7)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[7, 7], strides=[2, 2],
                          pads=[3, 3, 3, 3])], "stem",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def run(model, x):
    return ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("form", ["pad", "shifted", "crd"])
@pytest.mark.parametrize("c,hw", [(3, 16), (4, 10)])
def test_rewrite_gives_the_same_outputs(form, c, hw):
    model = stem_model(c, hw)
    x = np.random.default_rng(1).standard_normal((2, c, hw, hw)).astype(np.float32)
    ref, got = run(model, x), run(s2d.rewrite(model, form), x)
    assert got.shape == ref.shape == (2, 5, hw // 2, hw // 2)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    ops = [n.op_type for n in s2d.rewrite(model, form).graph.node]
    s2d_ops = ["Reshape", "Transpose", "Reshape"] if form == "crd" else ["SpaceToDepth"]
    assert ops == (["Pad"] if form == "pad" else []) + s2d_ops + ["Conv"]


def test_blocked_filter_places_every_tap_once():
    w = np.arange(2 * 3 * 49, dtype=np.float32).reshape(2, 3, 7, 7) + 1
    for shift in (0, 1):
        wb = s2d.blocked_filter(w, shift)
        assert wb.shape == (2, 12, 4, 4)
        assert sorted(wb[wb != 0].tolist()) == sorted(w.ravel().tolist())


def test_rewrite_refuses_a_model_without_a_stem():
    model = stem_model()
    model.graph.node[0].attribute[1].ints[:] = [1, 1]   # strides 1
    with pytest.raises(ValueError, match="no 7x7 stride-2"):
        s2d.rewrite(model)
    with pytest.raises(ValueError, match="form must be"):
        s2d.rewrite(stem_model(), "other")
