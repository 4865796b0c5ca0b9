"""Convolutions, softmax and padding: ``graph.conv``, ``graph.conv_transpose``, ``graph.softmax``,
``graph.log_softmax``, ``graph.pad``. Pools are in ``pool.py``, normalizations in ``norm.py``,
``graph.resize`` in ``resize.py``.

Spatial attributes are always explicit (the importer resolves ONNX defaults and ``auto_pad``)::

    %y = "graph.conv"(%x, %w, %b) {kernel_shape = [3, 3], strides = [1, 1], pads = [1, 1, 1, 1],
                                   dilations = [1, 1], group = 1}
       : (tensor<1x3x224x224xf32>, tensor<64x3x3x3xf32>, tensor<64xf32>) -> tensor<1x64x224x224xf32>

``pads`` has ONNX's layout: all begins, then all ends (``[h_begin, w_begin, h_end, w_end]``).

The reference semantics are vectorized numpy (windows as strided views, then one matmul), fast
enough to interpret whole ResNet/VGG models.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...ir.spec import Attr, Operand, OpSpec, fail
from ...ir.types import TensorType
from .common import norm_axis, same_elements, ttype
from .layout import channels_last, first_type, last_type, to_first, to_last


# ---- shared helpers (pool.py uses them too) ---------------------------------------------------

def spatial_attrs(op, n: int, names=("kernel_shape", "strides", "dilations")) -> dict:
    """The listed per-axis attributes (length ``n``, positive) and ``pads`` (length 2n, >= 0),
    checked; fails naming the op."""
    out = {}
    for name in names:
        v = op.attr(name)
        if v is None:
            fail(op, f"attribute {name} is required")
        v = tuple(v)
        if len(v) != n or any(int(x) < 1 for x in v):
            fail(op, f"{name} must hold {n} positive ints, got {list(v)}")
        out[name] = v
    pads = op.attr("pads")
    if pads is None:
        fail(op, "attribute pads is required")
    pads = tuple(pads)
    if len(pads) != 2 * n or any(p < 0 for p in pads):
        fail(op, f"pads must hold {2 * n} non-negative ints, got {list(pads)}")
    out["pads"] = pads
    return out


def compute_dtype(dtype) -> np.dtype:
    """The dtype float math runs in: float32 for float16 (numpy has no fast f16 kernels)."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def windows(xp: np.ndarray, kernel, strides, dilations, out) -> np.ndarray:
    """A strided view ``(N, C, *out, *kernel)`` of the windows of the padded input ``xp``
    (``N, C, *spatial``): element ``[n, c, o..., k...]`` is ``xp[n, c, o*s + k*d ...]``."""
    n = len(kernel)
    extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    v = sliding_window_view(xp, extent, axis=tuple(range(2, 2 + n)))
    idx = (slice(None), slice(None))
    idx += tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out, strides))
    idx += tuple(slice(None, None, d) for d in dilations)
    return v[idx]


def pad_spatial(x: np.ndarray, pads, value=0) -> np.ndarray:
    n = x.ndim - 2
    if not any(pads):
        return x
    width = [(0, 0), (0, 0)] + [(pads[i], pads[n + i]) for i in range(n)]
    return np.pad(x, width, mode="constant", constant_values=value)


# ---- convolution ------------------------------------------------------------------------------

