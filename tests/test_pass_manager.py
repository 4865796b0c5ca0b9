"""Passes, the pass registry, pipeline text and the pass manager's aids (verify-each, print-ir,
dump directory, timing, explain); dce, cse and canonicalize on printed IR."""

import io
import os

import attrs
import numpy as np
import pytest

from support.ir_text import body_lines
from ptxc.dialects.func import func_body, get_func
from ptxc.errors import CompileError, VerifyError
from ptxc.ir import interpret, parse_ir, print_ir, verify
from ptxc.ir.spec import OpSpec, lookup, register
from ptxc.ir.types import tensor
from ptxc.rewrite import (Explain, Pass, PassManager, RewritePattern, add_pass,
                          docstring_example, example_options, example_pass, format_pipeline,
                          get_pass, parse_pipeline, producer, register_pass, registered_passes)
from ptxc.rewrite import canonicalization
from ptxc.rewrite.passes.cse import op_key

T = "tensor<4xf32>"


if lookup("testpm.effect") is None:
    @register
    class Effect(OpSpec):
        """A test op with a side effect (not pure): dce and cse must leave it alone."""

        name = "testpm.effect"
        operands = ("x",)
        results = ("y",)

        def infer_types(self, op):
            return [op.operands[0].type]

        def reference(self, op, args, interp):
            return [args[0]]


def module(body: str, ret: str = "%y", args: str = f"%x: {T}", arg_names='"x"',
           n_args: int = 1) -> object:
    ins = ", ".join([T] * n_args)
    m = parse_ir(f'''"builtin.module"() ({{
  "func.func"() ({{
  ^bb0({args}):
{body}
    "func.return"({ret}) : ({T}) -> ()
  }}) {{arg_names = [{arg_names}], function_type = ({ins}) -> ({T}), result_names = ["y"], sym_name = "main"}} : () -> ()
}}) : () -> ()
''')
    verify(m)
    return m


def body_text(m) -> str:
    """The ops of main, one per line, without indentation (for compact expectations)."""
    return "\n".join(body_lines(m))


# ---- registry and pipeline text ------------------------------------------------------------------

def test_builtin_passes_are_registered_with_kebab_names():
    passes = registered_passes()
    assert {"dce", "cse", "canonicalize"} <= set(passes)
    for name, cls in passes.items():
        assert cls.name == name
        assert isinstance(get_pass(name), cls)


@pytest.mark.parametrize("name", sorted(registered_passes()))
def test_every_registered_pass_has_a_before_after_example_that_holds(name):
    cls = registered_passes()[name]
    example = docstring_example(cls)
    assert example is not None, f"pass {name} has no Before:/After: example in its docstring"
    before, after = example
    assert before.strip() != after.strip(), f"pass {name}: the example shows no change"
    if before.startswith('"builtin.module"') and after.startswith('"builtin.module"'):
        m = parse_ir(before, source=f"{name} docstring")
        verify(m)
        assert example_pass(cls).run(m) is True   # (its Options: line's, else the defaults)
        assert print_ir(m) == after


def test_docstring_example_extraction():
    class P:
        """Summary.

        Before:
            a
              b
        After:
            c
        Trailing prose.
        """

    assert docstring_example(P) == ("a\n  b\n", "c\n")

    class Q:
        """Before: only"""

    assert docstring_example(Q) is None
    assert example_options(P) == ""

    class R:
        """Summary.

        Options: max-iterations=4 verify-patterns=true
        Before:
            a
        After:
            b
        """

    assert example_options(R) == "max-iterations=4 verify-patterns=true"
    R.name = "canonicalize"
    p = example_pass(R)
    assert p.name == "canonicalize" and p.max_iterations == 4 and p.verify_patterns is True


