"""``graph.grid_sample`` and ``graph.roi_align`` -> one reduction generic over the output plus
the taps, whose body computes the source coordinates from the data (the grid, the boxes) and
reads ``X`` with ``tensor.extract`` at indices it has made safe (every index is computed as a
float, tested against the dim with comparisons that a NaN fails, and replaced by 0 when out of
range before its cast, so no input can make compiled code read outside ``X``), then one
elementwise generic for the result (the cast, RoiAlign's division by the sample count).

* grid_sample: loop dims ``(N, C, O1..Or)`` plus ``r`` tap dims of 2 (linear), 4 (cubic) or none
  (nearest). The grid is read through ``r`` maps, one per component (a constant last row). Per
  tap: the coordinate as the reference (denormalize, round for nearest, clamp or reflect when
  outside the border), the tap index ``floor(x) + k`` (``- 1`` for cubic), its weight
  (``1 - f``/``f``, or Keys' kernel at ``|k - 1 - f|``), the index padded (zeros: the tap reads
  0; border: clamped; reflection: reflected in f64 and truncated). The taps' weights multiply.
  Cubic with border padding clamps only the taps, as the graph op says.
* roi_align: loop dims ``(R, C, oh, ow)`` plus ``(gh, gw, 2, 2)``: the samples of a bin and the
  bilinear taps of a sample. A box's four coordinates and its batch index are read through
  constant-row maps; the batch index goes through ``arith.check_index`` (IndexOutOfRangeError at
  run time). ``avg`` sums ``w * x`` and divides by ``gh * gw``; ``max`` takes ``max(w * x)``,
  an out-of-range sample counting as 0. With ``sampling_ratio = 0`` the sample counts are per
  box: computed at compile time from constant rois into two i64 tables (the loop runs to the
  largest; the samples past a box's own count are masked). Non-constant rois with
  ``sampling_ratio = 0`` are refused (Unsupported -> CompileError naming the node): the loop
  bounds would depend on the data.

    %y = "graph.grid_sample"(%x, %g) {mode = "linear", ...} : (tensor<1x1x4x4xf32>,
           tensor<1x2x2x2xf32>) -> tensor<1x1x2x2xf32>
  becomes
    %s = "tensor.generic"(%g, %g, %acc) ({ ... coords, taps, tensor.extract(%x, ...) ... })
           {bounds = [1, 1, 2, 2, 2, 2], iterator_types = [4 x "parallel", 2 x "reduction"]}
"""

from __future__ import annotations

import numpy as np

from ...dialects.graph.sample import CUBIC_A, adaptive_grid, borders
from ...dialects.tensor.generic import build_generic
from ...dialects.tensor.maps import identity_map, unit_row
from ...ir.types import F32, F64, I64, INDEX
from .common import Unsupported, c, cast, const_array, elementwise, empty, fill, lowers, op_
from .shape import index_check_name


def _ct(*types):
    """The compute type: f64 when any operand is f64, else f32."""
    return F64 if any(t.element == F64 for t in types) else F32


def _dim(bb, d: int, t):
    return cast(bb, cast(bb, bb.create("tensor.index", [], {"dim": d}).result, I64), t)


def _cmp(bb, a, b, p):
    return op_(bb, "arith.cmp", a, b, predicate=p)


def _sel(bb, cond, a, b):
    return op_(bb, "arith.select", cond, a, b)


def _and(bb, *xs):
    out = xs[0]
    for x in xs[1:]:
        out = op_(bb, "arith.and", out, x)
    return out


def _floor(bb, x):
    return op_(bb, "math.floor", x)


def _trunc(bb, x, t):
    neg = _cmp(bb, x, c(bb, 0.0, t), "lt")
    return _sel(bb, neg, op_(bb, "math.ceil", x), _floor(bb, x))


def _clamp(bb, x, lo, hi, t):
    x = _sel(bb, _cmp(bb, x, c(bb, lo, t), "lt"), c(bb, lo, t), x)
    return _sel(bb, _cmp(bb, x, c(bb, hi, t), "gt"), c(bb, hi, t), x)


