"""fold-batchnorm, merge-siblings and eliminate-concat, each alone (and the three in a row), keep
random graphs verified and numerically equal under check-numerics: the shared strategy's graphs,
and graphs made of what these passes rewrite (conv / conv-transpose / gemm / matmul followed by
batch norms and per-channel mul, div, add and sub; sibling layers of one input with equal or
different geometry; concats of layer outputs, arguments, constants, repeats and nested concats)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptxc
from ptxc.rewrite import PassManager

from .strategies import graphs
from .tolerance import numerics_options

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

PASSES = ["fold-batchnorm", "merge-siblings", "eliminate-concat"]


def check(module, pipeline: str) -> None:
    PassManager(pipeline, check_numerics=True, **numerics_options(module)).run(module)


@pytest.mark.parametrize("pipeline", PASSES)
@SETTINGS
@given(case=graphs())
def test_each_layout_pass_alone_keeps_random_graphs_equal(pipeline, case):
    check(case.network.to_module(), pipeline)


# ---- graphs of what the layout passes rewrite ------------------------------------------------------

def _f32(a) -> np.ndarray:
    return np.asarray(a, np.float32)


@st.composite
def layout_graphs(draw):
    """A chain of steps over one input (see the module docstring); returns (network, inputs)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    net = ptxc.Network("layout")
    image = draw(st.booleans())

    def w(*shape, scale=None):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        return _f32(rng.standard_normal(shape) * (scale or np.sqrt(2.0 / fan_in)))

    def channel_const(t, axis):
        """A per-channel constant for ``t`` (sometimes a whole-tensor one, which must not fold)."""
        c = t.shape[axis]
        rank = len(t.shape)
        kind = draw(st.sampled_from(["vec", "full_rank", "one", "scalar", "not_channel"]))
        vals = _f32(rng.uniform(0.5, 1.5, c) * rng.choice([-1, 1], c))
        if kind == "one":
            return _f32([rng.uniform(0.5, 1.5)])
        if kind == "scalar":
            return _f32(rng.uniform(0.5, 1.5))
        if kind == "not_channel":
            return _f32(rng.uniform(0.5, 1.5, t.shape[-1])) if axis != rank - 1 else vals
        trailing = rank - 1 - axis
        if kind == "vec":
            return vals.reshape((c,) + (1,) * trailing)
        return vals.reshape((1,) * axis + (c,) + (1,) * trailing)

    def affine_chain(t, axis):
        for _ in range(draw(st.integers(0, 3))):
            kind = draw(st.sampled_from(["bn", "mul", "div", "add", "sub", "rsub"]))
            if kind == "bn":
                if axis != 1:
                    continue
                c = t.shape[1]
                t = net.add_batch_norm(t, _f32(rng.uniform(0.5, 1.5, c)), w(c, scale=0.1),
                                       w(c, scale=0.1), _f32(rng.uniform(0.5, 1.5, c)))
            elif kind == "rsub":
                t = net.add_elementwise(channel_const(t, axis), t, "sub")
            else:
                t = net.add_elementwise(t, channel_const(t, axis), kind)
        if draw(st.integers(0, 3)) == 0:
            t = net.add_activation(t, "relu")
        return t

    if image:
        shape = (draw(st.integers(1, 2)), draw(st.sampled_from([2, 4])), 4, 4)
    else:
        shape = (draw(st.integers(1, 3)), draw(st.sampled_from([3, 4])))
    x = net.add_input("x", shape)
    t = x
    for _ in range(draw(st.integers(1, 4))):
        c = t.shape[1]
        if image:
            kind = draw(st.sampled_from(["conv", "deconv", "siblings", "concat", "concat"]))
            if kind == "conv":
                groups = draw(st.sampled_from([1, 1, c]))
                out = c if groups > 1 else draw(st.sampled_from([2, 4]))
                bias = w(out, scale=0.1) if draw(st.booleans()) else None
                t = affine_chain(net.add_conv(t, w(out, c // groups, 1, 1), bias, groups=groups),
                                 1)
            elif kind == "deconv":
                groups = draw(st.sampled_from([1, 2])) if c % 2 == 0 else 1
                out_g = draw(st.sampled_from([1, 2]))
                bias = w(out_g * groups, scale=0.1) if draw(st.booleans()) else None
                y = net.add_deconv(t, w(c, out_g, 3, 3), bias, padding=1, groups=groups)
                t = affine_chain(y, 1)
            elif kind == "siblings":  # Inception: 1x1 and 3x3 branches of one input
                outs = []
                for _ in range(draw(st.integers(2, 3))):
                    k = draw(st.sampled_from([1, 1, 3]))
                    bias = w(2, scale=0.1) if draw(st.booleans()) else None
                    y = net.add_conv(t, w(2, c, k, k), bias, padding=k // 2)
                    outs.append(affine_chain(y, 1) if draw(st.booleans()) else y)
                t = net.add_concat(outs, axis=1)
            else:
                axis = 1 if t.shape[2] > 4 else draw(st.sampled_from([1, 2]))
                a = net.add_activation(t, "relu")
                which = draw(st.sampled_from(["arg", "repeat", "constant", "shared", "nested"]))
                if which == "arg":
                    parts = [t, a]
                elif which == "repeat":
                    parts = [a, a]
                elif which == "constant":
                    parts = [a, net.add_constant(w(*t.shape, scale=1.0))]
                elif which == "shared":  # a is in two concats
                    parts = [a, net.add_concat([net.add_activation(t, "tanh"), a], axis=axis)]
                else:  # DenseNet: concat(concat(p, q), r)
                    inner = net.add_concat([net.add_activation(t, "sigmoid"), a], axis=axis)
                    parts = [inner, net.add_activation(t, "tanh")]
                t = net.add_concat(parts, axis=axis)
                if t.shape[1] > 8:
                    t = net.add_conv(t, w(4, t.shape[1], 1, 1))
        else:
            kind = draw(st.sampled_from(["gemm", "matmul", "siblings"]))
            if kind == "gemm":
                n = draw(st.sampled_from([2, 3]))
                tb = draw(st.booleans())
                bw = w(n, c) if tb else w(c, n)
                cb = [None, w(n, scale=0.1), w(1, n, scale=0.1), w(t.shape[0], n, scale=0.1)][
                    draw(st.integers(0, 3))]
                y = net.add_layer("Gemm", [t, bw, cb], transB=int(tb),
                                  alpha=draw(st.sampled_from([1.0, 0.5])),
                                  beta=draw(st.sampled_from([1.0, 2.0])))[0]
                t = affine_chain(y, 1)
            elif kind == "matmul":
                y = net.add_matmul(t, w(c, draw(st.sampled_from([2, 3]))))
                if draw(st.booleans()):
                    y = net.add_elementwise(y, w(y.shape[1], scale=0.1), "add")
                t = affine_chain(y, 1)
            else:  # Q/K/V projections
                outs = []
                for _ in range(draw(st.integers(2, 3))):
                    n = draw(st.sampled_from([2, 3]))
                    which = draw(st.sampled_from(["fc", "gemm", "matmul"]))
                    if which == "fc":
                        outs.append(net.add_fully_connected(
                            t, w(n, c), w(n, scale=0.1) if draw(st.booleans()) else None))
                    elif which == "gemm":  # mixed transB, alpha, beta, C shapes
                        tb = draw(st.booleans())
                        cb = [None, w(n, scale=0.1), w(t.shape[0], n, scale=0.1)][
                            draw(st.integers(0, 2))]
                        outs.append(net.add_layer(
                            "Gemm", [t, w(n, c) if tb else w(c, n), cb], transB=int(tb),
                            alpha=draw(st.sampled_from([1.0, 0.5])),
                            beta=draw(st.sampled_from([1.0, 2.0])))[0])
                    else:
                        outs.append(net.add_matmul(t, w(c, n)))
                t = net.add_concat(outs, axis=1)
    net.mark_output(t, "y")
    return net, {"x": rng.standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("pipeline", PASSES + [",".join(PASSES)])
@SETTINGS
@given(case=layout_graphs())
def test_layout_passes_keep_their_own_kind_of_graphs_equal(pipeline, case):
    network, _ = case
    check(network.to_module(), pipeline)
