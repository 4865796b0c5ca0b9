"""The graph passes, one module per pass, and their tables.

The pass registry is a table, not an import side effect (as xDSL's ``get_all_passes``):
:mod:`ptxc.rewrite` never imports a pass module, so it cannot find the passes by importing
them. :func:`all_passes` lists this package's passes, :func:`all_canonicalizations` its
canonicalization patterns and :func:`all_pipelines` its named pipelines; the root package
installs them (with :func:`ptxc.lower.lowering_passes`) in the registries of
:mod:`ptxc.rewrite.pass_`, :mod:`ptxc.rewrite.canonicalization` and :mod:`ptxc.rewrite.pipeline`,
whose first lookup calls them. Importing this package imports no pass module.

A new pass is a module here (its class declared with ``@register_pass``) and a line in
:func:`all_passes` (tests/test_architecture.py checks that every declared pass is in a table).
"""

from __future__ import annotations


def all_passes() -> dict[str, type]:
    """Every graph pass class of this package, by name."""
    from . import (cancel_transposes, canonicalize, channels_last, cse, dce, eliminate_concat,
                   eliminate_noops, fold_batchnorm, fold_constants, fold_qdq, fuse_elementwise,
                   fuse_epilogues, merge_siblings, precision, recognize, space_to_depth)
    passes = (cancel_transposes.CancelTransposes, canonicalize.Canonicalize,
              channels_last.ToChannelsLast, cse.CommonSubexpressionElimination,
              dce.DeadCodeElimination, eliminate_concat.EliminateConcat,
              eliminate_noops.EliminateNoops, fold_batchnorm.FoldBatchNormPass,
              fold_constants.FoldConstants, fold_qdq.FoldQDQPass,
              fuse_elementwise.FuseElementwise, fuse_epilogues.FuseEpilogues,
              merge_siblings.MergeSiblingsPass, precision.LowerPrecision,
              recognize.RecognizePatterns, space_to_depth.SpaceToDepthStem)
    return {p.name: p for p in passes}


def all_canonicalizations() -> tuple:
    """Every canonicalization pattern (class or instance) of this package, in the order the
    ``canonicalize`` pass tries them."""
    from . import eliminate_noops
    return eliminate_noops.CANONICALIZATIONS


def all_pipelines() -> dict[str, str]:
    """The named pipelines: name -> pipeline text (``graph-opt``)."""
    from . import graph_opt
    return {"graph-opt": graph_opt.GRAPH_OPT}
