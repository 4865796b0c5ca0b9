"""An llvmlite IRBuilder that folds integer constants as it emits.

The loop dialect's index arithmetic is mostly arithmetic on constants: a flattened index
split back into coordinates divides by a shape (``arith.div %i, %c14``), strides multiply
induction values, an offset of 0 is added. The scalar emission is exact for every operand
(:mod:`ptxc.lower.llvm_scalar`: integer division guards a zero or -1 divisor with compares and
selects), so before this builder every division by a constant was seven instructions, and
ResNet-50's mapped kernels were 13 MB of LLVM IR (274k instructions at batch 1) that
llvmlite wrote, parsed twice and LLVM then folded back. LLVM's own InstCombine computes
the same values (these are exactly its constant folds), so the code's meaning, and the PTX
after O3, do not change; only the emission, the text and every parse shrink.

Before -> after (``arith.div %i, %c8`` on index)::

    %a = icmp eq i64 8, 0                %q = sdiv i64 %i, 8
    %b = icmp eq i64 8, -1
    %c = or i1 %a, %b
    %d = select i1 %c, i64 1, i64 8
    %q0 = sdiv i64 %i, %d
    %n = sub i64 0, %i
    %q = select i1 %b, i64 %n, i64 %q0

What folds: ``add sub mul and or xor shl lshr ashr sdiv udiv srem urem``, ``icmp``,
``select``, ``zext sext trunc`` on integer constants (a result that would be poison or
undefined, such as a division by zero or an overflow under ``nsw``/``nuw``, or a shift by
the width or more, is emitted as the instruction, unfolded); and the identities ``x + 0``,
``x - 0``, ``x * 1``, ``x * 0`` (0), ``x / 1``, ``x | 0``, ``x ^ 0``, ``x & -1``,
``select true/false``, ``and/or`` of i1 with a constant. Float arithmetic is never folded
(rounding, NaN payloads and signed zeros stay LLVM's business).
"""

from __future__ import annotations

from llvmlite import ir


def const_int(v) -> int | None:
    """The value of an integer ``ir.Constant`` (None for anything else)."""
    if (isinstance(v, ir.Constant) and isinstance(v.type, ir.IntType)
            and isinstance(v.constant, int)):
        return v.constant
    return None


def _wrap(x: int, bits: int) -> int:
    """``x`` modulo 2**bits, as a signed value (what ir.Constant prints)."""
    return _signed(x, bits)


def _signed(x: int, bits: int) -> int:
    """``x`` read as a two's-complement value of ``bits`` bits."""
    x &= (1 << bits) - 1
    return x - (1 << bits) if x >> (bits - 1) else x


def _unsigned(x: int, bits: int) -> int:
    return x & ((1 << bits) - 1)


def _fits(x: int, bits: int, signed: bool) -> bool:
    if signed:
        return -(1 << (bits - 1)) <= x < (1 << (bits - 1))
    return 0 <= x < (1 << bits)