def test_parse_pipeline_with_options_and_spacing():
    passes = parse_pipeline(" dce , canonicalize{max-iterations=4 verify-patterns=true},cse ")
    assert [p.name for p in passes] == ["dce", "canonicalize", "cse"]
    assert passes[1].max_iterations == 4 and passes[1].verify_patterns is True
    assert format_pipeline(passes) == "dce,canonicalize{max-iterations=4 verify-patterns=true},cse"
    assert parse_pipeline(format_pipeline(passes)) == passes
    assert parse_pipeline("canonicalize{max-iterations=3,verify-patterns=0}")[0] == \
        get_pass("canonicalize", max_iterations=3)
    assert parse_pipeline("") == []
    assert str(get_pass("canonicalize")) == "canonicalize"


def test_get_pass_takes_snake_or_kebab_options_and_passes_are_frozen_and_hashable():
    a = get_pass("canonicalize", max_iterations=2)
    b = get_pass("canonicalize", **{"max-iterations": "2"})
    assert a == b and hash(a) == hash(b)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        a.max_iterations = 3
    assert a.options() == {"max-iterations": 2, "verify-patterns": False}


@pytest.mark.parametrize("text, message", [
    ("dcee", r"unknown pass 'dcee'; did you mean dce"),
    ("canonicalize{max-iteration=4}", r"has no option 'max-iteration' \(options: max-iterations"),
    ("canonicalize{max-iterations=four}", r"max-iterations: 'four' is not a valid int"),
    ("canonicalize{verify-patterns=maybe}", r"verify-patterns: 'maybe' is not a valid bool"),
    ("canonicalize{max-iterations=4", r"unclosed '\{'"),
    ("canonicalize{max-iterations}", r"expected '=' after option 'max-iterations'"),
    ("dce,", r"column 5: expected a pass name"),
    ("dce cse", r"expected ',' between passes"),
    ("Dce", r"column 1: expected a pass name"),
])
def test_parse_pipeline_errors_say_what_and_where(text, message):
    with pytest.raises(CompileError, match=message):
        parse_pipeline(text)


def test_register_pass_rejects_bad_declarations():
    with pytest.raises(ValueError, match="kebab-case"):
        @register_pass
        @attrs.frozen
        class BadName(Pass):
            """x"""
            name = "Bad_Name"

    with pytest.raises(TypeError, match="must be an @attrs.frozen class"):
        @register_pass
        class NotAttrs(Pass):
            """x"""
            name = "not-attrs-pass"

    with pytest.raises(TypeError, match="needs a default"):
        @register_pass
        @attrs.frozen
        class NoDefault(Pass):
            """x"""
            name = "no-default-pass"
            level: int

    with pytest.raises(ValueError, match="registered twice"):
        @add_pass
        @attrs.frozen
        class Dce2(Pass):
            """x"""
            name = "dce"

    assert not {"not-attrs-pass", "no-default-pass"} & set(registered_passes())


# ---- dce, cse, canonicalize ------------------------------------------------------------------------

def test_dce_removes_dead_chains_but_keeps_unused_arguments_and_side_effects():
    body = "\n".join([
        f'    %c = "graph.constant"() {{value = dense<[1.0, 2.0, 3.0, 4.0]> : {T}}} : () -> {T}',
        f'    %d0 = "graph.add"(%x, %c) : ({T}, {T}) -> {T}',
        f'    %d1 = "graph.relu"(%d0) : ({T}) -> {T}',
        f'    %e = "testpm.effect"(%d1) : ({T}) -> {T}',
        f'    %d2 = "graph.relu"(%x) : ({T}) -> {T}',
        f'    %y = "graph.relu"(%x) : ({T}) -> {T}',
    ])
    m = module(body, args=f"%x: {T}, %unused: {T}", arg_names='"x", "unused"', n_args=2)
    assert get_pass("dce").run(m) is True
    assert body_text(m) == "\n".join([
        '%c = "graph.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>} : () -> '
        'tensor<4xf32>',
        '%d0 = "graph.add"(%x, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>',
        '%d1 = "graph.relu"(%d0) : (tensor<4xf32>) -> tensor<4xf32>',
        '%e = "testpm.effect"(%d1) : (tensor<4xf32>) -> tensor<4xf32>',
        '%y = "graph.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>',
        '"func.return"(%y) : (tensor<4xf32>) -> ()',
    ])
    assert "^bb0(%x: tensor<4xf32>, %unused: tensor<4xf32>)" in print_ir(m)
    assert get_pass("dce").run(m) is False


