"""Indexed reads and writes with run-time indices: ``graph.gather_elements``,
``graph.gather_nd``, ``graph.scatter_elements``, ``graph.scatter_nd`` (ONNX semantics; indices
are i32 or i64 and may be negative, counting from the end; one outside the dim is an error of
the reference).

    %g = "graph.gather_elements"(%data, %idx) {axis = 1}
           : (tensor<3x4xf32>, tensor<3x2xi64>) -> tensor<3x2xf32>
    %n = "graph.gather_nd"(%data, %idx) {batch_dims = 0}
           : (tensor<4x5x6xf32>, tensor<2x2xi64>) -> tensor<2x6xf32>
    %s = "graph.scatter_nd"(%data, %idx, %upd) {reduction = "none"}
           : (tensor<8xf32>, tensor<4x1xi64>, tensor<4xf32>) -> tensor<8xf32>

Scatters write the updates in order (a later duplicate index wins with ``reduction = "none"``,
as onnxruntime's sequential kernels do) or combine them with ``add``, ``mul``, ``max``, ``min``.
"""

from __future__ import annotations

import numpy as np

from ...ir.spec import Attr, OpSpec, fail
from ...ir.types import I32, I64
from .common import ttype

REDUCTIONS = ("none", "add", "mul", "max", "min")


def _check_indices(op, i: int):
    if ttype(op, i).element not in (I32, I64):
        fail(op, f"indices must be i32 or i64, are {ttype(op, i).element}")


def wrap(op, idx: np.ndarray, n: int, what: str = "indices") -> np.ndarray:
    """Negative indices made non-negative; an index outside [-n, n) fails naming the op."""
    idx = np.asarray(idx, dtype=np.int64)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        bad = int(idx.min() if idx.min() < -n else idx.max())
        from ...errors import IndexOutOfRangeError  # the runtimes' error for the same input
        raise IndexOutOfRangeError(f"{op.where}: {what}: index {bad} out of range [{-n}, {n})")
    return np.where(idx < 0, idx + n, idx)


class GatherElements(OpSpec):
    """``out[i][j][k] = data[idx[i][j][k]][j][k]`` for ``axis = 0`` (numpy's
    take_along_axis); ``out`` has the shape of ``indices``."""

    name = "graph.gather_elements"
    operands = ("data", "indices")
    results = ("output",)
    attributes = {"axis": Attr("int", required=True)}
    traits = {"pure"}

    def infer_types(self, op):
        d, i = ttype(op, 0), ttype(op, 1)
        _check_indices(op, 1)
        if d.rank != i.rank or d.rank == 0:
            fail(op, f"data {d} and indices {i} must have one rank >= 1")
        axis = op.attributes.get("axis", 0)
        if not 0 <= axis < d.rank:
            fail(op, f"axis {axis} out of range for rank {d.rank}")
        if any(a > b for k, (a, b) in enumerate(zip(i.shape, d.shape)) if k != axis):
            fail(op, f"indices {i} larger than data {d} outside the axis")
        return [d.with_shape(i.shape)]

    def reference(self, op, args, interp):
        data, idx = args
        axis = op.attr("axis")
        idx = wrap(op, idx, data.shape[axis])
        view = data[tuple(slice(0, s) if k != axis else slice(None)
                          for k, s in enumerate(idx.shape))]
        return [np.take_along_axis(view, idx, axis=axis)]


def nd_shape(op, d, i, b: int):
    """GatherND/ScatterND shapes: (q = the index tuple length, the gathered shape)."""
    if i.rank < 1 or d.rank < 1:
        fail(op, "data and indices must have rank >= 1")
    q = i.shape[-1]
    if not 0 <= b < min(d.rank, i.rank):
        fail(op, f"batch_dims {b} out of range")
    if d.shape[:b] != i.shape[:b]:
        fail(op, f"batch dims of data {d} and indices {i} differ")
    if not 1 <= q <= d.rank - b:
        fail(op, f"index tuples of length {q} do not fit data {d} with batch_dims {b}")
    return q, i.shape[:-1] + d.shape[b + q:]


