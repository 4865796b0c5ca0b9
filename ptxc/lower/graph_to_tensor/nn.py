"""Convolutions and padding: ``graph.conv``, ``graph.conv_transpose``, ``graph.pad``.

* conv -> ``tensor.pad`` (zeros, when ``pads`` has any) + init (``tensor.fill`` 0, or the bias
  broadcast along channels by a copy generic) + ``tensor.conv``.
* conv_transpose -> a convolution, as frameworks compute its gradient-of-conv form: the input is
  spread onto a zero tensor with the stride (``tensor.insert_slice`` with strides
  ``[1, 1, s...]``), padded by ``dilation * (k - 1) - pad_begin`` before and
  ``dilation * (k - 1) - pad_end + output_padding`` after (negative amounts crop), and convolved
  at stride 1 with the kernel flipped and its channel dims swapped per group
  (``W'[g*Mg + m, c, k] = W[g*Cg + c, m, K - 1 - k]``). A constant kernel is rearranged at
  compile time; otherwise a copy generic with a flipping map does it.
  That form multiplies the spread-in zeros by the kernel, so a NaN or inf tap would reach every
  output of its channel (``0 * NaN``), where ONNX (onnxruntime's col2im) adds only products of
  real inputs (issue 11). A kernel that is not a finite constant therefore lowers to the direct
  form instead: one generic over the output and the reduction dims (input channel of the
  group, kernel taps) whose body reads ``x`` at ``i = (o + pad - k * dilation) / stride`` with
  ``tensor.extract`` and adds ``x * w`` only where that ``i`` is a whole input position.
* pad, mode constant -> ``tensor.pad`` (after an ``extract_slice`` for negative pads, which
  ONNX applies first); modes reflect, edge and wrap -> a generic computing each source index
  from ``tensor.index`` and reading it with ``tensor.extract``.
"""

from __future__ import annotations

import numpy as np

from ...dialects.graph.nn import spatial_attrs
from ...dialects.tensor.generic import build_generic
from ...dialects.tensor.maps import identity_map, unit_row
from ...ir.spec import lookup
from ...ir.types import I64, INDEX, TensorType
from .common import acc_type, c, cast, const_array, constant, empty, fill, lowers, op_, pad


def bias_init(b, bias, out: TensorType, dim: int = 1):
    """``out``-shaped init holding ``bias`` (``(M,)``) along ``dim`` (1, or the last dim of a
    channels-last result), widened to ``out``'s element (an f16 bias into an f32 accumulator)."""
    n = out.rank
    return build_generic([bias], [empty(b, out)], out.shape,
                         [(unit_row(n, dim),), identity_map(n)], ["parallel"] * n,
                         lambda bb, args: [cast(bb, args[0], out.element)], b=b).result


def spatial_pad(b, x, op, pads, value):
    """``x`` padded by the spatial ``pads`` (begins then ends) of ``op``, whose layout says
    where the spatial dims are (1.. for channels first, 1..-1 for channels last)."""
    n = x.type.rank - 2
    lo, hi = list(pads[:n]), list(pads[n:])
    if op.attr("layout") == "NHWC":
        return pad(b, x, [0] + lo + [0], [0] + hi + [0], value)
    return pad(b, x, [0, 0] + lo, [0, 0] + hi, value)


def conv(b, op, el=None, tf32=False):
    """Lower a ``graph.conv`` (or the base view of a ``graph.fused_conv``); a channels-last one
    to a channels-last ``tensor.conv`` (graph/layout.py). ``el``: the element of the result
    (default the op's; f32 for an f32 accumulator of f16 operands), ``tf32``: round both
    factors to tf32."""
    g = lookup("graph.conv").groups(op)
    x, w, bias = g["X"], g["W"], g["B"]
    n = x.type.rank - 2
    a = spatial_attrs(op, n)
    last = op.attr("layout") == "NHWC"
    xp = spatial_pad(b, x, op, a["pads"], 0.0)
    out = op.results[0].type
    out = out.with_element(el or out.element)
    init = (bias_init(b, bias, out, out.rank - 1 if last else 1) if bias is not None
            else fill(b, out, 0.0))
    attrs = {"strides": a["strides"], "dilations": a["dilations"], "group": op.attr("group")}
    if last:
        attrs["layout"] = "NHWC"
    if tf32:
        attrs["tf32"] = True
    return b.create("tensor.conv", [xp, w, init], attrs).result


@lowers("graph.conv")
def _conv(op, b):
    return [conv(b, op)]