def _tdiv(a: int, b: int) -> int:
    """Integer division truncating toward zero (LLVM's sdiv)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_ICMP = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
         "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


class FoldingBuilder(ir.IRBuilder):
    """An ``ir.IRBuilder`` whose integer instructions fold constants (module docstring).
    A folded result has no instruction, so the ``name`` asked for is dropped."""

    @staticmethod
    def _k(ty, value: int) -> ir.Constant:
        if ty.width == 1:
            return ir.Constant(ty, bool(value & 1))
        return ir.Constant(ty, _wrap(value, ty.width))

    def _fold(self, op, lhs, rhs, flags, fold, simplify=None, **kw):
        """``simplify(lhs, rhs, a, b)`` (a, b: constant values or None) -> a value or None;
        ``fold(a, b, bits, flags)`` -> an int, or None (emit the instruction)."""
        if isinstance(lhs.type, ir.IntType) and lhs.type == rhs.type:
            a, c = const_int(lhs), const_int(rhs)
            if a is not None and c is not None:
                r = fold(a, c, lhs.type.width, tuple(flags or ()))
                if r is not None:
                    return self._k(lhs.type, r)
            elif simplify is not None:
                r = simplify(lhs, rhs, a, c)
                if r is not None:
                    return r
        return getattr(ir.IRBuilder, op)(self, lhs, rhs, flags=flags, **kw)

    # ---- arithmetic ---------------------------------------------------------------------------
    def add(self, lhs, rhs, name="", flags=()):
        return self._fold("add", lhs, rhs, flags, _fold_add, _simplify_add, name=name)

    def sub(self, lhs, rhs, name="", flags=()):
        return self._fold("sub", lhs, rhs, flags, _fold_sub,
                          lambda x, y, a, b: x if b == 0 else None, name=name)

    def mul(self, lhs, rhs, name="", flags=()):
        return self._fold("mul", lhs, rhs, flags, _fold_mul, self._simplify_mul, name=name)

    def sdiv(self, lhs, rhs, name="", flags=()):
        return self._fold("sdiv", lhs, rhs, flags, _fold_sdiv,
                          lambda x, y, a, b: x if b == 1 else None, name=name)

    def udiv(self, lhs, rhs, name="", flags=()):
        return self._fold("udiv", lhs, rhs, flags, _fold_udiv,
                          lambda x, y, a, b: x if b == 1 else None, name=name)

    def srem(self, lhs, rhs, name="", flags=()):
        return self._fold("srem", lhs, rhs, flags, _fold_srem, name=name)

    def urem(self, lhs, rhs, name="", flags=()):
        return self._fold("urem", lhs, rhs, flags, _fold_urem, name=name)

    def and_(self, lhs, rhs, name="", flags=()):
        return self._fold("and_", lhs, rhs, flags, lambda a, b, n, f: a & b,
                          self._simplify_and, name=name)

    def or_(self, lhs, rhs, name="", flags=()):
        return self._fold("or_", lhs, rhs, flags, lambda a, b, n, f: a | b,
                          self._simplify_or, name=name)

    def xor(self, lhs, rhs, name="", flags=()):
        return self._fold("xor", lhs, rhs, flags, lambda a, b, n, f: a ^ b, _simplify_add,
                          name=name)

    def shl(self, lhs, rhs, name="", flags=()):
        return self._fold("shl", lhs, rhs, flags, _fold_shl, name=name)

    def lshr(self, lhs, rhs, name="", flags=()):
        return self._fold("lshr", lhs, rhs, flags, _fold_lshr, name=name)

    def ashr(self, lhs, rhs, name="", flags=()):
        return self._fold("ashr", lhs, rhs, flags, _fold_ashr, name=name)

    def _simplify_mul(self, x, y, a, b):
        for v, c in ((x, b), (y, a)):
            if c == 1:
                return v
            if c == 0:
                return self._k(x.type, 0)
        return None

    def _simplify_and(self, x, y, a, b):
        ones = (1 << x.type.width) - 1
        for v, c in ((x, b), (y, a)):
            if c is not None and _unsigned(c, x.type.width) == ones:
                return v
            if c == 0:
                return self._k(x.type, 0)
        return None

    def _simplify_or(self, x, y, a, b):
        ones = (1 << x.type.width) - 1
        for v, c in ((x, b), (y, a)):
            if c == 0:
                return v
            if c is not None and _unsigned(c, x.type.width) == ones:
                return self._k(x.type, -1)
        return None

    # ---- compares, selects, casts -------------------------------------------------------------
    def icmp_signed(self, cmpop, lhs, rhs, name=""):
        a, c = const_int(lhs), const_int(rhs)
        if a is not None and c is not None:
            n = lhs.type.width
            return self._k(ir.IntType(1), int(_ICMP[cmpop](_signed(a, n), _signed(c, n))))
        return super().icmp_signed(cmpop, lhs, rhs, name)

    def icmp_unsigned(self, cmpop, lhs, rhs, name=""):
        a, c = const_int(lhs), const_int(rhs)
        if a is not None and c is not None:
            n = lhs.type.width
            return self._k(ir.IntType(1),
                           int(_ICMP[cmpop](_unsigned(a, n), _unsigned(c, n))))
        return super().icmp_unsigned(cmpop, lhs, rhs, name)

    def select(self, cond, lhs, rhs, name="", flags=()):
        c = const_int(cond)
        if c is not None and cond.type.width == 1:
            return lhs if c & 1 else rhs
        if lhs is rhs:
            return lhs
        return super().select(cond, lhs, rhs, name, flags)

    def zext(self, value, typ, name=""):
        c = const_int(value)
        if c is not None:
            return self._k(typ, _unsigned(c, value.type.width))
        return super().zext(value, typ, name)

    def sext(self, value, typ, name=""):
        c = const_int(value)
        if c is not None:
            return self._k(typ, _signed(c, value.type.width))
        return super().sext(value, typ, name)

    def trunc(self, value, typ, name=""):
        c = const_int(value)
        if c is not None:
            return self._k(typ, c)
        return super().trunc(value, typ, name)


def _simplify_add(x, y, a, b):
    """``x + 0``, ``0 + x`` (and the same for xor)."""
    if b == 0:
        return x
    if a == 0:
        return y
    return None


# ---- the folds (None: the result is poison or undefined; emit the instruction) ----------------
def _flagged(exact: int, bits: int, flags) -> int | None:
    if "nsw" in flags and not _fits(exact, bits, True):
        return None
    return exact


def _fold_add(a, b, n, flags):
    if "nuw" in flags and not _fits(_unsigned(a, n) + _unsigned(b, n), n, False):
        return None
    return _flagged(_signed(a, n) + _signed(b, n), n, flags)


def _fold_sub(a, b, n, flags):
    if "nuw" in flags and _unsigned(a, n) < _unsigned(b, n):
        return None
    return _flagged(_signed(a, n) - _signed(b, n), n, flags)


def _fold_mul(a, b, n, flags):
    if "nuw" in flags and not _fits(_unsigned(a, n) * _unsigned(b, n), n, False):
        return None
    return _flagged(_signed(a, n) * _signed(b, n), n, flags)


def _fold_sdiv(a, b, n, flags):
    a, b = _signed(a, n), _signed(b, n)
    if b == 0 or (b == -1 and a == -(1 << (n - 1))):
        return None
    return _tdiv(a, b)


def _fold_udiv(a, b, n, flags):
    a, b = _unsigned(a, n), _unsigned(b, n)
    return None if b == 0 else a // b


def _fold_srem(a, b, n, flags):
    a, b = _signed(a, n), _signed(b, n)
    if b == 0 or (b == -1 and a == -(1 << (n - 1))):
        return None
    return a - _tdiv(a, b) * b


def _fold_urem(a, b, n, flags):
    a, b = _unsigned(a, n), _unsigned(b, n)
    return None if b == 0 else a % b


def _fold_shl(a, b, n, flags):
    b = _unsigned(b, n)
    if b >= n or flags:
        return None
    return _unsigned(a, n) << b


def _fold_lshr(a, b, n, flags):
    b = _unsigned(b, n)
    return None if b >= n or flags else _unsigned(a, n) >> b


def _fold_ashr(a, b, n, flags):
    b = _unsigned(b, n)
    return None if b >= n or flags else _signed(a, n) >> b
