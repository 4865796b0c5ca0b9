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
