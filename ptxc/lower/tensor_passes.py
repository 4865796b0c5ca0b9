"""Tensor-stage passes: ``generalize-named-ops`` and ``fuse-tensor-elementwise``.

Producer-consumer fusion (as MLIR's linalg elementwise fusion): a parallel-only
``tensor.generic`` P whose one result has exactly one use, as an ``ins`` operand of a generic C,
is folded into C. P's out map must be a permutation of its loop dims (so each P loop dim is one
of its result's dims), and then C's map of that operand says, for every point of C's iteration
space, which point of P's it reads: P's loop dim ``j`` becomes an affine expression of C's loop
dims, P's input maps are composed with it, P's ``tensor.index`` ops become that expression, and
P's body is inlined in front of C's. C's map may be anything affine (identity, broadcast,
transposed, strided): a broadcast recomputes P's element for every point that reads it, as
MLIR's elementwise fusion does. Into a C with reduction dims, P is fused only when C reads each
of P's elements once (softmax's ``exp`` into its sum once the named reduce is generalized),
never into a generalized convolution or matmul, which would recompute P for every output
channel and kernel tap and would no longer be a plain contraction. The fused op keeps C's loc and result names; identical
(operand, map) pairs of the fused op share one block argument. So a conv's epilogue generic and
the elementwise chain after it end as one generic.
"""

from __future__ import annotations

import attrs

from ..dialects.func import func_body, functions
from ..dialects.tensor import NAMED_OPS, generalize
from ..dialects.tensor.generic import body as generic_body
from ..dialects.tensor.generic import generic_parts
from ..dialects.tensor.maps import permutation_of, row_terms, substitute
from ..ir.builder import Builder
from ..ir.core import Block, Operation, OpResult, Region
from ..ir.spec import make_op
from ..ir.types import INDEX
from ..rewrite.pass_ import Pass, register_pass
from ..rewrite.passes.dce import erase_dead_ops
from ..rewrite.provenance import FUSED, absorbed


@register_pass
@attrs.frozen
class GeneralizeNamedOps(Pass):
    """Replace each named structured op (tensor.matmul, conv, pool, reduce) by the
    ``tensor.generic`` with the same semantics (``ptxc.dialects.tensor.generalize``), so that the
    loop lowering only needs generics and data movement.

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x3xf32>, %init: tensor<2x1xf32>):
            %s = "tensor.reduce"(%x, %init) {axes = [1], kind = "sum"} : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x1xf32> loc("sum1")
            "func.return"(%s) : (tensor<2x1xf32>) -> ()
          }) {arg_names = ["x", "init"], function_type = (tensor<2x3xf32>, tensor<2x1xf32>) -> (tensor<2x1xf32>), result_names = ["s"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x3xf32>, %init: tensor<2x1xf32>):
            %s = "tensor.generic"(%x, %init) ({
            ^bb0(%0: f32, %1: f32):
              %2 = "arith.add"(%1, %0) : (f32, f32) -> f32
              "tensor.yield"(%2) : (f32) -> ()
            }) {bounds = [2, 3], indexing_maps = [[[1, 0, 0], [0, 1, 0]], [[1, 0, 0], [0, 0, 0]]], iterator_types = ["parallel", "reduction"], operand_segments = [1, 1]} : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x1xf32> loc("sum1")
            "func.return"(%s) : (tensor<2x1xf32>) -> ()
          }) {arg_names = ["x", "init"], function_type = (tensor<2x3xf32>, tensor<2x1xf32>) -> (tensor<2x1xf32>), result_names = ["s"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "generalize-named-ops"

    def run(self, module: Operation) -> bool:
        changed = False
        for op in list(module.walk()):
            if op.name in NAMED_OPS:
                g = generalize(op)
                op.block.insert_before(op, g)
                op.replace_all_uses_with(g.results)
                op.erase()
                changed = True
        return changed


# ---- fusion -----------------------------------------------------------------------------------------

def fusable(p: Operation, c: Operation, k: int) -> bool:
    """Whether producer ``p`` can be folded into consumer ``c``, which reads it as ins #k."""
    if p.name != "tensor.generic" or len(p.results) != 1 or len(p.results[0].uses) != 1:
        return False
    if any(t != "parallel" for t in p.attr("iterator_types")):
        return False
    p_ins, _ = generic_parts(p)
    out_arg = generic_body(p).args[len(p_ins)]
    if out_arg.uses:
        return False
    if permutation_of(p.attr("indexing_maps")[len(p_ins)], len(p.attr("bounds"))) is None:
        return False
    c_ins, _ = generic_parts(c)
    if k >= len(c_ins):
        return False
    if "reduction" in c.attr("iterator_types"):
        return reads_each_once(c.attr("indexing_maps")[k], c.attr("bounds"))
    own = _epilogue_of(p)
    if own is not None and (_epilogue_of(c) not in (None, own) or _bits(c) > _bits(p)):
        return False      # p stays its own contraction's epilogue (see _epilogue_of)
    return True


def _bits(g: Operation) -> int:
    return g.results[0].type.element.bitwidth


