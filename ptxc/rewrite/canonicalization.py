"""The canonicalization pattern registry, which the ``canonicalize`` pass applies.

A canonicalization pattern rewrites an op into a simpler or more regular equivalent that every
later pass may rely on (no-op eliminations, operand orders, ...). It must be sound for every
input, never grow the IR, and not fight another canonicalization (the driver fails on patterns
that never converge). Dialect and pass modules register theirs at import time::

    @register_canonicalization
    class RemoveIdentity(RewritePattern):
        root = "graph.identity"
        def match_and_rewrite(self, op, rewriter): ...

Registered patterns are found when their module is imported by ``ptxc.dialects`` (which
:func:`canonicalization_patterns` imports) or lives in ``ptxc/rewrite/passes/`` (every module of
which is imported).
"""

from __future__ import annotations

from .pattern import RewritePattern, as_pattern

_PATTERNS: list[RewritePattern] = []


def register_canonicalization(pattern):
    """Register a pattern class (as a decorator) or instance; returns it unchanged. Registering
    the same class or instance twice is an error (two instances of one class, configured
    differently, are fine)."""
    p = as_pattern(pattern)
    if any(getattr(q, "_registered_as", None) is pattern for q in _PATTERNS):
        raise ValueError(f"canonicalization pattern {p.name} registered twice")
    p._registered_as = pattern
    _PATTERNS.append(p)
    return pattern


def canonicalization_patterns() -> list[RewritePattern]:
    """Every registered canonicalization pattern, in registration order."""
    import ptxc.dialects  # noqa: F401
    import ptxc.rewrite.passes  # noqa: F401
    return list(_PATTERNS)
