"""Small attention models built with onnx.helper (tests/test_attention_fused.py): a BERT-style
self-attention block as PyTorch exports it (Q/K/V projections, heads split by reshape and
transpose, scores divided by sqrt(d), an additive mask from the attention mask, softmax,
context, output projection)."""

import numpy as np
from onnx import helper, numpy_helper

from .new_ops import graph_model


def bert_attention(b=2, s=6, heads=2, d=4, seed=0, scale_form="div", dtype=np.float32):
    rng = np.random.default_rng(seed)
    hid = heads * d
    init = {}

    def w(name, *shape):
        init[name] = (rng.standard_normal(shape) * 0.5).astype(dtype)
        return name
    nodes = []
    for t in "qkv":
        nodes += [helper.make_node("MatMul", ["x", w(f"W{t}", hid, hid)], [f"{t}0"]),
                  helper.make_node("Add", [f"{t}0", w(f"B{t}", hid)], [f"{t}1"]),
                  helper.make_node("Reshape", [f"{t}1", "hshape"], [f"{t}2"])]
    init["hshape"] = np.array([b, s, heads, d], np.int64)
    init["oshape"] = np.array([b, s, hid], np.int64)
    init["sd"] = np.array(np.sqrt(d), dtype)
    init["inv_sd"] = np.array(1 / np.sqrt(d), dtype)
    init["one"] = np.array(1, dtype)
    init["neg"] = np.array(-10000, dtype)
    nodes += [
        helper.make_node("Transpose", ["q2"], ["q"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k2"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v2"], ["v"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="qk")]
    if scale_form == "div":
        nodes.append(helper.make_node("Div", ["scores", "sd"], ["scaled"], name="scale"))
    else:
        nodes.append(helper.make_node("Mul", ["inv_sd", "scores"], ["scaled"], name="scale"))
    nodes += [
        helper.make_node("Cast", ["m"], ["mf"], to=1 if dtype == np.float32 else 10),
        helper.make_node("Sub", ["one", "mf"], ["inv"]),
        helper.make_node("Mul", ["inv", "neg"], ["bias2"]),
        helper.make_node("Unsqueeze", ["bias2", "ax12"], ["bias"]),
        helper.make_node("Add", ["scaled", "bias"], ["masked"], name="add_mask"),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1, name="softmax"),
        helper.make_node("MatMul", ["probs", "v"], ["ctx"], name="pv"),
        helper.make_node("Transpose", ["ctx"], ["ctx2"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx2", "oshape"], ["ctx3"]),
        helper.make_node("MatMul", ["ctx3", w("Wo", hid, hid)], ["y"])]
    init["ax12"] = np.array([1, 2], np.int64)
    x = rng.standard_normal((b, s, hid)).astype(dtype)
    m = np.ones((b, s), np.int64)
    m[0, -2:] = 0
    model = graph_model(nodes, {"x": x, "m": m}, ["y"], opset=17,
                        inits=[numpy_helper.from_array(v, k) for k, v in init.items()])
    return model, {"x": x, "m": m}
