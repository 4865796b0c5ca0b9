"""Horizontal merging: sibling layers that read the same input become one wider layer whose result
is split back into the siblings' results (TensorRT's horizontal fusion: Inception's 1x1 branches,
the Q/K/V projections of attention).

Siblings are users of one value ``x`` of the same kind, each reading ``x`` as its data input:

* ``graph.conv``: ``group = 1``, the same ``kernel_shape``, ``strides``, ``pads`` and
  ``dilations``, constant ``W`` and bias. The weights are concatenated along the output channels
  (axis 0; a missing bias is zeros when another sibling has one) and the result split along axis 1;
* ``graph.gemm``: the same ``transA``, constant ``B`` and ``C``. ``B`` is concatenated along
  ``N`` in the first sibling's ``transB`` layout (the others' are transposed to it); ``alpha``
  (and ``beta``) stay when all siblings agree and are folded into ``B`` (``C``) when they do not;
  ``C`` becomes ``[N]`` when every sibling's is per column, else ``[M, N]``. Split along axis 1;
* ``graph.matmul``: a constant 2-D ``B``, concatenated along its columns; split along the last
  axis;
* ``graph.fused_conv`` / ``fused_gemm`` / ``fused_matmul``: as their base op, when the epilogues
  are structurally identical and read no extra inputs (the merged op keeps that epilogue, which is
  elementwise, so it commutes with the split).

The merged op and its ``graph.split`` are placed just before the first reader of any sibling (the
input and the new constants dominate that point; each sibling's readers come after it). The split's
results take the siblings' result names; ``graph.split`` results are views, so bufferization gives
each sibling's reader a channel slice of the merged result and nothing is copied. The merged op
keeps the first sibling's location and lists the merged nodes in ``ptxc.merged``.
"""

from __future__ import annotations

import attrs
import numpy as np

from ...ir.core import Block, Operation, Region
from ...ir.spec import lookup
from ..driver import apply_patterns_greedily
from ..pass_ import Pass, register_pass
from ..pattern import RewritePattern
from .fold_batchnorm import const_array, label, make_constant

FAMILY = {"graph.conv": "conv", "graph.fused_conv": "conv",
          "graph.gemm": "gemm", "graph.fused_gemm": "gemm",
          "graph.matmul": "matmul", "graph.fused_matmul": "matmul"}

#: attributes whose values must agree for two siblings of a family to merge
GEOMETRY = {"conv": ("kernel_shape", "strides", "pads", "dilations", "layout"),
            "gemm": ("transA",),
            "matmul": ()}


# ---- reading an op -------------------------------------------------------------------------------

def is_fused(op: Operation) -> bool:
    return op.name.startswith("graph.fused_")


def parts(op: Operation):
    """(base operands, epilogue inputs)."""
    if is_fused(op):
        return lookup(op.name).split(op)
    return list(op.operands), []


def own_reason(op: Operation) -> str | None:
    """Why ``op`` cannot take part in a merge whatever its siblings are; None when it can."""
    base, extra = parts(op)
    fam = FAMILY[op.name]
    if extra:
        return f"{label(op)}'s epilogue reads other tensors"
    if fam == "conv" and op.attr("group") != 1:
        return f"{label(op)} is a grouped convolution (group {op.attr('group')})"
    if any(const_array(v) is None for v in base[1:]):
        return f"{label(op)}'s weights are not constant"
    if fam == "matmul" and base[1].type.rank != 2:
        return f"{label(op)}'s B is not a 2-D matrix"
    if fam == "gemm" and any(op.attr(k) not in (0, 1) for k in ("transA", "transB")):
        return f"{label(op)} has an invalid transA/transB"
    return None


def _attr_key(v):
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, int):
        return ("i", v)
    if isinstance(v, float):
        return ("f", v.hex())
    if isinstance(v, tuple):
        return ("t",) + tuple(_attr_key(x) for x in v)
    return (type(v).__name__, v)