class GatherND(OpSpec):
    """``out[b..., i...] = data[b..., *idx[b..., i...], ...]``: the last dim of ``indices``
    holds an index tuple into the dims after the ``batch_dims`` leading ones."""

    name = "graph.gather_nd"
    operands = ("data", "indices")
    results = ("output",)
    attributes = {"batch_dims": Attr("int", default=0)}
    traits = {"pure"}

    def infer_types(self, op):
        d, i = ttype(op, 0), ttype(op, 1)
        _check_indices(op, 1)
        _, shape = nd_shape(op, d, i, op.attributes.get("batch_dims", 0))
        return [d.with_shape(shape)]

    def reference(self, op, args, interp):
        data, idx = args
        b = op.attr("batch_dims")
        q = idx.shape[-1]
        idx = np.stack([wrap(op, idx[..., t], data.shape[b + t]) for t in range(q)], -1)
        out = np.empty(op.results[0].type.shape, data.dtype)
        for bi in np.ndindex(*data.shape[:b]):
            sub, ix = data[bi], idx[bi]
            out[bi] = sub[tuple(np.moveaxis(ix, -1, 0))]
        return [out]


def combine(reduction: str, old, new):
    if reduction == "none":
        return new
    fn = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduction]
    return fn(old, new)


class Scatter(OpSpec):
    operands = ("data", "indices", "updates")
    results = ("output",)
    traits = {"pure"}

    def verify(self, op):
        if op.attr("reduction") not in REDUCTIONS:
            fail(op, f"reduction must be one of {list(REDUCTIONS)}, got {op.attr('reduction')!r}")
        if ttype(op, 0).element != ttype(op, 2).element:
            fail(op, "data and updates have different element types")


class ScatterElements(Scatter):
    """``out = data`` with ``out[..., idx[p], ...] = upd[p]`` (the index along ``axis``, the
    other coordinates those of ``p``), for every position ``p`` of ``indices`` in order."""

    name = "graph.scatter_elements"
    attributes = {"axis": Attr("int", required=True), "reduction": Attr("str", default="none")}

    def infer_types(self, op):
        d, i, u = ttype(op, 0), ttype(op, 1), ttype(op, 2)
        _check_indices(op, 1)
        if i.shape != u.shape or i.rank != d.rank or d.rank == 0:
            fail(op, f"indices {i} and updates {u} must have one shape, of data's rank")
        if not 0 <= op.attributes.get("axis", 0) < d.rank:
            fail(op, "axis out of range")
        return [d]

    def reference(self, op, args, interp):
        data, idx, upd = args
        axis, red = op.attr("axis"), op.attr("reduction")
        idx = wrap(op, idx, data.shape[axis])
        out = data.copy()
        for p in np.ndindex(*idx.shape):
            t = list(p)
            t[axis] = idx[p]
            t = tuple(t)
            out[t] = combine(red, out[t], upd[p])
        return [out]


class ScatterND(Scatter):
    """``out = data`` with ``out[*idx[p]] = upd[p]`` (a slice when the tuple is shorter than
    data's rank), for every index tuple ``p`` in order."""

    name = "graph.scatter_nd"
    attributes = {"reduction": Attr("str", default="none")}

    def infer_types(self, op):
        d, i, u = ttype(op, 0), ttype(op, 1), ttype(op, 2)
        _check_indices(op, 1)
        q, want = nd_shape(op, d, i, 0)
        if u.shape != want:
            fail(op, f"updates {u} must have shape {list(want)}")
        return [d]

    def reference(self, op, args, interp):
        data, idx, upd = args
        red = op.attr("reduction")
        q = idx.shape[-1]
        idx = np.stack([wrap(op, idx[..., t], data.shape[t]) for t in range(q)], -1)
        out = data.copy()
        for p in np.ndindex(*idx.shape[:-1]):
            t = tuple(idx[p])
            out[t] = combine(red, out[t], upd[p])
        return [out]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (GatherElements, GatherND, ScatterElements, ScatterND)
