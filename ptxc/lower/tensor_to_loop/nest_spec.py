"""What one loop nest computes: the description function.py builds from the plan (plan.py's
fusions and placements) and nest.py's :class:`~.nest.NestEmitter` emits.

A :class:`NestSpec` describes what one nest computes, already bufferized: the iteration space
of the main op (a ``tensor.generic``; named ops arrive generalized), the main body and where
each of its arguments comes from (a load through an affine map over the nest's dims, a
constant, the carried accumulator), the start value of each accumulator (a load of the init,
the fill constant, or an inlined producer's body), an optional fused epilogue body, and where
each final value is stored (one or more places, each with its map and, for a scattered result,
the range of one nest dim it covers), and, where the plan fused them, a pad border the nest
also writes (:class:`PadFill`) and the contraction the op is (a matmul's or conv's generic).
It decides nothing about loops: their order, the unroll-and-jam and the short innermost dims
computed whole are the emitter's (nest.py).
"""

from __future__ import annotations

import attrs

from ...ir.core import Block, Operation
from ...ir.types import ScalarType


@attrs.define
class Load:
    """A scalar read through ``map`` (rows over the nest dims) from a place."""
    place: object
    map: tuple


@attrs.define
class Const:
    value: object
    type: ScalarType


@attrs.define
class Acc:
    """The k-th accumulator (main body) or the k-th result of the main op (epilogue)."""
    k: int


@attrs.define
class Stage:
    """A scalar body to evaluate: ``block`` (a generic's body), its op's loop dims as affine
    rows over the nest dims (for ``tensor.index``), one source per block argument (Load, Const,
    Acc, or None for an argument the body never reads)."""
    block: Block
    rows: tuple
    args: list


@attrs.define
class Target:
    """Where a final value goes: ``place``, through ``map``; ``restrict`` = ``(dim, lo, hi)``
    when this target covers only that range of one nest dim (a scattered slice)."""
    place: object
    map: tuple
    restrict: tuple | None = None


@attrs.define
class PadFill:
    """The nest also writes a pad's border along one dim (see "Pads along the innermost dim"
    in nest.py's docstring): nest dim ``dim``, whose points ``[0, size)`` are the op's, ranges
    over ``[-low, size + high)``; a point outside ``[0, size)`` stores ``value`` (a Python number,
    or a callable ``(scope) -> Value``) of element type ``type``."""
    dim: int
    size: int
    low: int
    high: int
    value: object
    type: ScalarType


@attrs.define
class NestSpec:
    op: Operation                 # for the loc
    bounds: tuple
    iters: tuple
    main: Stage
    acc_types: list               # one per accumulator (the main op's outs)
    out_types: list               # the main op's result element types
    inits: list                   # per accumulator: Load | Const | Stage | None (not read)
    targets: list                 # per final value: list[Target]
    epilogue: Stage | None = None
    pad: PadFill | None = None    # a pad border written by this (all-parallel) nest
    contraction: tuple | None = None   # (source, kind): the op is a matmul's or conv's generic
