"""The shared hypothesis strategy: random valid graph-dialect DAGs of the supported ops.

``graphs()`` draws a :class:`ptxc.Network` built layer by layer from random choices, so every
graph is valid by construction (shapes are inferred as it grows). It is biased toward the shapes
the graph optimizer fuses: conv -> batch norm -> activation chains, sibling 1x1 convs reading one
input, concats of convs, residual adds, gemm + bias + activation. It also draws, on purpose, the
cases random normal data and independent layers never produce:

* *order-sensitive pairs*: two ops of one input that differ only in the order of a list attribute
  (convolutions with mirrored asymmetric pads, Pads on opposite sides, Slices with swapped starts,
  Transposes with different perms of one result shape), subtracted (``sub`` is order-sensitive
  too), so a pass that compares such attributes as sets (CSE's key) changes the result;
* *extreme data*: a max or min reduction, max pool (padded) or global max pool over an
  all-negative (or, for min, all-positive) tensor made inside the graph (``-(|x| + c)``), added
  back to the layer's input, so a reduction that starts at 0.0 instead of -inf changes the
  result whatever data check-numerics feeds in; and ``case.inputs`` are sometimes all negative
  or all positive.

Later issues reuse it for every pass and lowering:

    @given(graphs())
    def test_pass(case):
        module = case.network.to_module()
        inputs = case.inputs          # random inputs, by name
"""

from __future__ import annotations

import attrs
import numpy as np
from hypothesis import strategies as st

import ptxc


@attrs.frozen
class GraphCase:
    network: "ptxc.Network"
    inputs: dict
    recipe: tuple   # the layer kinds drawn, for readable failure reports

    def __repr__(self) -> str:
        return f"GraphCase({' -> '.join(self.recipe)})"


def _w(rng, *shape, scale=None):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    s = np.sqrt(2.0 / fan_in) if scale is None else scale
    return (rng.standard_normal(shape) * s).astype(np.float32)


_ACTS = ["relu", "sigmoid", "tanh", "leaky_relu", "clip", "hard_swish", "gelu", "elu"]


