"""Patterns, the rewriter and the greedy driver: fixpoints, worklist re-enqueueing, dead-op
erasure, benefit order, failure reasons (explain), debug verification, non-convergence."""

import pytest

from ptxc.dialects.func import func_body, get_func
from ptxc.errors import CompileError, VerifyError
from ptxc.ir import parse_ir, print_ir, verify
from ptxc.ir.types import tensor
from ptxc.rewrite import (Explain, PatternRewriter, RewritePattern, apply_patterns_greedily,
                          producer, rewrite_pattern)
from ptxc.rewrite.driver import GreedyDriver

T = "tensor<4xf32>"


def module(body: str, args="%x: tensor<4xf32>", ret="%y", n_args=1) -> object:
    """A module whose main has ``args``, ``body`` and returns ``ret`` (one tensor<4xf32>)."""
    names = ", ".join(f'"a{i}"' for i in range(n_args))
    ins = ", ".join([T] * n_args)
    text = f'''"builtin.module"() ({{
  "func.func"() ({{
  ^bb0({args}):
{body}
    "func.return"({ret}) : ({T}) -> ()
  }}) {{arg_names = [{names}], function_type = ({ins}) -> ({T}), sym_name = "main"}} : () -> ()
}}) : () -> ()
'''
    m = parse_ir(text)
    verify(m)
    return m


def ops(m) -> list[str]:
    return [op.name for op in func_body(get_func(m)).ops]


def relu(src, dst, loc=None):
    return f'    %{dst} = "graph.relu"(%{src}) : ({T}) -> {T}' + (f' loc("{loc}")' if loc else "")


def add(a, b, dst, loc=None):
    return f'    %{dst} = "graph.add"(%{a}, %{b}) : ({T}, {T}) -> {T}' + (
        f' loc("{loc}")' if loc else "")


@rewrite_pattern("graph.relu")
def relu_of_relu(op, rewriter):
    """relu(relu(x)) -> relu(x)"""
    inner = producer(op.operands[0])
    if inner is None or inner.name != "graph.relu":
        return False
    rewriter.replace_op(op, inner.results)
    return True


# ---- the driver reaches a fixpoint ------------------------------------------------------------

def test_relu_chain_collapses_to_one_and_second_run_changes_nothing():
    m = module("\n".join([relu("x", "r0"), relu("r0", "r1"), relu("r1", "r2"), relu("r2", "y")]))
    assert apply_patterns_greedily(m, [relu_of_relu]) is True
    assert ops(m) == ["graph.relu", "func.return"]
    ret = func_body(get_func(m)).last_op
    assert producer(ret.operands[0]).operands[0] is func_body(get_func(m)).args[0]
    verify(m)
    assert apply_patterns_greedily(m, [relu_of_relu]) is False


def test_pattern_classes_and_instances_are_both_accepted():
    m = module("\n".join([relu("x", "r0"), relu("r0", "y")]))
    assert apply_patterns_greedily(m, [relu_of_relu()]) is True
    assert ops(m) == ["graph.relu", "func.return"]


def test_new_ops_are_visited_in_the_same_sweep():
    # add(x, x) -> relu(relu(x)): the new ops are inserted before the add, behind the sweep;
    # only the rewriter's notification puts them on the worklist, where relu_of_relu folds them
    @rewrite_pattern("graph.add")
    def add_to_two_relus(op, rewriter):
        a, b = op.operands
        if a is not b:
            return False
        r1 = rewriter.create("graph.relu", [a]).result
        r2 = rewriter.create("graph.relu", [r1]).result
        rewriter.replace_op(op, [r2])
        return True

    m = module(add("x", "x", "y"))
    driver = GreedyDriver(m, [add_to_two_relus, relu_of_relu])
    assert driver.iterate() is True
    assert ops(m) == ["graph.relu", "func.return"]
    verify(m)
    assert driver.iterate() is False


def test_producers_of_erased_ops_are_revisited_in_the_same_sweep():
    # r0 still has a user when the sweep reaches it; erasing r1 (dead) must put r0 back
    m = module("\n".join([relu("x", "r0"), relu("r0", "r1"), relu("x", "y")]))
    driver = GreedyDriver(m, [])
    assert driver.iterate() is True
    assert ops(m) == ["graph.relu", "func.return"]
    assert driver.iterate() is False


def test_dead_pure_ops_are_erased_unless_disabled():
    body = "\n".join([relu("x", "d0"), add("d0", "x", "d1"), relu("x", "y")])
    m = module(body)
    assert apply_patterns_greedily(m, [], erase_dead=False) is False
    assert len(ops(m)) == 4
    assert apply_patterns_greedily(m, []) is True
    assert ops(m) == ["graph.relu", "func.return"]


