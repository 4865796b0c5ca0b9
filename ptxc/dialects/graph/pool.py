"""Pooling: ``graph.max_pool``, ``graph.average_pool``, ``graph.global_average_pool``,
``graph.global_max_pool``.

``kernel_shape``, ``strides``, ``pads`` (begins then ends) and ``dilations`` are always explicit;
``layout = "NHWC"`` (layout.py) puts the channels last in ``X`` and ``Y`` (max and average pool);
``auto_pad`` is resolved by the importer. Output size per spatial axis, with
``e = (k - 1) * dilation + 1``::

    floor mode:  floor((in + pad_begin + pad_end - e) / stride) + 1
    ceil mode:   ceil((in + pad_begin + pad_end - e) / stride) + 1, minus one when that last
                 window would start past the input and the begin padding (PyTorch's rule)

Windows of ceil mode that run past the end padding ignore the positions past it: they are never
the max, and average pooling divides by the window's positions inside the input
(``count_include_pad = 0``) or inside input and explicit padding (``count_include_pad = 1``).
"""

from __future__ import annotations

import numpy as np

from ...ir.spec import Attr, OpSpec, fail
from ...ir.types import TensorType
from .common import ttype
from .layout import channels_last, first_type, last_type, to_first, to_last
from .nn import compute_dtype, spatial_attrs, windows