def test_cse_merges_equal_ops_and_constants_but_not_different_or_effectful_ones():
    body = "\n".join([
        f'    %c1 = "graph.constant"() {{value = dense<[1.0, 2.0, 3.0, 4.0]> : {T}}} : () -> {T}',
        f'    %c2 = "graph.constant"() {{value = dense<[1.0, 2.0, 3.0, 4.0]> : {T}}} : () -> {T}',
        f'    %c3 = "graph.constant"() {{value = dense<[1.0, 2.0, 3.0, 5.0]> : {T}}} : () -> {T}',
        f'    %a1 = "graph.add"(%x, %c1) : ({T}, {T}) -> {T} loc("add_1")',
        f'    %a2 = "graph.add"(%c2, %x) : ({T}, {T}) -> {T} loc("add_2")',
        f'    %a3 = "graph.add"(%x, %c3) : ({T}, {T}) -> {T} loc("add_3")',
        f'    %e1 = "testpm.effect"(%a1) : ({T}) -> {T}',
        f'    %e2 = "testpm.effect"(%a2) : ({T}) -> {T}',
        f'    %s = "graph.add"(%e1, %e2) : ({T}, {T}) -> {T}',
        f'    %y = "graph.add"(%s, %a3) : ({T}, {T}) -> {T}',
    ])
    m = module(body)
    x = {"x": np.arange(4, dtype=np.float32) - 2}
    expected = interpret(m, x)["y"]
    assert get_pass("cse").run(m) is True
    verify(m)
    assert body_text(m) == "\n".join([
        '%c1 = "graph.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>} : () -> '
        'tensor<4xf32>',
        '%c3 = "graph.constant"() {value = dense<[1.0, 2.0, 3.0, 5.0]> : tensor<4xf32>} : () -> '
        'tensor<4xf32>',
        '%a1 = "graph.add"(%x, %c1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> '
        'loc("add_1")',
        '%a3 = "graph.add"(%x, %c3) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> '
        'loc("add_3")',
        '%e1 = "testpm.effect"(%a1) : (tensor<4xf32>) -> tensor<4xf32>',
        '%e2 = "testpm.effect"(%a1) : (tensor<4xf32>) -> tensor<4xf32>',
        '%s = "graph.add"(%e1, %e2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>',
        '%y = "graph.add"(%s, %a3) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>',
        '"func.return"(%y) : (tensor<4xf32>) -> ()',
    ])
    np.testing.assert_array_equal(interpret(m, x)["y"], expected)
    assert get_pass("cse").run(m) is False


def test_cse_keys_tell_attribute_kinds_and_signed_zeros_apart():
    m = module(f'    %y = "graph.relu"(%x) : ({T}) -> {T}')
    op = func_body(get_func(m)).first_op

    def key(**attributes):
        op.attributes.clear()
        op.attributes.update(attributes)
        return op_key(op)

    assert key(**{"t.a": 1}) != key(**{"t.a": 1.0}) != key(**{"t.a": True})
    assert key(**{"t.a": 0.0}) != key(**{"t.a": -0.0})
    assert key(**{"t.a": (1, 2)}) == key(**{"t.a": (1, 2)})
    assert key(**{"t.a": float("nan")}) == key(**{"t.a": float("nan")})


