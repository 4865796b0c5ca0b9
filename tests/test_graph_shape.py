"""Shape and data-movement ops (graph.concat, split, slice, gather, reshape, flatten, transpose,
squeeze, unsqueeze, tile, expand, shape, constant_of_shape; ONNX Constant): the importer and the
reference semantics against onnxruntime on small models, attribute variants, folding of shape
chains, and errors that name the node."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ptxc
from ptxc.dialects.func import func_body, get_func
from ptxc.errors import ModelError, ShapeInputError, VerifyError
from ptxc.ir import DenseElements, parse_ir, print_ir, tensor
from ptxc.ir.spec import make_op

RNG = np.random.default_rng(0)
F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _elem(dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def make_model(nodes, inputs: dict, outputs, inits: dict | None = None, opset: int = 17):
    """inputs: name -> array (runtime graph inputs); outputs: list of (name, numpy dtype[,
    shape where ONNX cannot infer it]);
    inits: name -> array (initializers, known at compile time). Output shapes are left to
    ONNX shape inference."""
    def build(out_infos):
        graph = helper.make_graph(
            nodes, "g",
            [helper.make_tensor_value_info(n, _elem(a.dtype), a.shape)
             for n, a in inputs.items()],
            out_infos,
            [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        return model
    # the checker wants declared output shapes: take them from ONNX shape inference
    inferred = onnx.shape_inference.infer_shapes(build([]), data_prop=True)
    known = {vi.name: vi for vi in inferred.graph.value_info
             if vi.type.tensor_type.HasField("shape")}
    return build([known[o[0]] if o[0] in known else helper.make_tensor_value_info(
        o[0], _elem(o[1]), o[2] if len(o) > 2 and o[2] is not None else ["?"])
        for o in outputs])


def check(nodes, inputs, outputs, inits=None, opset=17):
    """Import with ptxc, interpret, compare with onnxruntime exactly (data movement)."""
    model = make_model(nodes, inputs, outputs, inits, opset)
    module = ptxc.import_onnx(model)
    got = ptxc.interpret(module, inputs)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run([o[0] for o in outputs], inputs)
    for (name, *_), w in zip(outputs, want):
        g = got[name]
        assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)
    return module


def ops_of(module):
    return [op.name for op in func_body(get_func(module)).ops]


def attrs_of(module, name):
    return [op.attributes for op in func_body(get_func(module)).ops if op.name == name]


def rand(*shape, dtype=np.float32):
    if np.dtype(dtype).kind == "f":
        return RNG.standard_normal(shape).astype(dtype)
    return RNG.integers(-50, 50, shape).astype(dtype)


# ---- concat ------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, -1, -3])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_concat(axis, dtype):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    ax = axis % 3
    for k, s in enumerate(shapes):
        s[ax] = k + 1
    xs = {f"x{k}": rand(*s, dtype=dtype) for k, s in enumerate(shapes)}
    m = check([helper.make_node("Concat", list(xs), ["y"], axis=axis)], xs, [("y", dtype)])
    assert attrs_of(m, "graph.concat")[0]["axis"] == ax


# ---- split -------------------------------------------------------------------------------

@pytest.mark.parametrize("opset,axis,split,n,num_outputs", [
    (11, 1, [1, 4, 2], 3, None),      # split attribute
    (13, 0, [3, 0, 1], 3, None),      # split input, a zero-size part
    (13, -1, None, 2, None),          # equal parts
    (18, 1, None, 3, 3),              # num_outputs, uneven: 3, 3, 1
    (18, 2, [2, 2], 2, None),
])
def test_split(opset, axis, split, n, num_outputs):
    x = {"x": rand(4, 7, 4)}
    inputs, attrs, inits = ["x"], {"axis": axis}, {}
    if split is not None and opset < 13:
        attrs["split"] = split
    elif split is not None:
        inputs.append("split")
        inits["split"] = np.array(split, np.int64)
    if num_outputs is not None:
        attrs["num_outputs"] = num_outputs
    outs = [(f"y{k}", np.float32) for k in range(n)]
    node = helper.make_node("Split", inputs, [o for o, _ in outs], **attrs)
    m = check([node], x, outs, inits, opset)
    a = attrs_of(m, "graph.split")[0]
    assert a["axis"] == axis % 3 and sum(a["split"]) == x["x"].shape[axis]
    assert len(a["split"]) == n


# ---- slice -------------------------------------------------------------------------------

BIG = np.iinfo(np.int64).max


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([0, 1], [2, 3], None, None),
    ([-3, -10], [-1, 100], [0, 2], [1, 2]),
    ([-1], [-BIG - 1], [1], [-1]),            # the whole axis reversed
    ([10], [0], [2], [-2]),                    # start clamped to dim - 1
    ([1, 5], [BIG, 2], [-1, 0], [3, -1]),
    ([3], [1], [0], [1]),                      # empty
    ([0, 0, 0], [4, 5, 6], [2, 1, 0], [-1, -2, -3]),
])
def test_slice(starts, ends, axes, steps):
    x = {"x": rand(4, 5, 6)}
    inits = {"starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64)}
    names = ["x", "starts", "ends"]
    if axes is not None:
        inits["axes"] = np.array(axes, np.int64)
        names.append("axes")
    if steps is not None:
        if axes is None:
            names.append("")
        inits["steps"] = np.array(steps, np.int64)
        names.append("steps")
    m = check([helper.make_node("Slice", names, ["y"])], x, [("y", np.float32)], inits, 13)
    a = attrs_of(m, "graph.slice")[0]
    assert len(a["starts"]) == len(a["ends"]) == len(a["steps"]) == 3 and "axes" not in a


def test_slice_random_against_numpy():
    """Random starts/ends/steps (inside and far outside the dims) as numpy indexes them."""
    rng = np.random.default_rng(1)
    x = rand(5, 4)
    for _ in range(30):
        starts = rng.integers(-8, 8, 2).tolist()
        ends = rng.integers(-8, 8, 2).tolist()
        steps = [int(rng.choice([-3, -2, -1, 1, 2, 3])) for _ in range(2)]
        inits = {"s": np.array(starts), "e": np.array(ends), "a": np.array([0, 1]),
                 "t": np.array(steps)}
        model = make_model([helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])],
                           {"x": x}, [("y", np.float32)], inits, 13)
        got = ptxc.interpret(ptxc.import_onnx(model), {"x": x})["y"]
        want = x[tuple(slice(s, e, t) for s, e, t in zip(starts, ends, steps))]
        np.testing.assert_array_equal(got, want, err_msg=str((starts, ends, steps)))


def test_slice_opset9_attributes():
    x = {"x": rand(3, 6)}
    node = helper.make_node("Slice", ["x"], ["y"], starts=[1, -4], ends=[BIG, -1], axes=[0, 1])
    check([node], x, [("y", np.float32)], opset=9)


# ---- gather ------------------------------------------------------------------------------

@pytest.mark.parametrize("axis,idx", [
    (0, np.array([0, 2, -1])), (1, np.array([[1, 0], [-2, 3]])), (-1, np.array(2)),
    (2, np.array([4, 0, 1], np.int32)),
])
def test_gather_constant_indices(axis, idx):
    x = {"x": rand(3, 4, 5)}
    check([helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)], x, [("y", np.float32)],
          {"i": idx}, 13)


def test_gather_runtime_indices():
    inputs = {"x": rand(6, 3, dtype=np.int64), "i": np.array([[5, -6], [0, -1]], np.int64)}
    m = check([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)], inputs, [("y", np.int64)])
    assert "graph.gather" in ops_of(m)


# ---- reshape, flatten, transpose, squeeze, unsqueeze ---------------------------------------

@pytest.mark.parametrize("shape,allowzero,want", [
    ([0, -1], 0, (2, 12)), ([4, 0, 2], 0, (4, 3, 2)), ([-1], 0, (24,)),
    ([2, 3, 2, 2], 1, (2, 3, 2, 2)), ([1, -1, 1, 4], 0, (1, 6, 1, 4)),
])
def test_reshape(shape, allowzero, want):
    x = {"x": rand(2, 3, 4)}
    node = helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=allowzero)
    m = check([node], x, [("y", np.float32)], {"s": np.array(shape, np.int64)}, 14)
    assert attrs_of(m, "graph.reshape")[0]["shape"] == want


def test_reshape_allowzero_keeps_zero():
    x = {"x": np.zeros((0, 3), np.float32)}
    node = helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)
    check([node], x, [("y", np.float32)], {"s": np.array([3, 0], np.int64)}, 14)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten(axis):
    check([helper.make_node("Flatten", ["x"], ["y"], axis=axis)], {"x": rand(2, 3, 4)},
          [("y", np.float32)], opset=13)


@pytest.mark.parametrize("perm", [None, [0, 2, 1], [2, 0, 1]])
def test_transpose(perm):
    kw = {} if perm is None else {"perm": perm}
    m = check([helper.make_node("Transpose", ["x"], ["y"], **kw)], {"x": rand(2, 3, 4)},
              [("y", np.float32)])
    assert attrs_of(m, "graph.transpose")[0]["perm"] == tuple(perm or (2, 1, 0))


@pytest.mark.parametrize("opset,axes,want", [
    (11, [-1, 0], (0, 3)), (13, [3, 0], (0, 3)), (13, None, (0, 2, 3)),
])
def test_squeeze(opset, axes, want):
    x = {"x": rand(1, 3, 1, 1)}
    names, attrs, inits = ["x"], {}, {}
    if axes is not None and opset < 13:
        attrs["axes"] = axes
    elif axes is not None:
        names.append("a")
        inits["a"] = np.array(axes, np.int64)
    m = check([helper.make_node("Squeeze", names, ["y"], **attrs)], x, [("y", np.float32)],
              inits, opset)
    assert attrs_of(m, "graph.squeeze")[0]["axes"] == want


@pytest.mark.parametrize("opset,axes,want", [
    (11, [0, -1], (0, 3)), (13, [4, 0, 2], (0, 2, 4)), (13, [-2], (1,)),
])
def test_unsqueeze(opset, axes, want):
    x = {"x": rand(3, 2)}
    if opset < 13:
        node, inits = helper.make_node("Unsqueeze", ["x"], ["y"], axes=axes), {}
    else:
        node, inits = helper.make_node("Unsqueeze", ["x", "a"], ["y"]), {
            "a": np.array(axes, np.int64)}
    m = check([node], x, [("y", np.float32)], inits, opset)
    assert attrs_of(m, "graph.unsqueeze")[0]["axes"] == want


# ---- tile, expand --------------------------------------------------------------------------

@pytest.mark.parametrize("reps", [[1, 1], [2, 3], [3, 0]])
def test_tile(reps):
    check([helper.make_node("Tile", ["x", "r"], ["y"])], {"x": rand(2, 3)}, [("y", np.float32)],
          {"r": np.array(reps, np.int64)}, 13)


@pytest.mark.parametrize("xshape,shape", [
    ((3, 1), (2, 1, 6)),     # bidirectional: the input's 3 survives a 1 in shape
    ((1,), (4, 2)), ((2, 3), (3,)), ((2, 1, 3), (1, 4, 1)),
])
def test_expand(xshape, shape):
    m = check([helper.make_node("Expand", ["x", "s"], ["y"])], {"x": rand(*xshape)},
              [("y", np.float32)], {"s": np.array(shape, np.int64)}, 13)
    assert attrs_of(m, "graph.expand")[0]["shape"] == np.broadcast_shapes(xshape, shape)


# ---- shape, constant_of_shape, constant ---------------------------------------------------

@pytest.mark.parametrize("kw", [{}, {"start": 1}, {"end": -1}, {"start": -10, "end": 10},
                                {"start": 2, "end": 1}])
def test_shape(kw):
    m = make_model([helper.make_node("Shape", ["x"], ["s"], **kw)], {"x": rand(2, 3, 4)},
                   [("s", np.int64)], opset=15)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": rand(2, 3, 4)})[0]
    module = ptxc.import_onnx(m)
    # the result depends only on the type: it is known at import time and folded
    np.testing.assert_array_equal(ptxc.interpret(module, {"x": rand(2, 3, 4)})["s"], want)
    a = attrs_of(module, "graph.shape")[0]
    assert 0 <= a["start"] <= 3 and 0 <= a["end"] <= 3


@pytest.mark.parametrize("value", [None, np.array([7], np.int32), np.array([1.5], np.float32),
                                   np.array([True])])
def test_constant_of_shape(value):
    kw = {} if value is None else {"value": numpy_helper.from_array(value)}
    dtype = np.float32 if value is None else value.dtype
    check([helper.make_node("ConstantOfShape", ["s"], ["y"], **kw)], {}, [("y", dtype)],
          {"s": np.array([2, 3], np.int64)}, 13)


def test_constant_of_shape_default_value_is_explicit():
    model = make_model([helper.make_node("ConstantOfShape", ["s"], ["y"]),
                        helper.make_node("Add", ["y", "x"], ["z"])],
                       {"x": rand(2, 3)}, [("z", np.float32)], {"s": np.array([2, 3])}, 13)
    m = ptxc.import_onnx(model)
    a = attrs_of(m, "graph.constant_of_shape")
    assert a[0]["value"] == DenseElements(np.zeros(1, np.float32)) and a[0]["shape"] == (2, 3)


@pytest.mark.parametrize("attr,value,dtype", [
    ("value", numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3)), np.float32),
    ("value", numpy_helper.from_array(np.array(3.0)), np.float64),
    ("value_float", 2.5, np.float32), ("value_floats", [1.0, 2.0], np.float32),
    ("value_int", -3, np.int64), ("value_ints", [4, 5, 6], np.int64),
])
def test_constant(attr, value, dtype):
    m = check([helper.make_node("Constant", [], ["y"], **{attr: value})], {}, [("y", dtype)])
    assert ops_of(m)[0] == "graph.constant"


# ---- the PyTorch shape chain ---------------------------------------------------------------

def test_pytorch_shape_chain_folds_into_reshape():
    """x.view(x.size(0), -1) as torch.onnx exports it: Shape, Gather, Unsqueeze, Concat feeding
    Reshape's shape. The chain folds at import; one graph.reshape with a static shape remains."""
    x = {"x": rand(2, 3, 4)}
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"], name="shape0"),
        helper.make_node("Gather", ["shp", "zero"], ["n"], axis=0, name="gather0"),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="unsq0"),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0, name="concat0"),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape0"),
    ]
    inits = {"zero": np.array(0, np.int64), "axes0": np.array([0], np.int64),
             "minus1": np.array([-1], np.int64)}
    m = check(nodes, x, [("y", np.float32, ["N", 12])], inits, 13)
    assert ops_of(m) == ["graph.reshape", "func.return"]
    assert attrs_of(m, "graph.reshape")[0]["shape"] == (2, 12)


