"""Converters that compose ONNX ops from graph ops, as the ONNX function bodies of these ops do:
GroupNormalization (18: scale/bias per group; 21: per channel), RMSNormalization (23) and
RotaryEmbedding (23). Statistics of f16 inputs are computed in f32 (``stash_type``); the graph
optimizer and the lowerings see ordinary reductions and elementwise ops, so every target runs
them.

    GroupNormalization(x: N x C x H x W, num_groups = G)
      = reshape(x, [N, G, C/G*H*W]) -> (x - mean) / sqrt(var + eps) -> reshape back
        -> * scale + bias (per channel; per group before opset 21)
"""

from __future__ import annotations

import numpy as np

from ...ir.types import F16, F32
from .context import ConvertContext, converter


def _const(ctx, value, el):
    return ctx.constant(np.array(value, el.np_dtype))


def _normalize(ctx, x, axes, eps, el, center: bool):
    """``(x - mean) / sqrt(var + eps)`` (center) or ``x / sqrt(mean(x*x) + eps)`` over axes."""
    if center:
        mean = ctx.emit1("graph.reduce_mean", [x], {"axes": axes, "keepdims": 1})
        x = ctx.emit1("graph.sub", [x, mean])
    ms = ctx.emit1("graph.reduce_mean", [ctx.emit1("graph.mul", [x, x])],
                   {"axes": axes, "keepdims": 1})
    den = ctx.emit1("graph.sqrt", [ctx.emit1("graph.add", [ms, _const(ctx, eps, el)])])
    return ctx.emit1("graph.div", [x, den])


def _stash(ctx, x):
    el = x.type.element
    if el == F16:
        return ctx.emit1("graph.cast", [x], {"to": F32}), F32
    return x, el


