"""The canonicalization pattern registry, which the ``canonicalize`` pass applies.

A canonicalization pattern rewrites an op into a simpler or more regular equivalent that every
later pass may rely on (no-op eliminations, operand orders, ...). It must be sound for every
input, never grow the IR, and not fight another canonicalization (the driver fails on patterns
that never converge). A pass module lists its own::

    class RemoveIdentity(RewritePattern):
        root = "graph.identity"
        def match_and_rewrite(self, op, rewriter): ...

    CANONICALIZATIONS = (RemoveIdentity, ...)

The patterns are a table, not an import side effect: this package imports no pass module.
:func:`ptxc.rewrite.passes.all_canonicalizations` lists them, ``ptxc/__init__.py`` installs
it with :func:`install_canonicalization_table`, and the first :func:`canonicalization_patterns`
calls it; :func:`register_canonicalization` adds a pattern at run time (tests).
"""

from __future__ import annotations

from typing import Callable, Iterable

from .pattern import RewritePattern, as_pattern

#: patterns added at run time (:func:`register_canonicalization`)
_PATTERNS: list[RewritePattern] = []
#: the installed table (ptxc.rewrite.passes.all_canonicalizations) and its patterns, once read
_table: Callable[[], Iterable] | None = None
_from_table: list[RewritePattern] | None = None


def install_canonicalization_table(table: Callable[[], Iterable]) -> None:
    """Give the registry its table, a function returning pattern classes or instances; it is
    called on the first :func:`canonicalization_patterns`."""
    global _table
    if _table is not None and _table is not table:
        raise ValueError(f"a canonicalization table is installed already ({_table.__module__}."
                         f"{_table.__qualname__})")
    _table = table


def _table_patterns() -> list[RewritePattern]:
    global _from_table
    if _from_table is None:
        if _table is None:
            raise ValueError("no canonicalization table is installed: ptxc/__init__.py installs "
                             "ptxc.rewrite.passes.all_canonicalizations")
        patterns = []
        for entry in _table():
            p = as_pattern(entry)
            p._registered_as = entry
            patterns.append(p)
        _from_table = patterns
    return _from_table


def register_canonicalization(pattern):
    """Register a pattern class (as a decorator) or instance at run time; returns it unchanged.
    Registering the same class or instance twice is an error (two instances of one class,
    configured differently, are fine)."""
    p = as_pattern(pattern)
    if any(getattr(q, "_registered_as", None) is pattern
           for q in _table_patterns() + _PATTERNS):
        raise ValueError(f"canonicalization pattern {p.name} registered twice")
    p._registered_as = pattern
    _PATTERNS.append(p)
    return pattern


def canonicalization_patterns() -> list[RewritePattern]:
    """Every canonicalization pattern: the table's, in order, then those registered at run
    time."""
    return _table_patterns() + list(_PATTERNS)
