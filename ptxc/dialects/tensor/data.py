"""Tensor creation and data movement: ``tensor.constant``, ``tensor.empty``, ``tensor.fill``,
``tensor.extract_slice``, ``tensor.insert_slice``, ``tensor.reshape``, ``tensor.pad``.

    %e = "tensor.empty"() : () -> tensor<1x8xf32>
    %z = "tensor.fill"(%e) {value = 0.0} : (tensor<1x8xf32>) -> tensor<1x8xf32>
    %s = "tensor.extract_slice"(%x) {offsets = [0, 2], sizes = [1, 4], strides = [1, 1]}
       : (tensor<1x8xf32>) -> tensor<1x4xf32>
    %c = "tensor.insert_slice"(%a, %e) {in_place = true, offsets = [0, 0], sizes = [1, 4],
                                        strides = [1, 1]} : (...) -> tensor<1x8xf32>
    %p = "tensor.pad"(%x) {high = [0, 1], low = [0, 1], value = 0.0}
       : (tensor<1x8xf32>) -> tensor<1x10xf32>

Slices keep the rank (a size-1 dimension stays; ``tensor.reshape`` drops it), and their strides
may be negative (a reversed slice, ONNX Slice with a negative step); they bufferize to views.
"""

from __future__ import annotations

import numpy as np

from ...ir.attributes import DenseElements
from ...ir.spec import Attr, Operand, OpSpec, fail
from ...ir.types import I1, ScalarType, TensorType


def tensor_operand(op, i: int = 0) -> TensorType:
    t = op.operands[i].type
    if not isinstance(t, TensorType):
        fail(op, f"operand #{i} must be a tensor, is {t}")
    return t


def scalar_value(op, value, element: ScalarType):
    """An attribute ``value`` (int, float or bool) checked against ``element``."""
    if isinstance(value, bool):
        if element != I1:
            fail(op, f"value {value} is a bool, the element type is {element}")
    elif isinstance(value, int):
        pass
    elif isinstance(value, float):
        if not element.is_float:
            fail(op, f"value {value} is a float, the element type is {element}")
    else:
        fail(op, f"value must be an int, float or bool, is {value!r}")
    return value


def garbage(t: TensorType) -> np.ndarray:
    """What the reference puts in a ``tensor.empty``: NaN for floats, the type's lowest value for
    integers, true for i1, so that reading an element nobody wrote shows up (check-numerics
    reports new NaNs)."""
    dt = t.element.np_dtype
    if dt.kind == "f":
        fill = np.nan
    elif dt == np.bool_:
        fill = True
    else:
        fill = np.iinfo(dt).min
    return np.full(t.shape, fill, dtype=dt)


class Constant(OpSpec):
    """A constant tensor (weights, index tables)."""

    name = "tensor.constant"
    operands = ()
    attributes = {"value": Attr("dense", required=True)}
    traits = {"pure", "constant"}

    def infer_types(self, op):
        v = op.attributes.get("value")
        if not isinstance(v, DenseElements):
            fail(op, "value must be a dense constant")
        return [v.type]

    def reference(self, op, args, interp):
        return [op.attributes["value"].array]


class Empty(OpSpec):
    """A tensor of the result type with undefined contents; only a DPS init (every element is
    written by the op that takes it as ``outs``). Reference: see :func:`garbage`."""

    name = "tensor.empty"
    operands = ()
    traits = {"pure"}

    def verify(self, op):
        if not isinstance(op.results[0].type, TensorType):
            fail(op, "result must be a tensor")

    def reference(self, op, args, interp):
        return [garbage(op.results[0].type)]


class Fill(OpSpec):
    """``init``'s shape filled with ``value``."""

    name = "tensor.fill"
    operands = ("init",)
    attributes = {"value": Attr("any", required=True, doc="int, float or bool")}
    traits = {"pure"}

    def infer_types(self, op):
        return [tensor_operand(op)]

    def verify(self, op):
        scalar_value(op, op.attributes["value"], tensor_operand(op).element)

    def reference(self, op, args, interp):
        t = op.results[0].type
        with np.errstate(all="ignore"):
            return [np.full(t.shape, op.attributes["value"], dtype=t.element.np_dtype)]


def slice_attrs(op, shape) -> tuple[tuple, tuple, tuple]:
    """offsets, sizes, strides of a slice op, checked against the sliced tensor's ``shape``."""
    got = []
    for name in ("offsets", "sizes", "strides"):
        v = op.attr(name)
        if not isinstance(v, tuple) or len(v) != len(shape):
            fail(op, f"{name} must hold {len(shape)} ints (one per dimension), is {v!r}")
        got.append(v)
    offsets, sizes, strides = got
    for k, (d, o, s, st) in enumerate(zip(shape, offsets, sizes, strides)):
        if s < 0 or st == 0:
            fail(op, f"dimension {k}: size {s} must be >= 0 and stride {st} non-zero")
        if s and not (0 <= o < d and 0 <= o + (s - 1) * st < d):
            fail(op, f"dimension {k}: offset {o}, size {s}, stride {st} leave [0, {d})")
    return offsets, sizes, strides


