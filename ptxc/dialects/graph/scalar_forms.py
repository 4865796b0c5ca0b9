"""Scalar forms: how each elementwise graph op computes one result element from one element of
each operand, written with arith and math ops. Fusions build scalar bodies from them (the
epilogue of ``graph.fused_conv``, the body of ``graph.elementwise``)::

    form = scalar_form(relu_op)               # None when the op has none
    y = form(relu_op, builder, [x_scalar])    # builds arith.max(x, 0.0) at builder; returns y

A form receives the op, a :class:`~ptxc.ir.builder.Builder` placed in a scalar block, and one
scalar value per operand (of the operand's element type); it returns the result's element.

Every form reproduces the op's numpy reference within fp32 rounding, edge values included:

* sigmoid uses the reference's overflow-free form (``exp(-|x|)``, then a select);
* elu/selu need ``expm1`` and softplus ``log1p``, which the math dialect lacks; they use the
  exact rewrites of Kahan (``expm1 x = (u - 1) x / log u`` with ``u = exp x``) and Goldberg
  (``log1p e = log(u) e / (u - 1)`` with ``u = 1 + e``), accurate to a few ulps near 0 where
  ``exp(x) - 1`` and ``log(1 + e)`` would lose every digit;
* ops whose reference computes float16 in float32 (activations, exp, log) do so in the body too
  (``arith.cast`` to f32 and back);
* integer ``graph.div`` by zero gives 0, as the reference does.

``graph.pow`` has a form only for float operands of one type (integer powers with negative
exponents truncate in the reference, which arith.pow cannot do). Cast, comparisons and ``where``
have forms; so do ``graph.identity``/``graph.dropout`` (the operand itself) and
``graph.elementwise`` (its body, inlined by :func:`inline_block`).

:class:`BodyBuilder` maps tensors to the scalars of a body being built: a block argument per
distinct outer tensor (which becomes an operand of the fused op), and an ``arith.constant`` for a
one-element ``graph.constant``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ...ir.builder import Builder
from ...ir.core import Block, Operation, OpResult, Value
from ...ir.spec import lookup
from ...ir.types import F16, F32, I1, ScalarType, TensorType

#: form(op, builder, scalar_args) -> the result element
ScalarForm = Callable[[Operation, Builder, list], Value]

_FORMS: dict[str, ScalarForm] = {}
_GUARDS: dict[str, Callable[[Operation], bool]] = {}


def _form(*names: str, guard=None):
    def wrap(fn):
        for n in names:
            _FORMS["graph." + n] = fn
            if guard is not None:
                _GUARDS["graph." + n] = guard
        return fn
    return wrap


def scalar_form(op: Operation) -> ScalarForm | None:
    """The scalar form of ``op``, or None when it has none (not elementwise, or a case the form
    cannot reproduce exactly)."""
    fn = _FORMS.get(op.name)
    if fn is None or len(op.results) != 1 or not isinstance(op.results[0].type, TensorType):
        return None
    if not all(isinstance(v.type, TensorType) for v in op.operands):
        return None
    guard = _GUARDS.get(op.name)
    if guard is not None and not guard(op):
        return None
    return fn


def has_scalar_form(op: Operation) -> bool:
    return scalar_form(op) is not None


def scalar_form_ops() -> list[str]:
    """The op names that have a scalar form."""
    return sorted(_FORMS)


# ---- building blocks -------------------------------------------------------------------------

def constant_attr(value, t: ScalarType):
    """``value`` as the ``value`` attribute of an ``arith.constant`` of type ``t``: a bool for i1,
    an int for integers, and for f32/f16 the shortest decimal that rounds to the same number."""
    if t == I1:
        return bool(value)
    if not t.is_float:
        return int(value)
    v = float(value)
    if t in (F32, F16):
        v = float(str(t.np_dtype.type(v)))
    return v


def constant(b: Builder, value, t: ScalarType) -> Value:
    """An ``arith.constant`` of type ``t`` at ``b``."""
    return b.create("arith.constant", [], {"value": constant_attr(value, t), "type": t}).result


def _op(b: Builder, name: str, *args, **attributes) -> Value:
    return b.create(name, list(args), attributes or None).result


def _c(b: Builder, value, like: Value) -> Value:
    return constant(b, value, like.type)


def _cmp(b: Builder, predicate: str, x: Value, y: Value) -> Value:
    return _op(b, "arith.cmp", x, y, predicate=predicate)


def _select(b: Builder, c: Value, x: Value, y: Value) -> Value:
    return _op(b, "arith.select", c, x, y)


def _expm1(b: Builder, x: Value) -> Value:
    """``exp(x) - 1``, accurate near 0 (Kahan): ``u = exp x``; ``x`` if ``u == 1``, ``-1`` if
    ``u - 1 == -1``, else ``(u - 1) * x / log u``."""
    one = _c(b, 1.0, x)
    u = _op(b, "math.exp", x)
    um1 = _op(b, "arith.sub", u, one)
    q = _op(b, "arith.div", _op(b, "arith.mul", um1, x), _op(b, "math.log", u))
    r = _select(b, _cmp(b, "eq", um1, _c(b, -1.0, x)), um1, q)
    return _select(b, _cmp(b, "eq", u, one), x, r)


def _log1p(b: Builder, e: Value) -> Value:
    """``log(1 + e)``, accurate near 0 (Goldberg): ``u = 1 + e``; ``e`` if ``u == 1``, else
    ``log(u) * e / (u - 1)``."""
    u = _op(b, "arith.add", _c(b, 1.0, e), e)
    d = _op(b, "arith.sub", u, _c(b, 1.0, e))
    q = _op(b, "arith.div", _op(b, "arith.mul", _op(b, "math.log", u), e), d)
    return _select(b, _cmp(b, "eq", d, _c(b, 0.0, e)), e, q)


def _widened(fn):
    """Run a unary float form in f32 when its operand is f16 (the reference does)."""
    def form(op, b, args):
        (x,) = args
        if x.type != F16:
            return fn(op, b, args)
        y = fn(op, b, [_op(b, "arith.cast", x, to=F32)])
        return _op(b, "arith.cast", y, to=F16)
    form.__doc__ = fn.__doc__
    return form


# ---- activations -----------------------------------------------------------------------------

@_form("relu")
def _relu(op, b, args):
    (x,) = args
    return _op(b, "arith.max", x, _c(b, 0, x))


@_form("leaky_relu")
@_widened
def _leaky_relu(op, b, args):
    (x,) = args
    neg = _cmp(b, "lt", x, _c(b, 0.0, x))
    return _select(b, neg, _op(b, "arith.mul", x, _c(b, op.attr("alpha"), x)), x)


@_form("prelu")
def _prelu(op, b, args):
    x, s = args
    neg = _cmp(b, "lt", x, _c(b, 0, x))
    return _select(b, neg, _op(b, "arith.mul", x, s), x)


@_form("sigmoid")
@_widened
def _sigmoid(op, b, args):
    (x,) = args
    e = _op(b, "math.exp", _op(b, "arith.neg", _op(b, "math.abs", x)))
    one = _c(b, 1.0, x)
    den = _op(b, "arith.add", one, e)
    pos = _cmp(b, "ge", x, _c(b, 0.0, x))
    return _select(b, pos, _op(b, "arith.div", one, den), _op(b, "arith.div", e, den))


@_form("tanh")
@_widened
def _tanh(op, b, args):
    return _op(b, "math.tanh", args[0])


@_form("clip")
def _clip(op, b, args):
    g = lookup(op.name).groups(op, args)
    y = g["input"]
    if g["min"] is not None:
        y = _op(b, "arith.max", y, g["min"])
    if g["max"] is not None:
        y = _op(b, "arith.min", y, g["max"])
    return y


@_form("elu")
@_widened
def _elu(op, b, args):
    (x,) = args
    zero = _c(b, 0.0, x)
    em1 = _expm1(b, _op(b, "arith.min", x, zero))
    neg = _op(b, "arith.mul", _c(b, op.attr("alpha"), x), em1)
    return _select(b, _cmp(b, "lt", x, zero), neg, x)


@_form("selu")
@_widened
def _selu(op, b, args):
    (x,) = args
    zero = _c(b, 0.0, x)
    a, g = _c(b, op.attr("alpha"), x), _c(b, op.attr("gamma"), x)
    em1 = _expm1(b, _op(b, "arith.min", x, zero))
    neg = _op(b, "arith.mul", g, _op(b, "arith.mul", a, em1))
    return _select(b, _cmp(b, "le", x, zero), neg, _op(b, "arith.mul", g, x))


def _clamp01(b, y):
    return _op(b, "arith.min", _op(b, "arith.max", y, _c(b, 0.0, y)), _c(b, 1.0, y))


@_form("hard_sigmoid")
@_widened
def _hard_sigmoid(op, b, args):
    (x,) = args
    y = _op(b, "arith.add", _op(b, "arith.mul", _c(b, op.attr("alpha"), x), x),
            _c(b, op.attr("beta"), x))
    return _clamp01(b, y)


@_form("hard_swish")
@_widened
def _hard_swish(op, b, args):
    (x,) = args
    y = _op(b, "arith.add", _op(b, "arith.mul", x, _c(b, 1 / 6, x)), _c(b, 0.5, x))
    return _op(b, "arith.mul", x, _clamp01(b, y))


@_form("softplus")
@_widened
def _softplus(op, b, args):
    """``max(x, 0) + log1p(exp(-|x|))``: numpy's logaddexp(0, x), step for step."""
    (x,) = args
    e = _op(b, "math.exp", _op(b, "arith.neg", _op(b, "math.abs", x)))
    return _op(b, "arith.add", _op(b, "arith.max", x, _c(b, 0.0, x)), _log1p(b, e))


