"""One-node ONNX models for op tests: random arrays and a model around a single node."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NP_TO_ONNX = {np.dtype(k): v for k, v in {
    "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE, "float16": TensorProto.FLOAT16,
    "int64": TensorProto.INT64, "int32": TensorProto.INT32, "int8": TensorProto.INT8,
    "uint8": TensorProto.UINT8, "uint32": TensorProto.UINT32, "uint64": TensorProto.UINT64,
    "bool": TensorProto.BOOL}.items()}

RNG = np.random.default_rng(0)


def rand(*shape, dtype="float32"):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(bool)
    if dtype.kind in "iu":
        lo, hi = (0, 20) if dtype.kind == "u" else (-10, 10)
        return RNG.integers(lo, hi, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def make_model(op, inputs, consts=None, n_out=1, opset=21, **attrs):
    """A one-node model. ``inputs``: (name, array) runtime inputs, names of ``consts``
    (initializers), or None for an absent input; outputs ``y0``, ``y1``, ...; shapes inferred."""
    consts = consts or {}
    names, vis = [], []
    for item in inputs:
        if item is None:
            names.append("")
        elif isinstance(item, str):
            names.append(item)
        else:
            name, x = item
            names.append(name)
            vis.append(helper.make_tensor_value_info(name, NP_TO_ONNX[x.dtype], x.shape))
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, name=f"{op.lower()}_node", **attrs)
    out_vis = [helper.make_tensor_value_info(o, 0, None) for o in outs]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    graph = helper.make_graph([node], "g", vis, out_vis, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset >= 21 else 8
    return onnx.shape_inference.infer_shapes(model)
