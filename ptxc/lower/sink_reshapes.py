"""``sink-collapse-reshapes``: move a ``tensor.reshape`` that merges dims below the elementwise
generic that reads it (IREE's "fusion by expansion"), so that the generic producing the
reshape's source can fuse into that consumer.

fuse-tensor-elementwise folds a producer generic P into a consumer C only when C reads P's
result directly. A reshape between them (a space-to-depth's transpose, then the reshape that
merges the block dims into channels) stops it, and P's result is stored by a kernel of its own.
When the reshape only merges contiguous dims (each result dim is a product of consecutive
source dims) and C is all-parallel, C can iterate the *unmerged* dims instead: each loop dim
that walked a merged dim is split into loop dims of the group's extents, every map stays affine
(the split dim ``d`` is ``sum_j g_j * stride_j`` in the new dims), C reads the reshape's source
directly, and its result, computed in the expanded shape, is merged back by a reshape of C's
fresh (contiguous) result: a view. Then P fuses into the expanded C, and the pass runs again on
the new reshape's consumer.

Taken only where that pays: C all-parallel with one result, whose out map is a permutation and
whose init is a ``tensor.empty``; the reshape read by C alone; its source the result of a
``tensor.generic`` read by the reshape alone (so P fuses next). In the cuda tensor pipeline
(``lower-graph-to-tensor,sink-collapse-reshapes,fuse-tensor-elementwise``), where
space-to-depth-stem makes such reshapes (rewrite/passes/space_to_depth.py); the cpu pipeline
does not run it yet (not timed there). Example (a space-to-depth of a 1x3x4x4 image into
1x12x2x2, then a cast)::

    Before:
      %r = tensor.reshape(%x) : 1x3x4x4 -> 1x3x2x2x2x2                          (a view)
      %t = tensor.generic(%r) {transpose (0, 3, 5, 1, 2, 4)} -> 1x2x2x3x2x2      (a kernel)
      %s = tensor.reshape(%t) : 1x2x2x3x2x2 -> 1x12x2x2
      %c = tensor.generic(%s) {bounds [1, 12, 2, 2], cast} -> 1x12x2x2          (a kernel)
    After sink-collapse-reshapes, fuse-tensor-elementwise:
      %r = tensor.reshape(%x) : 1x3x4x4 -> 1x3x2x2x2x2
      %c = tensor.generic(%r) {bounds [1, 2, 2, 3, 2, 2], transpose + cast} -> 1x2x2x3x2x2
      %s = tensor.reshape(%c) : 1x2x2x3x2x2 -> 1x12x2x2                          (a view)
"""

from __future__ import annotations

import attrs

from ..dialects.func import func_body, functions
from ..dialects.tensor.generic import body as generic_body
from ..dialects.tensor.generic import generic_parts
from ..dialects.tensor.maps import permutation_of, row_terms, substitute
from ..ir.builder import Builder
from ..ir.core import Block, OpResult, Region
from ..ir.spec import make_op
from ..rewrite.pass_ import Pass, register_pass
from ..rewrite.passes.dce import erase_dead_ops
from ..rewrite.provenance import FUSED
from .tensor_passes import index_expr


def collapse_groups(src, dst) -> list[list[int]] | None:
    """For a reshape of shape ``src`` to ``dst`` that only merges consecutive dims: the source
    dims of each result dim (trailing size-1 source dims join the last group); else None."""
    src, dst = list(src), list(dst)
    if len(src) <= len(dst) or not dst:
        return None
    groups, i = [], 0
    for n in dst:
        g, p = [], 1
        while True:
            if i >= len(src):
                return None
            p *= src[i]
            g.append(i)
            i += 1
            if p == n:
                break
            if p > n:
                return None
        groups.append(g)
    if any(src[j] != 1 for j in range(i, len(src))):
        return None
    groups[-1].extend(range(i, len(src)))
    return groups


def _candidate(c, k: int):
    """The reshape op and its groups when ``c``'s ins #k may be sunk (module docstring)."""
    v = generic_parts(c)[0][k]
    r = v.op if isinstance(v, OpResult) else None
    if r is None or r.name != "tensor.reshape" or len(v.uses) != 1:
        return None
    s = r.operands[0]
    p = s.op if isinstance(s, OpResult) else None
    if p is None or p.name != "tensor.generic" or len(p.results) != 1 or len(s.uses) != 1:
        return None
    groups = collapse_groups(s.type.shape, v.type.shape)
    if groups is None:
        return None
    n = len(c.attr("bounds"))
    dims = []
    for row in c.attr("indexing_maps")[k]:
        t = row_terms(row)
        if len(t) != 1 or t[0][1] != 1 or row[-1] != 0:
            return None
        dims.append(t[0][0])
    if len(set(dims)) != len(dims) or any(d >= n for d in dims):
        return None
    return r, groups, dims


