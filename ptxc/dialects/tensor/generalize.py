"""``generalize(op)``: a named op (matmul, conv, pool, reduce) as the ``tensor.generic`` with the
same semantics, so that the loop lowering needs only generics and data movement.

    tensor.matmul(A: MxK, B: KxN, C: MxN)
      = generic bounds [M, N, K], iterator_types [parallel, parallel, reduction],
        maps A (d0, d2), B (d2, d1), C (d0, d1), body c + a * b

A convolution iterates ``(n, m, o_1..o_s, c, k_1..k_s)`` and reads ``X`` at
``(n, c, o_i * stride_i + k_i * dilation_i)``; with ``group > 1`` the channel dims split into
``(g, m_g)`` and ``(c_g)`` so that ``m = g * M_g + m_g`` and ``c = g * C_g + c_g`` stay affine.
Channels-last (``layout = "NHWC"``): a conv iterates ``(n, o_1..o_s, m, k_1..k_s, c)``, a pool
``(n, o_1..o_s, c, k_1..k_s)`` (see :func:`_conv_last`).
Where the out is f32 and the ins f16, the body casts the ins to f32 before combining, as the
named op's reference does (but accumulates step by step, so f16 results may differ from the
named op's in the last bit).
"""

from __future__ import annotations

from ...errors import CompileError
from ...ir.core import Operation
from .generic import build_generic
from .maps import identity_map, unit_row

NAMED_OPS = ("tensor.matmul", "tensor.conv", "tensor.pool", "tensor.reduce")

_COMBINE = {"sum": "arith.add", "prod": "arith.mul", "max": "arith.max", "min": "arith.min"}


def _widen(b, v, t):
    return v if v.type == t else b.create("arith.cast", [v], {"to": t}).result


def _combine_body(kind: str, product: bool = False, tf32: bool = False):
    """Body ``out = combine(out, x)`` (or ``out + a * b`` for products; with ``tf32`` each
    factor is first rounded by ``arith.round_tf32``)."""
    def body(b, args):
        out = args[-1]
        ins = [_widen(b, a, out.type) for a in args[:-1]]
        if tf32:
            ins = [b.create("arith.round_tf32", [a]).result for a in ins]
        if product:
            v = b.create("arith.mul", ins).result
        else:
            (v,) = ins
        name = _COMBINE[kind]
        if out.type.name == "i1":  # max and min of booleans are or and and
            name = {"arith.max": "arith.or", "arith.min": "arith.and"}.get(name, name)
        return [b.create(name, [out, v]).result]
    return body


def _matmul(op):
    a, bm, c = op.operands
    ra, rb, rc = a.type.rank, bm.type.rank, c.type.rank
    n = rc + 1
    nb = rc - 2

    def batch_rows(t, r):
        rows = []
        for j in range(r - 2):
            dim = nb - (r - 2) + j
            if t.shape[j] == 1 and c.type.shape[dim] != 1:
                rows.append(unit_row(n, None))
            else:
                rows.append(unit_row(n, dim))
        return rows

    ma = [unit_row(n, nb), unit_row(n, rc)]
    mb = [unit_row(n, rc), unit_row(n, nb + 1)]
    if op.attr("transpose_a"):
        ma.reverse()
    if op.attr("transpose_b"):
        mb.reverse()
    ma = tuple(batch_rows(a.type, ra) + ma)
    mb = tuple(batch_rows(bm.type, rb) + mb)
    k = a.type.shape[-2] if op.attr("transpose_a") else a.type.shape[-1]
    mc = tuple(unit_row(n, i) for i in range(rc))
    return build_generic([a, bm], [c], c.type.shape + (k,), [ma, mb, mc],
                         ["parallel"] * rc + ["reduction"],
                         _combine_body("sum", True, bool(op.attr("tf32"))), loc=op.loc)


def _conv(op):
    if op.attr("layout") == "NHWC":
        return _conv_last(op)
    x, w, y = op.operands
    s = x.type.rank - 2
    strides, dilations, g = op.attr("strides"), op.attr("dilations"), op.attr("group")
    N, C = x.type.shape[:2]
    M, kernel = w.type.shape[0], w.type.shape[2:]
    out = y.type.shape[2:]
    Cg, Mg = C // g, M // g
    if g == 1:
        bounds = (N, M, *out, C, *kernel)
        n = len(bounds)
        o, c, k = 2, 2 + s, 3 + s  # first dims of the out spatial, channel, kernel loops
        m_row, ch_row, wc_row = unit_row(n, 1), unit_row(n, c), unit_row(n, c)
        iters = ["parallel"] * (2 + s) + ["reduction"] * (1 + s)
    else:
        bounds = (N, g, Mg, *out, Cg, *kernel)
        n = len(bounds)
        o, c, k = 3, 3 + s, 4 + s

        def two(i, ci, j):
            row = [0] * (n + 1)
            row[i], row[j] = ci, 1
            return tuple(row)

        m_row, ch_row, wc_row = two(1, Mg, 2), two(1, Cg, c), unit_row(n, c)
        iters = ["parallel"] * (3 + s) + ["reduction"] * (1 + s)
    sp_rows = []
    for i in range(s):
        row = [0] * (n + 1)
        row[o + i], row[k + i] = strides[i], dilations[i]
        sp_rows.append(tuple(row))
    mx = (unit_row(n, 0), ch_row, *sp_rows)
    mw = (m_row, wc_row, *[unit_row(n, k + i) for i in range(s)])
    my = (unit_row(n, 0), m_row, *[unit_row(n, o + i) for i in range(s)])
    return build_generic([x, w], [y], bounds, [mx, mw, my], iters,
                         _combine_body("sum", True, bool(op.attr("tf32"))), loc=op.loc)


