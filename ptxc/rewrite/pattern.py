"""Rewrite patterns: small classes that match one op and rewrite the IR around it.

A pattern names the op it is rooted at (``root``, or None to see every op), says how much it is
worth (``benefit``: the driver tries patterns with a higher benefit first) and implements
``match_and_rewrite(op, rewriter) -> bool``. Every change to the IR goes through the
:class:`~ptxc.rewrite.rewriter.PatternRewriter`, so that the driver knows which ops to look at
again. A pattern that does not match returns False without touching the IR; when the reason is
worth telling (a fusion that did not fire), it says so with ``return rewriter.fail(op, "...")``,
which is what ``--explain`` shows::

    class FuseConvRelu(RewritePattern):
        '''conv + relu -> conv with a fused activation.'''
        root = "graph.relu"
        benefit = 2

        def match_and_rewrite(self, op, rewriter):
            conv = producer(op.operands[0])
            if conv is None or conv.name != "graph.conv":
                return False                       # not this pattern's business: say nothing
            if len(conv.result.users) > 1:
                return rewriter.fail(op, f"{conv.loc} + {op.loc} not fused: "
                                         f"{conv.loc} has {len(conv.result.users)} users")
            fused = rewriter.create("graph.conv", conv.operands, {**conv.attributes,
                                    "activation": "relu"})
            rewriter.replace_op(op, fused.results)
            return True

A pattern's ``name`` is its class name unless the class sets one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, ClassVar

from ..ir.core import Operation, OpResult, Value

if TYPE_CHECKING:  # pragma: no cover
    from .rewriter import PatternRewriter


class RewritePattern:
    """Base of rewrite patterns; see the module docstring."""

    #: the op name this pattern is rooted at; None: the driver offers it every op
    root: ClassVar[str | None] = None
    #: patterns with a higher benefit are tried first (ties: the order they were given in)
    benefit: ClassVar[int] = 1
    #: how records and errors name the pattern (default: the class name)
    name: ClassVar[str] = "RewritePattern"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__

    def match_and_rewrite(self, op: Operation, rewriter: "PatternRewriter") -> bool:
        """Rewrite around ``op`` and return True, or return False leaving the IR untouched."""
        raise NotImplementedError(f"{type(self).__name__}.match_and_rewrite")

    def __repr__(self) -> str:
        return f"<pattern {self.name} root={self.root!r} benefit={self.benefit}>"


def rewrite_pattern(root: str | None = None, benefit: int = 1,
                    name: str | None = None) -> Callable[[Callable], type[RewritePattern]]:
    """Make a pattern class from a function ``fn(op, rewriter) -> bool``::

        @rewrite_pattern("graph.relu")
        def relu_of_relu(op, rewriter):
            '''relu(relu(x)) -> relu(x)'''
            inner = producer(op.operands[0])
            if inner is None or inner.name != "graph.relu":
                return False
            rewriter.replace_op(op, inner.results)
            return True
    """

    def wrap(fn: Callable) -> type[RewritePattern]:
        def match_and_rewrite(self, op, rewriter):
            return fn(op, rewriter)

        return type(name or fn.__name__, (RewritePattern,), {
            "root": root, "benefit": benefit, "match_and_rewrite": match_and_rewrite,
            "__doc__": fn.__doc__, "__module__": fn.__module__})

    return wrap


def producer(value: Value) -> Operation | None:
    """The op defining ``value``, or None for a block argument."""
    return value.op if isinstance(value, OpResult) else None


def as_pattern(p) -> RewritePattern:
    """A pattern instance from an instance or a pattern class (instantiated without arguments)."""
    if isinstance(p, RewritePattern):
        return p
    if isinstance(p, type) and issubclass(p, RewritePattern):
        return p()
    raise TypeError(f"{p!r} is not a RewritePattern (class or instance)")