def _epilogue_of(g: Operation) -> Operation | None:
    """The contraction (a conv, matmul, pool or reduce: named, or a generic with a reduction
    dim) whose result generic ``g`` reads as its only reader, with ``g``'s result no wider:
    ``g`` is that contraction's epilogue, and the loop stage makes the two one nest. Such a
    ``g`` is not folded into a consumer that is another contraction's epilogue (there it would
    be recomputed in that contraction's nest while its own contraction stored the wide
    accumulator), nor into one with a wider result (a dequantization: the contraction would
    store that). Example, a ResNet block's projection shortcut in int8::

        %ds = tensor.conv(...) -> i32;   %q = generic(%ds) -> i8        (requantize)
        %r = generic(%q) -> f32                                          (dequantize)
        %c3 = tensor.conv(...) -> i32;   %y = generic(%c3, %r) -> i8    (+ residual, relu)

    Folding ``%q`` into ``%r`` and that into ``%y`` made the shortcut conv store its i32
    accumulator (4 bytes per element) for ``%y`` to requantize, where its epilogue stores 1
    (``%r`` still folds into ``%y``: it is no contraction's epilogue); fp16 alike stored f32."""
    p_ins, _ = generic_parts(g)
    width = g.results[0].type.element.bitwidth
    for v in p_ins:
        q = v.op if isinstance(v, OpResult) else None
        if q is None or len(v.uses) != 1 or not hasattr(v.type, "element"):
            continue
        reduces = q.name in NAMED_OPS or (
            q.name == "tensor.generic" and "reduction" in q.attr("iterator_types"))
        if reduces and width <= v.type.element.bitwidth:
            return q
    return None


def reads_each_once(m, bounds) -> bool:
    """Whether ``m`` reads each element at most once over the iteration space: every loop dim of
    extent > 1 appears in one row only, and within a row the dims form a mixed-radix number
    (sorted by coefficient, each coefficient exceeds the span of the smaller terms), as
    ``2 * o + k`` with ``k < 2`` does (non-overlapping windows) and ``o + k`` does not."""
    seen: list[int] = []
    for row in m:
        terms = sorted((abs(coeff), i) for i, coeff in row_terms(row) if bounds[i] > 1)
        span = 0
        for coeff, i in terms:
            if coeff <= span:
                return False
            span += coeff * (bounds[i] - 1)
            seen.append(i)
    return len(seen) == len(set(seen)) and set(seen) == {i for i, b in enumerate(bounds) if b > 1}


def index_expr(b: Builder, row, cache: dict):
    """An ``index`` value computing the affine ``row`` from the current loop dims (``cache``: the
    ``tensor.index`` of each dim made so far); fuse and sink-collapse-reshapes use it."""
    def index(i):
        if i not in cache:
            cache[i] = b.create("tensor.index", [], {"dim": i}).result
        return cache[i]

    def const(v):
        return b.create("arith.constant", [], {"value": v, "type": INDEX}).result

    terms = row_terms(row)
    acc = None
    for i, coeff in terms:
        t = index(i) if coeff == 1 else b.create("arith.mul", [index(i), const(coeff)]).result
        acc = t if acc is None else b.create("arith.add", [acc, t]).result
    if acc is None:
        return const(row[-1])
    if row[-1]:
        acc = b.create("arith.add", [acc, const(row[-1])]).result
    return acc


def fuse(p: Operation, c: Operation, k: int) -> Operation:
    """The generic that computes ``c`` with its ins #k computed in place by ``p``'s body."""
    p_ins, _ = generic_parts(p)
    c_ins, c_outs = generic_parts(c)
    p_maps, c_maps = p.attr("indexing_maps"), c.attr("indexing_maps")
    perm = permutation_of(p_maps[len(p_ins)], len(p.attr("bounds")))
    exprs = [None] * len(perm)
    for r, j in enumerate(perm):
        exprs[j] = c_maps[k][r]
    n_c = len(c.attr("bounds"))
    p_in_maps = [substitute(m, exprs) if exprs else
                 tuple(tuple([0] * n_c + [row[-1]]) for row in m) for m in p_maps[:len(p_ins)]]
    # the fused op's ins: c's before k, p's, c's after k; equal (value, map) pairs merged
    entries = [(v, m, ("c", i)) for i, (v, m) in enumerate(zip(c_ins, c_maps)) if i < k]
    entries += [(v, m, ("p", i)) for i, (v, m) in enumerate(zip(p_ins, p_in_maps))]
    entries += [(v, m, ("c", i)) for i, (v, m) in enumerate(zip(c_ins, c_maps)) if i > k]
    ins, maps, slot = [], [], {}
    for v, m, key in entries:
        for j, (v2, m2) in enumerate(zip(ins, maps)):
            if v2 is v and m2 == m:
                slot[key] = j
                break
        else:
            slot[key] = len(ins)
            ins.append(v)
            maps.append(m)
    block = Block([v.type.element for v in ins] + [v.type.element for v in c_outs])
    b = Builder.at_end(block)
    # p's body, its block arguments mapped to the fused op's, its tensor.index ops rewritten
    pb = generic_body(p)
    mapping = {a: block.args[slot[("p", i)]] for i, a in enumerate(pb.args[:len(p_ins)])}
    cache: dict = {}
    for op in pb.ops:
        if op.name == "tensor.yield":
            produced = mapping.get(op.operands[0], op.operands[0])
            break
        if op.name == "tensor.index":
            mapping[op.results[0]] = index_expr(b, exprs[op.attr("dim")], cache)
            continue
        b.insert(op.clone(mapping))
    # c's body, its ins #k replaced by what p's body yields
    cb = generic_body(c)
    cmap = {}
    for i, a in enumerate(cb.args):
        if i < len(c_ins):
            cmap[a] = produced if i == k else block.args[slot[("c", i)]]
        else:
            cmap[a] = block.args[len(ins) + i - len(c_ins)]
    for op in cb.ops:
        if op.name == "tensor.index" and op.attr("dim") in cache:
            cmap[op.results[0]] = cache[op.attr("dim")]
            continue
        b.insert(op.clone(cmap))
    return make_op("tensor.generic", [ins, list(c_outs)], {
        "bounds": c.attr("bounds"), "indexing_maps": tuple(maps) + tuple(c_maps[len(c_ins):]),
        "iterator_types": c.attr("iterator_types"), FUSED: absorbed(c, p) or None,
        "ordered": c.attr("ordered") or None},
        result_types=[r.type for r in c.results], regions=[Region([block])], loc=c.loc,
        result_names=[r.name_hint for r in c.results])


