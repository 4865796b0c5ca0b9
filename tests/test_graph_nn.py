"""Graph-dialect neural-network and linear-algebra ops (conv, conv_transpose, pools, norms, lrn,
softmax, resize, pad, matmul, gemm): each ONNX op imported and run by the interpreter against
onnxruntime on small random models, attribute variants included; the textual round trip; typed
errors naming the node for bad attributes."""

import numpy as np
import pytest
from onnx import TensorProto

from ptxc.errors import ModelError, ShapeInputError, VerifyError
from ptxc.frontend.onnx_import import import_onnx
from ptxc.ir import interpret, make_op, parse_ir, print_ir, tensor, verify
from ptxc.ir.core import Block

ort = pytest.importorskip("onnxruntime")

from support.one_node import rand
from support.one_node import make_model as _make_model


def make_model(op, inputs, consts=None, n_out=1, opset=21, **attrs):
    return _make_model(op, inputs, consts, n_out, opset, **attrs)


def check(op, inputs, consts=None, rtol=1e-4, atol=1e-5, n_out=1, opset=21, **attrs):
    """Import and interpret the one-node model; compare with onnxruntime."""
    model = make_model(op, inputs, consts, n_out=n_out, opset=opset, **attrs)
    feeds = {k: v for k, v in (i for i in inputs if isinstance(i, tuple))}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    module = import_onnx(model)
    got = interpret(module, feeds)
    for o, w in zip(model.graph.output, want):
        g = got[o.name]
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                   atol=atol)
    return module


def conv_case(x_shape, w_shape, bias=True):
    consts = {"W": rand(*w_shape)}
    names = [("X", rand(*x_shape)), "W"]
    if bias:
        consts["B"] = rand(w_shape[0])
        names.append("B")
    return names, consts


# ---- convolutions ----------------------------------------------------------------------------

@pytest.mark.parametrize("x_shape,w_shape,bias,attrs", [
    ((1, 3, 9, 9), (4, 3, 3, 3), True, {}),
    ((2, 3, 9, 8), (4, 3, 3, 2), True, {"strides": [2, 1], "pads": [1, 0, 2, 1]}),
    ((1, 2, 11, 11), (3, 2, 3, 3), False, {"dilations": [2, 2], "strides": [2, 2]}),
    ((1, 4, 7, 7), (6, 2, 3, 3), True, {"group": 2, "pads": [1, 1, 1, 1]}),
    ((1, 4, 8, 8), (4, 1, 3, 3), True, {"group": 4, "strides": [2, 2],
                                        "auto_pad": "SAME_UPPER"}),          # depthwise
    ((1, 4, 8, 8), (8, 1, 3, 3), False, {"group": 4, "auto_pad": "SAME_LOWER",
                                         "strides": [2, 2]}),                # channel multiplier
    ((1, 3, 7, 6), (2, 3, 2, 3), True, {"auto_pad": "VALID", "strides": [2, 2]}),
    ((1, 3, 6, 6), (5, 3, 1, 1), True, {"strides": [2, 2]}),               # 1x1 fast path
    ((2, 3, 10), (4, 3, 3), True, {"pads": [1, 2], "strides": [2]}),       # 1-D
    ((1, 2, 5, 6, 4), (3, 2, 3, 3, 2), True, {"pads": [1, 1, 0, 1, 1, 1]}),  # 3-D
])
def test_conv(x_shape, w_shape, bias, attrs):
    names, consts = conv_case(x_shape, w_shape, bias)
    check("Conv", names, consts, **attrs)


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((1, 2, 4, 4), (2, 3, 3, 3), {}),
    ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 2]}),
    ((1, 2, 4, 4), (2, 3, 3, 3), {"strides": [3, 2], "output_padding": [1, 1]}),
    ((1, 2, 4, 4), (2, 2, 3, 3), {"strides": [2, 2], "output_shape": [9, 10]}),
    ((1, 2, 4, 4), (2, 2, 3, 3), {"strides": [2, 2], "output_shape": [10, 8]}),
    ((1, 2, 4, 4), (2, 3, 2, 3), {"dilations": [2, 2]}),
    ((1, 4, 3, 3), (4, 2, 3, 3), {"group": 2, "strides": [2, 2]}),
    ((1, 2, 4, 4), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 4, 4), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((2, 3, 5), (3, 2, 3), {"strides": [2], "pads": [1, 1]}),               # 1-D
    ((1, 2, 3, 4, 3), (2, 2, 2, 2, 2), {"strides": [2, 1, 2]}),             # 3-D
])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose(x_shape, w_shape, attrs, bias):
    x, w = rand(*x_shape), rand(*w_shape)
    consts = {"W": w}
    names = [("X", x), "W"]
    if bias:
        consts["B"] = rand(w_shape[1] * attrs.get("group", 1))
        names.append("B")
    check("ConvTranspose", names, consts, **attrs)