def _reflect(bb, x, lo: float, hi: float, t):
    """As the reference's reflection (in f64): by the nearer border until inside [lo, hi]."""
    x64 = cast(bb, x, F64)
    below = _cmp(bb, x64, c(bb, lo, F64), "lt")
    above = _cmp(bb, x64, c(bb, hi, F64), "gt")
    rng = hi - lo
    if rng == 0:
        return cast(bb, _sel(bb, op_(bb, "arith.or", below, above), c(bb, lo, F64), x64), t)
    dx = _sel(bb, below, op_(bb, "arith.sub", c(bb, lo, F64), x64),
              op_(bb, "arith.sub", x64, c(bb, hi, F64)))
    n = _floor(bb, op_(bb, "arith.div", dx, c(bb, rng, F64)))
    r = op_(bb, "arith.sub", dx, op_(bb, "arith.mul", n, c(bb, rng, F64)))
    half = _floor(bb, op_(bb, "arith.mul", n, c(bb, 0.5, F64)))
    even = _cmp(bb, op_(bb, "arith.sub", n, op_(bb, "arith.mul", half, c(bb, 2.0, F64))),
                c(bb, 0.0, F64), "eq")
    up = op_(bb, "arith.add", c(bb, lo, F64), r)
    down = op_(bb, "arith.sub", c(bb, hi, F64), r)
    y = _sel(bb, below, _sel(bb, even, up, down), _sel(bb, above, _sel(bb, even, down, up), x64))
    return cast(bb, y, t)


def _safe_index(bb, f, d: int, t):
    """An integer-valued float index: (index, in-range flag); out of range (or NaN) reads 0."""
    ok = _and(bb, _cmp(bb, f, c(bb, 0.0, t), "ge"), _cmp(bb, f, c(bb, d - 1.0, t), "le"))
    return cast(bb, cast(bb, _sel(bb, ok, f, c(bb, 0.0, t)), I64), INDEX), ok


def _cubic(bb, dist, t):
    """Keys' kernel (a = -0.75) at ``dist`` in [0, 2]."""
    a = CUBIC_A
    d = op_(bb, "math.abs", dist)

    def k(v):
        return c(bb, v, t)
    near = op_(bb, "arith.add", op_(bb, "arith.mul", op_(bb, "arith.mul", op_(
        bb, "arith.sub", op_(bb, "arith.mul", k(a + 2), d), k(a + 3)), d), d), k(1.0))
    far = op_(bb, "arith.sub", op_(bb, "arith.mul", op_(bb, "arith.add", op_(
        bb, "arith.mul", op_(bb, "arith.sub", op_(bb, "arith.mul", k(a), d), k(5 * a)), d),
        k(8 * a)), d), k(4 * a))
    return _sel(bb, _cmp(bb, d, k(1.0), "le"), near, far)


