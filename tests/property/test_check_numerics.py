"""check-numerics: random graphs go through dce, cse and canonicalize with the check on and pass;
a wrong pass is caught and named; the comparison catches each kind of difference."""

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ptxc.dialects.func import func_body, get_func, new_func, new_module, set_func_results
from ptxc.errors import CompileError, NumericsError
from ptxc.ir import Builder, DenseElements, interpret, print_ir, verify
from ptxc.ir.types import tensor
from ptxc.rewrite import Pass, PassManager, is_trivially_dead
from ptxc.rewrite.numerics import compare, random_inputs
from ptxc.rewrite.passes.cse import op_key

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def add_relu_graphs(draw, probe: bool = False):
    """A random module of graph.add / graph.relu / graph.constant over shapes that broadcast to
    one base shape, with duplicated ops and constants (work for cse) and dead values (for dce).
    With ``probe``, the first argument is a 4x4 f32 ``probe`` returned through a relu."""
    rank = draw(st.integers(0, 3))
    base = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    element = draw(st.sampled_from(["f32", "f32", "f32", "i32"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))

    def sub_shape():
        k = draw(st.integers(0, rank))
        return tuple(d if draw(st.booleans()) else 1 for d in base[rank - k:])

    arg_types = [tensor(sub_shape(), element) for _ in range(draw(st.integers(1, 3)))]
    arg_names = [f"in{i}" for i in range(len(arg_types))]
    if probe:
        arg_types.insert(0, tensor((4, 4)))
        arg_names.insert(0, "probe")
    m = new_module()
    f = new_func(m, "main", arg_types, arg_names)
    body = func_body(f)
    b = Builder.at_end(body)
    values = list(body.args[1:] if probe else body.args)
    ops, constants = [], []

    def pick():  # often a recent value, so that duplicates and chains get used
        return draw(st.sampled_from(values[-2:] if draw(st.booleans()) else values))

    for i in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["relu", "add", "add", "constant", "dup", "dup"]))
        if kind == "dup" and ops:
            op = draw(st.sampled_from(ops))
            operands = list(op.operands)
            if op.name == "graph.add" and draw(st.booleans()):
                operands.reverse()  # commutative: still a duplicate
            new = b.create(op.name, operands, dict(op.attributes))
        elif kind == "constant" or kind == "dup":
            if constants and draw(st.booleans()):
                value = draw(st.sampled_from(constants))
            else:
                shape = sub_shape()
                value = (rng.standard_normal(shape) * 2).astype(np.float32) if element == "f32" \
                    else rng.integers(-3, 4, shape).astype(np.int32)
                constants.append(value)
            new = b.create("graph.constant", [], {"value": DenseElements(np.asarray(value))})
        elif kind == "relu":
            new = b.create("graph.relu", [pick()], loc=f"relu_{i}")
        else:
            x, y = pick(), pick()
            new = b.create("graph.add", [x, y], loc=f"add_{i}")
        if draw(st.booleans()):
            new.result.name_hint = f"v{i}"
        ops.append(new)
        values.append(new.result)
    outs = [values[-1]] + draw(st.lists(st.sampled_from(values), max_size=1))
    if draw(st.booleans()):  # sum everything up: all ops live, duplicates included
        total = values[0]
        for v in values[1:]:
            total = b.create("graph.add", [total, v]).result
        outs.append(total)
    names = [f"out{i}" for i in range(len(outs))]
    if probe:
        outs.append(b.create("graph.relu", [body.args[0]], loc="probe_relu").result)
        names.append("probe_out")
    set_func_results(f, outs, names)
    verify(m)
    return m


def main_ops(m):
    return list(func_body(get_func(m)).ops)


