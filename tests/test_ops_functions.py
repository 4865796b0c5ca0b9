"""ONNX ops imported through their ONNX function body (ptxc/frontend/convert/functions.py):
NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss, Swish, SwiGLU,
CenterCropPad, the window functions; SpaceToDepth and DepthToSpace (composed). Interpreter and cpu against onnxruntime (onnx's reference
for opsets newer than it), cuda compiled with its PTX assembled by ptxas."""

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import ptxc
from support.new_ops import check_model, graph_model
from support.one_node import rand

RNG = np.random.default_rng(21)


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


@pytest.mark.slow
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_weights_ignore_index(reduction):
    x = rand(3, 5, 2)
    t = RNG.integers(0, 5, size=(3, 2)).astype(np.int64)
    t[1, 0] = 2  # the ignored class
    w = RNG.uniform(0.5, 1.5, size=5).astype(np.float32)
    nodes = [helper.make_node("NegativeLogLikelihoodLoss", ["x", "t", "w"], ["loss"],
                              reduction=reduction, ignore_index=2)]
    feeds = {"x": x, "t": t}
    want = check_model(graph_model(nodes, feeds, ["loss"], opset=22, inits=[_init("w", w)]),
                       feeds, cuda=reduction == "mean")
    # an independent numpy check of the definition beside onnxruntime's
    g = -np.take_along_axis(x, t[:, None, :], 1)[:, 0] * w[t] * (t != 2)
    ref = {"none": g, "sum": g.sum(), "mean": g.sum() / (w[t] * (t != 2)).sum()}[reduction]
    np.testing.assert_allclose(want["loss"], ref, rtol=1e-5)


@pytest.mark.slow
def test_softmax_cross_entropy_with_log_prob():
    x = rand(4, 6)
    t = RNG.integers(0, 6, size=(4,)).astype(np.int64)
    nodes = [helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["loss", "logp"])]
    feeds = {"x": x, "t": t}
    check_model(graph_model(nodes, feeds, ["loss", "logp"], opset=13), feeds, rtol=1e-5)


@pytest.mark.slow
def test_swish_swiglu_space_depth():
    x = rand(1, 8, 4, 6)
    nodes = [helper.make_node("Swish", ["x"], ["sw"], alpha=0.7),
             helper.make_node("SpaceToDepth", ["x"], ["s2d"], blocksize=2),
             helper.make_node("DepthToSpace", ["s2d"], ["d2s"], blocksize=2, mode="CRD"),
             helper.make_node("DepthToSpace", ["x"], ["dcr"], blocksize=2, mode="DCR")]
    check_model(graph_model(nodes, {"x": x}, ["sw", "s2d", "d2s", "dcr"], opset=24), {"x": x})
    # mode CRD of SpaceToDepth is opset 28 (onnx's reference is the oracle there)
    nodes = [helper.make_node("SpaceToDepth", ["x"], ["crd"], blocksize=2, mode="CRD")]
    check_model(graph_model(nodes, {"x": x}, ["crd"], opset=28), {"x": x}, cuda=False)


@pytest.mark.slow
def test_center_crop_pad_and_window():
    x = rand(5, 3, 2)
    nodes = [helper.make_node("CenterCropPad", ["x", "shape"], ["y"], axes=[0, 1]),
             helper.make_node("HannWindow", ["n"], ["hann"], periodic=0)]
    inits = [_init("shape", np.array([3, 6], np.int64)), _init("n", np.array(7, np.int64))]
    check_model(graph_model(nodes, {"x": x}, ["y", "hann"], opset=18, inits=inits), {"x": x},
                cuda=False)


def test_body_nodes_are_named_after_the_node():
    """The body's ops carry the expanded node's name as a prefix (what --explain and errors
    show), and the op type of the body, not the function's, reaches the graph."""
    x = rand(2, 3)
    m = graph_model([helper.make_node("Swish", ["x"], ["y"], name="act")], {"x": x}, ["y"],
                    opset=24)
    text = ptxc.print_ir(ptxc.import_onnx(m))
    assert "graph.sigmoid" in text and '"act/' in text


@pytest.mark.slow
def test_causal_conv_with_state():
    """CausalConvWithState (opset 27, a context-dependent body): onnx's reference is the
    oracle; an independent numpy check of the output beside it (depthwise causal conv over
    past_state ++ input, silu activation)."""
    x = rand(2, 4, 8)
    w = rand(4, 1, 3)
    bias = rand(4)
    past = rand(2, 4, 2)
    nodes = [helper.make_node("CausalConvWithState", ["x", "w", "b", "past"], ["y", "state"],
                              activation="silu")]
    feeds = {"x": x, "w": w, "b": bias, "past": past}
    want = check_model(graph_model(nodes, feeds, ["y", "state"], opset=27), feeds, rtol=1e-5,
                       cuda=False)
    full = np.concatenate([past, x], axis=2)
    conv = np.stack([sum(full[:, :, t + j] * w[:, 0, j] for j in range(3))
                     for t in range(8)], axis=2) + bias[:, None]
    np.testing.assert_allclose(want["y"], conv / (1 + np.exp(-conv)), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(want["state"], full[:, :, -2:])