@lowers("graph.grid_sample")
def _grid_sample(op, b):
    x, grid = op.operands
    out = op.results[0].type
    dims = x.type.shape[2:]
    r = len(dims)
    mode, padding, align = op.attr("mode"), op.attr("padding_mode"), op.attr("align_corners")
    t = _ct(x.type, grid.type)
    taps = {"nearest": 0, "linear": 2, "cubic": 4}[mode]
    nt = r if taps else 0
    n = out.rank + nt
    maps = [tuple(unit_row(n, d) for d in [0] + list(range(2, 2 + r)))
            + (unit_row(n, None, offset=r - 1 - i),) for i in range(r)]

    def body(bb, args):
        comps, acc = args[:r], args[r]
        ids = [bb.create("tensor.index", [], {"dim": d}).result for d in range(2)]
        ok_all, weight = None, None
        for i, d in enumerate(dims):
            lo, hi = borders(d, align)
            g = cast(bb, comps[i], t)
            one = c(bb, 1.0, t)
            if align:
                v = op_(bb, "arith.mul", op_(bb, "arith.div", op_(bb, "arith.add", g, one),
                                              c(bb, 2.0, t)), c(bb, d - 1.0, t))
            else:
                v = op_(bb, "arith.div", op_(bb, "arith.sub", op_(
                    bb, "arith.mul", op_(bb, "arith.add", g, one), c(bb, float(d), t)), one),
                    c(bb, 2.0, t))
            if mode == "nearest":
                v = op_(bb, "math.roundeven", v)
            if padding == "reflection" or (padding == "border" and mode != "cubic"):
                outside = op_(bb, "arith.or", _cmp(bb, v, c(bb, lo, t), "lt"),
                              _cmp(bb, v, c(bb, hi, t), "gt"))
                moved = (_clamp(bb, v, 0.0, d - 1.0, t) if padding == "border"
                         else _reflect(bb, v, lo, hi, t))
                v = _sel(bb, outside, moved, v)
            if mode == "nearest":
                f, w = _trunc(bb, v, t), None
            else:
                base = _floor(bb, v)
                frac = op_(bb, "arith.sub", v, base)
                k = _dim(bb, out.rank + i, t)
                if mode == "linear":
                    f = op_(bb, "arith.add", base, k)
                    w = _sel(bb, _cmp(bb, k, c(bb, 0.0, t), "eq"),
                             op_(bb, "arith.sub", one, frac), frac)
                else:
                    km1 = op_(bb, "arith.sub", k, one)
                    f = op_(bb, "arith.add", base, km1)
                    w = _cubic(bb, op_(bb, "arith.sub", frac, km1), t)
            if padding == "border":
                f = _clamp(bb, f, 0.0, d - 1.0, t)
            elif padding == "reflection":
                f = _trunc(bb, _reflect(bb, f, lo, hi, t), t)
            idx, ok = _safe_index(bb, f, d, t)
            ids.append(idx)
            ok_all = ok if ok_all is None else op_(bb, "arith.and", ok_all, ok)
            if w is not None:
                weight = w if weight is None else op_(bb, "arith.mul", weight, w)
        v = cast(bb, bb.create("tensor.extract", [x] + ids).result, t)
        if padding == "zeros":
            v = _sel(bb, ok_all, v, c(bb, 0.0, t))
        if weight is None:
            return [v]
        return [op_(bb, "arith.add", acc, op_(bb, "arith.mul", weight, v))]

    acc_t = out.with_element(t)
    bounds = tuple(out.shape) + (taps,) * nt
    iters = ["parallel"] * out.rank + ["reduction"] * nt
    out_map = tuple(unit_row(n, d) for d in range(out.rank))
    s = build_generic([grid] * r, [fill(b, acc_t, 0.0) if nt else empty(b, acc_t)], bounds,
                      maps + [out_map], iters, body, b=b).result
    if out.element == t:
        return [s]
    return [elementwise(b, [s], out, lambda bb, v: cast(bb, v[0], out.element))]


