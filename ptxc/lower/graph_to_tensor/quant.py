"""Quantization ops -> tensor dialect (ptxc/dialects/graph/quant.py has the semantics).

* quantize_linear: one generic ``clamp(rint(f32(x) / f32(scale)) + zp)``, the division in
  float32 as onnxruntime does, rounding half to even in float32 (:func:`_saturate`); a
  one-element constant scale divides without a division instruction (:func:`_exact_quotient`);
  a per-axis scale or zero point is read through a one-dim map along ``axis``.
* dequantize_linear: one generic ``f32(i32(x) - i32(zp)) * scale``.
* qlinear_conv / qlinear_matmul: ``tensor.conv`` or ``tensor.matmul`` of **int8 operands**
  into an i32 init holding the bias (:func:`_int8_form`: what an int8 tensor core multiplies,
  ``mma.m16n8k32.s8``), then, when there is a multiplier, one requantization generic:
  ``clamp(rint(epilogue(f32(acc) * multiplier, extras...)) + y_zp)``; an epilogue that
  ends by dividing by the output scale (fold-qdq's ``old(v * ys) / ys``) has that division
  made exact without ``div.rn`` by the same :func:`_saturate`.
  Where the int8 form does not exist (a shifted W outside int8, a run-time zero point, a
  correction that would depend on run-time data) the operands minus their zero points as i32
  (a constant W shifted at compile time), with zero padding after the shift: the same sums.
"""

from __future__ import annotations

import numpy as np

from ...dialects.graph.nn import spatial_attrs
from ...dialects.graph.quant import quant_range
from ...dialects.graph.scalar_forms import inline_block
from ...dialects.tensor.maps import unit_row
from ...ir.core import OpResult
from ...ir.spec import lookup
from ...ir.types import F32, F64, I8, I32, TensorType
from .common import c, cast, const_array, constant, elementwise, fill, lowers, op_
from .nn import spatial_pad


def _map(v, rank: int, axis: int):
    """The map of a scale/zero point: broadcast when one element, else along ``axis``."""
    if v.type.size == 1:
        return None
    return (unit_row(rank, axis),)


def _scalar_view(b, v):
    """A one-element tensor as rank 0 (broadcasts against anything)."""
    if v.type.size == 1 and v.type.rank:
        return b.create("tensor.reshape", [v], result_types=[v.type.with_shape(())]).result
    return v


#: the exact quotient is taken for divisors in [2**-100, 2**100] (see :func:`_exact_quotient`)
_DIVISOR_RANGE = (2.0 ** -100, 2.0 ** 100)
#: the quotient is clamped to +-2**22 before rounding where the zero point is not a constant:
#: far beyond any 8/16-bit range plus zp
_QUOTIENT_BOUND = 2.0 ** 22


def _saturate(bb, y, zp, el, zp_value: int | None = None):
    """``clamp(rint(y) + zp)`` cast to ``el``, as onnxruntime computes it in float32.

    For an f32 ``y`` and a result of at most 16 bits (i8, ui8, i16, ui16: ``|lo|, |hi|, |zp|
    <= 2**16``) everything stays f32, and that is exact: ``rint`` of an f32 is an f32; an
    integer-valued f32 plus an integer ``|zp| <= 2**16`` is exact while the sum stays below
    2**24, and beyond that the sum, rounded or not, lies past ``hi`` or ``lo`` (rounding is
    monotone), so saturation gives the same integer; ``lo`` and ``hi`` are f32 numbers. NaN
    stays NaN through min/max and casts as before. Wider results (i32) and f64 values round in
    f64.

    With the zero point a known integer ``zp_value`` (a constant, or 0 where there is none) the
    saturation moves before the rounding: ``rint(clamp(y, lo - zp, hi - zp)) + zp`` is the same
    integer (rint is monotone and keeps integers, the bounds are integers), already in range,
    and it is the form llvm_scalar turns into one f32 add and one integer add
    (``_rounded_plus_constant``): an int8 layer's epilogue does this for every output.

    A ``y`` that is ``arith.div(x, c)`` by a constant ``c`` is replaced by
    :func:`_exact_quotient` (no ``div.rn.f32``). Example (i8, zp -3)::

        before: %q = arith.div %x, %c;  %y = arith.cast %q to f64;  (two math.floor, selects,
                f64 add/max/min) ...;  arith.cast %r to i8
        after:  %q = <exact quotient of %x by %c>;
                %m = arith.min (arith.max %q, -125.0), 130.0;
                %s = arith.add (math.roundeven %m), -3.0;  arith.cast %s to i8
    """
    lo, hi = quant_range(el)
    if y.type == F32 and max(-lo, hi) <= 2 ** 16:
        ft = F32
        y = _exact_quotient(bb, y)
        if zp_value is not None and abs(zp_value) <= 2 ** 16:   # saturate, then round
            y = op_(bb, "arith.min", op_(bb, "arith.max", y, c(bb, float(lo - zp_value), F32)),
                    c(bb, float(hi - zp_value), F32))
            r = op_(bb, "math.roundeven", y)
            if zp_value:
                r = op_(bb, "arith.add", r, c(bb, float(zp_value), F32))
            return cast(bb, r, el)
        # into [-2**22, 2**22] first: the same saturated integer (|lo|, |hi|, |zp| <= 2**16),
        # and the domain where rounding and the cast need no conversion instruction
        # (llvm_scalar's MAGIC forms)
        y = op_(bb, "arith.min", op_(bb, "arith.max", y, c(bb, -2.0 ** 22, F32)),
                c(bb, 2.0 ** 22, F32))
    else:
        ft = F64
        y = cast(bb, y, F64)
    r = op_(bb, "math.roundeven", y)
    if zp is not None:
        r = op_(bb, "arith.add", r, cast(bb, zp, ft))
    r = op_(bb, "arith.min", op_(bb, "arith.max", r, c(bb, float(lo), ft)), c(bb, float(hi), ft))
    return cast(bb, r, el)


