"""Graph-dialect elementwise, activation, cast and reduction ops: each ONNX op imported and run by
the interpreter against onnxruntime on small random models, attribute variants included; erf
against math.erf; the textual round trip; typed errors naming the node for bad attributes."""

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ptxc.dialects.graph.elementwise import erf, trunc_div
from ptxc.errors import ModelError, VerifyError
from ptxc.frontend.onnx_import import import_onnx
from ptxc.ir import interpret, parse_ir, print_ir, verify

ort = pytest.importorskip("onnxruntime")

NP_TO_ONNX = {np.dtype(k): v for k, v in {
    "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE, "float16": TensorProto.FLOAT16,
    "int64": TensorProto.INT64, "int32": TensorProto.INT32, "int16": TensorProto.INT16,
    "int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "uint32": TensorProto.UINT32,
    "uint64": TensorProto.UINT64, "bool": TensorProto.BOOL}.items()}

RNG = np.random.default_rng(0)


def rand(shape, dtype="float32", lo=-3.0, hi=3.0):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if dtype.kind in "iu":
        lo, hi = (0, 10) if dtype.kind == "u" else (-10, 10)
        return RNG.integers(lo, hi, size=shape).astype(dtype)
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def make_model(op, inputs, n_out=1, opset=21, out_dtypes=None, inits=None, **attrs):
    """One-node model: ``inputs`` is a list of (name, array) or None for an absent input;
    ``inits`` names inputs given as initializers."""
    inits = inits or {}
    names, vis = [], []
    for item in inputs:
        if item is None:
            names.append("")
            continue
        name, x = item
        names.append(name)
        if name not in inits:
            vis.append(helper.make_tensor_value_info(name, NP_TO_ONNX[x.dtype], x.shape))
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, name=f"{op.lower()}_node", **attrs)
    out_vis = [helper.make_tensor_value_info(o, 0, None) for o in outs]
    initializers = [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()]
    graph = helper.make_graph([node], "g", vis, out_vis, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)


