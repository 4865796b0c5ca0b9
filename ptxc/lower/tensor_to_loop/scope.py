"""Insertion points inside a loop nest and the scalars emitted at them.

A :class:`Scope` is a builder at one level of a nest (the body of its ``loop.parallel``, of one
``loop.for`` inside it) with a cache of the values computed there; a lookup also sees the
levels it is nested in, so a value is computed once, at the level where it is first needed,
and reused by every level inside that. Constants (:func:`const`) are made once per nest at the
start of its outermost body; affine index expressions (:func:`affine`) are cached under the
values of the dims they read (:func:`dims_key`), so one is reused only where those dims have
the same values (in an unroll-and-jam, an index that reads the jammed dim is made per point,
one that does not is shared by the points).

The nests (nest.py), the fills and border kernels (data.py) and the function's rematerialized
scalars (function.py) all emit through a Scope.
"""

from __future__ import annotations

from ...dialects.graph.scalar_forms import constant_attr
from ...dialects.tensor.maps import row_terms
from ...ir.builder import Builder
from ...ir.core import Value
from ...ir.spec import make_op
from ...ir.types import INDEX, ScalarType


class Scope:
    """An insertion point inside a nest, with the values cached at its level (visible in the
    levels nested in it)."""

    def __init__(self, b: Builder, parent: "Scope | None" = None):
        self.b = b
        self.parent = parent
        self.cache: dict = {}

    def get(self, key):
        s = self
        while s is not None:
            if key in s.cache:
                return s.cache[key]
            s = s.parent
        return None


def const(scope: Scope, value, t: ScalarType) -> Value:
    """An ``arith.constant``, made once per nest at the start of its outermost body."""
    root = scope
    while root.parent is not None:
        root = root.parent
    key = ("const", t, repr(value))
    v = root.cache.get(key)
    if v is None:
        op = make_op("arith.constant", [], {"value": constant_attr(value, t), "type": t})
        block = root.b.block
        block.insert_before(block.first_op, op)
        v = root.cache[key] = op.results[0]
    return v


def cast(scope: Scope, v: Value, t: ScalarType) -> Value:
    return v if v.type == t else scope.b.create("arith.cast", [v], {"to": t}).result


def dims_key(rows, dims: dict) -> tuple:
    """What an expression over ``rows`` depends on: the values of the dims it reads (so a
    cached value is reused only where those dims have the same values)."""
    used = sorted({i for row in rows for i, _ in row_terms(row)})
    return tuple(dims[i] if isinstance(dims[i], int) else id(dims[i]) for i in used)


def affine(scope: Scope, row, dims: dict) -> Value:
    """The index ``sum c_i * d_i + k`` of ``row`` with the nest dims' values ``dims`` (an
    ``index`` Value, or an int for a dim fixed to one value)."""
    key = ("row", tuple(row), dims_key([row], dims))
    v = scope.get(key)
    if v is not None:
        return v
    k = int(row[-1])
    acc = None
    b = scope.b
    for i, c in row_terms(row):
        d = dims[i]
        if isinstance(d, int):
            k += c * d
            continue
        t = d if c == 1 else b.create("arith.mul", [d, const(scope, c, INDEX)]).result
        acc = t if acc is None else b.create("arith.add", [acc, t]).result
    if acc is None:
        v = const(scope, k, INDEX)
    elif k:
        v = b.create("arith.add", [acc, const(scope, k, INDEX)]).result
    else:
        v = acc
    scope.cache[key] = v
    return v
