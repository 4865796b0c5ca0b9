"""Matching helpers shared by the recognizers: constants matched by value, products of factors,
single-use checks, and the :class:`Match` that collects what a recognizer found.

A recognizer walks backwards from its root op through operands. Two kinds of mismatch:

* the *shape* of the subgraph is not the pattern's (another op kind, operands wired otherwise):
  the recognizer raises :class:`NoMatch` without a reason and the pattern says nothing (every
  ``graph.mul`` of a model is offered to the GELU recognizer; most are not GELUs);
* the shape is the pattern's but a detail is not (a constant of another value, a reduction over
  other axes, an intermediate read elsewhere): the recognizer notes a *problem* and carries on;
  once the whole shape has matched, :meth:`Match.check` raises :class:`NoMatch` with the first
  problem, which the pattern reports through ``rewriter.fail`` (``--explain`` shows it).

Constants are matched by value with a relative tolerance of a few ulps of their own element type
(``RTOL_ULPS`` machine epsilons): ``1/sqrt(2)`` written as ``0.70710677`` or
``0.7071067811865476`` is the same f32 number; ``0.7071`` is not. A constant stands for one number
when all its elements are equal; whether its broadcasting changes a shape is checked separately
(each recognizer checks that its result has the type of its input).
"""

from __future__ import annotations

import attrs
import numpy as np

from ....ir.core import Operation, Value, op_position_index
from ...pattern import producer

#: constants match their target within this many machine epsilons of their element type
RTOL_ULPS = 4


class NoMatch(Exception):
    """The recognizer does not apply; ``reason`` says why when worth telling (else None)."""

    def __init__(self, reason: str | None = None):
        super().__init__(reason)
        self.reason = reason


def no() -> NoMatch:
    """A silent mismatch (raise it)."""
    return NoMatch()


def label(op: Operation) -> str:
    """How messages name an op: its loc (ONNX node name), else its result's name, else its kind."""
    if op.loc:
        return op.loc
    if op.results and op.results[0].name_hint:
        return "%" + op.results[0].name_hint
    return op.name


def fmt(x: float, like: Value | None = None) -> str:
    """``x`` as the shortest decimal that is the same number in ``like``'s element type (f32
    when unknown): ``0.6``, not ``0.60000002``; ``2``, not ``2.0``."""
    el = getattr(getattr(like, "type", None), "element", None)
    dtype = el.np_dtype if el is not None and el.is_float else np.dtype(np.float32)
    s = str(dtype.type(x))
    return s[:-2] if s.endswith(".0") else s


def defining(value: Value, *names: str) -> Operation:
    """The op producing ``value`` if it is one of ``names``; else a silent :class:`NoMatch`."""
    op = producer(value)
    if op is None or op.name not in names:
        raise no()
    return op


def is_op(value: Value, *names: str) -> Operation | None:
    op = producer(value)
    return op if op is not None and op.name in names else None


def const_array(value: Value) -> np.ndarray | None:
    op = producer(value)
    if op is None or op.name != "graph.constant":
        return None
    return op.attributes["value"].array


def scalar_const(value: Value) -> float | None:
    """The number a constant holds when all its elements are equal (and it has some); else None."""
    a = const_array(value)
    if a is None or a.size == 0 or a.dtype.kind not in "fiu":
        return None
    flat = a.reshape(-1)
    if not np.all(flat == flat[0]):
        return None
    return float(flat[0])


def close(got: float, want: float, value: Value | None = None) -> bool:
    """``got`` equals ``want`` within a few ulps of ``value``'s element type (f32 if unknown)."""
    dtype = np.float32
    t = getattr(value, "type", None) if value is not None else None
    el = getattr(t, "element", None)
    if el is not None and el.is_float:
        dtype = el.np_dtype
    eps = float(np.finfo(dtype).eps)
    return abs(got - want) <= RTOL_ULPS * eps * abs(want)


def const_operand(op: Operation, commutative: bool = True) -> tuple[float, Value, Value] | None:
    """For a binary op with one scalar-constant operand: (its number, the constant value, the
    other operand). With ``commutative=False`` only the right operand may be the constant."""
    a, b = op.operands
    cb = scalar_const(b)
    if cb is not None:
        return cb, b, a
    if commutative:
        ca = scalar_const(a)
        if ca is not None:
            return ca, a, b
    return None


@attrs.frozen
class Factor:
    """One factor of a product: a tensor ``value``, or a number ``const`` (a scalar constant, or
    the reciprocal of a constant divisor, ``divisor=True``) that ``op`` applies."""

    value: Value | None
    const: float | None
    op: Operation
    divisor: bool = False
    like: Value | None = None   # the constant, for its element type

    def problem(self, want: float) -> str:
        """The message when this constant factor is not ``want``."""
        if self.divisor:
            return (f"{label(self.op)} divides by {fmt(1 / self.const, self.like)}, "
                    f"not {fmt(1 / want, self.like)}")
        return (f"{label(self.op)} multiplies by {fmt(self.const, self.like)}, "
                f"not {fmt(want, self.like)}")