@_form("gelu")
@_widened
def _gelu(op, b, args):
    (x,) = args
    half, one = _c(b, 0.5, x), _c(b, 1.0, x)
    hx = _op(b, "arith.mul", half, x)
    if op.attr("approximate") == "tanh":
        cube = _op(b, "arith.mul", _op(b, "arith.mul", _op(b, "arith.mul",
                                                           _c(b, 0.044715, x), x), x), x)
        inner = _op(b, "arith.mul", _c(b, np.sqrt(2.0 / np.pi), x), _op(b, "arith.add", x, cube))
        t = _op(b, "math.tanh", inner)
    else:
        t = _op(b, "math.erf", _op(b, "arith.mul", x, _c(b, 1 / np.sqrt(2.0), x)))
    return _op(b, "arith.mul", hx, _op(b, "arith.add", one, t))


# ---- unary math ------------------------------------------------------------------------------

def _math(name):
    def form(op, b, args):
        return _op(b, name, args[0])
    return form


_form("erf")(_math("math.erf"))
_form("sqrt")(_math("math.sqrt"))
_form("floor")(_math("math.floor"))
_form("ceil")(_math("math.ceil"))
_form("exp")(_widened(_math("math.exp")))
_form("log")(_widened(_math("math.log")))


@_form("abs")
def _abs(op, b, args):
    (x,) = args
    if x.type.is_float:
        return _op(b, "math.abs", x)
    if not x.type.is_signed:
        return x
    return _select(b, _cmp(b, "lt", x, _c(b, 0, x)), _op(b, "arith.neg", x), x)