# ---- pools -------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,attrs", [
    ((1, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 2, 7, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 6, 6), {"kernel_shape": [3, 3], "strides": [3, 3], "pads": [1, 1, 1, 1],
                    "ceil_mode": 1}),
    ((1, 2, 9, 9), {"kernel_shape": [2, 2], "dilations": [2, 2], "strides": [1, 2]}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 3], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 3], "auto_pad": "VALID"}),
    ((2, 3, 10), {"kernel_shape": [3], "strides": [2], "pads": [1, 0]}),
    ((1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 2], "strides": [2, 2, 2], "pads": [0, 1, 0, 1, 1, 1]}),
])
def test_max_pool(shape, attrs):
    check("MaxPool", [("X", rand(*shape))], **attrs)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_max_pool_int8(dtype):
    check("MaxPool", [("X", rand(1, 2, 6, 6, dtype=dtype))], kernel_shape=[3, 3],
          pads=[1, 1, 1, 1], strides=[2, 2])


@pytest.mark.parametrize("shape,attrs", [
    ((1, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 2, 7, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((2, 2, 7, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 2, 1],
                    "count_include_pad": 1}),
    ((1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 8, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                    "ceil_mode": 1, "count_include_pad": 1}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER",
                    "count_include_pad": 1}),
    ((1, 2, 9, 9), {"kernel_shape": [2, 2], "dilations": [2, 2]}),
    ((2, 3, 10), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ((1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 2], "strides": [2, 2, 2]}),
])
def test_average_pool(shape, attrs):
    check("AveragePool", [("X", rand(*shape))], **attrs)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 5, 6), (1, 2, 3, 4, 5)])
def test_global_pools(op, shape):
    check(op, [("X", rand(*shape))])


# ---- normalizations ---------------------------------------------------------------------------

@pytest.mark.parametrize("opset,shape,attrs", [
    (15, (2, 3, 4, 5), {}),
    (15, (2, 3), {"epsilon": 1e-3}),
    (9, (1, 4, 6), {"momentum": 0.8}),
    (7, (2, 3, 2, 2, 2), {"spatial": 1, "epsilon": 1e-2}),
])
def test_batch_normalization(opset, shape, attrs):
    c = shape[1]
    consts = {"s": rand(c), "b": rand(c), "m": rand(c), "v": np.abs(rand(c)) + 0.1}
    check("BatchNormalization", [("X", rand(*shape)), "s", "b", "m", "v"], consts,
          opset=opset, **attrs)


@pytest.mark.parametrize("shape,eps", [((2, 3, 5, 4), 1e-5), ((1, 2, 7), 1e-2)])
def test_instance_normalization(shape, eps):
    c = shape[1]
    check("InstanceNormalization", [("X", rand(*shape)), "s", "b"],
          {"s": rand(c), "b": rand(c)}, epsilon=eps)


@pytest.mark.parametrize("shape,axis,bias", [
    ((2, 3, 8), -1, True), ((2, 3, 4, 5), 1, False), ((4, 6), 0, True), ((2, 3, 4), -2, True)])
def test_layer_normalization(shape, axis, bias):
    norm = shape[axis % len(shape):]
    consts = {"s": rand(*norm)}
    names = [("X", rand(*shape)), "s"]
    if bias:
        consts["b"] = rand(*norm)
        names.append("b")
    check("LayerNormalization", names, consts, axis=axis, epsilon=1e-4)


def test_layer_normalization_mean_and_inv_std_dev():
    """The optional Mean and InvStdDev outputs, when used, are computed (with reductions)."""
    check("LayerNormalization", [("X", rand(3, 4, 5)), "s"], {"s": rand(5)}, n_out=3, axis=-1)


def test_layer_normalization_unused_outputs_cost_nothing():
    model = make_model("LayerNormalization", [("X", rand(3, 4, 5)), "s"], {"s": rand(5)},
                       axis=-1)
    node = model.graph.node[0]
    node.output.extend(["mean_unused", "inv_unused"])
    module = import_onnx(model)
    names = [op.name for op in module.walk()]
    assert "graph.reduce_mean" not in names and "graph.layer_normalization" in names


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn(size):
    check("LRN", [("X", rand(2, 7, 3, 3))], size=size, alpha=1e-2, beta=0.6, bias=1.5)


