"""Rewrites and passes: patterns, the greedy driver, passes, the pass manager, the graph passes.

    from ptxc.rewrite import PassManager
    PassManager("dce,cse,canonicalize", check_numerics=True).run(module)
"""

from .canonicalization import canonicalization_patterns, register_canonicalization  # noqa: F401
from .driver import apply_patterns_greedily, is_trivially_dead  # noqa: F401
from .explain import Explain, ExplainRecord  # noqa: F401
from .pass_ import (Pass, add_pass, docstring_example, example_options,  # noqa: F401
                    example_pass, get_pass, register_pass, registered_passes)
from .pass_manager import PassManager  # noqa: F401
from .pattern import RewritePattern, producer, rewrite_pattern  # noqa: F401
from .pipeline import format_pipeline, parse_pipeline  # noqa: F401
from .rewriter import PatternRewriter, RewriteListener  # noqa: F401
