"""The loop dialect's buffers as memory: the layout algebra of views, and the numpy memory the
interpreter holds a buffer in.

A ``BufferType`` carries a static layout (shape, strides and offset in elements from the base
pointer of the memory underneath). :func:`subview_type` and :func:`reshape_type` compute the
layout of a slice or a reshape of a buffer that already has one (tensor-to-loop's storage
planning takes views with them). In the interpreter a buffer is a numpy array: :func:`allocate`
makes one with a layout (fresh memory is NaN for floats, so reading what nobody wrote shows up
in numerics checks), :func:`restride` sees the same memory with another layout (a
``loop.view``; the CPU driver's arguments), :func:`per_block` finds the per-block copies behind
a ``gpu.shared`` buffer while a ``gpu.launch`` runs, and :func:`_check_bounds` and
:func:`_masked_indices` check the indices of a vectorized load or store.

These are apart from the op declarations (:mod:`ptxc.dialects.loop`) because more than the
loop ops use them: the gpu dialects' ops read and write the same memory, and the drivers and
the storage planner need layouts without the ops.
"""

from __future__ import annotations

import numpy as np

from ..errors import CompileError
from ..ir.core import Operation
from ..ir.types import BufferType


# ---- layouts --------------------------------------------------------------------------------

def subview_type(source: BufferType, offsets, sizes, steps=None) -> BufferType:
    """The type of the slice ``source[o0 : o0 + s0*t0 : t0, ...]`` (``sizes`` elements along each
    dimension, ``steps`` may be negative): a buffer over the same memory."""
    steps = tuple(steps) if steps is not None else (1,) * source.rank
    if not (len(offsets) == len(sizes) == len(steps) == source.rank):
        raise ValueError(f"a slice of {source} needs {source.rank} offsets, sizes and steps")
    for o, n, t, d in zip(offsets, sizes, steps, source.shape):
        if n and not (0 <= o < d and 0 <= o + (n - 1) * t < d):
            raise ValueError(f"slice offset {o}, size {n}, step {t} leaves a dimension of {d}")
    offset = source.offset + sum(o * s for o, s in zip(offsets, source.strides))
    strides = tuple(t * s for t, s in zip(steps, source.strides))
    return BufferType(sizes, source.element, strides, offset)


def reshape_type(source: BufferType, shape) -> BufferType | None:
    """The type of ``source`` seen with another shape (row-major element order), or None when its
    layout cannot express that shape as strides (the caller then needs a copy)."""
    shape = tuple(int(d) for d in shape)
    if int(np.prod(shape, dtype=np.int64)) != source.size:
        raise ValueError(f"cannot reshape {source} to {list(shape)}")
    if source.is_default_layout:
        return BufferType(shape, source.element)
    # numpy's rule for reshaping without a copy, on a probe with the same strides (in bytes of
    # an int8: elements); no memory is touched
    probe = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), source.shape, source.strides)
    try:
        view = np.reshape(probe, shape, copy=False)
    except ValueError:
        return None
    return BufferType(shape, source.element, view.strides, source.offset)


# ---- memory in the interpreter --------------------------------------------------------------

class _Memory:
    """Carries an ``__array_interface__`` for a strided view and keeps its owner alive."""

    def __init__(self, interface: dict, owner):
        self.__array_interface__ = interface
        self.owner = owner


def restride(array: np.ndarray, src: BufferType, new: BufferType) -> np.ndarray:
    """A numpy view with ``new``'s layout over the memory of ``array`` (laid out as ``src``):
    both layouts count from the same base pointer. This is ``as_strided`` with an origin that may
    lie before ``array``'s first element."""
    dtype = array.dtype
    if new.size == 0:
        return np.empty(new.shape, dtype)
    if array.size == 0:
        raise CompileError(f"a view of {new} into an empty buffer")
    isz = dtype.itemsize
    for d, have, want in zip(array.shape, array.strides, src.strides):
        if d > 1 and have != want * isz:
            raise CompileError(f"a buffer of type {src} is held in memory with strides "
                               f"{[s // isz for s in array.strides]}; its layout is not the "
                               "declared one")
    ptr, readonly = array.__array_interface__["data"]
    base = ptr - src.offset * isz
    iface = {"version": 3, "shape": new.shape, "typestr": dtype.str,
             "data": (base + new.offset * isz, readonly),
             "strides": tuple(s * isz for s in new.strides)}
    return np.asarray(_Memory(iface, array))


def allocate(t: BufferType, fill: bool = True) -> np.ndarray:
    """A fresh buffer of type ``t`` (a view of ``t.span`` elements of new memory), filled with NaN
    for floats and zeros otherwise (``fill``), so reads of unwritten memory are visible."""
    dtype = t.element.np_dtype
    root = np.zeros(max(t.span, 1), dtype)
    if fill and dtype.kind == "f":
        root[:] = np.nan
    if t.is_default_layout:
        return root[:t.size].reshape(t.shape)
    return restride(root, BufferType((root.size,), t.element), t)


# ---- reading and writing in the interpreter ---------------------------------------------

def per_block(interp, buf):
    """The per-block storage behind ``buf`` when it is a ``gpu.shared`` buffer (or a view of
    one) of the running ``gpu.launch``: an array of shape ``(blocks, *buf.shape)``; else None."""
    reg = getattr(interp, "gpu_shared", None)
    if not reg:
        return None
    entry = reg.get(id(buf))
    return entry[1] if entry is not None and entry[0] is buf else None


def _in_bounds(t: BufferType, idx: list) -> bool:
    for i, d in zip(idx, t.shape):
        i = np.asarray(i)
        if i.size and (i.min() < 0 or i.max() >= d):
            return False
    return True


def _masked_indices(interp, t: BufferType, idx: list) -> list:
    """Indices for a load under ``interp.loop_mask``: those of dead lanes become 0, so only
    live lanes can fail the bounds check (the common all-in-bounds case is left untouched)."""
    mask = getattr(interp, "loop_mask", None)
    if mask is None or _in_bounds(t, idx):
        return idx
    return [np.where(mask, np.asarray(i), 0) for i in idx]


def _check_bounds(op: Operation, t: BufferType, idx: list) -> None:
    for k, (i, d) in enumerate(zip(idx, t.shape)):
        i = np.asarray(i)
        if i.size and (i.min() < 0 or i.max() >= d):
            raise CompileError(f"{op.where}: index #{k} in [{i.min()}, {i.max()}] is out of "
                               f"bounds for {t}")