def test_canonicalize_applies_registered_patterns(monkeypatch):
    class ReluOfRelu(RewritePattern):
        root = "graph.relu"

        def match_and_rewrite(self, op, rewriter):
            inner = producer(op.operands[0])
            if inner is None or inner.name != "graph.relu":
                return False
            rewriter.replace_op(op, inner.results)
            return True

    monkeypatch.setattr(canonicalization, "_PATTERNS", list(canonicalization._PATTERNS))
    canonicalization.register_canonicalization(ReluOfRelu)
    assert any(isinstance(p, ReluOfRelu) for p in canonicalization.canonicalization_patterns())
    with pytest.raises(ValueError, match="registered twice"):
        canonicalization.register_canonicalization(ReluOfRelu)
    body = "\n".join([f'    %r{i} = "graph.relu"(%{"x" if i == 0 else f"r{i - 1}"}) : ({T}) -> {T}'
                      for i in range(3)] + [f'    %y = "graph.relu"(%r2) : ({T}) -> {T}'])
    m = module(body)
    assert get_pass("canonicalize").run(m) is True
    assert body_text(m).splitlines() == [
        '%r0 = "graph.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>',
        '"func.return"(%r0) : (tensor<4xf32>) -> ()']
    assert get_pass("canonicalize").run(m) is False


# ---- the pass manager ---------------------------------------------------------------------------------

@attrs.frozen
class BreakTypes(Pass):
    """Gives the first relu a wrong result type (a broken pass, for the tests)."""

    name = "break-types"

    def run(self, module):
        for op in module.walk():
            if op.name == "graph.relu":
                op.results[0].type = tensor((5,))
                return True
        return False


def _chain_text():
    blob = "0x" + np.arange(20, dtype=np.float32).tobytes().hex().upper()
    return parse_ir(f'''"builtin.module"() ({{
  "func.func"() ({{
  ^bb0(%x: {T}):
    %big = "graph.constant"() {{value = dense_resource<big> : tensor<20xf32>}} : () -> tensor<20xf32>
    %r = "graph.relu"(%x) : ({T}) -> {T} loc("relu_1")
    %r2 = "graph.relu"(%x) : ({T}) -> {T} loc("relu_2")
    %y = "graph.add"(%r, %r2) : ({T}, {T}) -> {T}
    "func.return"(%y) : ({T}) -> ()
  }}) {{arg_names = ["x"], function_type = ({T}) -> ({T}), result_names = ["y"], sym_name = "main"}} : () -> ()
}}) : () -> ()
{{-#
  blobs: {{
    big: "{blob}"
  }}
#-}}
''')


def test_pipeline_runs_in_order_and_reports_change():
    m = _chain_text()
    pm = PassManager("cse,dce")
    assert pm.pipeline == "cse,dce"
    assert pm.run(m) is True
    assert [t[0] for t in pm.pass_times] == ["cse", "dce"]
    assert [t[2] for t in pm.pass_times] == [True, True]
    assert "graph.constant" not in print_ir(m) and print_ir(m).count("graph.relu") == 1
    assert PassManager(["cse", get_pass("dce")]).run(m) is False


def test_verify_each_names_the_pass_that_broke_the_ir():
    with pytest.raises(VerifyError, match=r"after pass 'break-types': \"graph.relu\" "
                                          r"\(node 'relu_1'\): result #0 has type tensor<5xf32>"):
        PassManager([get_pass("dce"), BreakTypes(), get_pass("cse")]).run(_chain_text())
    m = _chain_text()
    PassManager([BreakTypes()], verify_each=False).run(m)  # not checked: goes through
    with pytest.raises(VerifyError):
        verify(m)


def test_verify_each_blames_a_broken_input_not_the_first_pass():
    m = _chain_text()
    BreakTypes().run(m)
    with pytest.raises(VerifyError, match="the pipeline's input does not verify"):
        PassManager("dce").run(m)


