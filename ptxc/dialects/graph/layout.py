"""Data layouts of the ops that have a channel axis: ``layout = "NCHW"`` (ONNX's, the default)
or ``layout = "NHWC"`` (channels last) on ``graph.conv``/``fused_conv``, ``graph.max_pool`` and
``graph.average_pool`` (and the tensor dialect's ``tensor.conv``/``tensor.pool``).

The names stand for any spatial rank: ``NCHW`` is ``(N, C, *spatial)``, ``NHWC`` is
``(N, *spatial, C)``. A channels-last convolution's filter is ``KRSC``: ``(M, *kernel, C/group)``
(the reduction's innermost dim, the input channel, is contiguous in both operands, which is
what 16-byte loads and implicit-GEMM tensor-core schedules want).

An op's meaning does not change with its layout: a channels-last op is the channels-first op on
its operands transposed to channels-first, with its result transposed back. That is exactly its
numpy reference (:func:`to_first` / :func:`to_last` around the channels-first code), so the
interpreter checks the to-channels-last pass, which rewrites ops into this form.
"""

from __future__ import annotations

import numpy as np

from ...ir.spec import fail
from ...ir.types import TensorType

LAYOUTS = ("NCHW", "NHWC")


def last_perm(rank: int) -> tuple[int, ...]:
    """The permutation taking ``(N, C, *spatial)`` to ``(N, *spatial, C)``."""
    return (0,) + tuple(range(2, rank)) + (1,)


def first_perm(rank: int) -> tuple[int, ...]:
    """The permutation taking ``(N, *spatial, C)`` back to ``(N, C, *spatial)``."""
    return (0, rank - 1) + tuple(range(1, rank - 1))


def channels_last(op) -> bool:
    """Whether ``op``'s ``layout`` attribute is ``NHWC`` (checked: it must be one of LAYOUTS)."""
    layout = op.attr("layout", "NCHW")
    if layout not in LAYOUTS:
        fail(op, f"layout must be one of {list(LAYOUTS)}, got {layout!r}")
    return layout == "NHWC"


def to_first(a: np.ndarray) -> np.ndarray:
    return a.transpose(first_perm(a.ndim))


def to_last(a: np.ndarray) -> np.ndarray:
    return a.transpose(last_perm(a.ndim))


def first_type(t: TensorType) -> TensorType:
    """The channels-first type of a channels-last tensor type."""
    return t.with_shape(tuple(t.shape[i] for i in first_perm(t.rank)))


def last_type(t: TensorType) -> TensorType:
    """The channels-last type of a channels-first tensor type."""
    return t.with_shape(tuple(t.shape[i] for i in last_perm(t.rank)))
