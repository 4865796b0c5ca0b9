"""The Attention converter (opsets 23, 24: ``nonpad_kv_seqlen``; 25: sliding windows), composed
from graph ops step for step as ONNX's reference computes it:

    Q, K, V -> [B, H, S, D] (3-D inputs split by q_num_heads / kv_num_heads)
    present_key/value = concat(past, K/V) along the sequence
    bias = mask (bool: 0 / -inf; shorter than the kv length: padded with -inf)
           + a compile-time 0 / -inf array for is_causal, the window, nonpad_kv_seqlen
    K, V heads repeated for grouped-query attention
    scores = (Q * sqrt(scale)) @ (K * sqrt(scale))^T, softcapped (c * tanh(x / c))
    P = softmax(scores + bias) (in softmax_precision), 0 on rows the bias masks entirely
    Y = P @ V, back to 3-D for 3-D inputs; qk_matmul_output per qk_matmul_output_mode

The causal, window and padding terms depend only on shapes (``nonpad_kv_seqlen`` is a
compile-time input, like every input that decides which positions exist), so they are constants.
"""

from __future__ import annotations

import numpy as np

from ...ir.types import I1
from .context import ConvertContext, converter, scalar_type_of


def _to_4d(ctx, v, heads):
    t = v.type
    if t.rank == 4:
        return v
    if t.rank != 3 or not heads or t.shape[2] % heads:
        raise ctx.error(f"3-D inputs need q_num_heads/kv_num_heads dividing the hidden size; "
                        f"got {t} with {heads} heads")
    b, s, h = t.shape
    v = ctx.emit1("graph.reshape", [v], {"shape": [b, s, heads, h // heads]})
    return ctx.emit1("graph.transpose", [v], {"perm": [0, 2, 1, 3]})


def _static_bias(ctx, q_len, kv_len, past_len, nonpad, causal, left, right):
    """The 0 / -inf compile-time part of the bias, [q, kv] or [B, 1, q, kv]; None if none."""
    i = np.arange(q_len).reshape(-1, 1)
    j = np.arange(kv_len).reshape(1, -1)
    if nonpad is not None and past_len == 0:
        off = (nonpad.reshape(-1) - q_len).reshape(-1, 1, 1, 1)
    else:
        off = past_len
    allowed = np.ones((q_len, kv_len), bool)
    used = False
    if causal:
        allowed = allowed & (j <= i + off)
        used = True
    if left >= 0 or right >= 0:
        diff = (i + off) - j
        if left >= 0:
            allowed = allowed & (diff <= left)
        if right >= 0:
            allowed = allowed & (-diff <= right)
        used = True
    if nonpad is not None:
        pad_ok = (np.arange(kv_len) < nonpad.reshape(-1, 1)).reshape(-1, 1, 1, kv_len)
        allowed = allowed & pad_ok
        used = True
    return np.where(allowed, 0.0, -np.inf) if used else None


@converter("Attention")
def attention(ctx: ConvertContext):
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    el = q.type.element
    rank = q.type.rank
    qh, kvh = int(ctx.attr("q_num_heads", 0)), int(ctx.attr("kv_num_heads", 0))
    q, k, v = _to_4d(ctx, q, qh), _to_4d(ctx, k, kvh), _to_4d(ctx, v, kvh)
    past_k, past_v = ctx.input(4), ctx.input(5)
    if (past_k is None) != (past_v is None):
        raise ctx.error("past_key and past_value must be given together")
    past_len = 0
    if past_k is not None:
        past_len = past_k.type.shape[2]
        k = ctx.emit1("graph.concat", [past_k, k], {"axis": 2})
        v = ctx.emit1("graph.concat", [past_v, v], {"axis": 2})
    present_k, present_v = k, v
    if any(ctx.node.output[1:3]) and past_k is None:  # a copy: the outputs get their own names
        present_k = ctx.emit1("graph.identity", [k])
        present_v = ctx.emit1("graph.identity", [v])
    b, hq, q_len, d = q.type.shape
    hk, kv_len = k.type.shape[1], k.type.shape[2]
    nonpad = ctx.const(6, "input nonpad_kv_seqlen") if ctx.input(6) is not None else None
    if nonpad is not None and past_k is not None:
        raise ctx.error("nonpad_kv_seqlen cannot be combined with past_key/past_value")
    static = _static_bias(ctx, q_len, kv_len, past_len, nonpad, bool(ctx.attr("is_causal", 0)),
                          int(ctx.attr("left_window_size", -1)),
                          int(ctx.attr("right_window_size", -1)))
    cdt = el.np_dtype

    bias = ctx.input(3)
    if bias is not None:
        mt = bias.type
        padw = kv_len - mt.shape[-1]
        if padw > 0:
            fillv = np.zeros(mt.shape[:-1] + (padw,), bool if mt.element == I1 else cdt)
            if mt.element != I1:
                fillv[...] = -np.inf
            bias = ctx.emit1("graph.concat", [bias, ctx.constant(fillv)], {"axis": mt.rank - 1})
        if mt.element == I1:
            bias = ctx.emit1("graph.where", [bias, ctx.constant(np.array(0, cdt)),
                                             ctx.constant(np.array(-np.inf, cdt))])
        if static is not None:
            bias = ctx.emit1("graph.add", [bias, ctx.constant(static.astype(cdt))])
    elif static is not None:
        bias = ctx.constant(static.astype(cdt))

    if hq != hk:
        if hq % hk:
            raise ctx.error(f"{hq} query heads are not a multiple of {hk} key/value heads")
        rep = hq // hk

        def repeat(x):
            t = x.type
            x = ctx.emit1("graph.unsqueeze", [x], {"axes": [2]})
            x = ctx.emit1("graph.expand", [x], {"shape": [t.shape[0], hk, rep] +
                                                list(t.shape[2:])})
            return ctx.emit1("graph.reshape", [x], {"shape": [t.shape[0], hq] +
                                                    list(t.shape[2:])})
        k, v = repeat(k), repeat(v)

    scale = ctx.attr("scale")
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)
    s = ctx.constant(np.array(np.sqrt(scale), cdt))
    kt = ctx.emit1("graph.transpose", [k], {"perm": [0, 1, 3, 2]})
    scores = ctx.emit1("graph.matmul", [ctx.emit1("graph.mul", [q, s]),
                                        ctx.emit1("graph.mul", [kt, s])])
    softcap = ctx.attr("softcap")
    if softcap is not None and softcap > 0:
        c = ctx.constant(np.array(softcap, cdt))
        scores = ctx.emit1("graph.mul", [ctx.emit1("graph.tanh", [
            ctx.emit1("graph.div", [scores, c])]), c])
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    qk_out = scores
    with_bias = ctx.emit1("graph.add", [scores, bias]) if bias is not None else scores
    if mode == 2:
        qk_out = with_bias
    sm_in = with_bias
    prec = ctx.attr("softmax_precision")
    if prec is not None:
        pt = scalar_type_of(int(prec), "softmax_precision")
        if pt != el:
            sm_in = ctx.emit1("graph.cast", [sm_in], {"to": pt})
    p = ctx.emit1("graph.softmax", [sm_in], {"axis": 3})
    if bias is not None:  # rows the bias masks entirely give 0 (softmax would give NaN)
        mx = ctx.emit1("graph.reduce_max", [bias], {"axes": [bias.type.rank - 1],
                                                    "keepdims": 1})
        masked = ctx.emit1("graph.equal", [mx, ctx.constant(np.array(-np.inf, cdt))])
        pe = p.type.element.np_dtype
        p = ctx.emit1("graph.where", [masked, ctx.constant(np.array(0, pe)), p])
    if p.type.element != el:
        p = ctx.emit1("graph.cast", [p], {"to": el})
    if mode == 3:
        qk_out = p
    y = ctx.emit1("graph.matmul", [p, v])
    if rank == 3:
        y = ctx.emit1("graph.transpose", [y], {"perm": [0, 2, 1, 3]})
        y = ctx.emit1("graph.reshape", [y], {"shape": [b, q_len, hq * y.type.shape[3]]})
    return [y, present_k, present_v, qk_out]