def test_runtime_shape_input_names_the_graph_input():
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"], name="r")],
                       {"x": rand(2, 3), "s": np.array([3, 2], np.int64)}, [("y", np.float32)])
    with pytest.raises(ShapeInputError, match="'r'") as e:
        ptxc.import_onnx(model)
    assert e.value.inputs == ("s",)
    m = ptxc.import_onnx(model, constant_inputs={"s": np.array([3, 2], np.int64)})
    assert ptxc.interpret(m, {"x": rand(2, 3)})["y"].shape == (3, 2)


# ---- text round trip ------------------------------------------------------------------------

def test_print_parse_round_trip():
    x = {"x": rand(4, 6)}
    nodes = [helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[2, 4]),
             helper.make_node("Slice", ["b"], ["c"], starts=[1], ends=[BIG], axes=[0]),
             helper.make_node("Transpose", ["c"], ["d"])]
    model = make_model(nodes, x, [("a", np.float32), ("d", np.float32)], opset=9)
    m = ptxc.import_onnx(model)
    text = print_ir(m)
    assert print_ir(parse_ir(text)) == text
    out = ptxc.interpret(parse_ir(text), x)
    np.testing.assert_array_equal(out["a"], x["x"][:, :2])
    np.testing.assert_array_equal(out["d"], x["x"][1:, 2:].T)