def fuse_elementwise(module: Operation) -> bool:
    """Fold producers into consumers to a fixpoint; returns whether anything changed."""
    changed_any = False
    changed = True
    while changed:
        changed = False
        for f in functions(module):
            for c in list(func_body(f).ops):
                if c.block is None or c.name != "tensor.generic":
                    continue
                c_ins, _ = generic_parts(c)
                for k, v in enumerate(c_ins):
                    p = v.op if isinstance(v, OpResult) else None
                    if p is not None and fusable(p, c, k):
                        new = fuse(p, c, k)
                        c.block.insert_before(c, new)
                        c.replace_all_uses_with(new.results)
                        c.erase()
                        p.erase()
                        changed = changed_any = True
                        break
    if changed_any:
        erase_dead_ops(module)
    return changed_any


@register_pass
@attrs.frozen
class FuseTensorElementwise(Pass):
    """Fold each parallel ``tensor.generic`` whose result has one use, as an input of another
    generic, into that consumer (see ptxc/lower/tensor_passes.py): an elementwise chain, or a
    conv's epilogue and what follows it, becomes one generic; no intermediate tensor is left.
    The fused generic lists the locs it absorbed in ``ptxc.fused`` (kernel provenance).

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<4xf32>, %b: tensor<4xf32>):
            %e0 = "tensor.empty"() : () -> tensor<4xf32>
            %s = "tensor.generic"(%x, %b, %e0) ({
            ^bb0(%0: f32, %1: f32, %2: f32):
              %3 = "arith.add"(%0, %1) : (f32, f32) -> f32
              "tensor.yield"(%3) : (f32) -> ()
            }) {bounds = [4], indexing_maps = [[[1, 0]], [[1, 0]], [[1, 0]]], iterator_types = ["parallel"], operand_segments = [2, 1]} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> loc("add1")
            %e1 = "tensor.empty"() : () -> tensor<4xf32>
            %y = "tensor.generic"(%s, %e1) ({
            ^bb0(%4: f32, %5: f32):
              %6 = "arith.constant"() {type = f32, value = 0.0} : () -> f32
              %7 = "arith.max"(%4, %6) : (f32, f32) -> f32
              "tensor.yield"(%7) : (f32) -> ()
            }) {bounds = [4], indexing_maps = [[[1, 0]], [[1, 0]]], iterator_types = ["parallel"], operand_segments = [1, 1]} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> loc("relu1")
            "func.return"(%y) : (tensor<4xf32>) -> ()
          }) {arg_names = ["x", "b"], function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<4xf32>, %b: tensor<4xf32>):
            %e1 = "tensor.empty"() : () -> tensor<4xf32>
            %y = "tensor.generic"(%x, %b, %e1) ({
            ^bb0(%0: f32, %1: f32, %2: f32):
              %3 = "arith.add"(%0, %1) : (f32, f32) -> f32
              %4 = "arith.constant"() {type = f32, value = 0.0} : () -> f32
              %5 = "arith.max"(%3, %4) : (f32, f32) -> f32
              "tensor.yield"(%5) : (f32) -> ()
            }) {bounds = [4], indexing_maps = [[[1, 0]], [[1, 0]], [[1, 0]]], iterator_types = ["parallel"], operand_segments = [2, 1], ptxc.fused = ["add1"]} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> loc("relu1")
            "func.return"(%y) : (tensor<4xf32>) -> ()
          }) {arg_names = ["x", "b"], function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "fuse-tensor-elementwise"

    def run(self, module: Operation) -> bool:
        return fuse_elementwise(module)