@given(add_relu_graphs())
@SETTINGS
def test_dce_cse_canonicalize_keep_the_numerics(m):
    n_before = len(main_ops(m))
    inputs = random_inputs(m, seed=1)
    expected = interpret(m, inputs)
    pm = PassManager("dce,cse,canonicalize,dce", check_numerics=True)
    pm.run(m)
    verify(m)
    # an independent check on other inputs: these passes never change arithmetic
    got = interpret(m, inputs)
    assert got.keys() == expected.keys()
    for k in expected:
        np.testing.assert_array_equal(got[k], expected[k])
    ops = main_ops(m)
    assert len(ops) <= n_before
    assert not any(is_trivially_dead(op) for op in ops), print_ir(m)
    keys = [op_key(op) for op in ops if op_key(op) is not None]
    assert len(keys) == len(set(keys)), print_ir(m)
    assert len(func_body(get_func(m)).args) == len(inputs)  # arguments are bindings: kept


@attrs.frozen
class ReluToInput(Pass):
    """A wrong pass: replaces every relu by its input.

    Before:
        %y = "graph.relu"(%x)
    After:
        (uses of %y read %x)
    """

    name = "relu-to-input"

    def run(self, module):
        changed = False
        for op in list(module.walk()):
            if op.name == "graph.relu":
                op.result.replace_all_uses_with(op.operands[0])
                op.erase()
                changed = True
        return changed


@given(add_relu_graphs(probe=True))
@SETTINGS
def test_a_wrong_pass_is_caught_and_named(m):
    pm = PassManager(["dce", ReluToInput(), "cse"], check_numerics=True)
    with pytest.raises(NumericsError) as e:
        pm.run(m)
    msg = str(e.value)
    assert e.value.pass_name == "relu-to-input"
    assert "pass 'relu-to-input' changed the results: output '" in msg
    assert "max abs error" in msg and "max rel error" in msg
    assert [t[0] for t in pm.pass_times] == ["dce", "relu-to-input"]  # stopped there


def test_the_error_names_the_output_and_the_largest_errors():
    m = new_module()
    f = new_func(m, "main", [tensor((2, 3))], ["x"])
    b = Builder.at_end(func_body(f))
    y = b.create("graph.relu", [func_body(f).args[0]]).result
    set_func_results(f, [func_body(f).args[0], y], ["same", "rectified"])
    x = random_inputs(m, seed=0)["x"]
    worst = np.abs(np.minimum(x, 0)).max()
    with pytest.raises(NumericsError, match=rf"output 'rectified' differs at {int((x < 0).sum())} "
                                            rf"of 6 elements: max abs error {worst:.6g}, max rel "
                                            rf"error inf \(rtol=0.0001, atol=1e-05\)"):
        PassManager([ReluToInput()], check_numerics=True).run(m)


# ---- the comparison -------------------------------------------------------------------------------

def arr(*xs, dtype=np.float32):
    return np.array(xs, dtype=dtype)


def test_compare_accepts_what_is_within_tolerance():
    assert compare({"y": arr(1.0, 2.0)}, {"y": arr(1.00005, 2.0)}, 1e-4, 1e-5) is None
    assert compare({"y": arr(np.nan, np.inf)}, {"y": arr(np.nan, np.inf)}, 1e-4, 1e-5) is None
    assert compare({"y": arr(1, 2, dtype=np.int32)}, {"y": arr(1, 2, dtype=np.int32)}, 0, 0) \
        is None