def same_region(r1: Region, r2: Region, mapping: dict | None = None) -> bool:
    """Whether two regions compute the same thing: the same ops with the same attributes and
    result types, reading corresponding values (outer values must be the same)."""
    mapping = {} if mapping is None else mapping
    if len(r1.blocks) != len(r2.blocks):
        return False
    for b1, b2 in zip(r1.blocks, r2.blocks):
        if [a.type for a in b1.args] != [a.type for a in b2.args] or len(b1) != len(b2):
            return False
        mapping.update({id(a): b for a, b in zip(b1.args, b2.args)})
        for o1, o2 in zip(b1.ops, b2.ops):
            if o1.name != o2.name or len(o1.operands) != len(o2.operands) or \
                    [r.type for r in o1.results] != [r.type for r in o2.results]:
                return False
            if sorted((k, _attr_key(v)) for k, v in o1.attributes.items()) != \
                    sorted((k, _attr_key(v)) for k, v in o2.attributes.items()):
                return False
            if any(mapping.get(id(v1), v1) is not v2 for v1, v2 in zip(o1.operands, o2.operands)):
                return False
            if len(o1.regions) != len(o2.regions) or not all(
                    same_region(a, b, mapping) for a, b in zip(o1.regions, o2.regions)):
                return False
            mapping.update({id(a): b for a, b in zip(o1.results, o2.results)})
    return True


def pair_reason(a: Operation, b: Operation) -> str | None:
    """Why two siblings (each fine on its own) cannot merge; None when they can."""
    for k in GEOMETRY[FAMILY[a.name]]:
        if a.attr(k) != b.attr(k):
            return f"differ in {k}"
    if a.result.type.element != b.result.type.element:
        return "differ in element type"
    if FAMILY[a.name] == "gemm" and not a.result.type.element.is_float:
        for k in ("alpha", "beta"):  # integer weights cannot take a float factor
            if a.attr(k) != b.attr(k):
                return f"differ in {k}"
    if a.name != b.name or (is_fused(a) and not same_region(a.regions[0], b.regions[0])):
        return "differ in epilogue"
    return None


def clone_region(region: Region) -> Region:
    new, mapping = Region(), {}
    for block in region.blocks:
        nb = new.append(Block([a.type for a in block.args], [a.name_hint for a in block.args]))
        mapping.update(zip(block.args, nb.args))
        for op in block.ops:
            nb.append(op.clone(mapping))
    return new


# ---- building the merged weights ----------------------------------------------------------------

def _width(op: Operation) -> int:
    """The output channels of a sibling: axis 1 of a conv/gemm, the last axis of a matmul or
    a channels-last conv."""
    shape = op.result.type.shape
    last = FAMILY[op.name] == "matmul" or op.attr("layout") == "NHWC"
    return shape[-1] if last else shape[1]


def _conv_weights(group):
    ws = [const_array(parts(op)[0][1]) for op in group]
    bs = [parts(op)[0][2] if len(parts(op)[0]) > 2 else None for op in group]
    W = np.concatenate(ws, axis=0)
    B = None
    if any(b is not None for b in bs):
        B = np.concatenate([const_array(b) if b is not None else np.zeros(w.shape[0], w.dtype)
                            for b, w in zip(bs, ws)])
    return W, B, {}