def test_lrn_even_size_follows_the_spec():
    """onnxruntime refuses even sizes; the window is [c - 1, c + 2] for size 4."""
    x = rand(2, 6, 3, 3)
    model = make_model("LRN", [("X", x)], size=4, alpha=0.1, beta=0.75, bias=1.0)
    got = interpret(import_onnx(model), {"X": x})["y0"]
    sq = np.zeros_like(x)
    for c in range(6):
        sq[:, c] = np.sum(x[:, max(0, c - 1):min(6, c + 3)] ** 2, axis=1)
    np.testing.assert_allclose(got, x / (1.0 + 0.1 / 4 * sq) ** 0.75, rtol=1e-5)


# ---- softmax ----------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,shape,axis", [
    (13, (2, 3, 4), -1), (13, (2, 3, 4), 0), (13, (2, 3, 4), 1),
    (11, (2, 3, 4), 1), (11, (2, 3, 4), 0), (11, (2, 3, 4), -1), (11, (3, 5), None),
    (11, (2, 3, 4, 1), 2),
])
def test_softmax(op, opset, shape, axis):
    attrs = {} if axis is None else {"axis": axis}
    check(op, [("X", rand(*shape) * 4)], opset=opset, **attrs)


def test_softmax_old_opset_is_per_axis_after_reshape():
    model = make_model("Softmax", [("X", rand(2, 3, 4))], opset=11, axis=1)
    names = [op.name for op in import_onnx(model).walk()]
    assert names.count("graph.reshape") == 2 and "graph.softmax" in names


# ---- resize ------------------------------------------------------------------------------------

def resize_check(x, scales=None, sizes=None, roi=None, opset=19, rtol=1e-4, **attrs):
    consts, names = {}, [("X", x), "roi" if roi is not None else None]
    if roi is not None:
        consts["roi"] = np.asarray(roi, np.float32)
    if scales is not None:
        consts["scales"] = np.asarray(scales, np.float32)
        names.append("scales")
    else:
        names += [None, "sizes"]
        consts["sizes"] = np.asarray(sizes, np.int64)
    return check("Resize", names, consts, opset=opset, rtol=rtol, **attrs)


