"""Explain: a record of which patterns fired where, and why the others did not.

The greedy driver writes one :class:`ExplainRecord` per (pass, pattern, op) it tried: fired, or not
fired with the reason the pattern gave through ``rewriter.fail``. Patterns that return False
without a reason are not applicable to that op and are not recorded (otherwise every op would list
every pattern). When the same pattern is tried on the same op again, the latest outcome replaces
the earlier one, except that "fired" stays.

A collector reaches the driver either as its ``explain=`` argument or, inside a pass run by a
:class:`~ptxc.rewrite.pass_manager.PassManager` made with ``explain=``, through :func:`collecting`
(a context variable), so passes need no extra parameter. ``--explain`` prints
:meth:`Explain.format`::

    [fuse-cbr] FuseConvRelu at "relu_13" (graph.relu): fired
    [fuse-cbr] FuseConvRelu at "relu_7" (graph.relu): not fired: conv_6 + relu_7 not fused:
        conv_6 has 2 users
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager

import attrs

from ..ir.core import Operation


@attrs.frozen
class ExplainRecord:
    pattern: str
    op_name: str
    location: str | None  # the op's loc, else the name of its first result, else None
    fired: bool
    reason: str | None = None
    pass_name: str | None = None

    def __str__(self) -> str:
        where = f'"{self.location}" ({self.op_name})' if self.location else self.op_name
        prefix = f"[{self.pass_name}] " if self.pass_name else ""
        outcome = "fired" if self.fired else f"not fired: {self.reason}"
        return f"{prefix}{self.pattern} at {where}: {outcome}"


def op_location(op: Operation) -> str | None:
    """How a record names an op: its loc, else ``%name`` of its first result."""
    if op.loc:
        return op.loc
    if op.results and op.results[0].name_hint:
        return "%" + op.results[0].name_hint
    return None


class Explain:
    """Collects :class:`ExplainRecord` s; see the module docstring."""

    def __init__(self):
        self._records: dict[tuple, ExplainRecord] = {}

    def record(self, pattern: str, op: Operation, fired: bool, reason: str | None = None,
               pass_name: str | None = None) -> None:
        loc = op_location(op)
        # ops without a name are told apart by identity (they cannot be told apart in the output)
        key = (pass_name, pattern, op.name, loc if loc is not None else id(op))
        old = self._records.get(key)
        if old is not None and old.fired and not fired:
            return
        self._records[key] = ExplainRecord(pattern, op.name, loc, fired, reason, pass_name)

    @property
    def records(self) -> list[ExplainRecord]:
        return list(self._records.values())

    def fired(self) -> list[ExplainRecord]:
        return [r for r in self._records.values() if r.fired]

    def not_fired(self) -> list[ExplainRecord]:
        return [r for r in self._records.values() if not r.fired]

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self):
        return iter(self.records)

    def format(self, only_not_fired: bool = False) -> str:
        recs = self.not_fired() if only_not_fired else self.records
        return "".join(f"{r}\n" for r in recs)


_CURRENT: contextvars.ContextVar[tuple[Explain, str | None] | None] = \
    contextvars.ContextVar("ptxc_explain", default=None)


@contextmanager
def collecting(explain: Explain | None, pass_name: str | None = None):
    """Within this block, drivers that were given no ``explain=`` record into ``explain``
    under ``pass_name``."""
    if explain is None:
        yield
        return
    token = _CURRENT.set((explain, pass_name))
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current() -> tuple[Explain, str | None] | None:
    """The collector (and pass name) set by :func:`collecting`, if any."""
    return _CURRENT.get()