def test_print_ir_after_all_and_after_change():
    out = io.StringIO()
    m = _chain_text()
    PassManager("dce,cse,dce", print_ir_after_all=True, stream=out).run(m)
    text = out.getvalue()
    headers = [ln for ln in text.splitlines() if ln.startswith("// -----//")]
    assert headers == ["// -----// IR Dump After dce //----- //",
                       "// -----// IR Dump After cse //----- //",
                       "// -----// IR Dump After dce //----- //"]
    dumps = text.split("// -----// IR Dump After ")[1:]
    assert "graph.constant" not in dumps[0] and dumps[0].count("graph.relu") == 2
    assert dumps[1].count("graph.relu") == 1
    first = dumps[0].split("\n", 1)[1]
    assert first.startswith('"builtin.module"')

    out = io.StringIO()
    PassManager("cse,dce,dce", print_ir_after_change=True, stream=out).run(_chain_text())
    headers = [ln for ln in out.getvalue().splitlines() if ln.startswith("// -----//")]
    assert headers == ["// -----// IR Dump After cse //----- //",
                       "// -----// IR Dump After dce //----- //"]
    # constants are elided in the printed IR
    out = io.StringIO()
    PassManager("cse", print_ir_after_all=True, stream=out).run(_chain_text())
    assert "dense_resource<__elided__> : tensor<20xf32>" in out.getvalue()
    assert "0x0000" not in out.getvalue()


def test_dump_dir_writes_numbered_files_that_parse_back(tmp_path):
    d = tmp_path / "dumps"
    m = _chain_text()
    original = print_ir(m)
    PassManager("cse,canonicalize{max-iterations=3},dce", dump_dir=d).run(m)
    files = sorted(os.listdir(d))
    assert files == ["00-input.mlir", "01-cse.mlir", "02-canonicalize.mlir", "03-dce.mlir"]
    assert (d / "00-input.mlir").read_text() == original
    assert (d / "03-dce.mlir").read_text() == print_ir(m)
    for f in files:
        text = (d / f).read_text()
        assert print_ir(parse_ir(text)) == text
    assert "blobs" in (d / "01-cse.mlir").read_text()  # full text, constants included


def test_timing_report_lists_every_pass_and_is_printed_when_asked():
    out = io.StringIO()
    pm = PassManager("dce,cse", timing=True, stream=out)
    assert "no pipeline has run" in pm.timing_report()
    pm.run(_chain_text())
    report = pm.timing_report()
    assert out.getvalue() == report
    lines = report.splitlines()
    assert any(ln.rstrip().endswith("  dce") for ln in lines)
    assert any(ln.rstrip().endswith("  cse") for ln in lines)
    assert any(ln.rstrip().endswith("(verify)") for ln in lines)
    assert lines[-1].rstrip().endswith("total")
    assert all(t >= 0 for _, t, _ in pm.pass_times) and pm.total_time >= sum(
        t for _, t, _ in pm.pass_times)


def test_a_pass_that_raises_or_returns_no_bool_is_named():
    @attrs.frozen
    class Crash(Pass):
        """Raises."""
        name = "crash"

        def run(self, module):
            raise KeyError("oops")

    @attrs.frozen
    class NoBool(Pass):
        """Forgets to return."""
        name = "no-bool"

        def run(self, module):
            pass

    with pytest.raises(CompileError, match=r"pass 'crash' failed: KeyError: 'oops'"):
        PassManager([Crash()]).run(_chain_text())
    with pytest.raises(CompileError, match=r"pass 'no-bool' returned None"):
        PassManager([NoBool()]).run(_chain_text())


def test_explain_collects_records_under_the_pass_name(monkeypatch):
    class NeverFuses(RewritePattern):
        root = "graph.add"

        def match_and_rewrite(self, op, rewriter):
            return rewriter.fail(op, "add not fused: just because")

    monkeypatch.setattr(canonicalization, "_PATTERNS", [NeverFuses()])
    ex = Explain()
    PassManager("canonicalize", explain=ex).run(_chain_text())
    [rec] = ex.records
    assert rec.pass_name == "canonicalize" and rec.reason == "add not fused: just because"
    assert rec.location == "%y"
    assert str(rec) == '[canonicalize] NeverFuses at "%y" (graph.add): not fired: add not ' \
                       'fused: just because'
