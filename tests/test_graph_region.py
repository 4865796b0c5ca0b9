"""graph.elementwise: a scalar body over broadcast operands; arith/math semantics; round trip."""

import numpy as np
import pytest

import ptxc
from ptxc.errors import VerifyError

TEXT = '''"builtin.module"() ({
  "func.func"() ({
  ^bb0(%x: tensor<2x3xf32>, %b: tensor<3xf32>):
    %y = "graph.elementwise"(%x, %b) ({
    ^bb0(%a: f32, %c: f32):
      %s = "arith.add"(%a, %c) : (f32, f32) -> f32
      %z = "arith.constant"() {type = f32, value = 0.0} : () -> f32
      %r = "arith.max"(%s, %z) : (f32, f32) -> f32
      %e = "math.tanh"(%r) : (f32) -> f32
      "graph.yield"(%e) : (f32) -> ()
    }) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    "func.return"(%y) : (tensor<2x3xf32>) -> ()
  }) {arg_names = ["x", "b"], function_type = (tensor<2x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
}) : () -> ()
'''


def test_elementwise_body_runs_vectorized_and_round_trips():
    m = ptxc.parse_ir(TEXT)
    ptxc.ir.verify(m)
    assert ptxc.print_ir(m) == TEXT
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    b = np.array([0.5, -1.0, 2.0], np.float32)
    y = ptxc.interpret(m, {"x": x, "b": b})["y"]
    np.testing.assert_allclose(y, np.tanh(np.maximum(x + b, 0)), rtol=1e-6)


def test_elementwise_verifier_checks_body_types():
    bad = TEXT.replace('"graph.yield"(%e) : (f32) -> ()',
                       '%k = "arith.cmp"(%e, %z) {predicate = "gt"} : (f32, f32) -> i1\n'
                       '      "graph.yield"(%k) : (i1) -> ()')
    with pytest.raises(VerifyError, match="body yields i1"):
        ptxc.ir.verify(ptxc.parse_ir(bad))


@pytest.mark.parametrize("a,b,expected", [(7, 2, 3), (-7, 2, -3), (7, -2, -3), (-7, -2, 3)])
def test_arith_integer_division_truncates(a, b, expected):
    from ptxc.dialects.arith import _int_div
    assert int(_int_div(np.int64(a), np.int64(b))) == expected


FUSED = '''"builtin.module"() ({
  "func.func"() ({
  ^bb0(%x: tensor<1x2x5x5xf32>, %w: tensor<3x2x3x3xf32>, %b: tensor<3xf32>, %r: tensor<1x3x5x5xf32>):
    %y = "graph.fused_conv"(%x, %w, %b, %r) ({
    ^bb0(%acc: f32, %res: f32):
      %s = "arith.add"(%acc, %res) : (f32, f32) -> f32
      %z = "arith.constant"() {type = f32, value = 0.0} : () -> f32
      %o = "arith.max"(%s, %z) : (f32, f32) -> f32
      "graph.yield"(%o) : (f32) -> ()
    }) {dilations = [1, 1], group = 1, kernel_shape = [3, 3], operand_segments = [1, 1, 1, 1], pads = [1, 1, 1, 1], strides = [1, 1]} : (tensor<1x2x5x5xf32>, tensor<3x2x3x3xf32>, tensor<3xf32>, tensor<1x3x5x5xf32>) -> tensor<1x3x5x5xf32>
    %m = "graph.fused_matmul"(%r, %r) ({
    ^bb0(%acc_1: f32):
      %t = "math.tanh"(%acc_1) : (f32) -> f32
      "graph.yield"(%t) : (f32) -> ()
    }) : (tensor<1x3x5x5xf32>, tensor<1x3x5x5xf32>) -> tensor<1x3x5x5xf32>
    "func.return"(%y, %m) : (tensor<1x3x5x5xf32>, tensor<1x3x5x5xf32>) -> ()
  }) {arg_names = ["x", "w", "b", "r"], function_type = (tensor<1x2x5x5xf32>, tensor<3x2x3x3xf32>, tensor<3xf32>, tensor<1x3x5x5xf32>) -> (tensor<1x3x5x5xf32>, tensor<1x3x5x5xf32>), result_names = ["y", "m"], sym_name = "main"} : () -> ()
}) : () -> ()
'''


def test_fused_conv_is_base_then_epilogue():
    from ptxc.dialects.graph.nn import conv_nd
    m = ptxc.parse_ir(FUSED)
    ptxc.ir.verify(m)
    assert ptxc.print_ir(m) == FUSED
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((1, 2, 5, 5)), "w": rng.standard_normal((3, 2, 3, 3)),
             "b": rng.standard_normal(3), "r": rng.standard_normal((1, 3, 5, 5))}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    out = ptxc.interpret(m, feeds)
    conv = conv_nd(feeds["x"], feeds["w"], feeds["b"], (1, 1), (1, 1, 1, 1), (1, 1), 1)
    np.testing.assert_allclose(out["y"], np.maximum(conv + feeds["r"], 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["m"], np.tanh(feeds["r"] @ feeds["r"]), rtol=1e-5, atol=1e-6)


def test_fused_conv_checks_base_and_epilogue():
    with pytest.raises(VerifyError, match="kernel_shape"):
        ptxc.ir.verify(ptxc.parse_ir(FUSED.replace("kernel_shape = [3, 3]", "kernel_shape = [2, 2]")))
    m = ptxc.parse_ir(FUSED)
    fused = [op for op in m.walk() if op.name == "graph.fused_conv"][0]
    fused.regions[0].blocks[0].args[1].type = ptxc.ir.F16
    with pytest.raises(VerifyError, match="f16"):
        ptxc.ir.verify(m)
