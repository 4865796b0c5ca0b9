"""Edge cases of issue 11, each against onnxruntime: integer Pow at the ends of the range (now
exact and wrapping, issue 40), a
model output that is also its input keeping its name through Engine.run and a plan, and
ConvTranspose keeping a NaN/inf kernel tap local."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ptxc


def _model(nodes, ins, outs, opset=15):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in ins],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _ort(m, feeds):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


@pytest.mark.parametrize("dtype,onnx_type", [(np.int64, TensorProto.INT64),
                                             (np.int32, TensorProto.INT32)])
def test_integer_pow_at_the_ends_of_the_range(dtype, onnx_type):
    """(-2**63) ** 2, 7 ** 64 and 3 ** 39 are the exact power wrapped to the type (issue 40:
    ONNX's reference; issue 11 had followed onnxruntime's ``(int)pow(double, double)``, which
    is undefined past the type and rounds past 2**53), 0 ** -1 the type's minimum and other
    negative exponents the truncated real power; onnxruntime agrees wherever its double power
    is exact; interpreter and compiled code agree with Python's integers."""
    lo = np.iinfo(dtype).min
    bits = np.iinfo(dtype).bits
    x = np.array([lo, lo, lo, 2**20, -3, 7, 3, 5, -7, 0, 0, 2, -1, -2], dtype)
    y = np.array([1, 2, 0, 4, 3, 64, 39, 2, 33, -1, 0, -1, -1, -3], dtype)

    def exact(a, e):
        if e < 0:
            return lo if a == 0 else (1 if a == 1 else (-1) ** e if a == -1 else 0)
        return (pow(a, e, 1 << bits) + (1 << bits - 1)) % (1 << bits) - (1 << bits - 1)
    want = np.array([exact(int(a), int(e)) for a, e in zip(x, y)], dtype)
    m = _model([helper.make_node("Pow", ["x", "y"], ["z"])],
               [("x", onnx_type, [14]), ("y", onnx_type, [14])], [("z", onnx_type, [14])])
    feeds = {"x": x, "y": y}
    np.testing.assert_array_equal(ptxc.interpret(ptxc.import_onnx(m), feeds)["z"], want)
    np.testing.assert_array_equal(ptxc.compile(m, target="cpu").run(feeds)["z"], want)
    (ort_z,) = _ort(m, feeds)
    real = np.array([float(a) ** float(e) if a or e >= 0 else np.inf for a, e in zip(x, y)])
    exact_in_double = np.abs(real) < min(2.0 ** 53, 2.0 ** (bits - 1))
    assert exact_in_double.sum() == 7
    np.testing.assert_array_equal(ort_z[exact_in_double], want[exact_in_double])


def test_output_that_is_an_input_keeps_its_name(tmp_path):
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, [3])],
               [("x", TensorProto.FLOAT, [3]), ("y", TensorProto.FLOAT, [3])], opset=17)
    x = np.array([-1.0, 2.0, -3.0], np.float32)
    want = dict(zip(["x", "y"], _ort(m, {"x": x})))
    eng = ptxc.compile(m, target="cpu")
    assert list(eng.outputs) == ["x", "y"]
    eng.save(tmp_path / "m.plan")
    for e in (eng, ptxc.load(tmp_path / "m.plan"), eng.create_context()):
        got = e.run({"x": x})
        assert sorted(got) == ["x", "y"]
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
    assert list(ptxc.compile(m, target="cuda", arch="sm_90").outputs) == ["x", "y"]


def _conv_transpose_model(xs, ws, attrs, w_const=None, elem=TensorProto.FLOAT):
    from onnx import numpy_helper
    ins = [("x", elem, list(xs))] + ([] if w_const is not None else [("w", elem, list(ws))])
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in ins],
                          [helper.make_tensor_value_info("y", elem, None)],
                          [] if w_const is None else [numpy_helper.from_array(w_const, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    import onnx
    return onnx.shape_inference.infer_shapes(m)


@pytest.mark.slow
@pytest.mark.parametrize("case", [
    dict(xs=(1, 2, 4, 4), ws=(2, 3, 3, 3), attrs=dict(strides=[2, 2])),
    dict(xs=(2, 4, 3, 5), ws=(4, 1, 2, 3), attrs=dict(strides=[2, 1], group=2, pads=[1, 0, 0, 1],
                                                      dilations=[1, 2], output_padding=[1, 0])),
    dict(xs=(1, 3, 6), ws=(3, 2, 4), attrs=dict(strides=[3], pads=[2, 1])),
])
@pytest.mark.parametrize("w_const", [True, False])
def test_conv_transpose_keeps_a_nan_weight_local(case, w_const):
    """A NaN (and an inf) in the kernel reaches only the outputs its real products reach, as
    onnxruntime's col2im; a runtime kernel takes the same direct path."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(case["xs"]).astype(np.float32)
    w = rng.standard_normal(case["ws"]).astype(np.float32)
    w.reshape(-1)[5] = np.nan
    w.reshape(-1)[-2] = np.inf
    m = _conv_transpose_model(case["xs"], case["ws"], case["attrs"], w if w_const else None)
    feeds = {"x": x} if w_const else {"x": x, "w": w}
    (want,) = _ort(m, feeds)
    assert np.isnan(want).any() and not np.isnan(want).all()
    for got in (ptxc.interpret(ptxc.import_onnx(m), feeds)["y"],
                ptxc.compile(m, target="cpu").run(feeds)["y"]):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.slow
def test_conv_transpose_direct_form_lowers_for_cuda():
    from ptxc.ptx import assemble, ptxas_path
    m = _conv_transpose_model((1, 2, 4, 4), (2, 3, 3, 3), dict(strides=[2, 2]))
    engine = ptxc.compile(m, target="cuda", arch="sm_90")
    if ptxas_path() is not None:
        assemble(engine.ptx, "sm_90")