def _sinkable(c) -> bool:
    if c.name != "tensor.generic" or len(c.results) != 1:
        return False
    if any(t != "parallel" for t in c.attr("iterator_types")):
        return False
    ins, outs = generic_parts(c)
    if len(outs) != 1 or not isinstance(outs[0], OpResult) or outs[0].op.name != "tensor.empty":
        return False
    if generic_body(c).args[len(ins)].uses:
        return False
    return permutation_of(c.attr("indexing_maps")[len(ins)], len(c.attr("bounds"))) is not None


def sink(c, k: int, r, groups, dims):
    """The expanded generic computing ``c`` with ins #k read from the source of reshape ``r``
    (``groups``: its source dims per result dim; ``dims``: ``c``'s loop dim of each), and the
    reshape of its result to ``c``'s result type, both inserted before ``c``."""
    ins, outs = generic_parts(c)
    maps = c.attr("indexing_maps")
    bounds = list(c.attr("bounds"))
    src = r.operands[0].type.shape
    split = {dims[q]: [src[j] for j in g] for q, g in enumerate(groups) if len(g) > 1}
    # the new loop dims: each old dim, or the group's dims in its place
    new_index, new_bounds = {}, []
    for d, b in enumerate(bounds):
        sizes = split.get(d, [b])
        new_index[d] = list(range(len(new_bounds), len(new_bounds) + len(sizes)))
        new_bounds += sizes
    n_new = len(new_bounds)
    exprs = []
    for d in range(len(bounds)):
        row = [0] * (n_new + 1)
        stride = 1
        for i in reversed(new_index[d]):
            row[i] = stride
            stride *= new_bounds[i]
        exprs.append(tuple(row))
    new_maps = []
    for i, m in enumerate(maps[:len(ins)]):
        if i != k:
            new_maps.append(substitute(m, exprs))
            continue
        rows = []
        for q, g in enumerate(groups):
            for j, _ in enumerate(g):
                row = [0] * (n_new + 1)
                row[new_index[dims[q]][j] if len(g) > 1 else new_index[dims[q]][0]] = 1
                rows.append(tuple(row))
        new_maps.append(tuple(rows))
    perm = permutation_of(maps[len(ins)], len(bounds))
    out_rows, out_shape = [], []
    for d in perm:
        for i in new_index[d]:
            row = [0] * (n_new + 1)
            row[i] = 1
            out_rows.append(tuple(row))
            out_shape.append(new_bounds[i])
    new_maps.append(tuple(out_rows))
    res_t = c.results[0].type
    empty = Builder.before_op(c).create(
        "tensor.empty", [], result_types=[res_t.with_shape(tuple(out_shape))], loc=c.loc).result
    new_ins = list(ins)
    new_ins[k] = r.operands[0]
    block = Block([v.type.element for v in new_ins] + [res_t.element])
    b = Builder.at_end(block)
    cb = generic_body(c)
    mapping = dict(zip(cb.args, block.args))
    cache: dict = {}
    for op in cb.ops:
        if op.name == "tensor.index":
            d = op.attr("dim")
            if d in split:
                mapping[op.results[0]] = index_expr(b, exprs[d], cache)
                continue
            new = op.clone(mapping)
            new.attributes["dim"] = new_index[d][0]
            b.insert(new)
            mapping[op.results[0]] = new.results[0]
            continue
        b.insert(op.clone(mapping))
    g = make_op("tensor.generic", [new_ins, [empty]], {
        "bounds": tuple(new_bounds), "indexing_maps": tuple(new_maps),
        "iterator_types": ("parallel",) * n_new, FUSED: c.attr(FUSED) or None,
        "ordered": c.attr("ordered") or None},
        result_types=[res_t.with_shape(tuple(out_shape))], regions=[Region([block])],
        loc=c.loc, result_names=[x.name_hint for x in c.results])
    c.block.insert_before(c, g)
    back = Builder.before_op(c).create("tensor.reshape", [g.results[0]], result_types=[res_t],
                                    loc=c.loc).result
    return back


def sink_through_pad(pad):
    """``pad(reshape(e))`` -> ``reshape(pad'(e))`` when every pad of a merged dim is whole
    rows of its outermost source dim (a multiple of the inner dims' product; ``pad'`` pads the
    same source dims, a merged dim's pad on its outermost), so that the generic computing ``e``
    writes the padded tensor's interior itself (lower-tensor-to-loop); None where it does not
    apply. The second case is the channel pad of a space-to-depth whose channels are (c, by,
    bx): 12 -> 16 channels is c padded 3 -> 4 (rewrite/passes/space_to_depth.py)."""
    v = pad.operands[0]
    r = v.op if isinstance(v, OpResult) else None
    if len(pad.operands) != 1 or r is None or r.name != "tensor.reshape" or len(v.uses) != 1:
        return None
    src = r.operands[0]
    groups = collapse_groups(src.type.shape, v.type.shape)
    if groups is None:
        return None
    low, high = pad.attr("low"), pad.attr("high")
    new_low, new_high = [0] * src.type.rank, [0] * src.type.rank
    for q, g in enumerate(groups):
        inner = 1
        for d in g[1:]:
            inner *= src.type.shape[d]
        if low[q] % inner or high[q] % inner:
            return None
        new_low[g[0]], new_high[g[0]] = low[q] // inner, high[q] // inner
    attrs_ = {"low": tuple(new_low), "high": tuple(new_high)}
    if "value" in pad.attributes:
        attrs_["value"] = pad.attr("value")
    b = Builder.before_op(pad)
    padded = b.create("tensor.pad", [src], attrs_, loc=pad.loc).result
    return b.create("tensor.reshape", [padded], result_types=[pad.results[0].type],
                    loc=pad.loc).result