@_form("neg")
def _neg(op, b, args):
    return _op(b, "arith.neg", args[0])


@_form("reciprocal")
def _reciprocal(op, b, args):
    (x,) = args
    return _op(b, "arith.div", _c(b, 1.0, x), x)


@_form("not")
def _not(op, b, args):
    return _op(b, "arith.not", args[0])


@_form("cast")
def _cast(op, b, args):
    (x,) = args
    to = op.attributes["to"]
    return x if x.type == to else _op(b, "arith.cast", x, to=to)


@_form("identity", "dropout")
def _identity(op, b, args):
    return args[0]


# ---- binary and variadic ---------------------------------------------------------------------

def _arith(name):
    def form(op, b, args):
        return _op(b, name, *args)
    return form


_form("add")(_arith("arith.add"))
_form("sub")(_arith("arith.sub"))
_form("mul")(_arith("arith.mul"))


@_form("div")
def _div(op, b, args):
    x, y = args
    q = _op(b, "arith.div", x, y)
    if x.type.is_float:
        return q
    zero = _c(b, 0, y)
    return _select(b, _cmp(b, "eq", y, zero), zero, q)  # x / 0 is 0, as the reference


def _same_float_types(op):
    a, c = op.operands[0].type.element, op.operands[1].type.element
    return a == c and a.is_float


