"""Attribute values.

Attributes are plain Python values, so passes read and build them without ceremony:
``int``, ``float``, ``bool``, ``str``, tuples of those (lists print as ``[1, 2]``), IR types, and
:class:`DenseElements` for constant tensors. Their textual forms:

    1   -2   1.5   1e-05   inf   nan   true   "same_upper"   [1, 1]   tensor<3xf32>
    dense<[1, -1]> : tensor<2xi64>            small constants, inline
    dense_resource<conv1_w> : tensor<64x3x7x7xf32>   large ones, bytes in the blob section

:func:`check_kind` is what the verifier uses to check an attribute against its op spec.
"""

from __future__ import annotations

import hashlib

import numpy as np

from .types import FunctionType, ScalarType, TensorType, BufferType, scalar_from_numpy

#: constants with at most this many elements print inline; larger ones go to the blob section
INLINE_LIMIT = 16


class DenseElements:
    """A constant tensor: a numpy array and its tensor type.

    Equality and hashing go by type and bytes, so two constants with equal contents compare equal
    (constant deduplication and pattern tests rely on it).
    """

    __slots__ = ("array", "type", "_digest")

    def __init__(self, array, type: TensorType | None = None):
        array = np.asarray(array)
        if type is None:
            type = TensorType(array.shape, scalar_from_numpy(array.dtype))
        if array.dtype != type.element.np_dtype:
            array = array.astype(type.element.np_dtype)
        if tuple(array.shape) != type.shape:
            array = array.reshape(type.shape)
        array = np.ascontiguousarray(array).reshape(type.shape)  # ascontiguousarray makes 0-d 1-d
        array.flags.writeable = False
        self.array = array
        self.type = type
        self._digest = None

    @property
    def digest(self) -> bytes:
        if self._digest is None:
            self._digest = hashlib.sha256(self.array.tobytes()).digest()
        return self._digest

    def __eq__(self, other) -> bool:
        return isinstance(other, DenseElements) and self.type == other.type and (
            self.digest == other.digest)

    def __hash__(self) -> int:
        return hash((self.type, self.digest))

    def __repr__(self) -> str:
        return f"DenseElements({self.type})"

    @property
    def is_inline(self) -> bool:
        return self.array.size <= INLINE_LIMIT


AttrValue = int | float | bool | str | tuple | ScalarType | TensorType | DenseElements

#: attribute kinds an op spec can declare
KINDS = ("int", "float", "bool", "str", "ints", "floats", "strs", "type", "dense", "any")


def check_kind(value, kind: str) -> bool:
    """Whether ``value`` is a valid attribute of ``kind``."""
    if kind == "any":
        return True
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind in ("ints", "floats", "strs"):
        return isinstance(value, tuple) and all(check_kind(v, kind[:-1]) for v in value)
    if kind == "type":
        return isinstance(value, (ScalarType, TensorType, BufferType, FunctionType))
    if kind == "dense":
        return isinstance(value, DenseElements)
    raise ValueError(f"unknown attribute kind {kind!r}")


def normalize(value):
    """Convert a Python or numpy value into the canonical attribute form (lists become tuples,
    numpy scalars become Python scalars, arrays become DenseElements)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (list, tuple)):
        return tuple(normalize(v) for v in value)
    if isinstance(value, np.ndarray):
        return DenseElements(value)
    return value
