"""Rewrites and passes: patterns, the greedy driver, passes, the pass manager, the graph passes."""

from .driver import apply_patterns_greedily, is_trivially_dead  # noqa: F401
from .explain import Explain, ExplainRecord  # noqa: F401
from .pattern import RewritePattern, producer, rewrite_pattern  # noqa: F401
from .rewriter import PatternRewriter, RewriteListener  # noqa: F401
