"""Exported attention chains with random shapes, scale forms and masks: recognize-patterns fuses
them into one ``graph.attention`` and every stage after it (recognize, lower-graph-to-tensor,
lower-tensor-to-loop) is interpreted before and after under check-numerics; the CPU JIT then
matches the unfused graph's interpretation."""

import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

import ptxc
import ptxc.lower.tensor_to_loop  # noqa: F401  (registers the pass)
from ptxc.driver.cpu import CpuProgram
from ptxc.ir import interpret
from ptxc.rewrite import PassManager

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from support.new_ops import graph_model  # noqa: E402

pytestmark = pytest.mark.slow
SETTINGS = settings(max_examples=10, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(b=st.integers(1, 2), h=st.integers(1, 3), s=st.integers(1, 5), t=st.integers(1, 5),
       d=st.integers(1, 4), form=st.sampled_from(["none", "div", "mul", "mul_q"]),
       mask=st.sampled_from(["none", "const", "input"]))
def test_attention_chain(b, h, s, t, d, form, mask):
    rng = np.random.default_rng(b * 100 + h * 10 + s + t + d)
    feeds = {"q": rng.standard_normal((b, h, s, d)).astype(np.float32),
             "kt": rng.standard_normal((b, h, d, t)).astype(np.float32),
             "v": rng.standard_normal((b, h, t, d)).astype(np.float32)}
    inits = [numpy_helper.from_array(np.array(1.7, np.float32), "c")]
    nodes, q, sc = [], "q", "s"
    if form == "mul_q":
        nodes.append(helper.make_node("Mul", ["q", "c"], ["qs"]))
        q = "qs"
    nodes.append(helper.make_node("MatMul", [q, "kt"], ["s"]))
    if form in ("div", "mul"):
        nodes.append(helper.make_node("Div" if form == "div" else "Mul", ["s", "c"], ["sc"]))
        sc = "sc"
    if mask != "none":
        m = np.where(rng.random((b, 1, 1, t)) < 0.3, -1e4, 0).astype(np.float32)
        if mask == "const":
            inits.append(numpy_helper.from_array(m, "m"))
        else:
            feeds["m"] = m
        nodes.append(helper.make_node("Add", [sc, "m"], ["a"]))
        sc = "a"
    nodes += [helper.make_node("Softmax", [sc], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["y"])]
    model = graph_model(nodes, feeds, ["y"], opset=17, inits=inits)
    module = ptxc.import_onnx(model)
    want = interpret(module, feeds)["y"]
    PassManager("fold-constants,recognize-patterns", check_numerics=True).run(module)
    assert sum(op.name == "graph.attention" for op in module.walk()) == 1
    PassManager("lower-graph-to-tensor,lower-tensor-to-loop", check_numerics=True).run(module)
    got = CpuProgram.from_module(module, threads=1, min_parallel_work=0)(feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
