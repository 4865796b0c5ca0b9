"""Shape and data movement: constants, concat, split, slice, gather, the reshape family,
transpose, tile, expand, shape, constant_of_shape.

* ``graph.constant`` -> ``tensor.constant`` (the same DenseElements; the name survives, so the
  blob keeps its name); ``graph.shape`` -> ``tensor.constant`` of the (static) dims;
  ``graph.constant_of_shape`` -> ``tensor.empty`` + ``tensor.fill``.
* concat -> ``tensor.empty`` + one ``tensor.insert_slice`` per operand along the axis. A concat
  marked ``in_place`` by the graph optimizer (eliminate-concat) marks each of its insert_slices
  ``in_place``: the bufferizer then gives each operand's producer a view of the result's buffer
  instead of copying (the decision is the graph optimizer's; the tensor IR only carries it).
* split / slice -> ``tensor.extract_slice`` (negative steps are negative strides).
* reshape, flatten, squeeze, unsqueeze -> ``tensor.reshape``.
* transpose -> a copy generic whose input map permutes the loop dims.
* expand -> a copy generic with a broadcast map.
* tile -> a broadcast generic to ``(r0, d0, r1, d1, ...)`` (the input read through
  ``(d1, d3, ...)``) and a ``tensor.reshape`` to ``(r0 * d0, r1 * d1, ...)``: affine, no modulo.
* gather -> a generic over the result: the body reads the index (an ``ins`` operand through a
  map over the index dims), checks it and wraps a negative one (``arith.check_index``: a bad
  index is a typed IndexOutOfRangeError from the interpreter and from both runtimes), and reads
  ``data`` with ``tensor.extract``.
"""

from __future__ import annotations

import numpy as np

from ...dialects.tensor.generic import build_generic
from ...dialects.tensor.maps import broadcast_map, identity_map, projection_map, unit_row
from ...ir.types import I64, INDEX
from .common import c, cast, constant, empty, fill, lowers, op_, reshape


def copy_generic(b, v, out, in_map):
    n = out.rank
    return build_generic([v], [empty(b, out)], out.shape, [in_map, identity_map(n)],
                         ["parallel"] * n, lambda bb, args: [args[0]], b=b).result


@lowers("graph.constant")
def _constant(op, b):
    return [b.create("tensor.constant", [], {"value": op.attributes["value"]}).result]


@lowers("graph.shape")
def _shape(op, b):
    start, end = op.attr("start"), op.attr("end", op.operands[0].type.rank)
    dims = np.array(op.operands[0].type.shape[start:end], dtype=np.int64).reshape(-1)
    return [constant(b, dims, I64)]


@lowers("graph.constant_of_shape")
def _constant_of_shape(op, b):
    value = op.attr("value").array.reshape(-1)[0]
    return [fill(b, op.results[0].type, value.item())]


@lowers("graph.concat")
def _concat(op, b):
    out = op.results[0].type
    axis = op.attr("axis")
    in_place = bool(op.attr("in_place", False))
    acc = empty(b, out)
    offset = 0
    for v in op.operands:
        offsets = [0] * out.rank
        offsets[axis] = offset
        attrs = {"offsets": offsets, "sizes": list(v.type.shape), "strides": [1] * out.rank}
        if in_place:
            attrs["in_place"] = True
        acc = b.create("tensor.insert_slice", [v, acc], attrs).result
        offset += v.type.shape[axis]
    return [acc]


def extract_slice(b, v, offsets, sizes, strides):
    return b.create("tensor.extract_slice", [v], {
        "offsets": list(offsets), "sizes": list(sizes), "strides": list(strides)}).result


@lowers("graph.split")
def _split(op, b):
    x = op.operands[0]
    axis = op.attr("axis")
    outs, offset = [], 0
    for r in op.results:
        offsets = [0] * x.type.rank
        offsets[axis] = offset
        outs.append(extract_slice(b, x, offsets, r.type.shape, [1] * x.type.rank))
        offset += r.type.shape[axis]
    return outs


@lowers("graph.slice")
def _slice(op, b):
    x = op.operands[0]
    sizes = op.results[0].type.shape
    offsets = [s if n else 0 for s, n in zip(op.attr("starts"), sizes)]
    return [extract_slice(b, x, offsets, sizes, op.attr("steps"))]


@lowers("graph.reshape", "graph.flatten", "graph.squeeze", "graph.unsqueeze")
def _reshape(op, b):
    return [b.create("tensor.reshape", [op.operands[0]],
                     result_types=[op.results[0].type]).result]


@lowers("graph.transpose")
def _transpose(op, b):
    perm = list(op.attr("perm"))
    out = op.results[0].type
    # out dim k is in dim perm[k]: in dim j is read by loop dim perm.index(j)
    return [copy_generic(b, op.operands[0], out,
                         projection_map(out.rank, [perm.index(j) for j in range(out.rank)]))]


@lowers("graph.expand")
def _expand(op, b):
    x, out = op.operands[0], op.results[0].type
    return [copy_generic(b, x, out, broadcast_map(x.type.shape, out.shape))]


@lowers("graph.tile")
def _tile(op, b):
    x, out = op.operands[0], op.results[0].type
    reps = op.attr("repeats")
    r = x.type.rank
    if r == 0:
        return [copy_generic(b, x, out, ())]
    wide = out.with_shape([v for d, k in zip(x.type.shape, reps) for v in (k, d)])
    in_map = tuple(unit_row(2 * r, 2 * i + 1) for i in range(r))
    return [reshape(b, copy_generic(b, x, wide, in_map), out.shape)]


@lowers("graph.gather")
def _gather(op, b):
    data, idx = op.operands
    axis = op.attr("axis")
    out = op.results[0].type
    q = idx.type.rank
    n = out.rank
    size = data.type.shape[axis]
    idx_map = tuple(unit_row(n, axis + j) for j in range(q))

    check = index_check_name("Gather", op, axis, size)

    def body(bb, args):
        i = op_(bb, "arith.check_index", args[0], size=size, check=check)
        ids = [bb.create("tensor.index", [], {"dim": d}).result for d in range(axis)]
        ids.append(cast(bb, i, INDEX))
        ids += [bb.create("tensor.index", [], {"dim": d}).result for d in range(axis + q, n)]
        return [bb.create("tensor.extract", [data] + ids).result]

    return [build_generic([idx], [empty(b, out)], out.shape, [idx_map, identity_map(n)],
                          ["parallel"] * n, body, b=b).result]


def index_check_name(kind: str, op, axis: int, size: int) -> str:
    """How an index check names its op in the error: ``Gather 'node' axis 0 (size 5)``. Every
    op that reads a tensor at indices taken from another tensor (Gather, GatherElements,
    ScatterND, ...) passes each such index through ``arith.check_index`` with this name."""
    return f"{kind}" + (f" {op.loc!r}" if op.loc else "") + f" axis {axis} (size {size})"