_form("pow", guard=_same_float_types)(_arith("arith.pow"))


def _fold(name):
    def form(op, b, args):
        y = args[0]
        for x in args[1:]:
            y = _op(b, name, y, x)
        return y
    return form


_form("max")(_fold("arith.max"))
_form("min")(_fold("arith.min"))
_form("sum")(_fold("arith.add"))


@_form("mean")
def _mean(op, b, args):
    s = _fold("arith.add")(op, b, args)
    return _op(b, "arith.div", s, _c(b, len(args), s))


@_form("where")
def _where(op, b, args):
    return _select(b, *args)


_form("equal")(lambda op, b, args: _cmp(b, "eq", *args))
_form("less")(lambda op, b, args: _cmp(b, "lt", *args))
_form("greater")(lambda op, b, args: _cmp(b, "gt", *args))


# ---- graph.elementwise: its own body ---------------------------------------------------------

def inline_block(block: Block, b: Builder, args) -> list[Value]:
    """Clone the ops of ``block`` at ``b``, its arguments replaced by ``args``; returns the
    (mapped) operands of its terminator (``graph.yield``), which is not cloned. Values the block
    reads from outside it are kept."""
    mapping: dict = dict(zip(block.args, args, strict=True))
    for op in block.ops:
        if op.name == "graph.yield":
            return [mapping.get(v, v) for v in op.operands]
        b.insert(op.clone(mapping))
    return []


@_form("elementwise")
def _elementwise(op, b, args):
    (y,) = inline_block(op.regions[0].blocks[0], b, args)
    return y


# ---- building a body from tensors ------------------------------------------------------------

def scalar_constant(v: Value):
    """The element of ``v`` when it is a one-element ``graph.constant``, else None."""
    p = v.op if isinstance(v, OpResult) else None
    if p is None or p.name != "graph.constant" or v.type.size != 1:
        return None
    return p.attributes["value"].array.reshape(-1)[0]


class BodyBuilder:
    """Builds a scalar body in ``block`` from tensor-level values (see the module docstring).

    ``known`` presets scalars for some tensors (a fused op's accumulator). :meth:`scalar` gives
    the scalar of a tensor: a preset one, an ``arith.constant`` for a one-element constant (when
    ``inline_constants``), else a new block argument; :attr:`inputs` lists the tensors that got
    block arguments, in order (the fused op's operands). :meth:`apply` applies an op's scalar
    form to its operands' scalars and records the result as its result's scalar.
    """

    def __init__(self, block: Block, known: dict | None = None, inline_constants: bool = True):
        self.block = block
        self.builder = Builder.at_end(block)
        self.known: dict[Value, Value] = dict(known or {})
        self.inline_constants = inline_constants
        self.inputs: list[Value] = []

    def scalar(self, v: Value) -> Value:
        s = self.known.get(v)
        if s is not None:
            return s
        c = scalar_constant(v) if self.inline_constants else None
        if c is not None:
            s = constant(self.builder, c, v.type.element)
        else:
            s = self.block.add_arg(v.type.element)
            self.inputs.append(v)
        self.known[v] = s
        return s

    def apply(self, op: Operation, args=None) -> Value:
        """The scalar of ``op``'s result: its form applied to ``args`` (default: the scalars of
        its operands)."""
        form = scalar_form(op)
        if form is None:
            raise ValueError(f"{op.where} has no scalar form")
        if args is None:
            args = [self.scalar(v) for v in op.operands]
        s = form(op, self.builder, list(args))
        self.known[op.results[0]] = s
        return s

    def finish(self, value: Value) -> None:
        """End the body with ``graph.yield(value)``."""
        self.builder.create("graph.yield", [value], result_types=[])