class Conv(OpSpec):
    """N-D convolution (ONNX Conv): ``X`` is ``(N, C, *spatial)``, ``W`` is
    ``(M, C/group, *kernel_shape)``, optional bias ``B`` is ``(M,)``. Output spatial size per axis:
    ``floor((in + pad_begin + pad_end - ((k - 1) * dilation + 1)) / stride) + 1``.
    ``layout = "NHWC"`` (layout.py): ``X`` is ``(N, *spatial, C)``, ``W`` is
    ``(M, *kernel_shape, C/group)`` (KRSC), ``Y`` is ``(N, *out, M)``."""

    name = "graph.conv"
    operands = ("X", "W", Operand("B", optional=True))
    results = ("Y",)
    attributes = {
        "kernel_shape": Attr("ints", required=True),
        "strides": Attr("ints", required=True),
        "pads": Attr("ints", required=True, doc="begins then ends"),
        "dilations": Attr("ints", required=True),
        "group": Attr("int", default=1),
        "layout": Attr("str", default="NCHW", doc="NCHW or NHWC (W then KRSC)"),
    }
    traits = {"pure"}

    def infer_types(self, op):
        x, w = ttype(op, 0), ttype(op, 1)
        if x.rank < 3:
            fail(op, f"X must have rank >= 3 (N, C, spatial...), got {x}")
        if channels_last(op):
            if w.rank != x.rank:
                fail(op, f"W must have rank {x.rank}, got {w}")
            return [last_type(t) for t in self._infer(op, first_type(x), first_type(w))]
        return self._infer(op, x, w)

    def _infer(self, op, x, w):
        n = x.rank - 2
        if w.rank != x.rank:
            fail(op, f"W must have rank {x.rank}, got {w}")
        a = spatial_attrs(op, n)
        g = op.attr("group")
        if g < 1 or x.shape[1] % g or w.shape[0] % g:
            fail(op, f"group {g} must divide the input channels {x.shape[1]} and the output "
                     f"channels {w.shape[0]}")
        if w.shape[1] * g != x.shape[1]:
            fail(op, f"W has {w.shape[1]} input channels per group, X has {x.shape[1]} channels "
                     f"in {g} group(s)")
        if tuple(w.shape[2:]) != a["kernel_shape"]:
            fail(op, f"kernel_shape {list(a['kernel_shape'])} does not match W {w}")
        out = conv_out_shape(x.shape[2:], a)
        if any(o < 1 for o in out):
            fail(op, f"output spatial shape {out} is empty (input {list(x.shape[2:])}, "
                     f"kernel {list(a['kernel_shape'])})")
        return [TensorType((x.shape[0], w.shape[0], *out), x.element)]

    def verify(self, op):
        same_elements(op)
        if not ttype(op).element.is_float:
            fail(op, f"needs float tensors, got {ttype(op)}")
        if len(op.operands) == 3 and ttype(op, 2).shape != (ttype(op, 1).shape[0],):
            fail(op, f"B must have shape [{ttype(op, 1).shape[0]}], got {ttype(op, 2)}")

    def reference(self, op, args, interp):
        x, w = args[0], args[1]
        b = args[2] if len(args) == 3 else None
        a = spatial_attrs(op, x.ndim - 2)
        cl = channels_last(op)
        if cl:
            x, w = to_first(x), to_first(w)
        y = conv_nd(x, w, b, a["strides"], a["pads"], a["dilations"], op.attr("group"))
        return [(to_last(y) if cl else y).astype(x.dtype, copy=False)]


def conv_out_shape(spatial, a) -> list[int]:
    n = len(spatial)
    return [(spatial[i] + a["pads"][i] + a["pads"][n + i]
             - ((a["kernel_shape"][i] - 1) * a["dilations"][i] + 1)) // a["strides"][i] + 1
            for i in range(n)]


def conv_nd(x, w, b, strides, pads, dilations, group) -> np.ndarray:
    """Convolution as im2col (a strided window view) and one (batched over groups) matmul."""
    ct = compute_dtype(x.dtype)
    x, w = x.astype(ct, copy=False), w.astype(ct, copy=False)
    n = x.ndim - 2
    N, C = x.shape[:2]
    M, kernel = w.shape[0], w.shape[2:]
    out = conv_out_shape(x.shape[2:], {"pads": pads, "kernel_shape": kernel,
                                       "dilations": dilations, "strides": strides})
    xp = pad_spatial(x, pads)
    G = group
    Cg, Mg = C // G, M // G
    P, K = int(np.prod(out)), int(np.prod(kernel))
    if K == 1:  # 1x1 kernel: no window gather needed
        cols = xp[(slice(None), slice(None)) + tuple(
            slice(0, (o - 1) * s + 1, s) for o, s in zip(out, strides))]
        # (N, C, *out) -> (G, N*P, Cg)
        cols = cols.reshape(N, G, Cg, P).transpose(1, 0, 3, 2).reshape(G, N * P, Cg)
    else:
        v = windows(xp, kernel, strides, dilations, out)          # (N, C, *out, *kernel)
        v = v.reshape((N, G, Cg) + tuple(out) + tuple(kernel))
        perm = (1, 0) + tuple(range(3, 3 + n)) + (2,) + tuple(range(3 + n, 3 + 2 * n))
        cols = v.transpose(perm).reshape(G, N * P, Cg * K)
    wg = w.reshape(G, Mg, Cg * K).transpose(0, 2, 1)              # (G, Cg*K, Mg)
    if G == 1:
        y = (cols[0] @ wg[0])[None]
    else:
        y = np.matmul(cols, wg)                                    # (G, N*P, Mg)
    y = y.reshape(G, N, P, Mg).transpose(1, 0, 3, 2).reshape((N, M) + tuple(out))
    if b is not None:
        y = y + b.astype(ct, copy=False).reshape((M,) + (1,) * n)
    return y