def test_higher_benefit_pattern_is_tried_first():
    fired = []

    class Low(RewritePattern):
        root = "graph.relu"
        benefit = 1

        def match_and_rewrite(self, op, rewriter):
            fired.append("Low")
            return False

    class High(RewritePattern):
        root = "graph.relu"
        benefit = 5

        def match_and_rewrite(self, op, rewriter):
            fired.append("High")
            return False

    class Any(RewritePattern):
        benefit = 3

        def match_and_rewrite(self, op, rewriter):
            if op.name == "graph.relu":
                fired.append("Any")
            return False

    m = module(relu("x", "y"))
    apply_patterns_greedily(m, [Low, Any, High])
    assert fired == ["High", "Any", "Low"]


def test_root_none_pattern_sees_every_op():
    seen = set()

    class Spy(RewritePattern):
        def match_and_rewrite(self, op, rewriter):
            seen.add(op.name)
            return False

    m = module("\n".join([relu("x", "r"), add("r", "x", "y")]), ret="%y")
    apply_patterns_greedily(m, [Spy])
    assert seen == {"func.func", "graph.relu", "graph.add", "func.return"}


# ---- the rewriter ---------------------------------------------------------------------------------

def test_rewriter_keeps_locations_and_names_and_inserts_before_the_match():
    @rewrite_pattern("graph.add")
    def add_to_relu(op, rewriter):
        new = rewriter.create("graph.relu", [op.operands[0]])
        rewriter.replace_op(op, new)
        return True

    m = module("\n".join([relu("x", "r", loc="relu_1"), add("r", "x", "y", loc="add_1")]))
    apply_patterns_greedily(m, [add_to_relu])
    text = print_ir(m)
    # the new op took the add's location and the name of the value it replaced
    assert '%y = "graph.relu"(%r) : (tensor<4xf32>) -> tensor<4xf32> loc("add_1")' in text
    assert '"func.return"(%y)' in text


def test_rewriter_set_attr_reenqueues_and_counts_changes():
    m = module(relu("x", "y"))
    op = func_body(get_func(m)).first_op
    rw = PatternRewriter(op)
    rw.set_attr(op, "test.tag", 3)
    assert op.attributes["test.tag"] == 3 and rw.changes == 1
    rw.set_attr(op, "test.tag", None)
    assert "test.tag" not in op.attributes and rw.changes == 2


def test_rewriter_refuses_bad_replacements_and_erasing_used_ops():
    m = module("\n".join([relu("x", "r"), relu("r", "y")]))
    first = func_body(get_func(m)).first_op
    rw = PatternRewriter(first)
    with pytest.raises(CompileError, match="replaced by 2 values, has 1 results"):
        rw.replace_op(first, [first.result, first.result])
    with pytest.raises(CompileError, match="still used by graph.relu"):
        rw.erase_op(first)
    assert rw.changes == 0
    verify(m)


# ---- failure reasons and explain ------------------------------------------------------------------

class FuseAddRelu(RewritePattern):
    """A stand-in fusion: relu(add(a, b)) fuses only when the add has one user."""

    root = "graph.relu"

    def match_and_rewrite(self, op, rewriter):
        add_op = producer(op.operands[0])
        if add_op is None or add_op.name != "graph.add":
            return False  # not applicable: no reason recorded
        users = len(add_op.result.users)
        if users > 1:
            return rewriter.fail(op, f"{add_op.loc} + {op.loc} not fused: {add_op.loc} has "
                                     f"{users} users")
        with rewriter.modify(add_op):
            add_op.attributes["test.fused"] = "relu"
        rewriter.replace_op(op, add_op.results)
        return True


def test_failure_reasons_are_recorded_and_fired_patterns_too():
    body = "\n".join([
        add("x", "x", "a1", loc="add_12"), relu("a1", "r1", loc="relu_13"),   # a1 has 2 users
        add("a1", "r1", "a2", loc="add_14"), relu("a2", "y", loc="relu_15"),  # fuses
        relu("x", "unused", loc="relu_16"),                                   # dead, no reason
    ])
    m = module(body)
    ex = Explain()
    assert apply_patterns_greedily(m, [FuseAddRelu], explain=ex) is True
    fired = [(r.pattern, r.location) for r in ex.fired()]
    assert fired == [("FuseAddRelu", "relu_15")]
    [miss] = ex.not_fired()
    assert miss.location == "relu_13" and miss.op_name == "graph.relu"
    assert miss.reason == "add_12 + relu_13 not fused: add_12 has 2 users"
    text = ex.format()
    assert 'FuseAddRelu at "relu_13" (graph.relu): not fired: add_12 + relu_13 not fused' in text
    assert 'FuseAddRelu at "relu_15" (graph.relu): fired' in text
    assert "relu_16" not in text  # a silent False is not recorded
    assert ops(m).count("graph.relu") == 1


def test_a_fired_record_is_not_overwritten_by_a_later_failure():
    ex = Explain()
    m = module(relu("x", "y", loc="r"))
    op = func_body(get_func(m)).first_op
    ex.record("P", op, True)
    ex.record("P", op, False, "later")
    assert [r.fired for r in ex] == [True]
    ex.record("Q", op, False, "first")
    ex.record("Q", op, False, "second")
    assert [r.reason for r in ex.not_fired()] == ["second"]


# ---- misbehaving patterns are named -------------------------------------------------------------