def slice_index(offsets, sizes, strides) -> tuple:
    """numpy basic indices for a slice (negative strides included)."""
    out = []
    for o, s, st in zip(offsets, sizes, strides):
        if s == 0:
            out.append(slice(0, 0))
            continue
        stop = o + s * st
        out.append(slice(o, stop if stop >= 0 else None, st))
    return tuple(out)


_SLICE_ATTRS = {"offsets": Attr("ints", required=True), "sizes": Attr("ints", required=True),
                "strides": Attr("ints", required=True)}


class ExtractSlice(OpSpec):
    """``source[offsets + i * strides]`` for ``i`` in ``sizes`` (same rank as ``source``);
    bufferizes to a view."""

    name = "tensor.extract_slice"
    operands = ("source",)
    attributes = dict(_SLICE_ATTRS)
    traits = {"pure"}

    def infer_types(self, op):
        t = tensor_operand(op)
        _, sizes, _ = slice_attrs(op, t.shape)
        return [t.with_shape(sizes)]

    def reference(self, op, args, interp):
        return [args[0][slice_index(op.attr("offsets"), op.attr("sizes"), op.attr("strides"))]]


class InsertSlice(OpSpec):
    """``dest`` with the slice ``offsets + i * strides`` replaced by ``source``.

    ``in_place = true`` (from a ``graph.concat {in_place}``): the graph optimizer decided that the
    producer of ``source`` writes straight into this slice of ``dest``; bufferization gives
    ``source`` a view of ``dest``'s buffer instead of a buffer of its own, so no copy is left.
    The value semantics are the same either way."""

    name = "tensor.insert_slice"
    operands = ("source", "dest")
    attributes = dict(_SLICE_ATTRS, in_place=Attr("bool", default=False))
    traits = {"pure"}

    def infer_types(self, op):
        return [tensor_operand(op, 1)]

    def verify(self, op):
        src, dst = tensor_operand(op, 0), tensor_operand(op, 1)
        _, sizes, _ = slice_attrs(op, dst.shape)
        if src.shape != tuple(sizes) or src.element != dst.element:
            fail(op, f"source {src} does not match the slice sizes {list(sizes)} of {dst}")

    def reference(self, op, args, interp):
        out = np.array(args[1], copy=True)
        out[slice_index(op.attr("offsets"), op.attr("sizes"), op.attr("strides"))] = args[0]
        return [out]


class Reshape(OpSpec):
    """Same elements (row-major order), the result's shape; bufferizes to a view."""

    name = "tensor.reshape"
    operands = ("source",)
    traits = {"pure"}

    def verify(self, op):
        t, r = tensor_operand(op), op.results[0].type
        if not isinstance(r, TensorType) or r.size != t.size or r.element != t.element:
            fail(op, f"cannot reshape {t} to {r}")

    def reference(self, op, args, interp):
        return [args[0].reshape(op.results[0].type.shape)]


class Pad(OpSpec):
    """``source`` with ``low[i]`` elements before and ``high[i]`` after along each dim, all equal
    to the scalar operand ``value`` when present, else the attribute ``value`` (default 0)."""

    name = "tensor.pad"
    operands = ("source", Operand("value", optional=True))
    attributes = {"low": Attr("ints", required=True), "high": Attr("ints", required=True),
                  "value": Attr("any", doc="the padding value when there is no operand")}
    traits = {"pure"}

    def infer_types(self, op):
        t = tensor_operand(op)
        low, high = op.attr("low"), op.attr("high")
        for name, v in (("low", low), ("high", high)):
            if not isinstance(v, tuple) or len(v) != t.rank or any(p < 0 for p in v):
                fail(op, f"{name} must hold {t.rank} non-negative ints, is {v!r}")
        return [t.with_shape([d + a + b for d, a, b in zip(t.shape, low, high)])]

    def verify(self, op):
        t = tensor_operand(op)
        if len(op.operands) == 2:
            if op.operands[1].type != t.element:
                fail(op, f"the value operand must be a {t.element}, is {op.operands[1].type}")
            if "value" in op.attributes:
                fail(op, "has both a value operand and a value attribute")
        elif "value" in op.attributes:
            scalar_value(op, op.attributes["value"], t.element)

    def reference(self, op, args, interp):
        x = args[0]
        value = args[1] if len(args) == 2 else op.attributes.get("value", 0)
        width = list(zip(op.attr("low"), op.attr("high")))
        with np.errstate(all="ignore"):
            value = np.asarray(value).astype(x.dtype)
        return [np.pad(x, width, mode="constant", constant_values=value)]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (Constant, Empty, Fill, ExtractSlice, InsertSlice, Reshape, Pad)