class ConvTranspose(OpSpec):
    """N-D transposed convolution (ONNX ConvTranspose): ``X`` is ``(N, C, *spatial)``, ``W`` is
    ``(C, M/group, *kernel_shape)``, optional ``B`` is ``(M,)``. Output size per axis:
    ``stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - pad_begin - pad_end``; positions
    past the end of the full result (from ``output_padding``) hold only the bias. The importer
    resolves ``output_shape`` and ``auto_pad`` into ``pads`` and ``output_padding``."""

    name = "graph.conv_transpose"
    operands = ("X", "W", Operand("B", optional=True))
    results = ("Y",)
    attributes = {
        "kernel_shape": Attr("ints", required=True),
        "strides": Attr("ints", required=True),
        "pads": Attr("ints", required=True, doc="begins then ends"),
        "dilations": Attr("ints", required=True),
        "output_padding": Attr("ints", required=True),
        "group": Attr("int", default=1),
        "layout": Attr("str", default="NCHW", doc="NCHW or NHWC (W then KRSC)"),
    }
    traits = {"pure"}

    def infer_types(self, op):
        x, w = ttype(op, 0), ttype(op, 1)
        if x.rank < 3:
            fail(op, f"X must have rank >= 3 (N, C, spatial...), got {x}")
        if channels_last(op):
            if w.rank != x.rank:
                fail(op, f"W must have rank {x.rank}, got {w}")
            return [last_type(t) for t in self._infer(op, first_type(x), first_type(w))]
        return self._infer(op, x, w)

    def _infer(self, op, x, w):
        n = x.rank - 2
        if w.rank != x.rank:
            fail(op, f"W must have rank {x.rank}, got {w}")
        a = spatial_attrs(op, n)
        opad = tuple(op.attr("output_padding") or ())
        if len(opad) != n or any(p < 0 for p in opad):
            fail(op, f"output_padding must hold {n} non-negative ints, got {list(opad)}")
        g = op.attr("group")
        if g < 1 or x.shape[1] % g:
            fail(op, f"group {g} must divide the input channels {x.shape[1]}")
        if w.shape[0] != x.shape[1]:
            fail(op, f"W has {w.shape[0]} input channels, X has {x.shape[1]}")
        if tuple(w.shape[2:]) != a["kernel_shape"]:
            fail(op, f"kernel_shape {list(a['kernel_shape'])} does not match W {w}")
        out = conv_transpose_out_shape(x.shape[2:], a, opad)
        if any(o < 1 for o in out):
            fail(op, f"output spatial shape {out} is empty")
        return [TensorType((x.shape[0], w.shape[1] * g, *out), x.element)]

    def verify(self, op):
        same_elements(op)
        if not ttype(op).element.is_float:
            fail(op, f"needs float tensors, got {ttype(op)}")
        m = ttype(op, 1).shape[1] * op.attr("group")
        if len(op.operands) == 3 and ttype(op, 2).shape != (m,):
            fail(op, f"B must have shape [{m}], got {ttype(op, 2)}")

    def reference(self, op, args, interp):
        x, w = args[0], args[1]
        b = args[2] if len(args) == 3 else None
        a = spatial_attrs(op, x.ndim - 2)
        y = conv_transpose_nd(x, w, b, a["strides"], a["pads"], a["dilations"],
                              op.attr("output_padding"), op.attr("group"))
        return [y.astype(x.dtype, copy=False)]