def run_both(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    module = import_onnx(model)
    got = interpret(module, feeds)
    return [got[o.name] for o in model.graph.output], want, module


def check(op, inputs, rtol=1e-5, atol=1e-6, **kw):
    model = make_model(op, inputs, **kw)
    feeds = {k: v for k, v in (i for i in inputs if i is not None) if k not in kw.get("inits", {})}
    got, want, module = run_both(model, feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g.astype(np.float64) if g.dtype != np.bool_ else g,
                                   w.astype(np.float64) if w.dtype != np.bool_ else w,
                                   rtol=rtol, atol=atol)
    return module


def op_names(module):
    return [op.name for op in module.walk()]


# ---- binary, variadic, comparisons ---------------------------------------------------------

@pytest.mark.parametrize("op", ["Sub", "Mul", "Div", "Add"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8"])
def test_binary_broadcast(op, dtype):
    a, b = rand((2, 3, 4), dtype), rand((3, 1), dtype)
    if op == "Div" and np.dtype(dtype).kind in "iu":
        b[b == 0] = 3
    check(op, [("a", a), ("b", b)])


def test_int_div_truncates():
    a = np.array([7, -7, 7, -7, 0, -1], np.int32)
    b = np.array([2, 2, -2, -2, 3, 5], np.int32)
    check("Div", [("a", a), ("b", b)])
    np.testing.assert_array_equal(trunc_div(a, b), [3, -3, -3, 3, 0, 0])


@pytest.mark.parametrize("types", [("float32", "float32"), ("float32", "int64"),
                                   ("int64", "float32"), ("int32", "int32"),
                                   ("float64", "float64"), ("float32", "int32")])
def test_pow(types):
    a = rand((3, 4), types[0], 0.5, 2.0)
    b = rand((4,), types[1], -2.0, 3.0)
    if np.dtype(types[0]).kind == "i":
        a = np.abs(a) % 4
    if np.dtype(types[1]).kind == "i":
        b = np.abs(b) % 4
    check("Pow", [("a", a), ("b", b)], rtol=1e-4)


def test_pow_negative_integer_exponent():
    a = np.array([1, 2, -1, 3], np.int64)
    b = np.array([-1, -1, -3, 2], np.int64)
    model = make_model("Pow", [("a", a), ("b", b)])
    y = interpret(import_onnx(model), {"a": a, "b": b})["y0"]
    np.testing.assert_array_equal(y, [1, 0, -1, 9])


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_variadic(op, n):
    shapes = [(2, 3, 4), (3, 1), (4,)][:n]
    check(op, [(f"x{i}", rand(s)) for i, s in enumerate(shapes)])


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_variadic_int(op):
    check(op, [("a", rand((2, 3), "int32")), ("b", rand((2, 3), "int32"))])


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater"])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_compare(op, dtype):
    a, b = rand((2, 3), dtype), rand((3,), dtype)
    b[0] = a[0, 0]
    module = check(op, [("a", a), ("b", b)])
    assert module is not None


def test_equal_bool():
    check("Equal", [("a", rand((4,), "bool")), ("b", rand((4,), "bool"))])


def test_where_and_not():
    c = rand((2, 1, 4), "bool")
    check("Where", [("c", c), ("x", rand((3, 1))), ("y", rand((4,)))])
    check("Where", [("c", c), ("x", rand((2, 3, 4), "int64")), ("y", rand((1,), "int64"))])
    check("Not", [("x", rand((2, 3), "bool"))])


# ---- unary math ----------------------------------------------------------------------------

@pytest.mark.parametrize("op,lo,hi", [
    ("Sqrt", 0.0, 4.0), ("Exp", -5.0, 5.0), ("Log", 0.01, 10.0), ("Neg", -3, 3),
    ("Abs", -3, 3), ("Reciprocal", 0.5, 3.0), ("Floor", -3, 3), ("Ceil", -3, 3),
    ("Erf", -4.0, 4.0)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_unary(op, lo, hi, dtype):
    if op == "Erf" and dtype == "float64":
        pytest.skip("onnxruntime has no float64 Erf; test_erf_against_math_erf covers it")
    check(op, [("x", rand((3, 5), dtype, lo, hi))])


@pytest.mark.parametrize("op", ["Neg", "Abs"])
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_unary_int(op, dtype):
    check(op, [("x", rand((3, 5), dtype))])


def test_erf_against_math_erf():
    x = np.concatenate([np.linspace(-7, 7, 20001), [0.0, -0.0, 1e-300, 1e-8, -1e-8, 0.5, 1.0,
                                                     2.5, 6.0, 5.99999, 1e300, -1e300]])
    want = np.array([math.erf(v) for v in x])
    got = erf(x)
    assert got.dtype == np.float64
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-300)
    assert rel.max() < 1e-13
    y = erf(np.array([np.inf, -np.inf, np.nan]))
    assert y[0] == 1 and y[1] == -1 and np.isnan(y[2])
    x32 = rand((1000,), "float32", -5, 5)
    np.testing.assert_allclose(erf(x32).astype(np.float32), [math.erf(v) for v in x32],
                               rtol=1e-7, atol=0)


# ---- activations ---------------------------------------------------------------------------

@pytest.mark.parametrize("op,attrs", [
    ("LeakyRelu", {}), ("LeakyRelu", {"alpha": 0.3}), ("Sigmoid", {}), ("Tanh", {}),
    ("Elu", {}), ("Elu", {"alpha": 0.5}), ("Selu", {}), ("Selu", {"alpha": 2.0, "gamma": 3.0}),
    ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSwish", {}),
    ("Softplus", {}), ("Relu", {}), ("Gelu", {}), ("Gelu", {"approximate": "tanh"})])
def test_activation(op, attrs):
    x = rand((2, 3, 4), "float32", -6, 6)
    x[0, 0, 0] = 0.0
    check(op, [("x", x)], **attrs)


def test_activation_float16_and_large_values():
    check("Sigmoid", [("x", np.array([-100, -20, 0, 20, 100], np.float32))])
    check("Softplus", [("x", np.array([-100, -20, 0, 20, 100], np.float32))])
    check("Tanh", [("x", rand((7,), "float16"))], rtol=1e-3, atol=1e-3)
    check("Sigmoid", [("x", rand((7,), "float16"))], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("slope_shape", [(1,), (4,), (3, 1), (2, 3, 4)])
def test_prelu(slope_shape):
    check("PRelu", [("x", rand((2, 3, 4))), ("s", rand(slope_shape, lo=0, hi=1))])


def test_prelu_constant_slope():
    check("PRelu", [("x", rand((2, 3, 4))), ("s", rand((3, 1), lo=0, hi=1))],
          inits={"s": rand((3, 1), lo=0, hi=1)})


@pytest.mark.parametrize("bounds", ["both", "min", "max", "none", "crossed"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int8"])
def test_clip_runtime_bounds(bounds, dtype):
    x = rand((3, 4), dtype)
    lo, hi = np.array(-2, dtype), np.array(3, dtype)
    if bounds == "crossed":
        lo, hi = hi, lo
    ins = [("x", x), ("lo", lo) if bounds in ("both", "min", "crossed") else None,
           ("hi", hi) if bounds in ("both", "max", "crossed") else None]
    while ins[-1] is None:
        ins.pop()
    module = check("Clip", ins)
    assert "graph.clip" in op_names(module)


def test_clip_opset6_attributes():
    x = rand((3, 4))
    model = make_model("Clip", [("x", x)], opset=6, min=-1.0, max=0.5)
    got, want, _ = run_both(model, {"x": x})
    np.testing.assert_allclose(got[0], want[0])
    model = make_model("Clip", [("x", x)], opset=6, max=0.5)
    got, want, _ = run_both(model, {"x": x})
    np.testing.assert_allclose(got[0], want[0])


# ---- cast, identity, dropout ---------------------------------------------------------------

@pytest.mark.parametrize("src,dst", [
    ("float32", TensorProto.INT32), ("float32", TensorProto.FLOAT16),
    ("float32", TensorProto.DOUBLE), ("float32", TensorProto.BOOL),
    ("float64", TensorProto.INT64), ("int64", TensorProto.FLOAT),
    ("int32", TensorProto.INT8), ("bool", TensorProto.FLOAT), ("uint8", TensorProto.INT64),
    ("float32", TensorProto.FLOAT)])
def test_cast(src, dst):
    x = rand((3, 4), src, -50, 50)
    x.flat[0] = 0
    module = check("Cast", [("x", x)], to=dst)
    assert "graph.cast" in op_names(module)


def test_identity_and_dropout_emit_ops():
    x = rand((2, 3))
    module = check("Identity", [("x", x)])
    assert "graph.identity" in op_names(module)
    for opset, kw in ((12, {}), (11, {"ratio": 0.3}), (7, {})):
        model = make_model("Dropout", [("x", x)], opset=opset, **kw)
        got, want, module = run_both(model, {"x": x})
        np.testing.assert_array_equal(got[0], want[0])
        assert "graph.dropout" in op_names(module)
    r = np.array(0.2, np.float32)
    module = check("Dropout", [("x", x), ("r", r)], inits={"r": r})
    drop = [op for op in module.walk() if op.name == "graph.dropout"][0]
    assert abs(drop.attr("ratio") - 0.2) < 1e-6


def test_dropout_training_true_is_refused():
    x = rand((2, 3))
    model = make_model("Dropout", [("x", x), ("r", np.array(0.5, np.float32)),
                                   ("t", np.array(True))],
                       inits={"r": np.array(0.5, np.float32), "t": np.array(True)})
    with pytest.raises(ModelError, match="dropout_node.*training_mode"):
        import_onnx(model)


# ---- reductions ----------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes,keepdims", [((1,), 1), ((0, 2), 0), ((-1,), 1), (None, 1),
                                           (None, 0)])
@pytest.mark.parametrize("opset", [11, 18])
def test_reduce(op, axes, keepdims, opset):
    x = rand((2, 3, 4))
    inits, kw = {}, {"keepdims": keepdims}
    ins = [("x", x)]
    if axes is not None:
        if opset >= 18 or (op == "ReduceSum" and opset >= 13):
            inits = {"axes": np.array(axes, np.int64)}
            ins.append(("axes", inits["axes"]))
        else:
            kw["axes"] = list(axes)
    module = check(op, ins, opset=opset, inits=inits, **kw)
    red = [o for o in module.walk() if o.name.startswith("graph.reduce_")][0]
    want = tuple(range(3)) if axes is None else tuple(sorted(a % 3 for a in axes))
    assert red.attr("axes") == want and red.attr("keepdims") == keepdims


def test_reduce_int_and_noop():
    check("ReduceSum", [("x", rand((2, 3), "int32")), ("axes", np.array([1], np.int64))],
          opset=13, inits={"axes": np.array([1], np.int64)})
    check("ReduceMax", [("x", rand((2, 3), "int64"))], opset=13, axes=[0], keepdims=0)
    empty = np.zeros((0,), np.int64)
    module = check("ReduceSum", [("x", rand((2, 3))), ("axes", empty)], opset=13,
                   inits={"axes": empty}, noop_with_empty_axes=1)
    assert "graph.identity" in op_names(module) and "graph.reduce_sum" not in op_names(module)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_argmax(axis, keepdims, last):
    x = RNG.integers(0, 3, size=(3, 4)).astype(np.float32)  # ties on purpose
    check("ArgMax", [("x", x)], axis=axis, keepdims=keepdims, select_last_index=last)


# ---- text round trip and errors -----------------------------------------------------------

def test_round_trip_text():
    x = rand((2, 3))
    node_list = [
        helper.make_node("Cast", ["x"], ["c"], to=TensorProto.INT64),
        helper.make_node("Clip", ["x", "", "hi"], ["k"]),
        helper.make_node("ReduceMean", ["k", "ax"], ["r"], keepdims=0),
        helper.make_node("Gelu", ["x"], ["g"], approximate="tanh"),
        helper.make_node("Max", ["x", "g", "k"], ["m"]),
        helper.make_node("Dropout", ["m"], ["d"]),
    ]
    g = helper.make_graph(
        node_list, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3)),
         helper.make_tensor_value_info("hi", TensorProto.FLOAT, ())],
        [helper.make_tensor_value_info(n, t, sh) for n, t, sh in
         (("c", TensorProto.INT64, (2, 3)), ("r", TensorProto.FLOAT, (2,)),
          ("d", TensorProto.FLOAT, (2, 3)))],
        [onnx.numpy_helper.from_array(np.array([1], np.int64), "ax")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    module = import_onnx(model)
    text = print_ir(module)
    again = parse_ir(text)
    verify(again)
    assert print_ir(again) == text
    feeds = {"x": x, "hi": np.array(0.5, np.float32)}
    a, b = interpret(module, feeds), interpret(again, feeds)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.parametrize("op,inputs,attrs,out_shape,match", [
    ("Gelu", [("x", (2,))], {"approximate": "erf"}, (2,), "approximate"),
    ("ArgMax", [("x", (2, 3))], {"axis": 1, "select_last_index": 2}, (2, 1),
     "select_last_index must be 0 or 1"),
    ("ReduceSum", [("x", (2, 3))], {"axes": [0, -2], "keepdims": 1}, (1, 3), "repeat"),
    ("ReduceMax", [("x", (2, 3))], {"axes": [3]}, (2, 3), "out of range"),
    ("ReduceMean", [("x", (2, 3))], {"axes": [0], "keepdims": 2}, (3,), "keepdims"),
    ("Cast", [("x", (2,))], {"to": TensorProto.STRING}, (2,), "STRING is not supported"),
    ("Cast", [("x", (2,))], {"to": TensorProto.FLOAT8E4M3FN}, (2,),
     "FLOAT8E4M3FN is not supported"),
])
def test_bad_attributes_name_the_node(op, inputs, attrs, out_shape, match):
    opset = 11 if op.startswith("Reduce") else 20
    nodes = [helper.make_node(op, [n for n, _ in inputs], ["y"], name="bad_node", **attrs)]
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
    out_type = attrs.get("to", TensorProto.INT64 if op == "ArgMax" else TensorProto.FLOAT)
    g = helper.make_graph(nodes, "g", vis, [helper.make_tensor_value_info("y", out_type,
                                                                     out_shape)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    with pytest.raises(ModelError, match=f"bad_node.*{match}|{match}.*bad_node"):
        import_onnx(model)


def test_verifier_names_op_on_bad_ir():
    from ptxc.dialects.func import func_body, new_func, new_module
    from ptxc.ir import Builder, tensor
    m = new_module()
    f = new_func(m, "main", [tensor((2, 3)), tensor((2, 3), "i64")], ["a", "b"])
    b = Builder.at_end(func_body(f))
    a, i = func_body(f).args
    with pytest.raises(VerifyError, match="graph.sub.*node 'sub1'.*element types"):
        op = b.create("graph.sub", [a, i], loc="sub1")
        op.spec.verify(op)
    with pytest.raises(VerifyError, match="graph.where.*condition must be i1"):
        op = b.create("graph.where", [a, a, a], loc="w")
        op.spec.verify(op)
    with pytest.raises(VerifyError, match="graph.reduce_sum.*out of range"):
        b.create("graph.reduce_sum", [a], {"axes": (2,), "keepdims": 1}, loc="r")
    with pytest.raises(VerifyError, match="graph.sqrt.*float"):
        op = b.create("graph.sqrt", [i], loc="s")
        op.spec.verify(op)


def test_dropout_training_with_zero_ratio_is_identity():
    x = rand((2, 3))
    consts = {"r": np.array(0.0, np.float32), "t": np.array(True)}
    model = make_model("Dropout", [("x", x), ("r", consts["r"]), ("t", consts["t"])],
                       inits=consts)
    np.testing.assert_array_equal(interpret(import_onnx(model), {"x": x})["y0"], x)
