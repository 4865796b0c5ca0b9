"""Issue 11's ops with random shapes and attributes through every lowering under check-numerics
(the module interpreted before and after each stage on the same inputs: lower-graph-to-tensor,
generalize, fuse, lower-tensor-to-loop), then JIT-compiled for the CPU and compared with the
graph interpreter."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

import sys, os  # noqa: E401
sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from support.new_ops import check_lowering, graph_model  # noqa: E402

pytestmark = pytest.mark.slow
SETTINGS = settings(max_examples=8, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _check(model, feeds):
    check_lowering(model, feeds)


shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple)


@SETTINGS
@given(shape=shapes, data=st.data(), exclusive=st.integers(0, 1), reverse=st.integers(0, 1),
       prod=st.booleans())
def test_cumulative(shape, data, exclusive, reverse, prod):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = np.random.default_rng(len(shape)).uniform(0.5, 1.5, shape).astype(np.float32)
    op = "CumProd" if prod else "CumSum"
    ax = numpy_helper.from_array(np.array(axis, np.int64), "ax")
    m = graph_model([helper.make_node(op, ["x", "ax"], ["y"], exclusive=exclusive,
                                      reverse=reverse)], {"x": x}, ["y"],
                    opset=26 if prod else 21, inits=[ax])
    _check(m, {"x": x})


@SETTINGS
@given(shape=st.lists(st.integers(1, 5), min_size=2, max_size=3).map(tuple),
       k=st.integers(-4, 4), upper=st.integers(0, 1))
def test_trilu(shape, k, upper):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    kk = numpy_helper.from_array(np.array(k, np.int64), "k")
    _check(graph_model([helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)], {"x": x},
                       ["y"], inits=[kk]), {"x": x})


@SETTINGS
@given(shape=shapes, data=st.data())
def test_gather_elements_and_topk(shape, data):
    r = len(shape)
    axis = data.draw(st.integers(0, r - 1))
    ishape = tuple(data.draw(st.integers(1, d)) for d in shape)
    rng = np.random.default_rng(sum(shape))
    x = rng.permutation(int(np.prod(shape))).reshape(shape).astype(np.float32)
    idx = rng.integers(-shape[axis], shape[axis], size=ishape).astype(np.int64)
    k = data.draw(st.integers(0, shape[axis]))
    kk = numpy_helper.from_array(np.array([k], np.int64), "k")
    nodes = [helper.make_node("GatherElements", ["x", "i"], ["g"], axis=axis),
             helper.make_node("TopK", ["x", "k"], ["v", "vi"], axis=axis,
                              largest=data.draw(st.integers(0, 1)))]
    # indices are constants: check-numerics draws its own random values for graph inputs
    inits = [kk, numpy_helper.from_array(idx, "i")]
    _check(graph_model(nodes, {"x": x}, ["g", "v", "vi"], inits=inits), {"x": x})


@SETTINGS
@given(shape=shapes, data=st.data(), reduction=st.sampled_from(["none", "add", "max"]))
def test_scatter_nd_and_elements(shape, data, reduction):
    r = len(shape)
    q = data.draw(st.integers(1, r))
    n_upd = data.draw(st.integers(1, 3))
    rng = np.random.default_rng(r * 7 + q)
    x = rng.standard_normal(shape).astype(np.float32)
    idx = np.stack([rng.integers(-d, d, size=n_upd) for d in shape[:q]], -1).astype(np.int64)
    upd = rng.standard_normal((n_upd,) + shape[q:]).astype(np.float32)
    axis = data.draw(st.integers(0, r - 1))
    eshape = tuple(data.draw(st.integers(1, d)) for d in shape)
    eidx = rng.integers(-shape[axis], shape[axis], size=eshape).astype(np.int64)
    eupd = rng.standard_normal(eshape).astype(np.float32)
    nodes = [helper.make_node("ScatterND", ["x", "i", "u"], ["s"], reduction=reduction),
             helper.make_node("ScatterElements", ["x", "ei", "eu"], ["se"], axis=axis,
                              reduction=reduction)]
    feeds = {"x": x, "u": upd, "eu": eupd}
    inits = [numpy_helper.from_array(idx, "i"), numpy_helper.from_array(eidx, "ei")]
    _check(graph_model(nodes, feeds, ["s", "se"], opset=18, inits=inits), feeds)


@SETTINGS
@given(shape=shapes, fmod=st.integers(0, 1), integer=st.booleans())
def test_mod_and_shift(shape, fmod, integer):
    rng = np.random.default_rng(len(shape) + fmod)
    if integer:
        a = rng.integers(-40, 40, size=shape).astype(np.int32)
        b = rng.integers(-6, 7, size=shape[-1:]).astype(np.int32)  # zeros included
    else:
        a = rng.uniform(-9, 9, shape).astype(np.float32)
        b = (rng.uniform(0.5, 3, shape[-1:]) * rng.choice([-1, 1])).astype(np.float32)
        fmod = 1
    _check(graph_model([helper.make_node("Mod", ["a", "b"], ["m"], fmod=fmod)],
                       {"a": a, "b": b}, ["m"]), {"a": a, "b": b})