def conv_transpose_out_shape(spatial, a, output_padding) -> list[int]:
    n = len(spatial)
    return [a["strides"][i] * (spatial[i] - 1) + output_padding[i]
            + (a["kernel_shape"][i] - 1) * a["dilations"][i] + 1
            - a["pads"][i] - a["pads"][n + i] for i in range(n)]


def conv_transpose_nd(x, w, b, strides, pads, dilations, output_padding, group) -> np.ndarray:
    """Transposed convolution: one matmul gives every input pixel's contribution per kernel tap,
    then one strided add per kernel tap (col2im) scatters them into the full output."""
    ct = compute_dtype(x.dtype)
    x, w = x.astype(ct, copy=False), w.astype(ct, copy=False)
    n = x.ndim - 2
    N, C = x.shape[:2]
    ins, kernel = x.shape[2:], w.shape[2:]
    G = group
    Cg, Mg = C // G, w.shape[1]
    M, P, K = Mg * G, int(np.prod(ins)), int(np.prod(kernel))
    xg = x.reshape(N, G, Cg, P).transpose(1, 0, 3, 2).reshape(G, N * P, Cg)
    wg = w.reshape(G, Cg, Mg * K)
    cols = np.matmul(xg, wg)                                       # (G, N*P, Mg*K)
    cols = cols.reshape((G, N) + tuple(ins) + (Mg,) + tuple(kernel))
    perm = (1, 0, 2 + n) + tuple(range(3 + n, 3 + 2 * n)) + tuple(range(2, 2 + n))
    cols = cols.transpose(perm).reshape((N, M) + tuple(kernel) + tuple(ins))
    full_shape = [s * (i - 1) + (k - 1) * d + 1
                  for s, i, k, d in zip(strides, ins, kernel, dilations)]
    full = np.zeros((N, M) + tuple(full_shape), dtype=ct)
    for tap in np.ndindex(*kernel):
        dst = (slice(None), slice(None)) + tuple(
            slice(t * d, t * d + s * (i - 1) + 1, s)
            for t, d, s, i in zip(tap, dilations, strides, ins))
        full[dst] += cols[(slice(None), slice(None)) + tap]
    out = conv_transpose_out_shape(ins, {"strides": strides, "kernel_shape": kernel,
                                         "dilations": dilations, "pads": pads}, output_padding)
    # y[o] = full[o + pad_begin], zero outside the full result
    lo = [pads[i] for i in range(n)]
    hi = [lo[i] + out[i] for i in range(n)]
    extra = [(max(0, -lo[i]), max(0, hi[i] - full_shape[i])) for i in range(n)]
    if any(e != (0, 0) for e in extra):
        full = np.pad(full, [(0, 0), (0, 0)] + extra)
    y = full[(slice(None), slice(None)) + tuple(
        slice(lo[i] + extra[i][0], hi[i] + extra[i][0]) for i in range(n))]
    if b is not None:
        y = y + b.astype(ct, copy=False).reshape((M,) + (1,) * n)
    return y


# ---- softmax -----------------------------------------------------------------------------------

class _SoftmaxBase(OpSpec):
    operands = ("input",)
    results = ("output",)
    attributes = {"axis": Attr("int", required=True, doc="non-negative")}
    traits = {"pure"}

    def infer_types(self, op):
        t = ttype(op)
        if t.rank == 0:
            fail(op, "input must have rank >= 1")
        if op.attr("axis") != norm_axis(op, op.attr("axis"), t.rank):
            fail(op, f"axis must be non-negative, got {op.attr('axis')}")
        return [t]

    def verify(self, op):
        if not ttype(op).element.is_float:
            fail(op, f"needs a float tensor, got {ttype(op)}")