def _two(n, i, ci, j):
    """The map row ``ci * d_i + d_j`` over ``n`` loop dims."""
    row = [0] * (n + 1)
    row[i], row[j] = ci, 1
    return tuple(row)


def _conv_last(op):
    """A channels-last conv: loops ``(n, o_1..o_s, m, k_1..k_s, c)`` (``(n, o.., g, m_g, k..,
    c_g)`` with groups): the out pixel's channel innermost among the parallel dims, the input
    channel innermost among the reductions, so both operands' reads run along their last,
    contiguous dim (implicit GEMM: M = N*P*Q, N = M, K = R*S*C)."""
    x, w, y = op.operands
    s = x.type.rank - 2
    strides, dilations, g = op.attr("strides"), op.attr("dilations"), op.attr("group")
    C, M, kernel = x.type.shape[-1], w.type.shape[0], w.type.shape[1:-1]
    out = y.type.shape[1:-1]
    Cg, Mg = C // g, M // g
    gd = 0 if g == 1 else 1  # the extra group loop
    bounds = (x.type.shape[0], *out) + ((g,) if gd else ()) + (Mg, *kernel, Cg)
    n = len(bounds)
    m, k, c = 1 + s + gd, 2 + s + gd, 2 + 2 * s + gd
    if gd:
        m_row, ch_row = _two(n, 1 + s, Mg, m), _two(n, 1 + s, Cg, c)
    else:
        m_row, ch_row = unit_row(n, m), unit_row(n, c)
    sp_rows = []
    for i in range(s):
        row = [0] * (n + 1)
        row[1 + i], row[k + i] = strides[i], dilations[i]
        sp_rows.append(tuple(row))
    mx = (unit_row(n, 0), *sp_rows, ch_row)
    mw = (m_row, *[unit_row(n, k + i) for i in range(s)], unit_row(n, c))
    my = (unit_row(n, 0), *[unit_row(n, 1 + i) for i in range(s)], m_row)
    iters = ["parallel"] * (k) + ["reduction"] * (1 + s)
    return build_generic([x, w], [y], bounds, [mx, mw, my], iters,
                         _combine_body("sum", True, bool(op.attr("tf32"))), loc=op.loc)


def _pool(op):
    x, y = op.operands
    if op.attr("layout") == "NHWC":  # loops (n, o_1..o_s, c, k_1..k_s)
        s = x.type.rank - 2
        kernel, strides, dilations = (op.attr(a) for a in ("kernel_shape", "strides",
                                                              "dilations"))
        bounds = y.type.shape + tuple(kernel)
        n = len(bounds)
        sp = []
        for i in range(s):
            row = [0] * (n + 1)
            row[1 + i], row[2 + s + i] = strides[i], dilations[i]
            sp.append(tuple(row))
        mx = (unit_row(n, 0), *sp, unit_row(n, 1 + s))
        my = tuple(unit_row(n, i) for i in range(2 + s))
        return build_generic([x], [y], bounds, [mx, my],
                             ["parallel"] * (2 + s) + ["reduction"] * s,
                             _combine_body(op.attr("kind")), loc=op.loc,
                             ordered=op.attr("kind") == "sum")
    s = x.type.rank - 2
    kernel, strides, dilations = (op.attr(a) for a in ("kernel_shape", "strides", "dilations"))
    bounds = y.type.shape + tuple(kernel)
    n = len(bounds)
    sp = []
    for i in range(s):
        row = [0] * (n + 1)
        row[2 + i], row[2 + s + i] = strides[i], dilations[i]
        sp.append(tuple(row))
    mx = (unit_row(n, 0), unit_row(n, 1), *sp)
    my = tuple(unit_row(n, i) for i in range(2 + s))
    # a window's sum keeps its row-major order (tensor.pool's semantics, onnxruntime's order)
    return build_generic([x], [y], bounds, [mx, my], ["parallel"] * (2 + s) + ["reduction"] * s,
                         _combine_body(op.attr("kind")), loc=op.loc,
                         ordered=op.attr("kind") == "sum")


def _reduce(op):
    x, y = op.operands
    axes = set(op.attr("axes"))
    n = x.type.rank
    my = tuple(unit_row(n, None if i in axes else i) for i in range(n))
    iters = ["reduction" if i in axes else "parallel" for i in range(n)]
    return build_generic([x], [y], x.type.shape, [identity_map(n), my], iters,
                         _combine_body(op.attr("kind")), loc=op.loc)


_GENERALIZE = {"tensor.matmul": _matmul, "tensor.conv": _conv, "tensor.pool": _pool,
               "tensor.reduce": _reduce}


def generalize(op: Operation) -> Operation:
    """The ``tensor.generic`` equivalent to the named op ``op`` (same operands, loc and result
    name; not inserted anywhere)."""
    fn = _GENERALIZE.get(op.name)
    if fn is None:
        raise CompileError(f"{op.where}: not a named op ({', '.join(NAMED_OPS)})")
    new = fn(op)
    new.results[0].name_hint = op.results[0].name_hint
    return new
