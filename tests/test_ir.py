"""The IR core: types, use-lists, the op list, specs, verifier, printer/parser and interpreter."""

import numpy as np
import pytest

import ptxc
from ptxc.dialects.func import func_body, get_func, new_func, new_module, set_func_results
from ptxc.errors import BindingError, ParseError, VerifyError
from ptxc.ir import Builder, DenseElements, Operation, parse_ir, print_ir, tensor, verify
from ptxc.ir.attributes import INLINE_LIMIT
from ptxc.ir.spec import make_op


def small_module(n=4):
    m = new_module()
    f = new_func(m, "main", [tensor((2, n))], ["x"])
    b = Builder.at_end(func_body(f))
    x = func_body(f).args[0]
    w = b.create("graph.constant", [], {"value": np.arange(n, dtype=np.float32)},
                 result_names=["w"]).result
    s = b.create("graph.add", [x, w], loc="add0").result
    y = b.create("graph.relu", [s], loc="relu0").result
    set_func_results(f, [y], ["y"])
    return m


def test_types_print():
    assert str(tensor((1, 3, 224, 224))) == "tensor<1x3x224x224xf32>"
    assert str(tensor((), "i64")) == "tensor<i64>"
    assert tensor((2, 3)).size == 6 and tensor((2, 3), "f16").nbytes == 12


def test_use_lists_follow_mutation():
    m = small_module()
    body = func_body(get_func(m))
    x = body.args[0]
    add = [op for op in body.ops if op.name == "graph.add"][0]
    relu = add.result.users[0]
    assert len(x.uses) == 1 and x.uses[0].op is add
    add.result.replace_all_uses_with(x)
    assert not add.result.uses and relu.operands[0] is x and len(x.uses) == 2
    add.erase()
    assert len(x.uses) == 1 and add.block is None
    verify(m)


def test_erase_refuses_used_op():
    m = small_module()
    add = [op for op in func_body(get_func(m)).ops if op.name == "graph.add"][0]
    with pytest.raises(ValueError, match="used by graph.relu"):
        add.erase()


def test_block_linked_list_insert_and_order():
    m = small_module()
    body = func_body(get_func(m))
    relu = [op for op in body.ops if op.name == "graph.relu"][0]
    b = Builder.before_op(relu)
    extra = b.create("graph.relu", [relu.operands[0]])
    names = [op.name for op in body.ops]
    assert names == ["graph.constant", "graph.add", "graph.relu", "graph.relu", "func.return"]
    assert extra.next_op is relu and relu.prev_op is extra and len(body) == 5


def test_verifier_catches_wrong_result_type():
    m = small_module()
    relu = [op for op in func_body(get_func(m)).ops if op.name == "graph.relu"][0]
    relu.results[0].type = tensor((2, 5))
    with pytest.raises(VerifyError, match=r'"graph.relu" \(node \'relu0\'\).*inferred'):
        verify(m)


def test_verifier_catches_dominance():
    m = small_module()
    body = func_body(get_func(m))
    add, relu = [op for op in body.ops if op.name in ("graph.add", "graph.relu")]
    relu.detach()
    body.insert_before(add, relu)
    with pytest.raises(VerifyError, match="does not dominate"):
        verify(m)


def test_verifier_catches_a_use_missing_from_the_use_list():
    m = small_module()
    body = func_body(get_func(m))
    add = [op for op in body.ops if op.name == "graph.add"][0]
    verify(m)
    v = add.operands[1]
    v.uses[:] = [u for u in v.uses if not (u.op is add and u.index == 1)]
    with pytest.raises(VerifyError, match="operand #1 is missing from its value's use-list"):
        verify(m)


def test_verifier_catches_bad_attribute_and_unknown_op():
    m = small_module()
    body = func_body(get_func(m))
    add = [op for op in body.ops if op.name == "graph.add"][0]
    add.attributes["bogus"] = 1
    with pytest.raises(VerifyError, match="unknown attribute 'bogus'"):
        verify(m)
    del add.attributes["bogus"]
    add.name = "graph.nonexistent"
    with pytest.raises(VerifyError, match="unknown op"):
        verify(m)


def test_make_op_infers_and_checks_broadcast():
    m = small_module()
    x = func_body(get_func(m)).args[0]
    c = make_op("graph.constant", [], {"value": np.zeros((3,), np.float32)}).result
    with pytest.raises(VerifyError, match="do not broadcast"):
        make_op("graph.add", [x, c])


def test_print_parse_print_identity_with_blobs():
    m = small_module(n=INLINE_LIMIT + 1)
    text = print_ir(m)
    assert "dense_resource<w>" in text and "{-#" in text
    assert print_ir(parse_ir(text)) == text
    elided = print_ir(m, elide_constants=True)
    assert "__elided__" in elided and "{-#" not in elided
    with pytest.raises(ParseError, match="elided"):
        parse_ir(elided)


def test_inline_constants_round_trip_exactly():
    vals = np.array([0.1, -1e-30, 3.4e38, np.inf, -np.inf, 1 / 3], np.float32)
    m = new_module()
    f = new_func(m, "main", [], [])
    c = Builder.at_end(func_body(f)).create("graph.constant", [], {"value": vals}).result
    set_func_results(f, [c], ["c"])
    text = print_ir(m)
    assert "dense<[" in text
    back = parse_ir(text)
    got = ptxc.interpret(back, {})["c"]
    assert got.tobytes() == vals.tobytes()
    assert print_ir(back) == text


def test_dense_equality_by_contents():
    a = DenseElements(np.arange(4, dtype=np.float32))
    b = DenseElements(np.arange(4, dtype=np.float32))
    assert a == b and hash(a) == hash(b)
    assert a != DenseElements(np.arange(4, dtype=np.int64))


@pytest.mark.parametrize("text,msg", [
    ('"builtin.module"() ({\n  %y = "graph.relu"(%x) : (tensor<2xf32>) -> tensor<2xf32>\n}) : () -> ()',
     "used before it is defined"),
    ('"builtin.module"() ({ }) : (', "expected a type"),
    ('"builtin.module"() ({ }) : () -> () trailing', "unexpected text"),
    ('"x.y"() {a = dense_resource<nope> : tensor<100xf32>} : () -> ()', "not defined"),
])
def test_parse_errors_have_position(text, msg):
    with pytest.raises(ParseError, match=msg) as e:
        parse_ir(text)
    assert "<ir>:" in str(e.value)


def test_interpret_checks_bindings():
    m = small_module()
    x = np.ones((2, 4), np.float32)
    out = ptxc.interpret(m, {"x": x})["y"]
    np.testing.assert_array_equal(out, np.maximum(x + np.arange(4), 0))
    with pytest.raises(BindingError, match="unknown input.*'z'.*missing input.*'x'"):
        ptxc.interpret(m, {"z": x})
    with pytest.raises(BindingError, match="shape \\[2, 5\\]"):
        ptxc.interpret(m, {"x": np.ones((2, 5), np.float32)})
    with pytest.raises(BindingError, match="dtype float64"):
        ptxc.interpret(m, {"x": np.ones((2, 4))})


def test_clone_is_deep_and_independent():
    m = small_module()
    c = m.clone()
    assert print_ir(c) == print_ir(m)
    body = func_body(get_func(c))
    relu = [op for op in body.ops if op.name == "graph.relu"][0]
    relu.attributes["x.tag"] = 1
    assert "x.tag" not in print_ir(m)
    assert isinstance(relu, Operation)