@converter("GroupNormalization")
def group_normalization(ctx: ConvertContext):
    t = ctx.type(0)
    if t.rank < 2:
        raise ctx.error(f"X must have rank >= 2 (N, C, ...), got {t}")
    g = ctx.attr("num_groups")
    n, c = t.shape[0], t.shape[1]
    if g is None or g <= 0 or c % g:
        raise ctx.error(f"num_groups {g} must divide the {c} channels")
    per_channel = ctx.opset >= 21
    want = (c,) if per_channel else (g,)
    for i, name in ((1, "scale"), (2, "bias")):
        if ctx.type(i).shape != want:
            raise ctx.error(f"{name} must have shape {list(want)}, got {ctx.type(i)}")
    eps = float(ctx.attr("epsilon", 1e-5))
    x, el = _stash(ctx, ctx.input(0))
    xg = ctx.emit1("graph.reshape", [x], {"shape": [n, g, t.size // max(n * g, 1)]})
    y = _normalize(ctx, xg, (2,), eps, el, True)
    if el != t.element:
        y = ctx.emit1("graph.cast", [y], {"to": t.element})
    scale, bias = ctx.input(1), ctx.input(2)
    if not per_channel:
        s = ctx.emit1("graph.reshape", [scale], {"shape": [g, 1]})
        b = ctx.emit1("graph.reshape", [bias], {"shape": [g, 1]})
        y = ctx.emit1("graph.add", [ctx.emit1("graph.mul", [y, s]), b])
        return [ctx.emit1("graph.reshape", [y], {"shape": list(t.shape)})]
    y = ctx.emit1("graph.reshape", [y], {"shape": list(t.shape)})
    shape = [c] + [1] * (t.rank - 2)
    s = ctx.emit1("graph.reshape", [scale], {"shape": shape})
    b = ctx.emit1("graph.reshape", [bias], {"shape": shape})
    return [ctx.emit1("graph.add", [ctx.emit1("graph.mul", [y, s]), b])]


@converter("RMSNormalization")
def rms_normalization(ctx: ConvertContext):
    t = ctx.type(0)
    axis = int(ctx.attr("axis", -1))
    if not -t.rank <= axis < t.rank:
        raise ctx.error(f"axis {axis} out of range for rank {t.rank}")
    axis %= t.rank
    eps = float(ctx.attr("epsilon", 1e-5))
    x, el = _stash(ctx, ctx.input(0))
    y = _normalize(ctx, x, tuple(range(axis, t.rank)), eps, el, False)
    if el != t.element:
        y = ctx.emit1("graph.cast", [y], {"to": t.element})
    return [ctx.emit1("graph.mul", [y, ctx.input(1)])]


def _slice_last(ctx, v, start, end, step=1):
    t = v.type
    starts = [0] * (t.rank - 1) + [start]
    ends = list(t.shape[:-1]) + [end]
    return ctx.emit1("graph.slice", [v], {"starts": starts, "ends": ends,
                                          "steps": [1] * (t.rank - 1) + [step]})


@converter("RotaryEmbedding")
def rotary_embedding(ctx: ConvertContext):
    """X is [B, H, S, D] or [B, S, H*D] (``num_heads``); the caches are [S_max, R/2] indexed by
    ``position_ids`` [B, S], or [B, S, R/2] without them. The first R = rotary_embedding_dim
    (default D) features rotate: halves (x1, x2) or, ``interleaved``, even/odd features:
    ``(x1 cos - x2 sin, x1 sin + x2 cos)``."""
    t = ctx.type(0)
    x = ctx.input(0)
    if t.rank == 4:
        bsz, heads, seq, d = t.shape
        x = ctx.emit1("graph.transpose", [x], {"perm": [0, 2, 1, 3]})
    elif t.rank == 3:
        heads = int(ctx.attr("num_heads", 0))
        bsz, seq, hidden = t.shape
        if heads <= 0 or hidden % heads:
            raise ctx.error(f"a 3-D input needs num_heads dividing {hidden}, got {heads}")
        d = hidden // heads
        x = ctx.emit1("graph.reshape", [x], {"shape": [bsz, seq, heads, d]})
    else:
        raise ctx.error(f"input must have rank 3 or 4, got {t}")
    r = int(ctx.attr("rotary_embedding_dim", 0)) or d
    if r % 2 or r > d:
        raise ctx.error(f"rotary_embedding_dim {r} must be even and at most the head size {d}")
    cos, sin = ctx.input(1), ctx.input(2)
    if ctx.input(3) is not None:
        cos = ctx.emit1("graph.gather", [cos, ctx.input(3)], {"axis": 0})
        sin = ctx.emit1("graph.gather", [sin, ctx.input(3)], {"axis": 0})
    if cos.type.shape[-1] != r // 2 or sin.type.shape[-1] != r // 2:
        raise ctx.error(f"the caches' last dim must be rotary_embedding_dim / 2 = {r // 2}")
    cos = ctx.emit1("graph.unsqueeze", [cos], {"axes": [2]})
    sin = ctx.emit1("graph.unsqueeze", [sin], {"axes": [2]})
    if ctx.attr("interleaved", 0):
        x1, x2 = _slice_last(ctx, x, 0, r, 2), _slice_last(ctx, x, 1, r, 2)
    else:
        x1, x2 = _slice_last(ctx, x, 0, r // 2), _slice_last(ctx, x, r // 2, r)
    mul, sub, add = (lambda a, b, n=n: ctx.emit1(n, [a, b])
                     for n in ("graph.mul", "graph.sub", "graph.add"))
    real = sub(mul(cos, x1), mul(sin, x2))
    imag = add(mul(sin, x1), mul(cos, x2))
    if ctx.attr("interleaved", 0):
        real = ctx.emit1("graph.unsqueeze", [real], {"axes": [4]})
        imag = ctx.emit1("graph.unsqueeze", [imag], {"axes": [4]})
        rot = ctx.emit1("graph.concat", [real, imag], {"axis": 4})
        rot = ctx.emit1("graph.reshape", [rot], {"shape": [bsz, seq, heads, r]})
    else:
        rot = ctx.emit1("graph.concat", [real, imag], {"axis": 3})
    if r < d:
        rot = ctx.emit1("graph.concat", [rot, _slice_last(ctx, x, r, d)], {"axis": 3})
    if t.rank == 4:
        return [ctx.emit1("graph.transpose", [rot], {"perm": [0, 2, 1, 3]})]
    return [ctx.emit1("graph.reshape", [rot], {"shape": list(t.shape)})]


@converter("Einsum")
def einsum(ctx: ConvertContext):
    """Einsum 12: the implicit form gets its output (the letters used once, sorted, after the
    ellipsis dims); ``...`` becomes upper-case letters for the broadcast dims."""
    xs = ctx.inputs()
    eq = str(ctx.attr("equation", "")).replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    subs = lhs.split(",")
    if len(subs) != len(xs) or any(x is None for x in xs):
        raise ctx.error(f"equation {eq!r} names {len(subs)} operands, the node has {len(xs)}")
    ell = max((x.type.rank - (len(s) - 3) for s, x in zip(subs, xs) if "..." in s), default=0)
    fill = "".join(chr(ord("A") + i) for i in range(ell))
    new = []
    for s, x in zip(subs, xs):
        if "..." in s:
            k = x.type.rank - (len(s) - 3)
            s = s.replace("...", fill[ell - k:])
        if len(s) != x.type.rank:
            raise ctx.error(f"subscript {s!r} does not fit input {x.type}")
        new.append(s)
    if not arrow:
        letters = "".join(new)
        out = fill + "".join(sorted(ch for ch in set(letters) if ch.islower()
                                    and letters.count(ch) == 1))
    else:
        out = out.replace("...", fill)
    return ctx.emit("graph.einsum", xs, {"equation": ",".join(new) + "->" + out})


@converter("LpPool")
def lp_pool(ctx: ConvertContext):
    """LpPool 2, 11, 18 (ceil_mode, dilations): ``(sum over the window of |x|^p)^(1/p)``,
    composed as AveragePool (count_include_pad: pads are 0) times the window size. With
    ``ceil_mode`` the windows past the padded input count fewer positions than the kernel's;
    the average pool then divides by the smaller count and the product is off there (refused)."""
    from .nn import _pool_attrs
    attrs = _pool_attrs(ctx)
    if attrs["ceil_mode"]:
        raise ctx.error("ceil_mode = 1 is not supported for LpPool")
    p = int(ctx.attr("p", 2))
    if p < 1:
        raise ctx.error(f"p must be >= 1, got {p}")
    x = ctx.input(0)
    el = x.type.element
    xp = ctx.emit1("graph.abs", [x]) if p == 1 else ctx.emit1("graph.mul", [x, x]) if p == 2 \
        else ctx.emit1("graph.pow", [ctx.emit1("graph.abs", [x]), _const(ctx, float(p), el)])
    attrs["count_include_pad"] = 1
    avg = ctx.emit1("graph.average_pool", [xp], attrs)
    s = ctx.emit1("graph.mul", [avg, _const(ctx, float(np.prod(attrs["kernel_shape"])), el)])
    if p == 1:
        return [s]
    if p == 2:
        return [ctx.emit1("graph.sqrt", [s])]
    return [ctx.emit1("graph.pow", [s, _const(ctx, 1.0 / p, el)])]


def _blocks(ctx):
    t = ctx.type(0)
    b = int(ctx.attr("blocksize", 0))
    if t.rank != 4 or b <= 0:
        raise ctx.error(f"needs a 4-D input and blocksize >= 1, got {t}, blocksize {b}")
    return t.shape, b


@converter("SpaceToDepth")
def space_to_depth(ctx: ConvertContext):
    """SpaceToDepth 1, 13, 28: ``[N, C, H, W] -> reshape [N, C, H/b, b, W/b, b] -> transpose
    -> [N, C*b*b, H/b, W/b]``, the transpose (0, 3, 5, 1, 2, 4) in mode DCR (the only mode
    before 28), (0, 1, 3, 5, 2, 4) in mode CRD."""
    (n, c, h, w), b = _blocks(ctx)
    if h % b or w % b:
        raise ctx.error(f"blocksize {b} must divide H = {h} and W = {w}")
    mode = str(ctx.attr("mode", "DCR"))
    if mode not in ("DCR", "CRD"):
        raise ctx.error(f"mode must be DCR or CRD, got {mode!r}")
    perm = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
    y = ctx.emit1("graph.reshape", [ctx.input(0)], {"shape": [n, c, h // b, b, w // b, b]})
    y = ctx.emit1("graph.transpose", [y], {"perm": perm})
    return [ctx.emit1("graph.reshape", [y], {"shape": [n, c * b * b, h // b, w // b]})]


@converter("DepthToSpace")
def depth_to_space(ctx: ConvertContext):
    """DepthToSpace 1, 11, 13: mode DCR ``reshape [N, b, b, C/b², H, W], transpose
    (0, 3, 4, 1, 5, 2)``; mode CRD ``reshape [N, C/b², b, b, H, W], transpose
    (0, 1, 4, 2, 5, 3)``; then ``[N, C/b², H*b, W*b]``."""
    (n, c, h, w), b = _blocks(ctx)
    if c % (b * b):
        raise ctx.error(f"blocksize² = {b * b} must divide the {c} channels")
    mode = str(ctx.attr("mode", "DCR"))
    if mode == "DCR":
        shape, perm = [n, b, b, c // (b * b), h, w], [0, 3, 4, 1, 5, 2]
    elif mode == "CRD":
        shape, perm = [n, c // (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3]
    else:
        raise ctx.error(f"mode must be DCR or CRD, got {mode!r}")
    y = ctx.emit1("graph.reshape", [ctx.input(0)], {"shape": shape})
    y = ctx.emit1("graph.transpose", [y], {"perm": perm})
    return [ctx.emit1("graph.reshape", [y], {"shape": [n, c // (b * b), h * b, w * b]})]