def _gemm_weights(group):
    first = group[0]
    tb = first.attr("transB")
    m = first.result.type.shape[0]
    alphas = {float(op.attr("alpha")) for op in group}
    with_c = [op for op in group if len(parts(op)[0]) > 2]
    betas = {float(op.attr("beta")) for op in with_c}
    attributes = {}
    bs = []
    for op in group:
        b = const_array(parts(op)[0][1])
        if op.attr("transB") != tb:
            b = b.T
        if len(alphas) > 1:
            b = b.astype(np.float64) * op.attr("alpha")
        bs.append(b)
    if len(alphas) > 1:
        attributes["alpha"] = 1.0
    W = np.concatenate(bs, axis=0 if tb else 1)
    B = None
    if with_c:
        cs = []
        for op in group:
            n = _width(op)
            base = parts(op)[0]
            if len(base) > 2:
                c = const_array(base[2])
                if len(betas) > 1:
                    c = c.astype(np.float64) * op.attr("beta")
            else:
                c = np.zeros((n,), W.dtype)
            cs.append((c, n))
        if all(tuple(np.broadcast_shapes(c.shape, (1, n))) == (1, n) for c, n in cs):
            B = np.concatenate([np.broadcast_to(c, (1, n)).reshape(n) for c, n in cs])
        else:
            B = np.concatenate([np.broadcast_to(c, (m, n)) for c, n in cs], axis=1)
        beta = 1.0 if len(betas) > 1 else betas.pop()
        if beta != first.attr("beta"):   # the first sibling may be one without C
            attributes["beta"] = beta
    return W, B, attributes


def _matmul_weights(group):
    return np.concatenate([const_array(parts(op)[0][1]) for op in group], axis=1), None, {}


WEIGHTS = {"conv": _conv_weights, "gemm": _gemm_weights, "matmul": _matmul_weights}


# ---- the pattern ---------------------------------------------------------------------------------

class MergeSiblings(RewritePattern):
    """Sibling conv/gemm/matmul ops (fused or not) reading one input -> one op + graph.split."""

    root = None

    def match_and_rewrite(self, op, rewriter):
        fam = FAMILY.get(op.name)
        if fam is None or not op.operands:
            return False
        x = op.operands[0]
        if x in op.operands[1:]:
            return False
        cands = [u for u in x.users if u is not op and FAMILY.get(u.name) == fam
                 and u.operands[0] is x and x not in u.operands[1:] and u.block is op.block]
        if not cands:
            return False
        mine = own_reason(op)
        if mine is not None:
            return rewriter.fail(op, f"{label(op)} and {label(cands[0])} read the same input but "
                                     f"{mine}")
        group, rejected = [op], []
        for u in cands:
            r = own_reason(u) or pair_reason(op, u)
            if r is None:
                group.append(u)
            else:
                rejected.append((u, r))
        if len(group) == 1:
            u, r = rejected[0]
            return rewriter.fail(op, f"{label(op)} and {label(u)} read the same input but {r}")
        pos = {id(o): i for i, o in enumerate(op.block.ops)}
        readers = [u for s in group for r in s.results for u in r.users]
        if any(id(u) not in pos for u in readers):
            return False  # a reader in a nested region: leave it alone
        group.sort(key=lambda o: pos[id(o)])
        self.merge(group, min(readers, key=lambda u: pos[id(u)]) if readers else None, rewriter)
        return True

    def merge(self, group, first_reader, rewriter):
        first = group[0]
        fam = FAMILY[first.name]
        el = first.result.type.element
        W, B, changed = WEIGHTS[fam](group)
        if first_reader is not None:
            rewriter.set_insertion_point_before(first_reader)
        else:
            rewriter.set_insertion_point_after(group[-1])
        base = parts(first)[0]
        hint = first.result.name_hint
        w_hint = base[1].name_hint
        w_val = make_constant(rewriter, W, el, f"{w_hint}_merged" if w_hint else None, first.loc)
        b_val = None
        if B is not None:
            b_hint = base[2].name_hint if len(base) > 2 else None
            b_hint = b_hint or (f"{w_hint}_bias" if w_hint else None)
            b_val = make_constant(rewriter, B, el, f"{b_hint}_merged" if b_hint else None,
                                  first.loc)
        attributes = {k: v for k, v in first.attributes.items()
                      if k != "operand_segments" and "." not in k}
        attributes.update(changed)
        fused = tuple(n for s in group for n in s.attributes.get("ptxc.fused", ()))
        if fused:
            attributes["ptxc.fused"] = fused
        attributes["ptxc.merged"] = tuple(label(s) for s in group)
        operands = [base[0], w_val] + ([b_val] if fam != "matmul" else [])
        regions = ()
        if is_fused(first):
            operands.append([])
            regions = (clone_region(first.regions[0]),)
        merged = rewriter.create(first.name, operands, attributes, regions=regions, loc=first.loc,
                                 result_names=[f"{hint}_merged" if hint else None])
        last = fam == "matmul" or merged.attr("layout") == "NHWC"  # channels-last conv
        axis = merged.result.type.rank - 1 if last else 1
        split = rewriter.create("graph.split", [merged.result],
                                {"axis": axis, "split": [_width(s) for s in group]},
                                loc=first.loc)
        for s, r in zip(group, split.results):
            rewriter.replace_op(s, [r])