def pool_out_shape(spatial, a, ceil_mode: int) -> list[int]:
    n = len(spatial)
    out = []
    for i in range(n):
        e = (a["kernel_shape"][i] - 1) * a["dilations"][i] + 1
        span = spatial[i] + a["pads"][i] + a["pads"][n + i] - e
        s = a["strides"][i]
        if ceil_mode:
            o = -(-span // s) + 1
            if (o - 1) * s >= spatial[i] + a["pads"][i]:
                o -= 1
        else:
            o = span // s + 1
        out.append(o)
    return out


class _Pool(OpSpec):
    operands = ("X",)
    results = ("Y",)
    traits = {"pure"}
    float_only = True

    def infer_types(self, op):
        x = ttype(op)
        if x.rank < 3:
            fail(op, f"X must have rank >= 3 (N, C, spatial...), got {x}")
        if channels_last(op):
            return [last_type(t) for t in self._infer(op, first_type(x))]
        return self._infer(op, x)

    def _infer(self, op, x):
        a = spatial_attrs(op, x.rank - 2)
        if op.attr("ceil_mode") not in (0, 1):
            fail(op, f"ceil_mode must be 0 or 1, got {op.attr('ceil_mode')}")
        out = pool_out_shape(x.shape[2:], a, op.attr("ceil_mode"))
        if any(o < 1 for o in out):
            fail(op, f"output spatial shape {out} is empty (input {list(x.shape[2:])}, kernel "
                     f"{list(a['kernel_shape'])})")
        return [x.with_shape(x.shape[:2] + tuple(out))]

    def verify(self, op):
        if self.float_only and not ttype(op).element.is_float:
            fail(op, f"needs a float tensor, got {ttype(op)}")

    def reference(self, op, args, interp):
        """``compute`` on the channels-first input (layout.py)."""
        if channels_last(op):
            return [to_last(self.compute(op, to_first(args[0])))]
        return [self.compute(op, args[0])]

    def _setup(self, op, x, fill):
        """The padded input (extended or cut to exactly what the windows read) and geometry."""
        n = x.ndim - 2
        a = spatial_attrs(op, n)
        out = pool_out_shape(x.shape[2:], a, op.attr("ceil_mode"))
        need = [(o - 1) * s + (k - 1) * d + 1 for o, s, k, d in
                zip(out, a["strides"], a["kernel_shape"], a["dilations"])]
        width = [(0, 0), (0, 0)]
        for i in range(n):
            width.append((a["pads"][i], max(0, need[i] - x.shape[2 + i] - a["pads"][i])))
        xp = np.pad(x, width, mode="constant", constant_values=fill) if any(
            w != (0, 0) for w in width) else x
        xp = xp[(slice(None), slice(None)) + tuple(slice(0, e) for e in need)]
        return a, out, xp


class MaxPool(_Pool):
    """Max over each window; padding never wins (ONNX MaxPool; the Indices output is not
    computed, so ``storage_order`` is dropped by the importer)."""

    name = "graph.max_pool"
    attributes = {
        "kernel_shape": Attr("ints", required=True),
        "strides": Attr("ints", required=True),
        "pads": Attr("ints", required=True, doc="begins then ends"),
        "dilations": Attr("ints", required=True),
        "ceil_mode": Attr("int", default=0),
        "layout": Attr("str", default="NCHW", doc="NCHW or NHWC"),
    }
    float_only = False

    def verify(self, op):
        el = ttype(op).element
        if not (el.is_float or el.name in ("i8", "ui8")):
            fail(op, f"needs a float, int8 or uint8 tensor, got {ttype(op)}")

    def compute(self, op, x):
        fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        a, out, xp = self._setup(op, x, fill)
        v = windows(xp, a["kernel_shape"], a["strides"], a["dilations"], out)
        n = x.ndim - 2
        y = v.max(axis=tuple(range(2 + n, 2 + 2 * n)))
        return y.astype(x.dtype, copy=False)


class AveragePool(_Pool):
    """Mean over each window. ``count_include_pad = 0``: divide by the window's positions inside
    the input; ``1``: inside the input and the explicit padding."""

    name = "graph.average_pool"
    attributes = {
        "kernel_shape": Attr("ints", required=True),
        "strides": Attr("ints", required=True),
        "pads": Attr("ints", required=True, doc="begins then ends"),
        "dilations": Attr("ints", required=True),
        "ceil_mode": Attr("int", default=0),
        "count_include_pad": Attr("int", default=0),
        "layout": Attr("str", default="NCHW", doc="NCHW or NHWC"),
    }

    def verify(self, op):
        super().verify(op)
        if op.attr("count_include_pad") not in (0, 1):
            fail(op, f"count_include_pad must be 0 or 1, got {op.attr('count_include_pad')}")

    def compute(self, op, x):
        ct = compute_dtype(x.dtype)
        a, out, xp = self._setup(op, x.astype(ct, copy=False), 0)
        n = x.ndim - 2
        v = windows(xp, a["kernel_shape"], a["strides"], a["dilations"], out)
        # summed position by position in row-major window order, as a loop (and onnxruntime's
        # pool kernels) does, not pairwise: the same rounding as the compiled sum
        total = np.zeros(v.shape[:2 + n], ct)
        for pos in np.ndindex(*a["kernel_shape"]):
            total = total + v[(Ellipsis,) + pos]
        # the count is separable: the product over axes of each axis's count
        count = np.ones((), dtype=np.float64)
        for i in range(n):
            size, pb, pe = x.shape[2 + i], a["pads"][i], a["pads"][n + i]
            s, k, d = a["strides"][i], a["kernel_shape"][i], a["dilations"][i]
            pos = np.arange(out[i])[:, None] * s + np.arange(k)[None, :] * d  # padded coords
            if op.attr("count_include_pad"):
                inside = pos < size + pb + pe
            else:
                inside = (pos >= pb) & (pos < size + pb)
            c = inside.sum(axis=1).astype(np.float64)
            count = np.multiply.outer(count, c)
        with np.errstate(all="ignore"):
            y = total / count.astype(ct)
        return y.astype(x.dtype, copy=False)


class _GlobalPool(OpSpec):
    operands = ("X",)
    results = ("Y",)
    traits = {"pure"}

    def infer_types(self, op):
        x = ttype(op)
        if x.rank < 2:
            fail(op, f"X must have rank >= 2 (N, C, spatial...), got {x}")
        return [x.with_shape(x.shape[:2] + (1,) * (x.rank - 2))]

    def verify(self, op):
        if not ttype(op).element.is_float:
            fail(op, f"needs a float tensor, got {ttype(op)}")


class GlobalAveragePool(_GlobalPool):
    """Mean over all spatial axes, kept as size-1 axes."""

    name = "graph.global_average_pool"

    def reference(self, op, args, interp):
        x = args[0]
        axes = tuple(range(2, x.ndim))
        y = x.mean(axis=axes, keepdims=True, dtype=compute_dtype(x.dtype)) if axes else x
        return [np.asarray(y).astype(x.dtype, copy=False)]


class GlobalMaxPool(_GlobalPool):
    """Max over all spatial axes, kept as size-1 axes."""

    name = "graph.global_max_pool"

    def reference(self, op, args, interp):
        x = args[0]
        axes = tuple(range(2, x.ndim))
        y = x.max(axis=axes, keepdims=True) if axes else x
        return [np.asarray(y).astype(x.dtype, copy=False)]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool)
