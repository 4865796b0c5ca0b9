"""LLVM loop metadata: the loop IDs a kernel's loop latches carry, and the schedule hints in them.

A loop ID is a metadata node whose first operand is the node itself (which makes it distinct:
two loops never share one) followed by property nodes, and the latch branch of the loop points
at it (LLVM LangRef, "'llvm.loop'")::

    br label %loop, !llvm.loop !3
    !1 = !{ !"llvm.loop.vectorize.width", i32 8 }
    !2 = !{ !"llvm.loop.vectorize.enable", i1 1 }
    !3 = !{ !3, !1, !2 }

llvmlite.ir has no self-referential node: ``Module.add_metadata`` uniques nodes by their
operands (it would hand every loop the same ID, and a node cannot name itself before it
exists). So :func:`loop_id` makes an ``MDValue`` directly, registered in the module's metadata
list under the next free number, and then sets its operands to itself plus the properties.
The property nodes are ordinary uniqued ``add_metadata`` nodes, shared by every loop that asks
for the same thing. (An ``MDValue``'s hash and equality look at its operands: a loop ID is
never hashed or compared, only printed, so the cycle is harmless.)

The properties (:func:`hint_nodes`) are the cpu schedule's (:mod:`ptxc.lower.cpu_schedule`,
kernel attributes ``cpu.vector_width``/``cpu.unroll``) and ``loop.for {rolled}``'s:

* ``vector_width`` W > 1: ``llvm.loop.vectorize.width`` W and ``llvm.loop.vectorize.enable``
  1 (LoopVectorize uses W lanes, past its cost model's choice where legal). Such hints also
  let LoopVectorize reorder a float reduction the loop carries (LLVM's
  ``LoopVectorizeHints::allowReordering``: x86 has no in-order vector reductions), which
  ptxc's loop semantics allow (the GPU schedules reassociate sums too) except in a
  ``loop.for {ordered}`` (a pool window's sum): that loop gets no width over 1. So a tactic
  with a vector width may change a float sum within its rounding, never an integer one; W = 1:
  ``llvm.loop.vectorize.width`` 1 and ``llvm.loop.interleave.count`` 1, which LoopVectorize
  reads as "do not vectorize" (with ``vectorize.enable`` 1 it would still interleave the
  scalar loop, which is unrolling by another name). W = 1 asks for a scalar kernel, so the
  kernel's function also gets ``noimplicitfloat`` (llvm_kernel._Kernel): the SLP vectorizer
  would otherwise still pack straight-line code into vectors (a matmul's accumulators that
  lower-tensor-to-loop unrolls and jams become one ``<8 x float>``). Scalar float arithmetic
  is explicit and unaffected (x86-64 keeps it in SSE registers, one lane);
* ``unroll`` U: ``llvm.loop.unroll.count`` U (LoopUnroll unrolls by U; 1 keeps the loop as it
  is). LoopVectorize passes the property on to the vectorized loop (its remainder loop is
  marked not to unroll), so U counts vector iterations there, each already interleaved by
  the vectorizer's own count: a vectorized loop's body holds U x that many vector
  iterations; U = 1 also keeps LoopVectorize from interleaving (one vector iteration per
  loop iteration). tests/test_cpu_schedule.py measures both on LLVM 22;
* ``rolled``: ``llvm.loop.unroll.disable`` (then no unroll count is given: the two conflict,
  and a rolled loop asked for it for a reason, see loop.for's ``rolled``).
"""

from __future__ import annotations

from llvmlite import ir

_I32 = ir.IntType(32)
_I1 = ir.IntType(1)


def _property(m: ir.Module, name: str, value: ir.Constant | None = None) -> ir.values.MDValue:
    operands = [ir.MetaDataString(m, name)] + ([] if value is None else [value])
    return m.add_metadata(operands)


def hint_nodes(m: ir.Module, vector_width: int = 0, unroll: int = 0,
               rolled: bool = False) -> list:
    """The property nodes of a loop ID for these hints (module docstring); empty for none
    (``0``: LLVM's own choice)."""
    out = []
    if rolled:
        out.append(_property(m, "llvm.loop.unroll.disable"))
    if vector_width == 1:
        out.append(_property(m, "llvm.loop.vectorize.width", ir.Constant(_I32, 1)))
        out.append(_property(m, "llvm.loop.interleave.count", ir.Constant(_I32, 1)))
    elif vector_width:
        out.append(_property(m, "llvm.loop.vectorize.width", ir.Constant(_I32, vector_width)))
        out.append(_property(m, "llvm.loop.vectorize.enable", ir.Constant(_I1, 1)))
    if unroll and not rolled:
        out.append(_property(m, "llvm.loop.unroll.count", ir.Constant(_I32, unroll)))
    return out


def loop_id(m: ir.Module, properties: list) -> ir.values.MDValue:
    """A new loop ID (distinct: its first operand is itself) holding ``properties``."""
    md = ir.values.MDValue(m, properties, name=str(len(m.metadata)))
    md.operands = (md, *properties)
    return md
