"""Memory limits (issue 13): an allocation the host cannot hold is refused before it is made,
with a typed error naming the layer, never a bare MemoryError. Regression: LRN with
size=2**31 failed at its first run with MemoryError (about 1000 GiB of scratch)."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import ptxc
from ptxc.errors import CompileError, ModelError


def lrn(size):
    n = helper.make_node("LRN", ["x"], ["y"], size=size, name="lrn0")
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                   (1, 8, 4, 4))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 8, 4, 4))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_lrn_with_a_huge_window_is_a_compile_error_naming_the_layer():
    with pytest.raises(CompileError, match="more than this host's.*'lrn0'"):
        ptxc.compile(lrn(2**31 - 1), target="cpu")


def test_lrn_size_2_to_the_31_is_refused_at_import():
    with pytest.raises(ModelError, match="size=2147483648"):
        ptxc.import_onnx(lrn(2**31))


def test_a_small_lrn_still_compiles_and_matches_the_interpreter():
    m = lrn(3)
    x = np.random.default_rng(0).standard_normal((1, 8, 4, 4)).astype(np.float32)
    got = ptxc.compile(m, target="cpu").run({"x": x})["y"]
    np.testing.assert_allclose(got, ptxc.interpret(ptxc.import_onnx(m), {"x": x})["y"],
                               rtol=1e-5, atol=1e-6)