@lowers("graph.roi_align")
def _roi_align(op, b):
    x, rois, bi = op.operands
    out = op.results[0].type
    batch, _, h, w = x.type.shape
    oh, ow = op.attr("output_height"), op.attr("output_width")
    ratio, ss, half = op.attr("sampling_ratio"), op.attr("spatial_scale"), op.attr("half_pixel")
    is_max = op.attr("mode") == "max"
    t = F64 if rois.type.element == F64 else F32    # coordinates, as the reference
    acc = F64 if x.type.element == F64 else F32     # the sum
    if ratio > 0:
        gh_tbl = gw_tbl = None
        mgh = mgw = ratio
    else:
        arr = const_array(rois)
        if arr is None:
            raise Unsupported(
                "sampling_ratio = 0 makes the samples per bin a function of the roi values; "
                "ptxc compiles them only when the rois are known at compile time (a constant, "
                "or bound with constant_inputs=), or give the node a sampling_ratio > 0")
        gh_tbl, gw_tbl = adaptive_grid(arr, t.np_dtype.type, ss, half, oh, ow)
        mgh, mgw = max(int(gh_tbl.max(initial=0)), 1), max(int(gw_tbl.max(initial=0)), 1)
    n = 8
    roi_maps = [(unit_row(n, 0), unit_row(n, None, offset=j)) for j in range(4)]
    ins, maps = [rois] * 4 + [bi], roi_maps + [(unit_row(n, 0),)]
    if gh_tbl is not None:
        ins += [_table(b, gh_tbl), _table(b, gw_tbl)]
        maps += [(unit_row(n, 0),)] * 2
    check = index_check_name("RoiAlign", op, 0, batch)

    def body(bb, args):
        x1, y1, x2, y2 = (cast(bb, a, t) for a in args[:4])
        bidx = cast(bb, op_(bb, "arith.check_index", cast(bb, args[4], I64), size=batch,
                            check=check), INDEX)
        k = lambda v: c(bb, float(v), t)  # noqa: E731
        if gh_tbl is not None:
            gh_i, gw_i = args[5], args[6]
            gh, gw = cast(bb, gh_i, t), cast(bb, gw_i, t)
        else:
            gh = gw = k(ratio)
        acc_in = args[-1]
        off = k(0.5 if half else 0.0)

        def start(v):
            return op_(bb, "arith.sub", op_(bb, "arith.mul", v, k(ss)), off)
        sw, sh, ew, eh = start(x1), start(y1), start(x2), start(y2)
        rw, rh = op_(bb, "arith.sub", ew, sw), op_(bb, "arith.sub", eh, sh)
        if not half:
            rw = _sel(bb, _cmp(bb, rw, k(1), "lt"), k(1), rw)
            rh = _sel(bb, _cmp(bb, rh, k(1), "lt"), k(1), rh)
        coords = []
        for st, rsize, bins, g, pd, sd in ((sh, rh, oh, gh, 2, 4), (sw, rw, ow, gw, 3, 5)):
            bsz = op_(bb, "arith.div", rsize, k(bins))
            p, s = _dim(bb, pd, t), _dim(bb, sd, t)
            v = op_(bb, "arith.add", op_(bb, "arith.add", st, op_(bb, "arith.mul", p, bsz)),
                    op_(bb, "arith.div", op_(bb, "arith.mul", op_(bb, "arith.add", s, k(0.5)),
                                                 bsz), g))
            coords.append(v)
        yy, xx = coords
        inside = _and(bb, _cmp(bb, yy, k(-1), "ge"), _cmp(bb, yy, k(h), "le"),
                      _cmp(bb, xx, k(-1), "ge"), _cmp(bb, xx, k(w), "le"))
        ids, weight = [bidx, bb.create("tensor.index", [], {"dim": 1}).result], None
        for v, d, td in ((yy, h, 6), (xx, w, 7)):
            v = _sel(bb, inside, v, k(0))
            v = _sel(bb, _cmp(bb, v, k(0), "lt"), k(0), v)
            low = _floor(bb, v)
            edge = _cmp(bb, low, k(d - 1), "ge")
            low = _sel(bb, edge, k(d - 1), low)
            v = _sel(bb, edge, low, v)
            high = _sel(bb, edge, low, op_(bb, "arith.add", low, k(1)))
            frac = op_(bb, "arith.sub", v, low)
            first = _cmp(bb, _dim(bb, td, t), k(0), "eq")
            idx, _ = _safe_index(bb, _sel(bb, first, low, high), d, t)
            ids.append(idx)
            wt = _sel(bb, first, op_(bb, "arith.sub", k(1), frac), frac)
            weight = wt if weight is None else op_(bb, "arith.mul", weight, wt)
        val = cast(bb, bb.create("tensor.extract", [x] + ids).result, acc)
        contrib = _sel(bb, inside, op_(bb, "arith.mul", cast(bb, weight, acc), val),
                       c(bb, 0.0, acc))
        new = op_(bb, "arith.max" if is_max else "arith.add", acc_in, contrib)
        if gh_tbl is not None:
            active = _and(bb, _cmp(bb, _dim(bb, 4, I64), gh_i, "lt"),
                          _cmp(bb, _dim(bb, 5, I64), gw_i, "lt"))
            new = _sel(bb, active, new, acc_in)
        return [new]

    acc_t = out.with_element(acc)
    init = fill(b, acc_t, -np.inf if is_max else 0.0)
    s = build_generic(ins, [init], tuple(out.shape) + (mgh, mgw, 2, 2),
                      maps + [tuple(unit_row(n, d) for d in range(4))], ["parallel"] * 4 + ["reduction"] * 4,
                      body, b=b).result
    # the result: avg divides by the sample count; a box without samples (adaptive) gives 0
    if gh_tbl is None:
        count = np.array(float(ratio * ratio))
    else:
        count = (gh_tbl * gw_tbl).astype(np.float64)
    cnt = _table(b, count.astype(acc.np_dtype), acc)
    cmap = (unit_row(4, 0),) if count.ndim else ()

    def final(bb, v):
        y, n_ = v
        if is_max:
            y = _sel(bb, _cmp(bb, n_, c(bb, 0.0, acc), "eq"), c(bb, 0.0, acc), y)
        else:
            y = op_(bb, "arith.div", y, _sel(bb, _cmp(bb, n_, c(bb, 0.0, acc), "eq"),
                                             c(bb, 1.0, acc), n_))
        return cast(bb, y, out.element)

    return [elementwise(b, [s, cnt], out, final, maps=[identity_map(4), cmap])]


def _table(b, array, el=None):
    from .common import constant
    return constant(b, np.asarray(array), el or I64)