class _Builder:
    """Grows a network from random draws; each step picks a layer that fits the tensors so far."""

    def __init__(self, draw, rng):
        self.draw, self.rng = draw, rng
        self.net = ptxc.Network("random")
        self.recipe: list[str] = []

    def act(self, t):
        kind = self.draw(st.sampled_from(_ACTS))
        if kind == "clip":
            return self.net.add_activation(t, "clip", alpha=0.0, beta=6.0)
        return self.net.add_activation(t, kind)

    # ---- 4-D (image) layers ---------------------------------------------------------------------
    def conv(self, x, out_c=None, k=None, stride=None):
        c = x.shape[1]
        out_c = out_c or self.draw(st.sampled_from([2, 4, 6]))
        k = k or self.draw(st.sampled_from([1, 1, 3]))
        stride = stride or self.draw(st.sampled_from([1, 1, 2]))
        groups = 1
        if k == 3 and out_c == c and self.draw(st.integers(0, 3)) == 0:
            groups = c  # depthwise
        bias = _w(self.rng, out_c, scale=0.1) if self.draw(st.booleans()) else None
        return self.net.add_conv(x, _w(self.rng, out_c, c // groups, k, k), bias, stride=stride,
                                 padding=k // 2, groups=groups)

    # ---- cases drawn on purpose (see the module docstring) --------------------------------------
    def pair(self, x):
        """``a - b``: two ops of ``x`` alike but for the order of a list attribute."""
        n, r = self.net, len(x.shape)
        kinds = ["pads"] + (["conv_pads"] if r == 4 else [])
        spatial = list(x.shape[2:]) if r == 4 else list(x.shape)
        if r == 4 and spatial[0] == spatial[1] and spatial[0] >= 2:
            kinds += ["slices", "transposes"]
        kind = self.draw(st.sampled_from(kinds))
        self.recipe.append(f"pair:{kind}")
        if kind == "conv_pads":  # a 2x2 kernel, one pad per axis: the map keeps its size
            w = _w(self.rng, x.shape[1], x.shape[1], 2, 2)
            a = n.add_conv(x, w, padding=(1, 0, 0, 1))
            b = n.add_conv(x, w, padding=(0, 1, 1, 0))
        elif kind == "slices":   # [0:h-1, 1:w] and [1:h, 0:w-1]
            h = spatial[0]
            a = n.add_slice(x, [0, 1], [h - 1, h], axes=[2, 3])
            b = n.add_slice(x, [1, 0], [h, h - 1], axes=[2, 3])
        elif kind == "transposes":  # spatial dims swapped, and not
            a = n.add_transpose(x, [0, 1, 3, 2])
            b = n.add_transpose(x, [0, 1, 2, 3])
        else:                    # one more row/column, before or after
            lo, hi = [0] * r, [0] * r
            lo[-1], hi[-2] = 1, 1
            a = n.add_layer("Pad", [x, np.array(lo + hi, np.int64)], mode="constant")[0]
            b = n.add_layer("Pad", [x, np.array(hi + lo, np.int64)], mode="constant")[0]
        return n.add_elementwise(a, b, "sub")

    def extreme(self, x):
        """``x + reduce(-(|x| + c))``: a max-like reduction of all-negative data (or a min of
        all-positive data), broadcast back onto ``x``."""
        n, r = self.net, len(x.shape)
        kinds = ["max", "min"] + (["max_pool", "global_max_pool"] if r == 4 else [])
        kind = self.draw(st.sampled_from(kinds))
        self.recipe.append(f"extreme:{kind}")
        mag = n.add_elementwise(n.add_unary(x, "abs"), np.float32(0.25), "add")
        if kind == "min":
            return n.add_elementwise(x, n.add_reduce(mag, "min", axes=[r - 1]), "add")
        neg = n.add_unary(mag, "neg")
        if kind == "max_pool":   # 3x3, stride 1, pad 1: border windows hold padding
            y = n.add_pooling(neg, "max", kernel=3, stride=1, padding=1)
        elif kind == "global_max_pool":
            y = n.add_global_pooling(neg, "max")
        else:
            y = n.add_reduce(neg, "max", axes=[self.draw(st.sampled_from(range(1, r)))])
        return n.add_elementwise(x, y, "add")

    def bn(self, x):
        c = x.shape[1]
        r = self.rng
        return self.net.add_batch_norm(
            x, r.uniform(0.5, 1.5, c).astype(np.float32), _w(r, c, scale=0.1),
            _w(r, c, scale=0.1), r.uniform(0.5, 1.5, c).astype(np.float32))

    def step4(self, x):
        kind = self.draw(st.sampled_from(
            ["cbr", "cbr", "conv", "siblings", "concat", "residual", "act", "pool", "eltwise",
             "bn", "pair", "extreme"]))
        if kind == "pair":
            return self.pair(x)
        if kind == "extreme":
            return self.extreme(x)
        self.recipe.append(kind)
        n = self.net
        if kind == "cbr":
            return self.act(self.bn(self.conv(x)))
        if kind == "conv":
            return self.conv(x)
        if kind == "siblings":  # Inception: several 1x1 convs of one input, then concat
            outs = [self.conv(x, k=1, stride=1) for _ in range(self.draw(st.integers(2, 3)))]
            if self.draw(st.booleans()):
                outs = [self.act(o) for o in outs]
            return n.add_concat(outs, axis=1)
        if kind == "concat":
            a = self.conv(x, stride=1)
            return n.add_concat([a, self.act(self.conv(x, stride=1))], axis=1)
        if kind == "residual":
            y = self.bn(self.conv(x, out_c=x.shape[1], stride=1))
            return self.act(n.add_elementwise(y, x, "add"))
        if kind == "act":
            return self.act(x)
        if kind == "pool":
            if min(x.shape[2:]) < 2:
                return self.act(x)
            return n.add_pooling(x, self.draw(st.sampled_from(["max", "average"])), kernel=2)
        if kind == "eltwise":
            c = np.float32(self.draw(st.floats(0.5, 2.0)))
            per_channel = (self.rng.uniform(0.5, 1.5, (1, x.shape[1], 1, 1))
                           .astype(np.float32))
            other = per_channel if self.draw(st.booleans()) else np.array(c, np.float32)
            return n.add_elementwise(x, other, self.draw(st.sampled_from(["add", "mul", "sub"])))
        return self.bn(x)

    # ---- 2-D (feature) layers --------------------------------------------------------------------
    def step2(self, x):
        kind = self.draw(st.sampled_from(["gemm", "gemm", "matmul", "act", "softmax", "eltwise",
                                          "layernorm", "pair", "extreme"]))
        if kind == "pair":
            return self.pair(x)
        if kind == "extreme":
            return self.extreme(x)
        self.recipe.append(kind)
        n = self.net
        f = x.shape[1]
        if kind == "gemm":
            out = self.draw(st.sampled_from([3, 5, 8]))
            bias = _w(self.rng, out, scale=0.1) if self.draw(st.booleans()) else None
            y = n.add_fully_connected(x, _w(self.rng, out, f), bias)
            return self.act(y) if self.draw(st.booleans()) else y
        if kind == "matmul":
            return n.add_matmul(x, _w(self.rng, f, self.draw(st.sampled_from([4, 6]))))
        if kind == "act":
            return self.act(x)
        if kind == "softmax":
            return n.add_softmax(x, axis=-1)
        if kind == "layernorm":
            return n.add_layer_norm(x, self.rng.uniform(0.5, 1.5, f).astype(np.float32),
                                    _w(self.rng, f, scale=0.1))
        return n.add_elementwise(x, _w(self.rng, f, scale=1.0), "add")


@st.composite
def graphs(draw, max_layers: int = 6, image: bool | None = None):
    """A random valid network (see the module docstring) with random inputs."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    b = _Builder(draw, rng)
    image = draw(st.booleans()) if image is None else image
    if image:
        h = draw(st.sampled_from([5, 6, 8]))
        w = h if draw(st.booleans()) else draw(st.sampled_from([5, 6, 8]))  # squares: more pairs
        shape = (draw(st.integers(1, 2)), draw(st.sampled_from([2, 3, 4])), h, w)
        x = b.net.add_input("x", shape)
        t = x
        for _ in range(draw(st.integers(1, max_layers))):
            t = b.step4(t)
        if draw(st.booleans()):
            t = b.net.add_global_pooling(t, "average")
            t = b.net.add_flatten(t, axis=1)
            b.recipe.append("head")
            t = b.step2(t)
    else:
        shape = (draw(st.integers(1, 3)), draw(st.sampled_from([4, 6, 8])))
        x = b.net.add_input("x", shape)
        t = x
        for _ in range(draw(st.integers(1, max_layers))):
            t = b.step2(t)
    b.net.mark_output(t, "y")
    x = rng.standard_normal(shape)
    sign = draw(st.sampled_from(["any", "any", "negative", "positive"]))
    if sign != "any":   # all of one sign: a reduction's identity and its winner both matter
        x = np.abs(x) + 0.125
        x = -x if sign == "negative" else x
    inputs = {"x": x.astype(np.float32)}
    return GraphCase(b.net, inputs, tuple(b.recipe))