@pytest.mark.parametrize("scales,attrs", [
    ([1, 1, 2, 3], {"mode": "nearest"}),
    ([1, 1, 0.6, 0.5], {"mode": "nearest"}),
    ([1, 1, 1.7, 2.5], {"mode": "nearest", "nearest_mode": "round_prefer_ceil"}),
    ([1, 1, 1.7, 2.5], {"mode": "nearest", "nearest_mode": "floor",
                        "coordinate_transformation_mode": "asymmetric"}),
    ([1, 1, 1.7, 2.5], {"mode": "nearest", "nearest_mode": "ceil",
                        "coordinate_transformation_mode": "align_corners"}),
    ([1, 1, 2, 2], {"mode": "linear"}),
    ([1, 1, 0.6, 0.8], {"mode": "linear"}),
    ([1, 1, 1.5, 2.0], {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
    ([1, 1, 1.5, 2.0], {"mode": "linear", "coordinate_transformation_mode": "asymmetric"}),
    ([1, 1, 1.5, 2.0], {"mode": "linear",
                        "coordinate_transformation_mode": "pytorch_half_pixel"}),
    ([1, 1, 2, 2], {"mode": "cubic"}),
    ([1, 1, 0.8, 1.6], {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}),
    ([1, 1, 2, 2], {"mode": "cubic", "coordinate_transformation_mode": "asymmetric"}),
])
def test_resize_scales(scales, attrs):
    resize_check(rand(1, 2, 4, 6), scales=scales, **attrs)


def test_resize_align_corners_uses_the_unrounded_output_length():
    """As the ONNX node tests (test_resize_downsample_scales_linear_align_corners) expect:
    with scale 0.6 on 4 pixels the mapping divides by 4 * 0.6 - 1, not by 2 - 1."""
    x = np.array([[[[1, 2, 3, 4]]]], np.float32)
    model = make_model("Resize", [("X", x), None, "scales"],
                       {"scales": np.array([1, 1, 1, 0.6], np.float32)}, mode="linear",
                       coordinate_transformation_mode="align_corners")
    y = interpret(import_onnx(model), {"X": x})["y0"]
    np.testing.assert_allclose(y, [[[[1, 1 + 3 / (4 * np.float32(0.6) - 1)]]]], rtol=1e-6)


@pytest.mark.parametrize("sizes,attrs", [
    ([1, 2, 9, 4], {"mode": "nearest"}),
    ([1, 2, 3, 12], {"mode": "linear"}),
    ([1, 2, 7, 7], {"mode": "cubic"}),
    ([1, 2, 3, 3], {"mode": "linear", "antialias": 1}),
    ([1, 2, 2, 3], {"mode": "cubic", "antialias": 1}),
    ([9, 9], {"mode": "nearest", "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"}),
    ([9, 9], {"mode": "linear", "axes": [3, 2], "keep_aspect_ratio_policy": "not_smaller"}),
])
def test_resize_sizes(sizes, attrs):
    resize_check(rand(1, 2, 5, 6), sizes=sizes, **attrs)


def test_resize_tf_crop_and_resize():
    resize_check(rand(1, 1, 5, 5), sizes=[1, 1, 4, 3], roi=[0, 0, 0.2, -0.3, 1, 1, 0.9, 1.2],
                 mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
                 extrapolation_value=7.0)


def test_resize_opset10_nearest():
    check("Resize", [("X", rand(1, 2, 3, 4)), "scales"],
          {"scales": np.array([1, 1, 2, 3], np.float32)}, opset=10, mode="nearest")


def test_resize_uint8_nearest():
    resize_check(rand(1, 3, 4, 4, dtype="uint8"), scales=[1, 1, 2, 2], mode="nearest")


def test_resize_scales_at_run_time_is_a_shape_input_error():
    model = make_model("Resize", [("X", rand(1, 1, 2, 2)), None,
                                  ("scales", np.ones(4, np.float32))], mode="nearest")
    with pytest.raises(ShapeInputError, match="scales"):
        import_onnx(model)


# ---- pad ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode,pads", [
    ("constant", [1, 2, 0, 3, 1, 2]), ("reflect", [1, 2, 0, 3, 1, 2]),
    ("edge", [1, 2, 0, 3, 1, 2]), ("wrap", [1, 2, 0, 3, 1, 2]),
    ("constant", [0, -1, 2, 1, 2, -1]),                       # negative pads crop
])
def test_pad(mode, pads):
    names = [("X", rand(4, 4, 5)), "pads"]
    if mode == "constant":
        names.append(("value", np.array(1.5, np.float32)))     # a run-time constant_value
    check("Pad", names, {"pads": np.array(pads, np.int64)}, mode=mode)


def test_pad_axes():
    check("Pad", [("X", rand(2, 3, 4)), "pads", None, "axes"],
          {"pads": np.array([1, 2, 3, 0], np.int64), "axes": np.array([-1, 0], np.int64)})


def test_pad_opset2_value_attribute():
    check("Pad", [("X", rand(3, 4))], opset=10, pads=[1, 0, 2, 1], value=3.0)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_pad_integers(dtype):
    check("Pad", [("X", rand(3, 4, dtype=dtype)), "pads"],
          {"pads": np.array([1, 0, 2, 1], np.int64)}, mode="edge")


# ---- matmul, gemm ------------------------------------------------------------------------------