def _flipped_kernel(b, w, group):
    """``W`` ``(C, Mg, *K)`` as a convolution kernel ``(G*Mg, C/G, *K)``, flipped spatially."""
    C, Mg, *K = w.type.shape
    G = group
    Cg = C // G
    s = len(K)
    arr = const_array(w)
    if arr is not None:
        v = arr.reshape((G, Cg, Mg, *K)).swapaxes(1, 2).reshape((G * Mg, Cg, *K))
        v = v[(slice(None), slice(None)) + (slice(None, None, -1),) * s]
        return constant(b, np.ascontiguousarray(v), w.type.element)
    n = 3 + s  # loops (g, mg, cg, k...)

    def two(i, ci, j):
        row = [0] * (n + 1)
        row[i], row[j] = ci, 1
        return tuple(row)

    m_in = (two(0, Cg, 2), unit_row(n, 1)) + tuple(
        unit_row(n, 3 + i, -1, K[i] - 1) for i in range(s))
    m_out = (two(0, Mg, 1), unit_row(n, 2)) + tuple(unit_row(n, 3 + i) for i in range(s))
    out = w.type.with_shape((G * Mg, Cg, *K))
    return build_generic([w], [empty(b, out)], (G, Mg, Cg, *K), [m_in, m_out],
                         ["parallel"] * n, lambda bb, args: [args[0]], b=b).result


@lowers("graph.conv_transpose")
def _conv_transpose(op, b):
    g = lookup("graph.conv_transpose").groups(op)
    x, w, bias = g["X"], g["W"], g["B"]
    n = x.type.rank - 2
    a = spatial_attrs(op, n)
    strides, dilations, pads = a["strides"], a["dilations"], a["pads"]
    opad = op.attr("output_padding")
    kernel = w.type.shape[2:]
    N, C, *ins = x.type.shape
    wc = const_array(w)
    if wc is None or not np.isfinite(wc).all():
        return [_conv_transpose_direct(op, b, x, w, bias, strides, dilations, pads)]
    if any(s > 1 for s in strides):
        up = TensorType((N, C) + tuple(s * (i - 1) + 1 for s, i in zip(strides, ins)),
                        x.type.element)
        x = b.create("tensor.insert_slice", [x, fill(b, up, 0.0)], {
            "offsets": [0] * (n + 2), "sizes": list(x.type.shape),
            "strides": [1, 1] + list(strides)}).result
    low = [d * (k - 1) - pads[i] for i, (d, k) in enumerate(zip(dilations, kernel))]
    high = [d * (k - 1) - pads[n + i] + opad[i]
            for i, (d, k) in enumerate(zip(dilations, kernel))]
    xp = pad(b, x, [0, 0] + low, [0, 0] + high, 0.0)
    wk = _flipped_kernel(b, w, op.attr("group"))
    out = op.results[0].type
    init = bias_init(b, bias, out) if bias is not None else fill(b, out, 0.0)
    return [b.create("tensor.conv", [xp, wk, init], {
        "strides": [1] * n, "dilations": list(dilations), "group": op.attr("group")}).result]


def _conv_transpose_direct(op, b, x, w, bias, strides, dilations, pads):
    """``y[b, m, o] = bias[m] + sum over (c, k) of x[b, g*Cg + c, i] * w[g*Cg + c, m', k]``
    where ``i = (o + pad - k*d) / s`` is whole and inside the input (``g = m // Mg``,
    ``m' = m - g*Mg``): only real products, as ONNX's col2im."""
    out = op.results[0].type
    n = x.type.rank - 2
    ct = acc_type(out.element)
    C, ins = x.type.shape[1], x.type.shape[2:]
    Mg, kernel = w.type.shape[1], w.type.shape[2:]
    Cg = C // op.attr("group")
    r = n + 2
    acc_t = TensorType(out.shape, ct)
    init = bias_init(b, bias, acc_t) if bias is not None else fill(b, acc_t, 0.0)

    def body(bb, args):
        (acc,) = args
        dim = lambda d: bb.create("tensor.index", [], {"dim": d}).result  # noqa: E731
        i64 = lambda v: cast(bb, v, I64)  # noqa: E731
        m, cc = i64(dim(1)), i64(dim(r))
        grp = op_(bb, "arith.div", m, c(bb, Mg, I64))
        cin = op_(bb, "arith.add", op_(bb, "arith.mul", grp, c(bb, Cg, I64)), cc)
        mw = op_(bb, "arith.sub", m, op_(bb, "arith.mul", grp, c(bb, Mg, I64)))
        ok, xi = None, []
        for j in range(n):
            k = i64(dim(r + 1 + j))
            t = op_(bb, "arith.sub", op_(bb, "arith.add", i64(dim(2 + j)), c(bb, pads[j], I64)),
                    op_(bb, "arith.mul", k, c(bb, dilations[j], I64)))
            q = op_(bb, "arith.div", t, c(bb, strides[j], I64))
            conds = [op_(bb, "arith.cmp", t, c(bb, 0, I64), predicate="ge"),
                     op_(bb, "arith.cmp", op_(bb, "arith.mul", q, c(bb, strides[j], I64)), t,
                         predicate="eq"),
                     op_(bb, "arith.cmp", q, c(bb, ins[j], I64), predicate="lt")]
            for cnd in conds:
                ok = cnd if ok is None else op_(bb, "arith.and", ok, cnd)
            xi.append(cast(bb, op_(bb, "arith.select", ok, q, c(bb, 0, I64)), INDEX))
        ix = lambda v: cast(bb, v, INDEX)  # noqa: E731
        xv = bb.create("tensor.extract", [x, dim(0), ix(cin)] + xi).result
        wv = bb.create("tensor.extract", [w, ix(cin), ix(mw)] +
                       [dim(r + 1 + j) for j in range(n)]).result
        prod = op_(bb, "arith.mul", cast(bb, xv, ct), cast(bb, wv, ct))
        return [op_(bb, "arith.select", ok, op_(bb, "arith.add", acc, prod), acc)]

    bounds = tuple(out.shape) + (Cg,) + tuple(kernel)
    y = build_generic([], [init], bounds, [tuple(unit_row(r + 1 + n, d) for d in range(r))],
                      ["parallel"] * r + ["reduction"] * (1 + n), body, b=b).result
    if ct != out.element:
        y = build_generic([y], [empty(b, out)], out.shape, [identity_map(r), identity_map(r)],
                          ["parallel"] * r, lambda bb, a: [cast(bb, a[0], out.element)],
                          b=b).result
    return y


