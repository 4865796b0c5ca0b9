"""The PatternRewriter: every IR change a pattern makes goes through it.

It is a builder (insertion point, :meth:`PatternRewriter.create`) that also tells a listener (the
greedy driver) what changed, so the driver can look again at exactly the ops a change may have
made rewritable: the users of new or replaced values, the producers of an erased op's operands
(which may now be dead), new ops, ops modified in place.

The insertion point starts just before the matched op. New ops take the matched op's location
unless given one, and a replacement value without a name takes the name of the value it
replaces, so ONNX node and tensor names survive fusions.
"""

from __future__ import annotations

from contextlib import contextmanager
from ..errors import CompileError
from ..ir.builder import Builder
from ..ir.core import Block, Operation, OpResult, Value
from ..ir.spec import make_op


class RewriteListener:
    """What the driver hears from a rewriter. Every method defaults to doing nothing."""

    def op_inserted(self, op: Operation) -> None:
        """``op`` (and what is nested in it) was inserted."""

    def op_modified(self, op: Operation) -> None:
        """``op``'s attributes or operands changed in place."""

    def op_erasing(self, op: Operation) -> None:
        """``op`` is about to be erased (its operands are still attached)."""

    def value_replacing(self, old: Value, new: Value) -> None:
        """Every use of ``old`` is about to read ``new`` instead (users still read ``old``)."""

    def value_released(self, value: Value) -> None:
        """A use of ``value`` went away: its producer may be dead now."""

    def match_failed(self, op: Operation, reason: str) -> None:
        """The current pattern did not match ``op``, for ``reason``."""


class PatternRewriter:
    """Builds and mutates IR on behalf of a pattern; see the module docstring.

    ``changes`` counts the mutations made through it (the driver checks that a pattern which
    returns False made none, and that one which returns True made some).
    """

    def __init__(self, op: Operation | None = None, listener: RewriteListener | None = None):
        self.listener = listener if listener is not None else RewriteListener()
        self.root = op
        self.changes = 0
        self.failure: str | None = None
        self._builder = Builder.before_op(op) if op is not None and op.block is not None \
            else Builder()

    # ---- insertion point ------------------------------------------------------------------
    def set_insertion_point_before(self, op: Operation) -> None:
        self._builder = Builder.before_op(op)

    def set_insertion_point_after(self, op: Operation) -> None:
        self._builder = Builder.after_op(op)

    def set_insertion_point_to_end(self, block: Block) -> None:
        self._builder = Builder.at_end(block)

    # ---- creating ops -----------------------------------------------------------------------
    def insert(self, op: Operation) -> Operation:
        """Insert an op made elsewhere (``make_op``, ``Operation.clone``) at the insertion point."""
        if op.loc is None and self.root is not None:
            op.loc = self.root.loc
        self._builder.insert(op)
        self.changes += 1
        self.listener.op_inserted(op)
        return op

    def create(self, name: str, operands=(), attributes=None, result_types=None, regions=(),
               loc: str | None = None, result_names=None) -> Operation:
        """Make a registered op (as :meth:`Builder.create`) and insert it at the insertion point;
        ``loc`` defaults to the matched op's location."""
        return self.insert(make_op(name, operands, attributes, result_types, regions, loc,
                                   result_names))

    # ---- replacing and erasing -------------------------------------------------------------
    def replace_all_uses_with(self, old: Value, new: Value) -> None:
        """Make every user of ``old`` read ``new``."""
        if old is new:
            return
        self.changes += 1
        self.listener.value_replacing(old, new)
        if isinstance(new, OpResult) and new.name_hint is None:
            new.name_hint = old.name_hint
        old.replace_all_uses_with(new)

    def replace_op(self, op: Operation, new_values) -> None:
        """Replace every use of ``op``'s results by ``new_values`` (values, one per result, a single
        value, or an op whose results to use), then erase ``op``."""
        if isinstance(new_values, Operation):
            new_values = new_values.results
        elif isinstance(new_values, Value):
            new_values = [new_values]
        new_values = list(new_values)
        if len(new_values) != len(op.results):
            raise CompileError(f"{op.where}: replaced by {len(new_values)} values, "
                               f"has {len(op.results)} results")
        for r, v in zip(op.results, new_values):
            if not isinstance(v, Value):
                raise CompileError(f"{op.where}: result #{r.index} replaced by {v!r}, not a value")
            self.replace_all_uses_with(r, v)
        self.erase_op(op)

    def erase_op(self, op: Operation) -> None:
        """Erase ``op`` (and what is nested in it); its results must have no uses left."""
        for r in op.results:
            if r.uses:
                users = ", ".join(sorted({u.op.name for u in r.uses}))
                raise CompileError(f"cannot erase {op.where}: result #{r.index} is still used "
                                   f"by {users}")
        self.changes += 1
        self.listener.op_erasing(op)
        op.erase()

    # ---- modifying in place -----------------------------------------------------------------
    @contextmanager
    def modify(self, op: Operation):
        """Modify ``op`` in place inside a ``with`` block; the driver looks at it again after::

            with rewriter.modify(op):
                op.attributes["activation"] = "relu"
        """
        old_operands = list(op.operands)
        yield op
        self._modified(op, old_operands)

    def set_attr(self, op: Operation, name: str, value) -> None:
        """Set (or, with ``value=None``, remove) attribute ``name`` of ``op``."""
        with self.modify(op):
            if value is None:
                op.attributes.pop(name, None)
            else:
                from ..ir.attributes import normalize
                op.attributes[name] = normalize(value)

    def set_operand(self, op: Operation, index: int, value: Value) -> None:
        with self.modify(op):
            op.set_operand(index, value)

    def _modified(self, op: Operation, old_operands: list[Value]) -> None:
        self.changes += 1
        # producers of operands no longer read may have become dead
        kept = {id(v) for v in op.operands}
        for v in old_operands:
            if id(v) not in kept:
                self.listener.value_released(v)
        self.listener.op_modified(op)

    # ---- failing ------------------------------------------------------------------------------
    def fail(self, op: Operation, reason: str) -> bool:
        """Say why the pattern does not apply to ``op``; returns False, so a pattern can
        ``return rewriter.fail(op, "...")``."""
        self.failure = reason
        self.listener.match_failed(op, reason)
        return False