# ---- errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("node,consts,match", [
    (helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"], name="sl"),
     {"s": np.array([0]), "e": np.array([2]), "a": np.array([0]), "t": np.array([0])},
     "steps must not be 0"),
    (helper.make_node("Slice", ["x", "s", "e", "a"], ["y"], name="sl"),
     {"s": np.array([0, 0]), "e": np.array([2, 2]), "a": np.array([1, -1])}, "repeat axis 1"),
    (helper.make_node("Reshape", ["x", "s"], ["y"], name="rs"), {"s": np.array([-1, -1])},
     "more than one -1"),
    (helper.make_node("Reshape", ["x", "s"], ["y"], name="rs"), {"s": np.array([4, 2])},
     "cannot reshape"),
    (helper.make_node("Split", ["x", "s"], ["y", "z"], name="sp", axis=1),
     {"s": np.array([1, 1])}, "summing to 3"),
    (helper.make_node("Unsqueeze", ["x", "s"], ["y"], name="us"), {"s": np.array([1, -3])},
     "repeat"),
    (helper.make_node("Tile", ["x", "s"], ["y"], name="tl"), {"s": np.array([2])},
     "repeats"),
    (helper.make_node("Expand", ["x", "s"], ["y"], name="ex"), {"s": np.array([4, 4])},
     "does not broadcast"),
    (helper.make_node("Constant", [], ["y"], name="cst",
                      sparse_value=helper.make_sparse_tensor(
                          numpy_helper.from_array(np.array([1.0], np.float32)),
                          numpy_helper.from_array(np.array([0], np.int64)), [4])),
     {}, "sparse"),
    (helper.make_node("Constant", [], ["y"], name="cst", value_strings=["a"]), {}, "string"),
])
def test_converter_errors_name_the_node(node, consts, match):
    """Shape inputs bound with constant_inputs (ONNX shape inference cannot see them, so the
    converter is what checks them)."""
    inputs = {} if node.op_type == "Constant" else {"x": rand(2, 3)}
    inputs.update({k: v.astype(np.int64) for k, v in consts.items()})
    model = make_model([node], inputs, [(o, np.float32) for o in node.output], opset=13)
    with pytest.raises(ModelError, match=match) as e:
        ptxc.import_onnx(model, constant_inputs=consts)
    assert repr(node.name) in str(e.value)


