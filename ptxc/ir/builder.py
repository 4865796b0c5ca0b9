"""A builder with an insertion point, as MLIR's OpBuilder.

    b = Builder.at_end(func_body)
    y = b.create("graph.relu", [x], loc="relu1").result
"""

from __future__ import annotations

from .core import Block, Operation
from .spec import make_op


class Builder:
    """Inserts new ops at a point: the end of a block, or before/after an op."""

    def __init__(self, block: Block | None = None, before: Operation | None = None,
                 after: Operation | None = None):
        self.block = block
        self.before = before
        self.after = after

    @classmethod
    def at_end(cls, block: Block) -> "Builder":
        return cls(block=block)

    @classmethod
    def before_op(cls, op: Operation) -> "Builder":
        return cls(block=op.block, before=op)

    @classmethod
    def after_op(cls, op: Operation) -> "Builder":
        return cls(block=op.block, after=op)

    def insert(self, op: Operation) -> Operation:
        if self.before is not None:
            self.before.block.insert_before(self.before, op)
        elif self.after is not None:
            self.after.block.insert_after(self.after, op)
            self.after = op  # keep program order for a sequence of inserts
        elif self.block is not None:
            self.block.append(op)
        else:
            raise ValueError("builder has no insertion point")
        return op

    def create(self, name: str, operands=(), attributes=None, result_types=None, regions=(),
               loc: str | None = None, result_names=None) -> Operation:
        """Make a registered op (result types inferred unless given) and insert it."""
        return self.insert(make_op(name, operands, attributes, result_types, regions, loc,
                                   result_names))