@register_pass
@attrs.frozen
class MergeSiblingsPass(Pass):
    """Merge sibling conv, gemm and matmul layers (also fused ones with identical epilogues) that
    read the same input with compatible geometry and constant weights into one wider layer
    followed by a ``graph.split`` (see :mod:`ptxc.rewrite.passes.merge_siblings`). ``--explain``
    says why siblings stay apart ("conv_3 and conv_5 read the same input but differ in
    strides").

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<1x2x2x2xf32>):
            %w1 = "graph.constant"() {value = dense<[1.0, 2.0]> : tensor<1x2x1x1xf32>} : () -> tensor<1x2x1x1xf32>
            %b1 = "graph.constant"() {value = dense<[0.5]> : tensor<1xf32>} : () -> tensor<1xf32>
            %a = "graph.conv"(%x, %w1, %b1) {dilations = [1, 1], group = 1, kernel_shape = [1, 1], pads = [0, 0, 0, 0], strides = [1, 1]} : (tensor<1x2x2x2xf32>, tensor<1x2x1x1xf32>, tensor<1xf32>) -> tensor<1x1x2x2xf32> loc("conv_1")
            %ra = "graph.relu"(%a) : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32> loc("relu_2")
            %w2 = "graph.constant"() {value = dense<[3.0, 4.0, 5.0, 6.0]> : tensor<2x2x1x1xf32>} : () -> tensor<2x2x1x1xf32>
            %b = "graph.conv"(%x, %w2) {dilations = [1, 1], group = 1, kernel_shape = [1, 1], pads = [0, 0, 0, 0], strides = [1, 1]} : (tensor<1x2x2x2xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x2x2xf32> loc("conv_3")
            "func.return"(%ra, %b) : (tensor<1x1x2x2xf32>, tensor<1x2x2x2xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<1x2x2x2xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x2x2x2xf32>), result_names = ["a", "b"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<1x2x2x2xf32>):
            %w1_merged = "graph.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]> : tensor<3x2x1x1xf32>} : () -> tensor<3x2x1x1xf32> loc("conv_1")
            %b1_merged = "graph.constant"() {value = dense<[0.5, 0.0, 0.0]> : tensor<3xf32>} : () -> tensor<3xf32> loc("conv_1")
            %a_merged = "graph.conv"(%x, %w1_merged, %b1_merged) {dilations = [1, 1], group = 1, kernel_shape = [1, 1], pads = [0, 0, 0, 0], ptxc.merged = ["conv_1", "conv_3"], strides = [1, 1]} : (tensor<1x2x2x2xf32>, tensor<3x2x1x1xf32>, tensor<3xf32>) -> tensor<1x3x2x2xf32> loc("conv_1")
            %a, %b = "graph.split"(%a_merged) {axis = 1, split = [1, 2]} : (tensor<1x3x2x2xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x2x2x2xf32>) loc("conv_1")
            %ra = "graph.relu"(%a) : (tensor<1x1x2x2xf32>) -> tensor<1x1x2x2xf32> loc("relu_2")
            "func.return"(%ra, %b) : (tensor<1x1x2x2xf32>, tensor<1x2x2x2xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<1x2x2x2xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x2x2x2xf32>), result_names = ["a", "b"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "merge-siblings"

    def run(self, module: Operation) -> bool:
        return apply_patterns_greedily(module, [MergeSiblings])