@pytest.mark.parametrize("a,b", [
    ((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (2, 4, 3)), ((2, 1, 3, 4), (5, 4, 2)),
    ((2, 3, 4), (4,)), ((4,), (4,)), ((1, 3, 4), (2, 4, 6)),
])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_matmul(a, b, dtype):
    check("MatMul", [("A", rand(*a, dtype=dtype)), ("B", rand(*b, dtype=dtype))])


def test_matmul_float16():
    check("MatMul", [("A", rand(3, 8, dtype="float16")), ("B", rand(8, 5, dtype="float16"))],
          rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("c_shape,attrs", [
    ((), {}), ((5,), {"transB": 1}), ((3, 5), {"transA": 1, "alpha": 0.5, "beta": 2.0}),
    ((1, 5), {"transA": 1, "transB": 1}), ((3, 1), {"beta": -1.0}), (None, {"alpha": 3.0}),
])
def test_gemm(c_shape, attrs):
    a = rand(4, 3) if attrs.get("transA") else rand(3, 4)
    b = rand(5, 4) if attrs.get("transB") else rand(4, 5)
    names, consts = [("A", a), "B"], {"B": b}
    if c_shape is not None:
        names.append(("C", rand(*c_shape)))
    check("Gemm", names, consts, **attrs)


# ---- IR: round trip and verifier ------------------------------------------------------------

def test_text_round_trip():
    x = rand(1, 2, 5, 6)
    model = make_model("Resize", [("X", x), None, "scales"],
                       {"scales": np.array([1, 1, 1.5, 2], np.float32)}, mode="cubic")
    for m in (model, make_model("ConvTranspose", [("X", x), "W"], {"W": rand(2, 3, 3, 3)},
                                strides=[2, 2], output_padding=[1, 0])):
        module = import_onnx(m)
        text = print_ir(module)
        again = parse_ir(text)
        verify(again)
        assert print_ir(again) == text
        feeds = {"X": x}
        np.testing.assert_array_equal(interpret(again, feeds)["y0"],
                                      interpret(module, feeds)["y0"])


def _arg(t):
    return Block([t]).args[0]


def test_verifier_names_the_op():
    x, w = _arg(tensor((1, 4, 5, 5))), _arg(tensor((6, 3, 3, 3)))
    with pytest.raises(VerifyError, match=r'graph.conv.*node .c1.*input channels'):
        make_op("graph.conv", [x, w], {"kernel_shape": (3, 3), "strides": (1, 1),
                                       "pads": (0, 0, 0, 0), "dilations": (1, 1)}, loc="c1")
    with pytest.raises(VerifyError, match="pads must hold 4"):
        make_op("graph.max_pool", [x], {"kernel_shape": (2, 2), "strides": (1, 1),
                                        "pads": (0, 0), "dilations": (1, 1)})
    with pytest.raises(VerifyError, match="inner dimensions"):
        make_op("graph.matmul", [_arg(tensor((2, 3))), _arg(tensor((4, 2)))])


# ---- converter errors ------------------------------------------------------------------------

def _import_error(op, inputs, consts=None, opset=21, n_out=1, **attrs):
    model = make_model(op, inputs, consts, n_out=n_out, opset=opset, **attrs)
    for o in model.graph.output:  # where ONNX shape inference gave up
        if not o.type.tensor_type.elem_type:
            o.type.tensor_type.elem_type = TensorProto.FLOAT
    with pytest.raises(ModelError) as e:
        import_onnx(model)
    assert f"node '{op.lower()}_node' ({op})" in str(e.value)
    return str(e.value)


@pytest.mark.parametrize("op,inputs,consts,attrs,expect", [
    ("AveragePool", [("X", rand(1, 2, 6, 6))], None,
     {"kernel_shape": [2, 2], "count_include_pad": 2}, "count_include_pad"),
    ("Conv", [("X", rand(1, 2, 6, 6)), "W"], {"W": rand(3, 2, 3, 3)}, {"auto_pad": "FOO"},
     "auto_pad"),
    ("Conv", [("X", rand(1, 2, 6, 6)), "W"], {"W": rand(3, 2, 3, 3)}, {"kernel_shape": [2, 2]},
     "kernel_shape"),
    ("Pad", [("X", rand(2, 3)), "pads"], {"pads": np.zeros(4, np.int64)}, {"mode": "mirror"},
     "mode"),
    ("Resize", [("X", rand(1, 1, 2, 2)), None, "scales"],
     {"scales": np.array([1, 1, 0.5, 0.5], np.float32)}, {"antialias": 1}, "antialias"),
    ("Resize", [("X", rand(1, 1, 2, 2)), None, "scales"],
     {"scales": np.array([1, 1, 2, 2], np.float32)}, {"mode": "area"}, "mode"),
    ("BatchNormalization", [("X", rand(1, 2, 3, 3)), "s", "b", "m", "v"],
     {k: np.ones(2, np.float32) for k in "sbmv"}, {"training_mode": 1, "n_out": 3},
     "training_mode"),
    ("MaxPool", [("X", rand(1, 2, 6, 6))], None, {"kernel_shape": [2, 2], "storage_order": 3},
     "storage_order"),
    ("LRN", [("X", rand(1, 2, 6, 6))], None, {"size": 0}, "size"),
])
def test_bad_attributes_name_the_node(op, inputs, consts, attrs, expect):
    assert expect in _import_error(op, inputs, consts, **attrs)


def test_max_pool_indices_output_is_refused_when_used():
    model = make_model("MaxPool", [("X", rand(1, 1, 4, 4))], n_out=2, kernel_shape=[2, 2])
    with pytest.raises(ModelError, match="inference outputs"):
        import_onnx(model)