def sink_collapse_reshapes(module) -> bool:
    """Sink every reshape that qualifies (module docstring), to a fixpoint; whether anything
    changed."""
    changed_any = changed = False
    while True:
        changed = False
        for f in functions(module):
            for c in list(func_body(f).ops):
                if c.block is not None and c.name == "tensor.pad":
                    back = sink_through_pad(c)
                    if back is not None:
                        r = c.operands[0].op
                        c.results[0].replace_all_uses_with(back)
                        c.erase()
                        r.erase()
                        changed = changed_any = True
                    continue
                if c.block is None or not _sinkable(c):
                    continue
                for k in range(len(generic_parts(c)[0])):
                    found = _candidate(c, k)
                    if found is None:
                        continue
                    back = sink(c, k, *found)
                    c.results[0].replace_all_uses_with(back)
                    c.erase()
                    found[0].erase()
                    changed = changed_any = True
                    break
        if not changed:
            break
    if changed_any:
        erase_dead_ops(module)
    return changed_any


@register_pass
@attrs.frozen
class SinkCollapseReshapes(Pass):
    """Move a ``tensor.reshape`` that merges dims below the all-parallel generic reading it, the
    generic iterating the unmerged dims, so that the reshape's producing generic can fuse into
    it (ptxc/lower/sink_reshapes.py, with a space-to-depth example). In the cuda tensor
    pipeline.

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x3xf32>):
            %0 = "tensor.empty"() : () -> tensor<2x3xf32> loc("Relu_0")
            %r = "tensor.generic"(%x, %0) ({
            ^bb0(%1: f32, %2: f32):
              %3 = "arith.constant"() {type = f32, value = 0.0} : () -> f32
              %4 = "arith.max"(%1, %3) : (f32, f32) -> f32
              "tensor.yield"(%4) : (f32) -> ()
            }) {bounds = [2, 3], indexing_maps = [[[1, 0, 0], [0, 1, 0]], [[1, 0, 0], [0, 1, 0]]], iterator_types = ["parallel", "parallel"], operand_segments = [1, 1]} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32> loc("Relu_0")
            %f = "tensor.reshape"(%r) : (tensor<2x3xf32>) -> tensor<6xf32> loc("Reshape_1")
            %5 = "tensor.empty"() : () -> tensor<6xf32> loc("Neg_2")
            %y = "tensor.generic"(%f, %5) ({
            ^bb0(%6: f32, %7: f32):
              %8 = "arith.neg"(%6) : (f32) -> f32
              "tensor.yield"(%8) : (f32) -> ()
            }) {bounds = [6], indexing_maps = [[[1, 0]], [[1, 0]]], iterator_types = ["parallel"], operand_segments = [1, 1]} : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32> loc("Neg_2")
            "func.return"(%y) : (tensor<6xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<2x3xf32>) -> (tensor<6xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x3xf32>):
            %0 = "tensor.empty"() : () -> tensor<2x3xf32> loc("Relu_0")
            %r = "tensor.generic"(%x, %0) ({
            ^bb0(%1: f32, %2: f32):
              %3 = "arith.constant"() {type = f32, value = 0.0} : () -> f32
              %4 = "arith.max"(%1, %3) : (f32, f32) -> f32
              "tensor.yield"(%4) : (f32) -> ()
            }) {bounds = [2, 3], indexing_maps = [[[1, 0, 0], [0, 1, 0]], [[1, 0, 0], [0, 1, 0]]], iterator_types = ["parallel", "parallel"], operand_segments = [1, 1]} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32> loc("Relu_0")
            %5 = "tensor.empty"() : () -> tensor<2x3xf32> loc("Neg_2")
            %y = "tensor.generic"(%r, %5) ({
            ^bb0(%6: f32, %7: f32):
              %8 = "arith.neg"(%6) : (f32) -> f32
              "tensor.yield"(%8) : (f32) -> ()
            }) {bounds = [2, 3], indexing_maps = [[[1, 0, 0], [0, 1, 0]], [[1, 0, 0], [0, 1, 0]]], iterator_types = ["parallel", "parallel"], operand_segments = [1, 1]} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32> loc("Neg_2")
            %9 = "tensor.reshape"(%y) : (tensor<2x3xf32>) -> tensor<6xf32> loc("Neg_2")
            "func.return"(%9) : (tensor<6xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<2x3xf32>) -> (tensor<6xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "sink-collapse-reshapes"

    def run(self, module) -> bool:
        return sink_collapse_reshapes(module)