def test_gather_out_of_range_index_at_run_time():
    model = make_model([helper.make_node("Gather", ["x", "i"], ["y"], name="g")],
                       {"x": rand(3, 2), "i": np.array([3], np.int64)}, [("y", np.float32)])
    m = ptxc.import_onnx(model)
    with pytest.raises(ptxc.PtxcError, match="'g'.*out of range"):
        ptxc.interpret(m, {"x": rand(3, 2), "i": np.array([3], np.int64)})


def _op(name, x_type, attrs):
    from ptxc.dialects.func import new_func, new_module
    f = new_func(new_module(), "main", [x_type], ["x"])
    return make_op(name, [func_body(f).args[0]], attrs, loc="n1")


@pytest.mark.parametrize("name,attrs,match", [
    ("graph.slice", {"starts": (0, 0), "ends": (5, 1), "steps": (1, 1)}, "not normalized"),
    ("graph.slice", {"starts": (0,), "ends": (1,), "steps": (1,)}, "one per axis"),
    ("graph.transpose", {"perm": (0, 0)}, "not a permutation"),
    ("graph.squeeze", {"axes": (1,)}, "not all of size 1"),
    ("graph.unsqueeze", {"axes": (2, 0)}, "sorted"),
    ("graph.split", {"axis": 1, "split": (1, 1)}, "summing"),
    ("graph.reshape", {"shape": (4, 2)}, "cannot reshape"),
    ("graph.shape", {"start": 0, "end": 3}, r"\[0, 2\]"),
])
def test_op_verify_errors(name, attrs, match):
    with pytest.raises(VerifyError, match=match) as e:
        _op(name, tensor((4, 3)), attrs)
    assert "node 'n1'" in str(e.value)


def test_shape_only_trait():
    from ptxc.ir.spec import lookup
    assert lookup("graph.shape").has_trait("shape_only")
    assert not lookup("graph.gather").has_trait("shape_only")
