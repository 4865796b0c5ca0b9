"""IR types: scalars, tensors (values), buffers (memory), functions.

Textual forms follow MLIR: ``f32``, ``i1``, ``ui8``, ``index``, ``tensor<1x3x224x224xf32>``,
``tensor<f32>`` (rank 0), ``buffer<4x4xf16>``, ``buffer<4x4xf16, strides [8, 1], offset 2>`` (a
buffer with a non-default layout), ``(tensor<2xf32>) -> (tensor<2xf32>)``.
Shapes are static: every dimension is a non-negative int.
"""

from __future__ import annotations

import attrs
import ml_dtypes  # noqa: F401  (registers numpy's "bfloat16" dtype, the reference type of bf16)
import numpy as np


@attrs.frozen
class ScalarType:
    """An element type. ``name`` is its textual form."""

    name: str

    def __str__(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return self.name in ("f64", "f32", "f16", "bf16")

    @property
    def is_int(self) -> bool:
        return not self.is_float

    @property
    def is_signed(self) -> bool:
        return not self.name.startswith("ui") and self.name != "i1"

    @property
    def bitwidth(self) -> int:
        return _BITS[self.name]

    @property
    def np_dtype(self) -> np.dtype:
        """The numpy dtype the reference semantics use for this type."""
        try:
            return np.dtype(_NP[self.name])
        except KeyError:
            raise TypeError(f"{self.name} has no numpy dtype") from None


_NP = {
    "f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16",
    "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8",
    "ui64": "uint64", "ui32": "uint32", "ui16": "uint16", "ui8": "uint8",
    "i1": "bool", "index": "int64",
}
_BITS = {
    "f64": 64, "f32": 32, "f16": 16, "bf16": 16, "i64": 64, "i32": 32, "i16": 16, "i8": 8,
    "ui64": 64, "ui32": 32, "ui16": 16, "ui8": 8, "i1": 1, "index": 64,
}
SCALAR_NAMES = tuple(_BITS)

F64, F32, F16, BF16 = (ScalarType(n) for n in ("f64", "f32", "f16", "bf16"))
I64, I32, I16, I8 = (ScalarType(n) for n in ("i64", "i32", "i16", "i8"))
UI64, UI32, UI16, UI8 = (ScalarType(n) for n in ("ui64", "ui32", "ui16", "ui8"))
I1 = ScalarType("i1")
INDEX = ScalarType("index")


def scalar_from_numpy(dtype) -> ScalarType:
    """The scalar type of a numpy dtype (``int64`` gives ``i64``, never ``index``)."""
    name = np.dtype(dtype).name
    for k, v in _NP.items():
        if v == name and k != "index":
            return ScalarType(k)
    raise TypeError(f"numpy dtype {name} has no ptxc scalar type")


def _dims(shape: tuple[int, ...]) -> str:
    return "".join(f"{d}x" for d in shape)


@attrs.frozen
class TensorType:
    """An immutable tensor value of static shape."""

    shape: tuple[int, ...] = attrs.field(converter=lambda s: tuple(int(d) for d in s))
    element: ScalarType

    def __str__(self) -> str:
        return f"tensor<{_dims(self.shape)}{self.element}>"

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes in memory: i1 takes a byte per element (as numpy's bool)."""
        return self.size * max(8, self.element.bitwidth) // 8

    def with_shape(self, shape) -> "TensorType":
        return TensorType(shape, self.element)

    def with_element(self, element: ScalarType) -> "TensorType":
        return TensorType(self.shape, element)


def row_major_strides(shape) -> tuple[int, ...]:
    """The strides (in elements) of a dense row-major array of ``shape``."""
    strides, acc = [], 1
    for d in reversed(tuple(shape)):
        strides.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(strides))


def _layout_ints(s):
    return None if s is None else tuple(int(x) for x in s)


@attrs.frozen
class BufferType:
    """A region of memory of static shape in the loop dialect, with a static layout.

    Element ``(i_0, ..., i_{n-1})`` lives at ``offset + sum_k i_k * strides[k]`` elements from the
    buffer's base pointer. The default layout is row-major with offset 0; ``strides=None`` means
    that default, so ``BufferType(s, e) == BufferType(s, e, row_major_strides(s), 0)`` (``strides``
    always reads back as a tuple). Strides may be negative (reversed slices) as long as no element
    lies before the base pointer. Textual form, the layout suffix only when not the default:
    ``buffer<4x8xf32>``, ``buffer<4x8xf32, strides [16, 1], offset 4>``,
    ``buffer<4xf32, offset 2>``.
    """

    shape: tuple[int, ...] = attrs.field(converter=lambda s: tuple(int(d) for d in s))
    element: ScalarType
    strides: tuple[int, ...] | None = attrs.field(default=None, converter=_layout_ints)
    offset: int = attrs.field(default=0, converter=int)

    def __attrs_post_init__(self):
        if self.strides is None:
            object.__setattr__(self, "strides", row_major_strides(self.shape))
        if len(self.strides) != len(self.shape):
            raise ValueError(f"buffer of rank {len(self.shape)} with {len(self.strides)} strides")
        if self.size and self.min_element < 0:
            raise ValueError(f"buffer layout strides {list(self.strides)}, offset {self.offset} "
                             "reaches before the base pointer")

    def __str__(self) -> str:
        suffix = ""
        if self.strides != row_major_strides(self.shape):
            suffix += ", strides [" + ", ".join(map(str, self.strides)) + "]"
        if self.offset:
            suffix += f", offset {self.offset}"
        return f"buffer<{_dims(self.shape)}{self.element}{suffix}>"

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def is_default_layout(self) -> bool:
        """Row-major with offset 0 (the layout of a fresh allocation or a dense argument)."""
        return self.offset == 0 and self.strides == row_major_strides(self.shape)

    @property
    def min_element(self) -> int:
        """The lowest element offset from the base pointer that the buffer touches."""
        return self.offset + sum(min(0, (d - 1) * s) for d, s in zip(self.shape, self.strides))

    @property
    def max_element(self) -> int:
        """The highest element offset from the base pointer that the buffer touches."""
        return self.offset + sum(max(0, (d - 1) * s) for d, s in zip(self.shape, self.strides))

    @property
    def span(self) -> int:
        """Elements from the base pointer needed to hold every element (0 when empty)."""
        return self.max_element + 1 if self.size else 0

    def with_layout(self, strides, offset: int = 0) -> "BufferType":
        return BufferType(self.shape, self.element, strides, offset)


@attrs.frozen
class FunctionType:
    inputs: tuple = attrs.field(converter=tuple)
    results: tuple = attrs.field(converter=tuple)

    def __str__(self) -> str:
        ins = ", ".join(map(str, self.inputs))
        outs = ", ".join(map(str, self.results))
        return f"({ins}) -> ({outs})"


Type = ScalarType | TensorType | BufferType | FunctionType


def tensor(shape, element: ScalarType | str = F32) -> TensorType:
    """Shorthand: ``tensor((1, 3), "f32")``."""
    if isinstance(element, str):
        element = ScalarType(element)
    return TensorType(tuple(shape), element)