@pytest.mark.parametrize("before, after, message", [
    (arr(1.0, 2.0), arr(1.0, 2.5), r"output 'y' differs at 1 of 2 elements: max abs error "
                                   r"0.5, max rel error 0.25 .*index \[1\]: 2.0 -> 2.5$"),
    (arr(0.0, 2.0), arr(0.5, 2.0), r"max abs error 0.5, max rel error inf"),
    (arr(1.0, 2.0), arr(1.0, 2.0, 3.0), r"changed from float32\[2\] to float32\[3\]"),
    (arr(1.0, 2.0), arr(1.0, 2.0, dtype=np.float16), r"changed from float32\[2\] to float16\[2\]"),
    (arr(1.0, 2.0), arr(np.nan, 2.0), r"1 new NaN\(s\), first at index \[0\] \(was 1.0\)"),
    (arr(1.0, np.inf), arr(1.0, 5.0), r"differs at 1 of 2 elements.*index \[1\]: inf -> 5.0"),
    (arr(1, 2, dtype=np.int32), arr(1, 3, dtype=np.int32), r"differs at 1 of 2 elements"),
    (arr(True, False, dtype=np.bool_), arr(True, True, dtype=np.bool_), r"differs at 1 of 2"),
])
def test_compare_reports_each_kind_of_difference(before, after, message):
    import re
    problem = compare({"y": before}, {"y": after}, 1e-4, 1e-5)
    assert problem is not None and re.search(message, problem), problem


def test_compare_reports_missing_and_new_outputs():
    assert "output 'y' is gone" in compare({"y": arr(1.0)}, {"z": arr(1.0)}, 1e-4, 1e-5)
    assert "new output(s) ['z']" in compare({"y": arr(1.0)}, {"y": arr(1.0), "z": arr(1.0)},
                                            1e-4, 1e-5)


def test_random_inputs_are_seeded_and_typed():
    m = new_module()
    types = [tensor((50,), "f32"), tensor((50,), "i64"), tensor((50,), "i1"), tensor((), "f16")]
    f = new_func(m, "main", types, ["f", "i", "b", "h"])
    set_func_results(f, [func_body(f).args[0]], ["y"])
    a, b, c = random_inputs(m, 0), random_inputs(m, 0), random_inputs(m, 1)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["f"], c["f"])
    assert a["f"].dtype == np.float32 and (a["f"] < 0).any() and (a["f"] > 0).any()
    assert a["i"].dtype == np.int64 and a["i"].min() >= 0 and a["i"].max() <= 3
    assert a["b"].dtype == np.bool_ and a["b"].any() and not a["b"].all()
    assert a["h"].shape == () and a["h"].dtype == np.float16


def test_a_pass_that_changes_the_bindings_is_named():
    @attrs.frozen
    class DropArg(Pass):
        """Removes main's second argument (wrong: arguments are bindings)."""
        name = "drop-arg"

        def run(self, module):
            f = get_func(module)
            func_body(f).erase_arg(1)
            f.attributes["arg_names"] = f.attributes["arg_names"][:1]
            ft = f.attributes["function_type"]
            f.attributes["function_type"] = type(ft)(ft.inputs[:1], ft.results)
            return True

    m = new_module()
    f = new_func(m, "main", [tensor((2,)), tensor((2,))], ["x", "unused"])
    set_func_results(f, [func_body(f).args[0]], ["y"])
    with pytest.raises(NumericsError, match=r"pass 'drop-arg': the arguments of 'main' changed "
                                            r"from \['unused', 'x'\] to \['x'\]"):
        PassManager([DropArg()], check_numerics=True).run(m)


def test_check_numerics_needs_a_main_function():
    m = new_module()
    f = new_func(m, "not_main", [tensor((2,))], ["x"])
    set_func_results(f, [func_body(f).args[0]], ["y"])
    with pytest.raises(CompileError, match="no function 'main'"):
        PassManager("dce", check_numerics=True).run(m)


def _shared_graphs():
    try:
        from property.strategies import graphs
    except ImportError:  # the shared strategy of tests/property/strategies.py
        return None
    return graphs


@pytest.mark.skipif(_shared_graphs() is None, reason="no shared graph strategy")
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_passes_keep_the_numerics_of_the_shared_random_networks(data):
    case = data.draw(_shared_graphs()())
    m = case.network.to_module()
    expected = interpret(m, case.inputs)
    PassManager("dce,cse,canonicalize", check_numerics=True).run(m)
    got = interpret(m, case.inputs)
    for k in expected:
        np.testing.assert_array_equal(got[k], expected[k])
