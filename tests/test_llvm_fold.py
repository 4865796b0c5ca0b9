"""ptxc.lower.llvm_fold: the emission's constant folds equal LLVM's own, operand by operand.

The reference is LLVM: each case is also written as an instruction on constants in a function
``ret``-ing it, the module is optimized (InstSimplify folds it) and the returned constant is
read back. A fold that would be poison (overflow under nsw, division by zero, a shift by the
width) must not fold at all."""

import itertools
import re

import llvmlite.binding as llvm
import pytest
from llvmlite import ir

from ptxc.lower.llvm_fold import FoldingBuilder, const_int

I1, I8, I32, I64 = (ir.IntType(n) for n in (1, 8, 32, 64))
BINARY = ["add", "sub", "mul", "sdiv", "udiv", "srem", "urem", "and_", "or_", "xor", "shl",
          "lshr", "ashr"]
VALUES = {I8: [0, 1, -1, 2, 3, 7, 8, 127, -128, -7], I64: [0, 1, -1, 3, 14, 256, -5,
                                                            2 ** 63 - 1, -2 ** 63, 63, 64]}
PREDICATES = ["==", "!=", "<", "<=", ">", ">="]


def _builder():
    m = ir.Module()
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), []), "f")
    return FoldingBuilder(fn.append_basic_block("entry"))


def _llvm_fold(cases):
    """[(text of an instruction on constants, type)] -> the constant LLVM folds each to (an int,
    or None where it leaves an instruction or gives poison/undef)."""
    lines = []
    for k, (instr, ty) in enumerate(cases):
        lines.append(f"define {ty} @f{k}() {{\n  %r = {instr}\n  ret {ty} %r\n}}")
    mod = llvm.parse_assembly("\n".join(lines))
    pto = llvm.create_pipeline_tuning_options(speed_level=1)
    llvm.initialize_native_target()
    tm = llvm.Target.from_default_triple().create_target_machine()
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    out = []
    text = str(mod)
    for k, (_, ty) in enumerate(cases):
        body = re.search(rf"@f{k}\(\).*?\{{(.*?)\}}", text, re.S).group(1)
        m = re.search(rf"ret {ty} (-?\d+|true|false)\s", body)
        out.append(None if m is None else {"true": 1, "false": 0}.get(m.group(1), None)
                   if m.group(1) in ("true", "false") else int(m.group(1)))
    return out


def _same(folded, ty, want):
    if ty.width == 1:
        return bool(folded & 1) == bool(want)
    mask = (1 << ty.width) - 1
    return folded & mask == want & mask


@pytest.mark.parametrize("ty", [I8, I64], ids=["i8", "i64"])
def test_binary_folds_match_llvm(ty):
    b = _builder()
    name = {"and_": "and", "or_": "or"}
    cases, got = [], []
    for op, flags in [(o, ()) for o in BINARY] + [("add", ("nsw",)), ("mul", ("nsw",)),
                                                  ("sub", ("nsw",)), ("add", ("nuw",))]:
        for x, y in itertools.product(VALUES[ty], repeat=2):
            r = getattr(b, op)(ir.Constant(ty, x), ir.Constant(ty, y), flags=flags)
            f = " ".join(flags)
            cases.append((f"{name.get(op, op)} {f} {ty} {x}, {y}".replace("  ", " "), ty))
            got.append(const_int(r))
    want = _llvm_fold(cases)
    for (instr, _), g, w in zip(cases, got, want):
        if g is None:
            continue  # left as an instruction: always right
        assert w is not None, f"{instr}: folded to {g}, LLVM gives poison/undef"
        assert _same(g, ty, w), f"{instr}: folded to {g}, LLVM {w}"
    # the plain, defined cases do fold
    assert sum(g is not None for g in got) > 0.8 * len(got)


def test_compares_and_casts_match_llvm():
    b = _builder()
    cases, got = [], []
    for pred, signed in itertools.product(PREDICATES, (True, False)):
        for x, y in itertools.product(VALUES[I8], repeat=2):
            fn = b.icmp_signed if signed else b.icmp_unsigned
            r = fn(pred, ir.Constant(I8, x), ir.Constant(I8, y))
            code = {"==": "eq", "!=": "ne"}.get(pred) or \
                ("s" if signed else "u") + {"<": "lt", "<=": "le", ">": "gt", ">=": "ge"}[pred]
            cases.append((f"icmp {code} i8 {x}, {y}", I1))
            got.append(const_int(r))
    for x in VALUES[I8]:
        for cast, ty in (("zext", I64), ("sext", I64), ("trunc", I1)):
            got.append(const_int(getattr(b, cast)(ir.Constant(I8, x), ty)))
            cases.append((f"{cast} i8 {x} to {ty}", ty))
    want = _llvm_fold(cases)
    for (instr, ty), g, w in zip(cases, got, want):
        assert g is not None and w is not None and _same(g, ty, w), (instr, g, w)


def test_identities_and_selects():
    m = ir.Module()
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [I64, I1]), "f")
    b = FoldingBuilder(fn.append_basic_block("entry"))
    x, c = fn.args
    zero, one = ir.Constant(I64, 0), ir.Constant(I64, 1)
    assert b.add(x, zero) is x and b.add(zero, x) is x and b.sub(x, zero) is x
    assert b.mul(x, one) is x and b.mul(one, x) is x and const_int(b.mul(x, zero)) == 0
    assert b.sdiv(x, one) is x and b.udiv(x, one) is x
    assert b.or_(x, zero) is x and b.xor(zero, x) is x and b.and_(x, ir.Constant(I64, -1)) is x
    assert b.select(ir.Constant(I1, True), x, zero) is x
    assert b.select(ir.Constant(I1, False), x, zero) is zero
    assert b.and_(c, ir.Constant(I1, True)) is c and b.or_(c, ir.Constant(I1, False)) is c
    assert not b.block.instructions  # nothing was emitted
    # not foldable: emitted
    b.sdiv(x, ir.Constant(I64, 8))
    b.sdiv(ir.Constant(I64, 8), ir.Constant(I64, 0))
    b.fadd(ir.Constant(ir.FloatType(), 1.0), ir.Constant(ir.FloatType(), 2.0))
    assert len(b.block.instructions) == 3


def test_division_by_a_constant_is_one_instruction():
    """The scalar emission's exact integer division, on a constant divisor, is one sdiv (the
    guards for 0 and -1 fold away); on a variable divisor it keeps them."""
    from ptxc.ir.types import ScalarType
    from ptxc.lower.llvm_scalar import ScalarEmitter

    class E(ScalarEmitter):
        pass
    m = ir.Module()
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [I64, I64]), "f")
    e = E()
    e.m, e.b, e.vals = m, FoldingBuilder(fn.append_basic_block("entry")), {}
    x, y = fn.args
    idx = ScalarType("index")
    e._int_div(x, ir.Constant(I64, 14), idx)
    assert [i.opname for i in e.b.block.instructions] == ["sdiv"]
    e._int_div(x, y, idx)
    assert len(e.b.block.instructions) > 4