def _factors(op: Operation) -> list[Factor] | None:
    """The two factors of a ``graph.mul``, or of a ``graph.div`` by a scalar constant."""
    if op.name == "graph.mul":
        return [Factor(v, scalar_const(v), op, like=v) for v in op.operands]
    if op.name == "graph.div":
        c = scalar_const(op.operands[1])
        if c is None or c == 0:
            return None
        return [Factor(op.operands[0], scalar_const(op.operands[0]), op),
                Factor(None, 1.0 / c, op, divisor=True, like=op.operands[1])]
    return None


def three_factor_products(root: Operation):
    """Each way to read ``root`` as a product of three factors ``(a * b) * c`` in any order and
    association, where ``a * b`` is a ``graph.mul`` (or a division by a constant) feeding
    ``root``: yields ``(factors, inner_op)``."""
    top = _factors(root)
    if top is None:
        return
    for i, f in enumerate(top):
        if f.value is None or f.const is not None:
            continue
        inner = producer(f.value)
        if inner is None:
            continue
        sub = _factors(inner)
        if sub is None:
            continue
        yield sub + [top[1 - i]], inner


def gated_product(m: "Match", gates, want: float):
    """Match ``m.root`` as ``x * gate(x) * want`` (three factors, any order and association; the
    constant may be a multiplier or a divisor): ``gates`` is a list of ``(kind, matcher)``, a
    matcher taking a fresh :class:`Match` and the gate's value and returning ``x`` (or raising
    :class:`NoMatch`). Returns ``(x, kind)`` and absorbs the matched ops into ``m``; a match
    without problems is preferred to one with."""
    found = []
    for factors, inner in three_factor_products(m.root):
        for i, f in enumerate(factors):
            if f.value is None or f.const is not None:
                continue
            rest = factors[:i] + factors[i + 1:]
            for kind, gate in gates:
                sub = m.fork()
                try:
                    x = gate(sub, f.value)
                except NoMatch:
                    continue
                xs = [r for r in rest if r.value is x]
                ks = [r for r in rest if r.const is not None and r.value is not x]
                if not xs or not ks:
                    continue
                k = ks[0]
                if not close(k.const, want, k.like):
                    sub.problem(k.problem(want))
                sub.take(inner)
                found.append((sub, x, kind))
                if not sub.problems:
                    break
    if not found:
        raise no()
    sub, x, kind = min(found, key=lambda t: bool(t[0].problems))
    m.merge(sub)
    return x, kind


class Match:
    """What a recognizer found: the ops it absorbs (with how many uses each may have) and the
    problems that stop it; see the module docstring."""

    def __init__(self, root: Operation, pattern: str):
        self.root = root
        self.pattern = pattern
        self.ops: dict[int, tuple[Operation, int]] = {}
        self.problems: list[str] = []

    def fork(self) -> "Match":
        """An empty match of the same root, to try one alternative in."""
        return Match(self.root, self.pattern)

    def merge(self, other: "Match") -> None:
        self.ops.update(other.ops)
        self.problems += other.problems

    def take(self, op: Operation, uses: int = 1) -> Operation:
        """Absorb ``op``, whose result must have exactly ``uses`` uses (all inside the match)."""
        self.ops[id(op)] = (op, uses)
        return op

    def want(self, got: float, want: float, like: Value | None, message: str) -> None:
        """A constant that should be ``want``; ``message`` is the problem if it is not."""
        if not close(got, want, like):
            self.problems.append(message)

    def problem(self, message: str) -> None:
        self.problems.append(message)

    def check(self) -> None:
        """Raise :class:`NoMatch` with a reason for the first problem or extra user."""
        if self.problems:
            raise NoMatch(self.problems[0])
        for op, uses in self.ops.values():
            if op is self.root:
                continue
            r = op.results[0]
            if len(r.uses) != uses:
                n = len(r.users)
                inside = f" ({uses} inside the pattern)" if uses > 1 else ""
                raise NoMatch(f"{label(op)} has {n} user{'s' if n != 1 else ''}{inside}")

    def fused_locs(self) -> tuple[str, ...]:
        """The locs of the absorbed ops other than the root, in program order (with what each,
        and the root, had already absorbed: their own ``ptxc.fused``)."""
        ops = [op for op, _ in self.ops.values() if op is not self.root and op.block is not None]
        pos = op_position_index(self.root.block) if ops else {}
        ops.sort(key=lambda o: pos.get(id(o), -1))
        out: list[str] = []
        for o in ops + [self.root]:
            out += o.attributes.get("ptxc.fused", ())
            if o is not self.root and o.loc:
                out.append(o.loc)
        return tuple(out)