def _exact_quotient(bb, y):
    """``y`` itself, or, when ``y = arith.div(x, c)`` with a constant f32 ``c`` in
    ``_DIVISOR_RANGE`` and nothing else uses ``y``, the same quotient ``RN(x / c)`` computed
    with one multiply and two fmas (no ``div.rn.f32``, which is a long sequence with a slow
    path on NVPTX), for a value that is only rounded to an integer and saturated::

        before: %q = arith.div %x, %c
        after:  %xc = arith.min (arith.max %x, -|c| 2**22), |c| 2**22
                %q0 = arith.mul %xc, %r                  with r = RN(1 / c), a constant
                %e  = math.fma (arith.neg %q0), %c, %xc  (exactly xc - q0 c)
                %q  = math.fma %e, %r, %q0

    Markstein's theorem: with ``r = RN(1/c)`` and ``q0`` the faithful ``RN(x r)``, the residual
    ``e`` is exact and ``RN(q0 + e r)`` is the correctly rounded ``x / c``, provided nothing
    overflows or underflows. The guards:

    * the clamp of ``x`` to ``+-|c| 2**22`` (exact constants: a power-of-two scaling of ``c``)
      keeps ``q0``, ``q0 c`` and ``q`` finite; it changes only quotients beyond ``2**22``,
      which become ``+-2**22``, and rounding, adding a zero point of at most 2**16 and
      saturating to a range of at most 2**16 are monotone, so the final integer is the same.
      NaN stays NaN (min/max propagate it); infinities saturate as before.
    * ``2**-100 <= |c| <= 2**100`` keeps ``r`` a normal number and ``|c| 2**22`` finite.
    * underflow: where ``|x / c| >= 1/4``, ``|x| >= 2**-102``, so ``x`` and ``q0 c`` are
      multiples of 2**-149 and the residual (below ``2 ulp(q0) |c|``) is representable: exact.
      Smaller quotients (in particular every quotient below 2**-126, where ``e`` may round)
      come out below 1/2 by either computation (q0 and q are within a few ulps of x / c), so
      both round to 0.

    ``tests/test_exact_quotient.py`` checks the sequence against numpy's division over every
    f32 mantissa for adversarial divisors and millions of random ones.
    """
    div = y.op if isinstance(y, OpResult) else None
    if div is None or div.name != "arith.div" or y.type != F32 or y.has_uses:
        return y
    x, d = div.operands
    if not (isinstance(d, OpResult) and d.op.name == "arith.constant"):
        return y
    cv = np.float32(d.op.attributes["value"])
    if not _DIVISOR_RANGE[0] <= abs(float(cv)) <= _DIVISOR_RANGE[1]:
        return y
    with np.errstate(all="ignore"):
        r = np.float32(1) / cv
    bound = float(abs(cv) * np.float32(_QUOTIENT_BOUND))
    xc = op_(bb, "arith.min", op_(bb, "arith.max", x, c(bb, -bound, F32)), c(bb, bound, F32))
    q0 = op_(bb, "arith.mul", xc, c(bb, float(r), F32))
    e = op_(bb, "math.fma", op_(bb, "arith.neg", q0), d, xc)
    q = op_(bb, "math.fma", e, c(bb, float(r), F32), q0)
    div.erase()
    return q