class Softmax(_SoftmaxBase):
    """``exp(x - max) / sum(exp(x - max))`` along ``axis`` (ONNX Softmax-13 semantics; the
    importer turns older opsets' 2-D coercion into reshapes)."""

    name = "graph.softmax"

    def reference(self, op, args, interp):
        x = args[0]
        ax = op.attr("axis")
        xc = x.astype(compute_dtype(x.dtype), copy=False)
        with np.errstate(all="ignore"):
            e = np.exp(xc - np.max(xc, axis=ax, keepdims=True))
            y = e / np.sum(e, axis=ax, keepdims=True)
        return [y.astype(x.dtype, copy=False)]


class LogSoftmax(_SoftmaxBase):
    """``x - max - log(sum(exp(x - max)))`` along ``axis`` (ONNX LogSoftmax-13 semantics)."""

    name = "graph.log_softmax"

    def reference(self, op, args, interp):
        x = args[0]
        ax = op.attr("axis")
        xc = x.astype(compute_dtype(x.dtype), copy=False)
        with np.errstate(all="ignore"):
            s = xc - np.max(xc, axis=ax, keepdims=True)
            y = s - np.log(np.sum(np.exp(s), axis=ax, keepdims=True))
        return [y.astype(x.dtype, copy=False)]


# ---- pad ---------------------------------------------------------------------------------------

PAD_MODES = ("constant", "reflect", "edge", "wrap")


class Pad(OpSpec):
    """Pads ``data`` by ``pads`` (``[begin_0, ..., begin_n, end_0, ..., end_n]``, one pair per axis;
    negative values crop). Modes: ``constant`` (the optional scalar operand ``constant_value``,
    default 0), ``reflect`` (mirror without repeating the edge), ``edge`` (repeat the edge),
    ``wrap`` (cyclic). Cropping is applied before padding."""

    name = "graph.pad"
    operands = ("data", Operand("constant_value", optional=True))
    results = ("output",)
    attributes = {"pads": Attr("ints", required=True), "mode": Attr("str", default="constant")}
    traits = {"pure"}

    def infer_types(self, op):
        t = ttype(op)
        pads = tuple(op.attr("pads") or ())
        if len(pads) != 2 * t.rank:
            fail(op, f"pads must hold {2 * t.rank} ints for {t}, got {list(pads)}")
        shape = [d + pads[i] + pads[t.rank + i] for i, d in enumerate(t.shape)]
        if any(d < 0 for d in shape):
            fail(op, f"pads {list(pads)} crop {t} below zero size")
        return [t.with_shape(shape)]

    def verify(self, op):
        mode = op.attr("mode")
        if mode not in PAD_MODES:
            fail(op, f"mode must be one of {list(PAD_MODES)}, got {mode!r}")
        if len(op.operands) == 2:
            same_elements(op)
            if ttype(op, 1).size != 1:
                fail(op, f"constant_value must be a scalar, got {ttype(op, 1)}")
            if mode != "constant":
                fail(op, f"constant_value is only used in mode 'constant', not {mode!r}")
        t = ttype(op)
        pads = op.attr("pads")
        if mode != "constant":
            for i, d in enumerate(t.shape):
                if d + min(pads[i], 0) + min(pads[t.rank + i], 0) == 0 and (
                        pads[i] > 0 or pads[t.rank + i] > 0):
                    fail(op, f"mode {mode!r} cannot pad axis {i}, which is empty")

    def reference(self, op, args, interp):
        x = args[0]
        r = x.ndim
        pads = op.attr("pads")
        mode = op.attr("mode")
        crop = tuple(slice(max(0, -pads[i]), x.shape[i] - max(0, -pads[r + i])) for i in range(r))
        x = x[crop]
        width = [(max(0, pads[i]), max(0, pads[r + i])) for i in range(r)]
        if not any(a or b for a, b in width):
            return [np.array(x)]
        if mode == "constant":
            value = args[1].reshape(()) if len(args) == 2 else np.zeros((), x.dtype)
            y = np.pad(x, width, mode="constant", constant_values=value)
        else:
            y = np.pad(x, width, mode=mode)
        return [y.astype(x.dtype, copy=False)]


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (Conv, ConvTranspose, Softmax, LogSoftmax, Pad)
