"""Named structured ops (``tensor.matmul``, ``conv``, ``pool``, ``reduce``) for the loop lowering.

Each becomes the ``tensor.generic`` with the same semantics (``ptxc.dialects.tensor.generalize``)
before the analysis, so that one loop-nest builder serves all structured ops: the generic of a
named op has its reduction dims last and an out map over the parallel dims only, which is
exactly the nest the brief asks for (reduction loops innermost, the accumulator carried in
registers, read once, stored once); going through the generic costs no memory traffic.

One thing the generic cannot say: a named op with an f16 result sums in f32 and rounds once
(its reference, as tensor cores accumulate), while a generic's body accumulates in its out's
type. For those (sum/product kinds with an f16 out) :func:`generalize_all` also returns a
*wide body*: the same computation with an f32 accumulator, which the nest uses instead (the
start value widened, the result rounded once when stored).

Once generalized, the elementwise producers that a named op reads once per element (a
softmax's ``exp`` feeding its sum, a mean's cast) are fused into it
(``ptxc.lower.tensor_passes.fuse_elementwise``, what ``fuse-tensor-elementwise`` does after
``generalize-named-ops``), so a pipeline that keeps named ops at the tensor stage gets the same
nests as one that generalizes them; ops with a wide body are generalized after that fusion
(a fused body would accumulate in f16 again).

**Contractions.** A matmul or conv leaves a mark on its generic (:data:`CONTRACTION`: the
source op and the kind of its products), and the nests built from it carry the
``contraction`` annotation (:func:`annotation`; ptxc/dialects/loop_contraction.py), which the
GPU schedules that take contractions read (gpu_map/contraction.py): a role per dim of the
``loop.parallel`` (``B`` read by both factors, ``M`` by the first only, ``N`` by the second
only, from the factors' indexing maps) and a ``K`` per reduction loop. Each nest of the op is
annotated on its own, after the unroll-and-jam and the split into a main nest and a
remainder, so the annotation describes the nest as built. Not annotated: a nest without
reduction loops (K of one point), one whose factor is a constant (a fill), one with a dim
neither factor reads::

    tensor.matmul(x: 2x24x40xf16, w: 40x13xf16, C: 2x24x13xf32)   (x's batch dim: an M dim)
      -> loop.parallel (m, b, n step 8) {contraction = ["matmul", "f16", "MMN", "K"]}
         loop.parallel (m, b, n in [8, 13)) {contraction = ["matmul", "f16", "MMN", "K"]}
"""

from __future__ import annotations

from ...dialects.func import func_body
from ...dialects.loop_contraction import Annotation, kind_of
from ...dialects.tensor import NAMED_OPS, generalize
from ...dialects.tensor.generic import body as generic_body
from ...ir.builder import Builder
from ...ir.core import Block, Operation
from ...ir.types import F16, F32

#: the mark generalize_all leaves on the generic of a matmul or conv, ``(source, kind)``:
#: the nests built from it carry the ``contraction`` annotation (module docstring).
#: A generic rebuilt by a fusion (tensor_passes.fuse: a producer folded into its operands)
#: loses it, knowingly: its factors are no longer plain loads.
CONTRACTION = "ptxc.contraction"

_SUMS = {"sum": "arith.add", "prod": "arith.mul"}
#: every combiner: max/min of f16 are exact in any width, but widened too so that no reduction
#: carries an f16 value (the rule precision="fp16" keeps: accumulators are f32)
_COMBINE = {**_SUMS, "max": "arith.max", "min": "arith.min"}


def _kind(op: Operation) -> tuple[str, bool] | None:
    """(combine op, whether the ins are multiplied first) of a named op."""
    if op.name in ("tensor.matmul", "tensor.conv"):
        return "arith.add", True
    return (_COMBINE[op.attr("kind")], False) if op.attr("kind") in _COMBINE else None


def _wide_body(op: Operation, combine: str, product: bool) -> Block:
    ins = op.operands[:-1]
    block = Block([v.type.element for v in ins] + [F32])
    b = Builder.at_end(block)
    xs = [a if a.type == F32 else b.create("arith.cast", [a], {"to": F32}).result
          for a in block.args[:-1]]
    v = b.create("arith.mul", xs).result if product else xs[0]
    y = b.create(combine, [block.args[-1], v]).result
    b.create("tensor.yield", [y], result_types=[])
    return block


def generalize_all(func: Operation, wide_too: bool = True) -> dict[int, tuple[Block, object]]:
    """Replace every named op of ``func`` by its generic (in place; those that need a wide body
    only with ``wide_too``); returns ``id(generic) -> (wide body, f32)`` for those that must
    accumulate in f32 (see the module docstring)."""
    wide = {}
    for op in list(func_body(func).ops):
        if op.name not in NAMED_OPS:
            continue
        kind = _kind(op) if op.results[0].type.element == F16 else None
        if kind is not None and not wide_too:
            continue
        g = generalize(op)
        op.block.insert_before(op, g)
        op.replace_all_uses_with(g.results)
        if kind is not None:
            wide[id(g)] = (_wide_body(op, *kind), F32)
        if op.name in ("tensor.matmul", "tensor.conv"):
            g.attributes[CONTRACTION] = _contraction(op, g, F32 if kind else None)
        op.erase()
    return wide


def _contraction(op: Operation, g: Operation, wide) -> tuple:
    """The mark of ``g``, the generic of the matmul or conv ``op``: (source, kind of its
    products; loop_contraction.kind_of). tf32 where ``g``'s body rounds its factors (the
    generic is what the nest computes: every generalization of a ``tf32`` matmul or conv
    rounds them, tensor/generalize.py)."""
    rounds = any(o.name == "arith.round_tf32" for o in generic_body(g).ops)
    acc = wide or op.results[0].type.element
    return (op.name.split(".")[1], kind_of(op.operands[0].type.element, acc, rounds))


def annotation(mark: tuple, factor_maps: list, order: list, red: list) -> tuple | None:
    """The ``contraction`` annotation of a nest of the generic marked ``mark`` over the
    parallel dims ``order`` and reduction loops ``red`` (dims of the generic) whose factors
    read through ``factor_maps`` (module docstring, "Contractions"), or None."""
    if not red:
        return None
    roles = ""
    for d in order:
        ra, rb = (any(row[d] for row in m) for m in factor_maps)
        if not (ra or rb):
            return None
        roles += "B" if ra and rb else ("M" if ra else "N")
    return Annotation(*mark, roles, len(red)).value
