"""The structural identity of a kernel: two launches with equal keys emit the same LLVM code.

ResNet-50's mapped program launches the same code many times (each repeated bottleneck block
has the same shapes; the weights and activations are arguments), and the LLVM emission
(llvmlite objects, Python) is a large part of a cuda compile. :func:`launch_key` is a
hashable value built from everything the emission reads, so
:func:`ptxc.lower.loop_to_llvm.lower_loop_to_llvm` emits each distinct kernel once and copies
its text for the others (renamed).

What is in the key, op by op in walk order: the op name; every attribute except provenance
(``ptxc.fused``; ``loc`` is not an attribute), each value tagged with its type (so ``1`` and
``True``, ``0.0`` and ``-0.0`` differ); the result types; each operand as a local number (a
value defined in the kernel), the index of its root buffer among the kernel's arguments with
its own type (layout included: a view indexes with its strides and offset), or the index of
the top-level scalar it reads (those scalars are keyed the same way first); the run-time
check number of an ``arith.check_index``. Anything the key cannot compare by value (an
unknown attribute type) is keyed by identity, which never matches another op: the key may
miss a twin, never invent one.

Before -> after (kernel_45 and kernel_49 with equal keys)::

    emit kernel_45, emit kernel_49               ->  emit kernel_45; kernel_49 is its text
                                                     with the name replaced
"""

from __future__ import annotations

import numpy as np

from ..ir.attributes import DenseElements
from ..ir.core import Operation, Value
from ..ir.types import BufferType
from ..rewrite.provenance import FUSED


def _freeze(v):
    """An attribute value as a hashable, type-tagged value (see the module docstring)."""
    if isinstance(v, (bool, int, str)):
        return (type(v).__name__, v)
    if isinstance(v, (float, np.floating)):
        return (type(v).__name__, repr(v))
    if isinstance(v, np.integer):
        return (type(v).__name__, int(v))
    if isinstance(v, (tuple, list)):
        return ("seq", tuple(_freeze(x) for x in v))
    if isinstance(v, DenseElements):
        return ("dense", v.type, v.digest)
    if v is None:
        return ("none",)
    try:
        hash(v)
    except TypeError:
        return ("id", id(v))
    if type(v).__module__.startswith("ptxc.ir.types"):
        return ("type", v)
    return ("id", id(v))


def launch_key(op: Operation, roots: list, tops: list, check_ids: dict, root_of) -> tuple:
    """The key of the kernel ``op`` with argument buffers ``roots`` (their order), the top-level
    scalar ops ``tops`` it reads, the run-time check numbers ``check_ids`` (id(op) -> number)
    and ``root_of`` (a buffer value -> its root)."""
    local: dict[int, int] = {}
    root_index = {id(r): i for i, r in enumerate(roots)}
    out: list = []

    def operand(v: Value):
        n = local.get(id(v))
        if n is not None:
            return ("l", n)
        if isinstance(v.type, BufferType):
            return ("b", root_index.get(id(root_of(v)), ("id", id(v))), v.type)
        return ("id", id(v))  # (a top-level scalar's result is local: the tops come first)

    def visit(o: Operation):
        attrs_ = tuple(sorted((k, _freeze(a)) for k, a in o.attributes.items() if k != FUSED))
        out.append((o.name, attrs_, tuple(operand(v) for v in o.operands),
                    tuple(r.type for r in o.results), check_ids.get(id(o))))
        for r in o.results:
            local[id(r)] = len(local)
        for region in o.regions:
            out.append("{")
            for block in region.blocks:
                out.append(("block", tuple(a.type for a in block.args)))
                for a in block.args:
                    local[id(a)] = len(local)
                for inner in block.ops:
                    visit(inner)
            out.append("}")

    for t in tops:
        visit(t)
    out.append(("kernel", len(roots)))
    visit(op)
    return tuple(out)
