"""Provenance: which ONNX nodes each kernel computes, through every fusion.

An op's ``loc`` is the ONNX node it came from; an op that absorbed others (a conv that took a
batch norm and a relu, a recognized GELU, a tensor generic that took its elementwise producer)
lists their locs in the discardable attribute ``ptxc.fused``. The lowerings keep ``loc`` on
everything they build but not the attribute, so provenance is collected as a map keyed by loc
at the end of the graph and tensor stages (:func:`collect`) and written back onto the kernels
(the top-level ops of the loop stage) by :func:`annotate_kernels`; the LLVM emission copies
each kernel's nodes into its :class:`~ptxc.lower.loop_to_llvm.KernelInfo`, so ``bench
--profile``, ``inspect`` and plans name every node a kernel ran.

Before (graph stage, after graph-opt)::

    %y = "graph.fused_conv"(%x, %w, %b) {ptxc.fused = ["bn1", "relu1"], ...} loc("conv1")

After (loop stage, after :func:`annotate_kernels`)::

    "loop.parallel"() ({...}) {ptxc.fused = ["bn1", "relu1"], ...} loc("conv1")
"""

from __future__ import annotations

from ..ir.attributes import normalize
from ..ir.core import Operation

FUSED = "ptxc.fused"


def nodes_of(op: Operation) -> tuple[str, ...]:
    """``op``'s own loc first, then what it absorbed, without repeats."""
    out: list[str] = []
    for n in ((op.loc,) if op.loc else ()) + tuple(op.attributes.get(FUSED, ())):
        if n and n not in out:
            out.append(n)
    return tuple(out)


def absorbed(into: Operation, *others: Operation) -> tuple[str, ...]:
    """The ``ptxc.fused`` list of ``into`` after it absorbs ``others`` (their nodes, and what
    they absorbed, less ``into``'s own loc)."""
    out = list(into.attributes.get(FUSED, ()))
    for o in others:
        out += [n for n in nodes_of(o) if n != into.loc and n not in out]
    return tuple(out)


def collect(module: Operation, prov: dict) -> dict:
    """Add every op of ``module`` to ``prov`` (loc -> nodes), expanding names already in it."""
    for op in module.walk():
        if not op.loc:
            continue
        nodes = list(prov.get(op.loc, (op.loc,)))
        for n in nodes_of(op):
            for m in prov.get(n, (n,)):
                if m not in nodes:
                    nodes.append(m)
        prov[op.loc] = tuple(nodes)
    return prov


def annotate_kernels(module: Operation, prov: dict) -> None:
    """Set ``ptxc.fused`` on the top-level ops of every function from ``prov``."""
    for func in module.regions[0].blocks[0].ops:
        for region in func.regions:
            for block in region.blocks:
                for op in block.ops:
                    nodes = prov.get(op.loc, ()) if op.loc else ()
                    extra = tuple(n for n in nodes if n != op.loc)
                    if extra:
                        op.attributes[FUSED] = normalize(extra)