class InsertAfterUser(RewritePattern):
    """Breaks dominance: the replacement is created after the op's user."""

    root = "graph.add"

    def match_and_rewrite(self, op, rewriter):
        user = op.result.users[0]
        rewriter.set_insertion_point_after(user)
        new = rewriter.create("graph.relu", [op.operands[0]])
        rewriter.replace_op(op, new)
        return True


def test_debug_mode_names_the_pattern_that_broke_the_ir():
    body = "\n".join([add("x", "x", "a"), relu("a", "y")])
    with pytest.raises(VerifyError, match=r"after pattern InsertAfterUser rewrote \"graph.add\""
                                          r".*does not dominate"):
        apply_patterns_greedily(module(body), [InsertAfterUser], verify_each=True)
    # without debug mode the driver does not notice; the broken IR is left for the verifier
    m = module(body)
    apply_patterns_greedily(m, [InsertAfterUser], max_iterations=3)
    with pytest.raises(VerifyError, match="does not dominate"):
        verify(m)


def test_debug_mode_blames_the_input_when_it_is_already_broken():
    m = module(relu("x", "y"))
    func_body(get_func(m)).first_op.results[0].type = tensor((5,))
    with pytest.raises(VerifyError, match="before any pattern"):
        apply_patterns_greedily(m, [relu_of_relu], verify_each=True)


def test_pattern_that_changes_ir_but_returns_false_is_an_error():
    @rewrite_pattern("graph.relu")
    def liar(op, rewriter):
        rewriter.set_attr(op, "test.x", 1)
        return False

    with pytest.raises(CompileError, match="pattern liar changed the IR .* but returned False"):
        apply_patterns_greedily(module(relu("x", "y")), [liar])


def test_pattern_that_returns_true_without_a_change_is_an_error():
    @rewrite_pattern("graph.relu")
    def noop(op, rewriter):
        op.attributes["test.x"] = 1  # behind the rewriter's back
        return True

    with pytest.raises(CompileError, match="pattern noop returned True .* without changing"):
        apply_patterns_greedily(module(relu("x", "y")), [noop])


def test_pattern_raising_a_python_error_becomes_a_compile_error_naming_it():
    @rewrite_pattern("graph.relu")
    def buggy(op, rewriter):
        return {}["missing"]

    with pytest.raises(CompileError, match=r"pattern buggy failed on \"graph.relu\" \(node 'r'\)"
                                          r": KeyError"):
        apply_patterns_greedily(module(relu("x", "y", loc="r")), [buggy])


def test_non_bool_result_is_an_error():
    @rewrite_pattern("graph.relu")
    def none(op, rewriter):
        return None

    with pytest.raises(CompileError, match="returned None"):
        apply_patterns_greedily(module(relu("x", "y")), [none])


# ---- non-convergence --------------------------------------------------------------------------------

class Ping(RewritePattern):
    root = "graph.relu"

    def match_and_rewrite(self, op, rewriter):
        if op.attributes.get("test.state", 0) != 0:
            return False
        rewriter.set_attr(op, "test.state", 1)
        return True


class Pong(RewritePattern):
    root = "graph.relu"

    def match_and_rewrite(self, op, rewriter):
        if op.attributes.get("test.state", 0) != 1:
            return False
        rewriter.set_attr(op, "test.state", 0)
        return True


def test_ping_pong_patterns_fail_naming_both():
    m = module("\n".join([relu("x", "r", loc="relu_a"), relu("r", "y", loc="relu_b")]))
    with pytest.raises(CompileError) as e:
        apply_patterns_greedily(m, [Ping, Pong], max_rewrites=50)
    msg = str(e.value)
    assert "did not converge: more than 50 rewrites" in msg
    assert "Ping x" in msg and "Pong x" in msg and "relu_a" in msg


class OncePerSweep(RewritePattern):
    """Fires on every other visit of an op: once per sweep, forever."""

    root = "graph.relu"

    def __init__(self):
        self.visits = {}

    def match_and_rewrite(self, op, rewriter):
        n = self.visits[id(op)] = self.visits.get(id(op), -1) + 1
        if n % 2:
            return False
        rewriter.set_attr(op, "test.n", n)
        return True


def test_max_iterations_error_names_the_patterns_still_firing():
    m = module(relu("x", "y", loc="relu_7"))
    with pytest.raises(CompileError, match=r"did not converge in 4 iterations; still firing in "
                                          r"the last one: OncePerSweep x1 \(at relu_7\)"):
        apply_patterns_greedily(m, [OncePerSweep()], max_iterations=4)


def test_a_sweep_that_changes_needs_another_to_confirm_the_fixpoint():
    body = "\n".join([relu("x", "r0"), relu("r0", "y")])
    with pytest.raises(CompileError, match=r"did not converge in 1 iterations.*relu_of_relu x1"):
        apply_patterns_greedily(module(body), [relu_of_relu], max_iterations=1)
    assert apply_patterns_greedily(module(body), [relu_of_relu], max_iterations=2) is True
    with pytest.raises(CompileError, match="at least 1"):
        apply_patterns_greedily(module(body), [relu_of_relu], max_iterations=0)
