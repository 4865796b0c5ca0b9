"""Scalar forms: each elementwise graph op's arith/math body reproduces the op's own reference
semantics within fp32 rounding on random and edge values; inline_block; BodyBuilder."""

import numpy as np
import pytest

import ptxc
from ptxc.dialects.func import func_body, get_func, new_func, new_module, set_func_results
from ptxc.dialects.graph.scalar_forms import (BodyBuilder, inline_block, scalar_form,
                                              scalar_form_ops)
from ptxc.ir import Builder, DenseElements, interpret, verify
from ptxc.ir.core import Block, Region
from ptxc.ir.spec import make_op
from ptxc.ir.types import F32, scalar_from_numpy, tensor

EDGE = np.array([0.0, -0.0, 1.0, -1.0, 1e-8, -1e-8, 1e-4, -1e-4, 3e-3, -3e-3, 0.5, -0.5, 2.5, -2.5,
                 3.0, -3.0, 6.0, -6.0, 15.0, -15.0, 20.0, -20.0, 88.0, -88.0, 100.0, -100.0,
                 1e30, -1e30, 1.5e-40, np.inf, -np.inf, np.nan], np.float32)


def floats(rng, dtype=np.float32, n=64):
    """Edge values, then normal and tiny random values: one flat array."""
    r = np.concatenate([rng.standard_normal(n) * 3, rng.uniform(-1e-3, 1e-3, n // 2)])
    with np.errstate(over="ignore"):  # 1e30 is inf in float16
        return np.concatenate([EDGE, r]).astype(dtype)


def single_op(name, arrays, attributes=None, constants=None, operands=None):
    """A module ``main(args...) -> name(operands)``; ``constants`` maps operand index -> array
    fed as a graph.constant; ``operands`` (for segment ops) groups the operand list."""
    constants = constants or {}
    m = new_module()
    types = [tensor(a.shape, scalar_from_numpy(a.dtype)) for a in arrays]
    f = new_func(m, "main", types, [f"a{i}" for i in range(len(arrays))])
    body = func_body(f)
    b = Builder.at_end(body)
    values = list(body.args)
    for i, c in sorted(constants.items()):
        values.insert(i, b.create("graph.constant", [], {"value": DenseElements(c)}).result)
    if operands is not None:
        values = operands(values)
    op = b.create(name, values, attributes, loc="op")
    set_func_results(f, [op.result], ["y"])
    verify(m)
    return m, {f"a{i}": a for i, a in enumerate(arrays)}


def fuse_to_elementwise(m):
    """Replace the single graph op of ``m`` by a graph.elementwise built from its scalar form."""
    body = func_body(get_func(m))
    op = next(o for o in body.ops if o.loc == "op")
    form = scalar_form(op)
    assert form is not None, op.name
    block = Block()
    bb = BodyBuilder(block)
    bb.finish(bb.apply(op))
    new = make_op("graph.elementwise", bb.inputs, result_types=[op.result.type],
                  regions=[Region([block])], loc="fused")
    body.insert_before(op, new)
    op.result.replace_all_uses_with(new.result)
    op.erase()
    verify(m)
    return m


def assert_close(got, want, dtype):
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert (np.isnan(g) == np.isnan(w)).all(), (got, want)
    ok = ~np.isnan(w)
    assert (np.isinf(g[ok]) == np.isinf(w[ok])).all()
    eps = float(np.finfo(dtype).eps)
    np.testing.assert_allclose(g[ok], w[ok], rtol=4 * eps, atol=float(np.finfo(dtype).tiny))


def check(name, arrays, attributes=None, constants=None, operands=None):
    m, feeds = single_op(name, arrays, attributes, constants, operands)
    want = interpret(m, feeds)["y"]
    got = interpret(fuse_to_elementwise(m), feeds)["y"]
    assert_close(got, want, want.dtype if want.dtype.kind == "f" else np.float32)
    return m


UNARY = [("relu", {}), ("leaky_relu", {"alpha": 0.1}), ("sigmoid", {}), ("tanh", {}),
         ("elu", {"alpha": 0.7}), ("selu", {}), ("hard_sigmoid", {}),
         ("hard_sigmoid", {"alpha": 0.3, "beta": 0.4}), ("hard_swish", {}), ("softplus", {}),
         ("gelu", {}), ("gelu", {"approximate": "tanh"}), ("erf", {}), ("exp", {}), ("log", {}),
         ("sqrt", {}), ("abs", {}), ("neg", {}), ("reciprocal", {}), ("floor", {}), ("ceil", {}),
         ("identity", {}), ("dropout", {})]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("name,attributes", UNARY, ids=[f"{n}{a}" for n, a in UNARY])
def test_unary_forms_match_the_reference(name, attributes, dtype):
    rng = np.random.default_rng(0)
    check(f"graph.{name}", [floats(rng, dtype)], attributes)


@pytest.mark.parametrize("name", ["relu", "abs", "neg"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.uint8])
def test_integer_unary_forms(name, dtype):
    if name == "neg" and np.dtype(dtype).kind == "u":
        pytest.skip("neg takes signed types")
    info = np.iinfo(dtype)
    x = np.array([0, 1, -1, 7, -7, info.min, info.max], np.int64)
    x = np.clip(x, info.min, info.max).astype(dtype)
    check(f"graph.{name}", [x])


BINARY = ["add", "sub", "mul", "div", "pow", "max", "min", "sum", "mean"]


@pytest.mark.parametrize("name", BINARY)
def test_binary_forms_with_broadcasting(name):
    rng = np.random.default_rng(1)
    a = floats(rng).reshape(-1, 1)[:64]
    b = np.concatenate([EDGE[:8], rng.standard_normal(8).astype(np.float32)])
    check(f"graph.{name}", [a, b])


@pytest.mark.parametrize("name", ["max", "min", "sum", "mean"])
def test_variadic_forms_fold_pairwise(name):
    rng = np.random.default_rng(2)
    xs = [floats(rng)[:48].reshape(3, 16), rng.standard_normal(16).astype(np.float32),
          rng.standard_normal((3, 1)).astype(np.float32)]
    check(f"graph.{name}", xs)
    check(f"graph.{name}", xs[:1])


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "max", "min"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_integer_binary_forms(name, dtype):
    a = np.array([7, -7, 0, 5, -3, 100, 1, 2, 0], np.int64)
    b = np.array([2, 2, 3, -2, -2, 0, 1, 0, 0], np.int64)
    if np.dtype(dtype).kind == "u":
        a, b = np.abs(a), np.abs(b)
    check(f"graph.{name}", [a.astype(dtype), b.astype(dtype)])


def test_integer_division_truncates_and_by_zero_is_zero():
    a = np.array([7, -7, 7, -7, 5], np.int32)
    b = np.array([2, 2, -2, -2, 0], np.int32)
    m = check("graph.div", [a, b])
    np.testing.assert_array_equal(interpret(m, {"a0": a, "a1": b})["y"], [3, -3, -3, 3, 0])


def test_pow_has_a_form_only_for_one_float_type():
    rng = np.random.default_rng(3)
    check("graph.pow", [np.abs(floats(rng)), floats(rng)])
    m, _ = single_op("graph.pow", [np.ones(3, np.float32), np.ones(3, np.int64)])
    assert scalar_form(next(o for o in func_body(get_func(m)).ops if o.loc == "op")) is None
    m, _ = single_op("graph.pow", [np.ones(3, np.int32), np.ones(3, np.int32)])
    assert scalar_form(next(o for o in func_body(get_func(m)).ops if o.loc == "op")) is None


def test_prelu_slope_is_a_broadcast_operand():
    rng = np.random.default_rng(4)
    x = floats(rng)[:96].reshape(2, 3, 16)
    check("graph.prelu", [x, np.array([0.1, -0.5, 2.0], np.float32).reshape(3, 1)])


@pytest.mark.parametrize("bounds", ["both", "min", "max", "crossed"])
def test_clip_bounds_from_constants_or_operands(bounds):
    rng = np.random.default_rng(5)
    x = floats(rng)
    lo, hi = np.array(-1.5, np.float32), np.array(6.0, np.float32)
    if bounds == "crossed":
        lo, hi = hi, lo
    segs = {"both": lambda v: [v[0], v[1], v[2]], "crossed": lambda v: [v[0], v[1], v[2]],
            "min": lambda v: [v[0], v[1], None], "max": lambda v: [v[0], None, v[1]]}[bounds]
    consts = {"min": [lo], "max": [hi]}.get(bounds, [lo, hi])
    # bounds as one-element constants: they become arith.constant in the body
    m = check("graph.clip", [x], constants={i + 1: c for i, c in enumerate(consts)},
              operands=segs)
    fused = next(o for o in func_body(get_func(m)).ops if o.name == "graph.elementwise")
    assert len(fused.operands) == 1
    assert sum(o.name == "arith.constant" for o in fused.regions[0].blocks[0].ops) == len(consts)
    # bounds as runtime operands: they become body arguments
    check("graph.clip", [x] + [c.reshape(1) for c in consts], operands=segs)


def test_where_compare_not_cast():
    rng = np.random.default_rng(6)
    a, b = floats(rng), floats(rng)[::-1].copy()
    for name in ("equal", "less", "greater"):
        check(f"graph.{name}", [a, b])
    check("graph.where", [a > 0, a, b[:1]])
    check("graph.not", [a > 0])
    for to in ("i32", "i64", "f16", "i1", "f32"):
        x = np.where(np.isfinite(a) & (np.abs(a) < 1e9), a, 0).astype(np.float32)
        check("graph.cast", [x], {"to": ptxc.ir.types.ScalarType(to)})
    check("graph.cast", [np.array([0, 1, -3, 200], np.int32)], {"to": F32})
    check("graph.cast", [a > 0], {"to": F32})


ELEMENTWISE = '''"builtin.module"() ({
  "func.func"() ({
  ^bb0(%x: tensor<2x3xf32>, %b: tensor<3xf32>):
    %y = "graph.elementwise"(%x, %b) ({
    ^bb0(%a: f32, %c: f32):
      %s = "arith.add"(%a, %c) : (f32, f32) -> f32
      %z = "arith.constant"() {type = f32, value = 0.0} : () -> f32
      %r = "arith.max"(%s, %z) : (f32, f32) -> f32
      "graph.yield"(%r) : (f32) -> ()
    }) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32> loc("op")
    "func.return"(%y) : (tensor<2x3xf32>) -> ()
  }) {arg_names = ["x", "b"], function_type = (tensor<2x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
}) : () -> ()
'''


def test_elementwise_form_inlines_its_body():
    m = ptxc.parse_ir(ELEMENTWISE)
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32),
             "b": rng.standard_normal(3).astype(np.float32)}
    want = interpret(m, feeds)["y"]
    fuse_to_elementwise(m)
    body = [o.name for o in m.walk() if o.parent_op is not None and
            o.parent_op.name == "graph.elementwise"]
    assert body == ["arith.add", "arith.constant", "arith.max", "graph.yield"]
    np.testing.assert_array_equal(interpret(m, feeds)["y"], want)


def test_inline_block_maps_arguments_and_returns_the_yielded_values():
    m = ptxc.parse_ir(ELEMENTWISE)
    src = next(o for o in m.walk() if o.name == "graph.elementwise").regions[0].blocks[0]
    dst = Block([F32, F32])
    b = Builder.at_end(dst)
    (y,) = inline_block(src, b, [dst.args[1], dst.args[0]])
    ops = list(dst.ops)
    assert [o.name for o in ops] == ["arith.add", "arith.constant", "arith.max"]
    assert ops[0].operands == [dst.args[1], dst.args[0]]
    assert y is ops[2].result
    assert len(list(src.ops)) == 4  # the source is untouched


def test_forms_exist_for_every_listed_op():
    want = {"relu", "leaky_relu", "prelu", "sigmoid", "tanh", "clip", "elu", "selu",
            "hard_sigmoid", "hard_swish", "softplus", "gelu", "erf", "exp", "log", "sqrt", "abs",
            "neg", "reciprocal", "floor", "ceil", "add", "sub", "mul", "div", "pow", "max", "min",
            "sum", "mean", "where", "equal", "less", "greater", "not", "cast", "elementwise"}
    assert {f"graph.{n}" for n in want} <= set(scalar_form_ops())
    m, _ = single_op("graph.softmax", [np.ones((2, 3), np.float32)], {"axis": 1})
    assert scalar_form(next(o for o in func_body(get_func(m)).ops if o.loc == "op")) is None


def test_body_builder_dedups_inputs_and_inlines_scalar_constants():
    m, feeds = single_op("graph.add", [np.ones((2, 3), np.float32)],
                         constants={1: np.array([[2.5]], np.float32)})
    body = func_body(get_func(m))
    add = next(o for o in body.ops if o.loc == "op")
    block = Block()
    bb = BodyBuilder(block)
    s = bb.apply(add)
    t = bb.apply(add, [s, bb.scalar(add.operands[0])])
    bb.finish(t)
    assert bb.inputs == [body.args[0]]
    assert [o.name for o in block.ops] == ["arith.constant", "arith.add", "arith.add",
                                           "graph.yield"]
    assert list(block.ops)[0].attributes["value"] == 2.5