@lowers("graph.quantize_linear")
def _quantize(op, b):
    x, s = op.operands[0], _scalar_view(b, op.operands[1])
    zp = op.operands[2] if len(op.operands) == 3 else None
    zp_value = _scalar_zp(zp)   # a known zero point is a number in the body, not an input
    zp = _scalar_view(b, zp) if zp is not None and zp_value is None else None
    out = op.results[0].type
    axis = op.attr("axis")
    ins = [x, s] + ([zp] if zp is not None else [])
    maps = [None] + [_map(v, out.rank, axis) for v in ins[1:]]

    def body(bb, a):
        q = op_(bb, "arith.div", cast(bb, a[0], F32), cast(bb, a[1], F32))
        return _saturate(bb, q, a[2] if zp is not None else None, out.element, zp_value)

    return [elementwise(b, ins, out, body, maps=maps)]


@lowers("graph.dequantize_linear")
def _dequantize(op, b):
    x, s = op.operands[0], _scalar_view(b, op.operands[1])
    zp = _scalar_view(b, op.operands[2]) if len(op.operands) == 3 else None
    out = op.results[0].type
    axis = op.attr("axis")
    ins = [x, s] + ([zp] if zp is not None else [])
    maps = [None] + [_map(v, out.rank, axis) for v in ins[1:]]

    def body(bb, a):
        d = cast(bb, a[0], I32)
        if zp is not None:
            d = op_(bb, "arith.sub", d, cast(bb, a[2], I32))
        return cast(bb, op_(bb, "arith.mul", cast(bb, d, F32), cast(bb, a[1], F32)),
                    out.element)

    return [elementwise(b, ins, out, body, maps=maps)]


def _shifted(b, v, zp, axis: int | None):
    """``i32(v) - i32(zp)`` (zp one element, or 1-D along ``axis``); folded when constant."""
    out = v.type.with_element(I32)
    arr, zarr = const_array(v), (const_array(zp) if zp is not None else None)
    if arr is not None and (zp is None or zarr is not None):
        r = arr.astype(np.int32)
        if zarr is not None:
            z = zarr.astype(np.int32)
            if z.size == 1:
                r = r - z.reshape(())
            else:
                shape = [1] * r.ndim
                shape[axis] = z.size
                r = r - z.reshape(shape)
        return constant(b, r, I32)
    if zp is None:
        return elementwise(b, [v], out, lambda bb, a: cast(bb, a[0], I32))
    zp = _scalar_view(b, zp)
    return elementwise(b, [v, zp], out,
                       lambda bb, a: op_(bb, "arith.sub", cast(bb, a[0], I32),
                                         cast(bb, a[1], I32)),
                       maps=[None, _map(zp, v.type.rank, axis)])


def _init(b, bias, out: TensorType, channel: int):
    if bias is None:
        return fill(b, out, 0)
    return elementwise(b, [bias], out, lambda bb, a: a[0],
                       maps=[(unit_row(out.rank, channel),)], inline_constants=False)


def _conv(b, op, x, w, pad_value, init):
    """``tensor.conv`` of ``x`` padded with ``pad_value`` (in ``op``'s layout) and ``w``."""
    a = spatial_attrs(op, x.type.rank - 2)
    attrs = {"strides": a["strides"], "dilations": a["dilations"], "group": op.attr("group")}
    if op.attr("layout") == "NHWC":
        attrs["layout"] = "NHWC"
    return b.create("tensor.conv", [spatial_pad(b, x, op, a["pads"], pad_value), w, init],
                    attrs).result


def _wrap32(a: np.ndarray) -> np.ndarray:
    """int64 values as int32 arithmetic has them (mod 2**32)."""
    return (np.asarray(a, np.int64) % (1 << 32)).astype(np.uint32).view(np.int32)


def _scalar_zp(v) -> int | None:
    """A one-element constant zero point as an int (absent: 0); None when not one."""
    if v is None:
        return 0
    a = const_array(v)
    if a is None or a.size != 1:
        return None
    return int(a.reshape(()))


