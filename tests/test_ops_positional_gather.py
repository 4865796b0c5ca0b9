"""Trilu, CumSum/CumProd, ArgMin, ReduceProd and the composed reductions, Hardmax, and the indexed
ops GatherElements/GatherND/ScatterND/ScatterElements (issue 11): interpreter and cpu against
onnxruntime (onnx's reference for opsets newer than it), cuda compiled with its PTX assembled."""

import numpy as np
import pytest
from onnx import helper, numpy_helper

from support.new_ops import check_model, graph_model
from support.one_node import rand

pytestmark = pytest.mark.slow  # each compiles for cpu and cuda and runs ptxas

RNG = np.random.default_rng(12)


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


@pytest.mark.parametrize("k,upper", [(0, 1), (1, 0), (-2, 1), (3, 0)])
def test_trilu(k, upper):
    x = rand(2, 4, 5)
    nodes = [helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)]
    check_model(graph_model(nodes, {"x": x}, ["y"], inits=[_init("k", np.array(k))]), {"x": x},
                cuda=k == 0)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(exclusive, reverse):
    x = rand(3, 6)
    xi = RNG.integers(-5, 5, size=(3, 6)).astype(np.int64)
    nodes = [helper.make_node("CumSum", ["x", "ax"], ["y"], exclusive=exclusive, reverse=reverse),
             helper.make_node("CumSum", ["xi", "ax0"], ["yi"], exclusive=exclusive,
                              reverse=reverse)]
    feeds = {"x": x, "xi": xi}
    inits = [_init("ax", np.array(1, np.int64)), _init("ax0", np.array(-2, np.int32))]
    check_model(graph_model(nodes, feeds, ["y", "yi"], inits=inits), feeds,
                cuda=exclusive == reverse == 0)


def test_cumprod_against_numpy():
    """CumProd is opset 26: onnx's reference is the oracle."""
    x = (RNG.uniform(0.5, 1.5, size=(2, 5))).astype(np.float32)
    nodes = [helper.make_node("CumProd", ["x", "ax"], ["y"], reverse=1)]
    want = check_model(graph_model(nodes, {"x": x}, ["y"], opset=26,
                                   inits=[_init("ax", np.array(1, np.int64))]), {"x": x})
    np.testing.assert_allclose(want["y"], np.flip(np.cumprod(np.flip(x, 1), 1), 1), rtol=1e-6)


def test_reductions_and_argmin_hardmax():
    x = rand(3, 4, 5)
    x[0, 0, :2] = x[0, 0, 2]  # ties for arg_min
    axes = _init("axes", np.array([1, -1], np.int64))
    nodes = [helper.make_node(op, ["x", "axes"], [op.lower()], keepdims=kd)
             for op, kd in [("ReduceProd", 1), ("ReduceL1", 0), ("ReduceL2", 1),
                            ("ReduceSumSquare", 0), ("ReduceLogSumExp", 0)]]
    nodes += [helper.make_node("Abs", ["x"], ["ax_abs"]),
              helper.make_node("ReduceLogSum", ["ax_abs", "axes"], ["reducelogsum"]),
              helper.make_node("ArgMin", ["x"], ["amin"], axis=2),
              helper.make_node("ArgMin", ["x"], ["amin_last"], axis=-1, keepdims=0,
                               select_last_index=1),
              helper.make_node("Hardmax", ["x"], ["hmax"], axis=1)]
    outs = [n.output[0] for n in nodes if n.output[0] != "ax_abs"]
    check_model(graph_model(nodes, {"x": x}, outs, opset=18, inits=[axes]), {"x": x}, rtol=1e-5,
                atol=1e-5)


def test_hardmax_opset11_coerces_to_2d():
    x = rand(2, 3, 4)
    nodes = [helper.make_node("Hardmax", ["x"], ["y"], axis=1)]
    check_model(graph_model(nodes, {"x": x}, ["y"], opset=11), {"x": x}, cuda=False)


def test_gathers():
    data = rand(4, 5, 6)
    ge_idx = RNG.integers(-5, 5, size=(4, 3, 6)).astype(np.int64)
    nd_idx = np.array([[1, -2], [3, 0], [0, 4]], np.int64)
    nd_b = RNG.integers(0, 5, size=(4, 2, 1)).astype(np.int64)
    nodes = [helper.make_node("GatherElements", ["data", "gi"], ["ge"], axis=1),
             helper.make_node("GatherND", ["data", "ni"], ["gn"]),
             helper.make_node("GatherND", ["data", "nb"], ["gnb"], batch_dims=1)]
    feeds = {"data": data, "gi": ge_idx, "ni": nd_idx, "nb": nd_b}
    check_model(graph_model(nodes, feeds, ["ge", "gn", "gnb"]), feeds)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatters(reduction):
    data = rand(5, 4)
    nd_idx = np.array([[1], [-1], [3]], np.int64)
    nd_upd = rand(3, 4)
    el_idx = np.array([[0, 4, 2], [3, 1, -1]], np.int64)
    el_upd = rand(2, 3)
    if reduction != "none":  # duplicates only where the order does not matter
        nd_idx[2, 0] = 1
        el_idx[1, 0] = 0
    nodes = [helper.make_node("ScatterND", ["data", "ni", "nu"], ["snd"], reduction=reduction),
             helper.make_node("ScatterElements", ["data", "ei", "eu"], ["sel"], axis=0,
                              reduction=reduction)]
    feeds = {"data": data, "ni": nd_idx, "nu": nd_upd, "ei": el_idx, "eu": el_upd}
    check_model(graph_model(nodes, feeds, ["snd", "sel"], opset=18), feeds,
                cuda=reduction in ("none", "add"))


def test_einsum():
    a, b = rand(2, 3, 4), rand(2, 4, 5)
    d = rand(4, 4)
    nodes = [helper.make_node("Einsum", ["a", "b"], ["bmm"], equation="bij,bjk->bik"),
             helper.make_node("Einsum", ["d"], ["tr"], equation="ii"),
             helper.make_node("Einsum", ["a"], ["el"], equation="...j->..."),
             helper.make_node("Einsum", ["a", "d"], ["im"], equation="bij,jk")]
    feeds = {"a": a, "b": b, "d": d}
    check_model(graph_model(nodes, feeds, ["bmm", "tr", "el", "im"]), feeds, rtol=1e-5,
                atol=1e-5)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(p):
    x = rand(1, 2, 5, 6)
    nodes = [helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 3], strides=[1, 2],
                              pads=[1, 0, 0, 1], p=p)]
    check_model(graph_model(nodes, {"x": x}, ["y"], opset=18), {"x": x}, rtol=1e-5, atol=1e-5,
                cuda=p == 3)