# ---- pad ------------------------------------------------------------------------------------------

def _mod(bb, j, m):
    """``j mod m`` in [0, m) for an index ``j`` and a positive constant ``m``."""
    mc = c(bb, m, INDEX)
    r = op_(bb, "arith.sub", j, op_(bb, "arith.mul", op_(bb, "arith.div", j, mc), mc))
    neg = op_(bb, "arith.cmp", r, c(bb, 0, INDEX), predicate="lt")
    return op_(bb, "arith.select", neg, op_(bb, "arith.add", r, mc), r)


def _source_index(bb, mode: str, j, size: int):
    if mode == "edge":
        return op_(bb, "arith.min", op_(bb, "arith.max", j, c(bb, 0, INDEX)),
                   c(bb, size - 1, INDEX))
    if mode == "wrap":
        return _mod(bb, j, size)
    if size == 1:  # reflect of a single element: always that element
        return c(bb, 0, INDEX)
    period = 2 * (size - 1)
    r = _mod(bb, j, period)
    inside = op_(bb, "arith.cmp", r, c(bb, size, INDEX), predicate="lt")
    return op_(bb, "arith.select", inside, r, op_(bb, "arith.sub", c(bb, period, INDEX), r))


@lowers("graph.pad")
def _pad(op, b):
    x = op.operands[0]
    r = x.type.rank
    pads = list(op.attr("pads"))
    low, high = pads[:r], pads[r:]
    mode = op.attr("mode")
    if mode == "constant":
        value = 0
        if len(op.operands) == 2:
            arr = const_array(op.operands[1])
            if arr is None:
                v = op.operands[1]
                zero = [c(b, 0, INDEX) for _ in range(v.type.rank)]
                scalar = b.create("tensor.extract", [v] + zero).result
                xc = pad(b, x, [min(p, 0) for p in low], [min(p, 0) for p in high], 0)
                if not any(p > 0 for p in low + high):
                    return [xc]
                return [b.create("tensor.pad", [xc, scalar], {
                    "low": [max(p, 0) for p in low], "high": [max(p, 0) for p in high]}).result]
            value = arr.reshape(-1)[0]
        y = pad(b, x, low, high, value)
        if y is x:  # nothing to pad or crop: still a new tensor
            y = build_generic([x], [empty(b, x.type)], x.type.shape,
                              [identity_map(r)] * 2, ["parallel"] * r,
                              lambda bb, args: [args[0]], b=b).result
        return [y]
    xc = pad(b, x, [min(p, 0) for p in low], [min(p, 0) for p in high], 0)
    size = xc.type.shape
    out = op.results[0].type
    lo = [max(p, 0) for p in low]

    def body(bb, args):
        idx = []
        for d in range(r):
            j = bb.create("tensor.index", [], {"dim": d}).result
            if lo[d] or size[d] != out.shape[d]:
                j = op_(bb, "arith.sub", j, c(bb, lo[d], INDEX)) if lo[d] else j
                j = _source_index(bb, mode, j, size[d])
            idx.append(j)
        return [bb.create("tensor.extract", [xc] + idx).result]

    return [build_generic([], [empty(b, out)], out.shape, [identity_map(r)],
                          ["parallel"] * r, body, b=b).result]
