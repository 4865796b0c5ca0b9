"""LLVM types and constants of ptxc's scalar types: what a scalar is in a register and in
memory, the width of ``index``, and a constant converted as the reference converts it.

Both LLVM emitters need these: :mod:`ptxc.lower.llvm_scalar` for the operands and results of
``arith``/``math`` ops, :mod:`ptxc.lower.llvm_kernel` and :mod:`ptxc.lower.loop_to_llvm` for
buffer elements, addresses and loop indices, which they lay out without emitting a scalar op.

* floats are LLVM's ``half``/``float``/``double``; bf16 is a storage type whose register type is
  its bits (i16); i1 is i1 in registers and a byte in memory (numpy's bool).
* ``index`` is i64, or i32 inside :func:`index_bits` ``(32)`` (a context variable, so kernels
  emitted in different threads do not see each other's): loop_to_llvm emits a
  ``gpu.launch {index_bits = 32}`` when no index value of the kernel can leave i32
  (:func:`ptxc.lower.loop_to_llvm.launch_index_bits`).
* :func:`constant` converts exactly as ``np.asarray(value).astype(t.np_dtype)``.
"""

from __future__ import annotations

import contextlib
import contextvars

import numpy as np
from llvmlite import ir

from ..errors import CompileError
from ..ir.types import I1, INDEX, ScalarType
from .llvm_fold import _signed

I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
BOOL = ir.IntType(1)

_FLOATS = {"f16": ir.HalfType(), "f32": ir.FloatType(), "f64": ir.DoubleType()}
_FSUFFIX = {"f16": "f16", "f32": "f32", "f64": "f64"}

#: the LLVM width of ``index`` in the kernel being emitted (module docstring; a context
#: variable, so kernels emitted in different threads do not see each other's)
_INDEX_BITS: contextvars.ContextVar[int] = contextvars.ContextVar("ptxc_index_bits", default=64)


@contextlib.contextmanager
def index_bits(bits: int):
    """Within the block, ``index`` lowers to an integer of ``bits`` (32 or 64) bits."""
    if bits not in (32, 64):
        raise ValueError(f"index is 32 or 64 bits, not {bits}")
    token = _INDEX_BITS.set(bits)
    try:
        yield
    finally:
        _INDEX_BITS.reset(token)


def index_type() -> ir.IntType:
    """The LLVM type of ``index`` here (i64, or i32 inside ``index_bits(32)``)."""
    return ir.IntType(_INDEX_BITS.get())


def llvm_type(t: ScalarType) -> ir.Type:
    """The register type of a scalar (``index`` is i64, or i32 inside :func:`index_bits`;
    ``i1`` is i1, bf16 its bits: i16)."""
    if t == INDEX:
        return index_type()
    if t.name == "bf16":
        return I16
    if t.name in _FLOATS:
        return _FLOATS[t.name]
    if t.is_float:
        raise CompileError(f"element type {t} is not supported by the LLVM lowering")
    return ir.IntType(t.bitwidth)


def memory_type(t: ScalarType) -> ir.Type:
    """The in-memory type of a buffer element: i1 takes a byte (numpy's bool)."""
    return I8 if t == I1 else llvm_type(t)


def align_of(t: ScalarType) -> int:
    return max(1, t.bitwidth // 8)


def supported(t) -> bool:
    """Arithmetic lowers for ``t``."""
    return isinstance(t, ScalarType) and (t.name in _FLOATS or not t.is_float)


def storable(t) -> bool:
    """``t`` can live in buffers, be loaded, stored, selected and cast (bf16 too)."""
    return supported(t) or (isinstance(t, ScalarType) and t.name == "bf16")


def constant(value, t: ScalarType) -> ir.Constant:
    """The constant ``value`` of type ``t``, converted exactly as the reference does
    (``np.asarray(value).astype(t.np_dtype)``)."""
    with np.errstate(all="ignore"):
        v = np.asarray(value).astype(t.np_dtype)[()]
    if t.name == "bf16":
        return ir.Constant(I16, int(np.asarray(v).view(np.int16)))
    if t.is_float:
        return ir.Constant(llvm_type(t), float(v))
    if t == I1:
        return ir.Constant(BOOL, int(bool(v)))
    ty = llvm_type(t)
    return ir.Constant(ty, _signed(int(np.asarray(v).view(f"i{t.bitwidth // 8}")), ty.width))