def _int8_form(b, op, g, acc_t: TensorType, cy: int):
    """The int8 form of a qlinear op, or None where there is none (then the i32 form runs).

    ``sum_k (x - zx) (w - zw)`` is computed as ``sum_k x8 w8 - zx' sum_k w8``: ``x8`` is x as
    int8 (ui8 moved down by 128, ``zx' = zx - 128``; i8 as it is, ``zx' = zx``), ``w8`` the
    constant ``w - zw`` when every value fits in int8 (symmetric weights: w itself), and the
    correction ``zx' sum_k w8`` per output channel is folded into the bias at compile time. A
    convolution pads x8 with ``zx'`` (``x - zx`` padded with 0). Exact: i32 sums wrap alike
    in both forms. A constant W of a 2-D matmul is stored transposed (``transpose_b``), K
    contiguous, as a fully connected layer's weights are::

        before: %xi = i32(x) - 15; %p = pad(%xi, 0); tensor.conv(%p, %w_i32, %bias_i32)
        after:  %p = pad(%x_i8, 15); tensor.conv(%p, %w_i8, %bias_i32 - 15 * sum(w))
    """
    conv = op.name == "graph.qlinear_conv"
    x, w = g["X"], g["W"]
    zx, zw = _scalar_zp(g["x_zero_point"]), g["w_zero_point"]
    if zx is None:
        return None
    warr = const_array(w)
    if warr is None:   # a run-time W: i8 with no zero point only, and nothing to correct
        if w.type.element.name != "i8" or _scalar_zp(zw) != 0:
            return None
        w8, w8arr = w, None
    else:
        wi = warr.astype(np.int64)
        if zw is not None:
            za = const_array(zw)
            if za is None:
                return None
            axis = 0 if conv else wi.ndim - 1
            shape = [1] * wi.ndim
            shape[axis] = za.size
            wi = wi - za.astype(np.int64).reshape(shape if za.size > 1 else ())
        if wi.min(initial=0) < -128 or wi.max(initial=0) > 127:
            return None
        w8arr = wi.astype(np.int8)
        w8 = None
    unsigned = x.type.element.name == "ui8"
    if unsigned:
        zx -= 128
    bias = g["B"]
    if zx:
        if w8arr is None or (not conv and w8arr.ndim != 2):
            return None
        barr = const_array(bias) if bias is not None else np.zeros(acc_t.shape[cy], np.int32)
        if barr is None:
            return None
    if unsigned:
        x = elementwise(b, [x], x.type.with_element(I8), lambda bb, a: cast(
            bb, op_(bb, "arith.sub", cast(bb, a[0], I32), c(bb, 128, I32)), I8))
    if zx:
        k_axes = tuple(range(1, w8arr.ndim)) if conv else (0,)
        corr = zx * w8arr.astype(np.int64).sum(axis=k_axes)
        bias = constant(b, _wrap32(barr.astype(np.int64) - corr), I32)
    init = _init(b, bias, acc_t, cy)
    if conv:
        if w8 is None:
            w8 = constant(b, w8arr, I8)
        return _conv(b, op, x, w8, zx, init)
    attrs = {}
    if w8 is None:
        if w8arr.ndim == 2:
            w8arr, attrs = np.ascontiguousarray(w8arr.T), {"transpose_b": True}
        w8 = constant(b, w8arr, I8)
    return b.create("tensor.matmul", [x, w8, init], attrs).result


@lowers("graph.qlinear_conv", "graph.qlinear_matmul")
def _qlinear(op, b):
    spec = lookup(op.name)
    g = spec.groups(op)
    out = op.results[0].type
    acc_t = out.with_element(I32)
    cy = spec.y_channel(op, out.rank)
    x, w = g["X"], g["W"]
    form = _int8_form(b, op, g, acc_t, cy)
    if form is not None:
        acc = form
    elif op.name == "graph.qlinear_conv":
        xi = _shifted(b, x, g["x_zero_point"], None)
        wi = _shifted(b, w, g["w_zero_point"], 0)
        acc = _conv(b, op, xi, wi, 0, _init(b, g["B"], acc_t, cy))
    else:
        xi = _shifted(b, x, g["x_zero_point"], x.type.rank - 2)
        wi = _shifted(b, w, g["w_zero_point"], w.type.rank - 1)
        acc = b.create("tensor.matmul", [xi, wi, _init(b, g["B"], acc_t, cy)]).result
    if g["multiplier"] is None:
        return [acc]
    m = _scalar_view(b, g["multiplier"])
    yz = g["y_zero_point"]
    yz_value = _scalar_zp(yz) if yz is not None else None
    yz = _scalar_view(b, yz) if yz is not None else None
    extras = list(g["epilogue_inputs"])
    ins = [acc, m] + ([yz] if yz is not None else []) + extras
    maps = [None, _map(m, out.rank, cy)] + [None] * (len(ins) - 2)
    block = op.regions[0].blocks[0]

    def body(bb, a):
        f = op_(bb, "arith.mul", cast(bb, a[0], F32), cast(bb, a[1], F32))
        k = 3 if yz is not None else 2
        (f,) = inline_block(block, bb, [f] + list(a[k:]))
        if yz is None:
            return f
        return _saturate(bb, f, a[2], out.element, yz_value)

    return [elementwise(b, ins, out, body, maps=maps, inline_constants=False)]
