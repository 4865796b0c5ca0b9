"""The kernels a tuner sees: each top-level kernel of a loop function, alone in a module of its
own, and its key.

    for k in kernels_of(loop_module):      # before the schedule pass (map-to-gpu / cpu-schedule)
        k.key                              # 'a3f0...' (sha256 of its canonical text, 16 hex)
        k.module                           # the kernel alone: one function of its buffers
        k.outputs                          # the argument names it writes

A kernel is a top-level ``loop.parallel``, ``loop.for`` or ``loop.copy`` of a function (the ops
``map-to-gpu`` maps and ``loop-to-llvm`` emits one by one). :func:`isolate` moves a copy of one
into a module of its own: each *root* buffer it reaches (through ``loop.view`` chains) -- a
function argument, a ``loop.alloc`` or a ``loop.global`` -- becomes an argument ``b0, b1, ...``
in the order the kernel first uses them; the top-level views and scalars it reads are copied in
front of it. The written roots (``loop.store`` and ``loop.copy`` destinations) are the
function's ``loop.outputs``. Weights become arguments too, so the module depends on the
kernel's shapes and code, not on the values of its weights.

The key is the sha256 of that module's text with every location, value name, provenance
attribute and schedule attribute (``tactic``, ``tuning_key``, ``cpu.*``) removed (ONNX names survive to every stage and differ from layer to layer; two
layers of the same shapes and code have one key). It is what a timing cache is indexed by
(with the device), TensorRT's "layer signature". It is computed before the schedule pass, so
it does not depend on the tactic chosen.

Example (the 2nd of two identical 1x1 convolutions of a ResNet block and the 1st have one key;
a 3x3 of the same channels does not)::

    keys = [k.key for k in kernels_of(m)]   ->  ['5e1c...', '09ab...', '5e1c...']
"""

from __future__ import annotations

import hashlib

import attrs

from ..dialects.func import func_body, functions, new_func, new_module, set_func_results
from ..dialects.loop import OUTPUTS_ATTR
from ..ir.core import BlockArgument, Operation, Value
from ..ir.types import BufferType
from ..rewrite.provenance import FUSED

KERNEL_OPS = ("loop.parallel", "loop.for", "loop.copy")
_ROOT_OPS = ("loop.alloc", "loop.global")


@attrs.frozen(eq=False)
class Kernel:
    """One top-level kernel: ``op`` (in its module), its isolated ``module`` (see the module
    docstring), ``key``, ``outputs`` (the isolated function's written arguments), ``index``
    (its place among the function's kernels) and ``loc`` (the ONNX node it comes from)."""

    op: Operation
    module: Operation
    key: str
    outputs: tuple[str, ...]
    index: int

    @property
    def loc(self) -> str | None:
        return self.op.loc


def _root(v: Value) -> Value:
    while not isinstance(v, BlockArgument) and v.op.name == "loop.view":
        v = v.op.operands[0]
    return v


def _is_root(v: Value, top) -> bool:
    """A buffer the kernel gets as an argument: a function argument, an alloc or a global."""
    if isinstance(v, BlockArgument):
        return v.block is top
    return v.op.name in _ROOT_OPS


def isolate(op: Operation) -> tuple[Operation, tuple[str, ...]]:
    """``(module, outputs)``: the kernel ``op`` alone in a new module (module docstring)."""
    top = op.block
    inside = {id(o) for o in op.walk()}
    roots: list[Value] = []
    written: set[int] = set()
    needed: list[Operation] = []   # top-level views and scalars, in program order
    seen: set[int] = set()

    def visit(v: Value) -> None:
        if isinstance(v, BlockArgument):
            if v.block is top and v not in roots:
                roots.append(v)
            return
        if id(v.op) in inside:
            return
        if _is_root(v, top):
            if v not in roots:
                roots.append(v)
            return
        if id(v.op) in seen:
            return
        seen.add(id(v.op))
        for w in v.op.operands:
            visit(w)
        needed.append(v.op)

    for o in op.walk():
        for v in o.operands:
            visit(v)
        if o.name in ("loop.store", "loop.copy") and isinstance(o.operands[1].type, BufferType):
            written.add(id(_root(o.operands[1])))
    order = {id(o): i for i, o in enumerate(top.ops)}
    needed.sort(key=lambda o: order[id(o)])
    names = [f"b{i}" for i in range(len(roots))]
    module = new_module()
    f = new_func(module, "main", [r.type for r in roots], names)
    body = func_body(f)
    mapping = dict(zip(roots, body.args))
    for o in needed:
        body.append(o.clone(mapping))
    body.append(op.clone(mapping))
    set_func_results(f, [])
    outputs = tuple(n for n, r in zip(names, roots) if id(r) in written)
    f.attributes[OUTPUTS_ATTR] = outputs
    return module, outputs


def _schedule_attr(name: str) -> bool:
    """An attribute a schedule pass wrote (``tactic``, ``tuning_key``, cpu-schedule's
    ``cpu.*``): how the kernel is generated, not what it computes, so not in its key (a
    module scheduled once and tuned again keeps its kernels' keys)."""
    return name in ("tactic", "tuning_key") or name.startswith("cpu.")


def canonical_text(module: Operation) -> str:
    """The module's text without locations, value names, provenance or schedule attributes
    (the key's input). It strips them from ``module`` in place: call it on a copy you own."""
    from ..ir.printer import print_ir
    for o in module.walk():
        o.loc = None
        o.attributes.pop(FUSED, None)
        for name in [n for n in o.attributes if _schedule_attr(n)]:
            del o.attributes[name]
        for r in o.results:
            r.name_hint = None
        for region in o.regions:
            for block in region.blocks:
                for a in block.args:
                    a.name_hint = None
    return print_ir(module)


def kernel_key(op: Operation) -> str:
    """The key of the top-level kernel ``op`` (module docstring)."""
    module, _ = isolate(op)
    return hashlib.sha256(canonical_text(module).encode()).hexdigest()[:16]


def kernels_of(module: Operation) -> list[Kernel]:
    """Every top-level kernel of every function of a loop-level ``module``, in program order."""
    out = []
    for f in functions(module):
        for op in func_body(f).ops:
            if op.name in KERNEL_OPS:
                iso, outputs = isolate(op)
                key_module, _ = isolate(op)
                key = hashlib.sha256(canonical_text(key_module).encode()).hexdigest()[:16]
                out.append(Kernel(op, iso, key, outputs, len(out)))
    return out
