"""What every graph -> tensor lowering uses: the registry of lowerings, and builders for the
tensor ops they emit (DPS inits, elementwise generics with broadcast maps, scalar constants in
bodies, f16 widening).

A lowering is ``fn(op, b) -> list[Value]``: it builds tensor ops at ``b`` (just before ``op``)
from ``op``'s operands (already lowered) and returns the values that replace ``op``'s results.
It raises :class:`Unsupported` for an attribute variant it cannot express; the pass collects
those and reports every one at once.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ...dialects.graph.scalar_forms import constant as scalar_constant_op
from ...dialects.tensor.generic import build_generic
from ...dialects.tensor.maps import broadcast_map, identity_map, unit_row
from ...ir.attributes import DenseElements
from ...ir.builder import Builder
from ...ir.core import OpResult, Value
from ...ir.types import F16, F32, I1, ScalarType, TensorType

Lowering = Callable  # (op, Builder) -> list[Value]

LOWERINGS: dict[str, Lowering] = {}


class Unsupported(Exception):
    """A lowering cannot express this op (an attribute variant); the message says why."""


def lowers(*names: str):
    """Register a lowering for the graph ops ``names``."""
    def wrap(fn):
        for n in names:
            if n in LOWERINGS:
                raise ValueError(f"two lowerings for {n}")
            LOWERINGS[n] = fn
        return fn
    return wrap


# ---- values ----------------------------------------------------------------------------------------

def acc_type(el: ScalarType) -> ScalarType:
    """The element sums and statistics are computed in: f32 for f16 (as the graph references)."""
    return F32 if el == F16 else el


def empty(b: Builder, t: TensorType) -> Value:
    return b.create("tensor.empty", [], result_types=[t]).result


def fill_value(value, el: ScalarType):
    """``value`` as a ``tensor.fill`` attribute for element type ``el``."""
    if el == I1:
        return bool(value)
    if el.is_float:
        return float(value)
    return int(value)


def fill(b: Builder, t: TensorType, value) -> Value:
    return b.create("tensor.fill", [empty(b, t)], {"value": fill_value(value, t.element)}).result


def lowest(el: ScalarType):
    """The identity of max: -inf, the type's lowest integer, false."""
    if el == I1:
        return False
    if el.is_float:
        return -np.inf
    return int(np.iinfo(el.np_dtype).min)


def highest(el: ScalarType):
    if el == I1:
        return True
    if el.is_float:
        return np.inf
    return int(np.iinfo(el.np_dtype).max)


def constant(b: Builder, array: np.ndarray, el: ScalarType | None = None) -> Value:
    """A ``tensor.constant`` of ``array`` (of type ``el`` when given)."""
    t = TensorType(array.shape, el) if el is not None else None
    return b.create("tensor.constant", [], {"value": DenseElements(array, t)}).result


def const_array(v: Value) -> np.ndarray | None:
    """The contents of ``v`` when a ``tensor.constant`` (or ``graph.constant``) defines it."""
    if isinstance(v, OpResult) and v.op.name in ("tensor.constant", "graph.constant"):
        return v.op.attributes["value"].array
    return None


def c(b: Builder, value, t: ScalarType) -> Value:
    """An ``arith.constant`` (in a body)."""
    return scalar_constant_op(b, value, t)


def op_(b: Builder, name: str, *args, **attributes) -> Value:
    return b.create(name, list(args), attributes or None).result


def cast(b: Builder, v: Value, t: ScalarType) -> Value:
    return v if v.type == t else op_(b, "arith.cast", v, to=t)


# ---- generics ----------------------------------------------------------------------------------------

def elementwise(b: Builder, operands, out: TensorType, body, inline_constants: bool = True,
                init: Value | None = None, maps=None) -> Value:
    """A parallel ``tensor.generic`` over ``out``'s shape; each operand broadcast (numpy rules)
    unless ``maps`` gives its map (None entries broadcast); ``body(builder, scalars)`` returns
    the result element. One-element constants become ``arith.constant`` in the body, an operand
    repeated with the same map one block argument."""
    n = len(out.shape)
    maps = list(maps) if maps is not None else [None] * len(operands)
    maps = [broadcast_map(v.type.shape, out.shape) if m is None else m
            for v, m in zip(operands, maps)]
    ins: list[Value] = []
    in_maps: list = []
    plan = []  # per operand: ("arg", index into ins) or ("const", value)
    for v, m in zip(operands, maps):
        arr = const_array(v) if inline_constants else None
        if arr is not None and arr.size == 1:
            plan.append(("const", arr.reshape(-1)[0]))
            continue
        for j, (w, wm) in enumerate(zip(ins, in_maps)):
            if w is v and wm == m:
                plan.append(("arg", j))
                break
        else:
            plan.append(("arg", len(ins)))
            ins.append(v)
            in_maps.append(m)

    def gen_body(bb, args):
        scalars = [args[k] if kind == "arg" else c(bb, k, v.type.element)
                   for (kind, k), v in zip(plan, operands)]
        return [body(bb, scalars)]

    return build_generic(ins, [init if init is not None else empty(b, out)], out.shape,
                         in_maps + [identity_map(n)], ["parallel"] * n, gen_body, b=b).result


def channel_map(rank: int):
    """The map of a per-channel ``(C,)`` operand in a loop nest over ``(N, C, ...)``."""
    return (unit_row(rank, 1),)


def map_elements(b: Builder, v: Value, out_el: ScalarType, fn) -> Value:
    """``fn(builder, element)`` applied to every element of ``v`` (result element ``out_el``)."""
    return elementwise(b, [v], v.type.with_element(out_el), lambda bb, s: fn(bb, s[0]))


def widen(b: Builder, v: Value) -> Value:
    """``v`` in its accumulation type (a cast generic for f16, ``v`` itself otherwise)."""
    el = acc_type(v.type.element)
    if el == v.type.element:
        return v
    return map_elements(b, v, el, lambda bb, s: cast(bb, s, el))


def keepdims_shape(shape, axes) -> tuple[int, ...]:
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def reshape(b: Builder, v: Value, shape) -> Value:
    shape = tuple(shape)
    if v.type.shape == shape:
        return v
    return b.create("tensor.reshape", [v], result_types=[v.type.with_shape(shape)]).result


def reduce(b: Builder, x: Value, axes, kind: str, init_value, el: ScalarType | None = None
           ) -> Value:
    """``tensor.reduce`` of ``x`` over ``axes`` into a fill of ``init_value`` (keepdims shape,
    element ``el`` or x's)."""
    t = TensorType(keepdims_shape(x.type.shape, set(axes)), el or x.type.element)
    return b.create("tensor.reduce", [x, fill(b, t, init_value)],
                    {"kind": kind, "axes": tuple(sorted(axes))}).result


def pad(b: Builder, x: Value, low, high, value) -> Value:
    """``x`` padded by ``low``/``high`` per dim with the constant ``value``; negative entries
    crop (an ``extract_slice`` first, as ONNX crops before padding)."""
    low, high = list(low), list(high)
    if any(p < 0 for p in low + high):
        shape = x.type.shape
        offsets = [max(0, -p) for p in low]
        sizes = [d - max(0, -lo) - max(0, -hi) for d, lo, hi in zip(shape, low, high)]
        x = b.create("tensor.extract_slice", [x], {"offsets": offsets, "sizes": sizes,
                                                   "strides": [1] * len(shape)}).result
        low, high = [max(0, p) for p in low], [max(0, p) for p in high]
    if not any(low + high):
        return x
    return b.create("tensor.pad", [x], {"low": low, "high": high,
                                        "value": fill_value(value, x.type.element)}).result
