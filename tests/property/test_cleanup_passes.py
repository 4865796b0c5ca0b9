"""eliminate-noops, fold-constants and cancel-transposes, each alone (and the three in a row),
keep random graphs verified and numerically equal under check-numerics: the shared strategy's
graphs, and graphs made of what these passes rewrite (no-op layers, transpose and reshape chains,
constant subgraphs, splits with unused outputs)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, numpy_helper

import ptxc
from ptxc.rewrite import PassManager

from .strategies import graphs
from .tolerance import numerics_options

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

PASSES = ["eliminate-noops", "fold-constants", "cancel-transposes"]


def check(module, pipeline: str) -> None:
    PassManager(pipeline, check_numerics=True, **numerics_options(module)).run(module)


@pytest.mark.parametrize("pipeline", PASSES)
@SETTINGS
@given(case=graphs())
def test_each_cleanup_pass_alone_keeps_random_graphs_equal(pipeline, case):
    check(case.network.to_module(), pipeline)


# ---- graphs of what the cleanup passes rewrite ------------------------------------------------

@st.composite
def cleanup_graphs(draw):
    """A chain of layers over one input, drawn from no-ops (identity, dropout, same-shape
    reshape/expand/tile/pad/slice/cast, single-input sum/concat), transposes and reshape-like
    layers (often inverse pairs, sometimes read twice), constant subgraphs added in, and splits
    with one output unused."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    net = ptxc.Network("cleanup")
    t = net.add_input("x", shape)
    i64 = lambda v: net.add_constant(np.array(v, np.int64))  # noqa: E731
    kinds = []
    for _ in range(draw(st.integers(1, 8))):
        s, r = tuple(t.shape), len(t.shape)
        kind = draw(st.sampled_from([
            "identity", "dropout", "noop", "noop", "noop", "transpose", "transpose_pair", "reshape",
            "unsqueeze_squeeze", "flatten", "constant", "split", "shared"]))
        kinds.append(kind)
        if kind == "identity":
            t = net.add_layer("Identity", [t])[0]
        elif kind == "dropout":
            t = net.add_layer("Dropout", [t])[0]
        elif kind == "noop":
            which = draw(st.sampled_from(["reshape", "expand", "tile", "pad", "slice", "cast",
                                          "sum", "concat", "transpose"]))
            if which == "reshape":
                t = net.add_reshape(t, list(s))
            elif which == "expand":
                t = net.add_layer("Expand", [t, i64([1] * r)])[0]
            elif which == "tile":
                t = net.add_layer("Tile", [t, i64([1] * r)])[0]
            elif which == "pad":
                t = net.add_layer("Pad", [t, i64([0] * 2 * r)])[0]
            elif which == "slice":
                t = net.add_slice(t, [0] * r, list(s))
            elif which == "cast":
                t = net.add_layer("Cast", [t], to=TensorProto.FLOAT)[0]
            elif which == "sum":
                t = net.add_layer("Sum", [t])[0]
            elif which == "concat":
                t = net.add_concat([t], axis=0)
            else:
                t = net.add_transpose(t, list(range(r)))
        elif kind in ("transpose", "transpose_pair"):
            perm = list(draw(st.permutations(range(r))))
            t = net.add_transpose(t, perm)
            if kind == "transpose_pair":
                back = list(draw(st.permutations(range(r)))) if draw(st.booleans()) \
                    else list(np.argsort(perm))
                t = net.add_transpose(t, back)
        elif kind == "reshape":
            size = int(np.prod(s))
            target = draw(st.sampled_from([[size], [1, size], list(reversed(s)), list(s)]))
            t = net.add_reshape(t, target)
        elif kind == "unsqueeze_squeeze":
            axis = draw(st.integers(0, r))
            t = net.add_layer("Unsqueeze", [t, i64([axis])])[0]
            if draw(st.booleans()):
                t = net.add_layer("Squeeze", [t, i64([axis])])[0]
        elif kind == "flatten":
            t = net.add_flatten(t, axis=draw(st.integers(0, r)))
        elif kind == "constant":
            # a constant subgraph: ConstantOfShape * constant, transposed twice, then added
            fill = net.add_layer("ConstantOfShape", [i64(list(s))], value=numpy_helper.from_array(
                np.array([draw(st.sampled_from([0.5, 2.0, -1.0]))], np.float32)))[0]
            c = net.add_elementwise(fill, rng.standard_normal(s).astype(np.float32), "mul")
            perm = list(draw(st.permutations(range(r))))
            c = net.add_transpose(net.add_transpose(c, perm), list(np.argsort(perm)))
            t = net.add_elementwise(t, c, "add")
        elif kind == "split":
            axis = draw(st.integers(0, r - 1))
            if s[axis] < 2:
                t = net.add_activation(t, "relu")
                continue
            k = draw(st.integers(1, s[axis] - 1))
            a, b = net.add_layer("Split", [t, i64([k, s[axis] - k])], num_outputs=2, axis=axis)
            t = net.add_activation(draw(st.sampled_from([a, b])), "tanh")
            # the split output not taken is unused: a slice of the other remains
        else:  # "shared": a transpose or reshape read by two layers
            if draw(st.booleans()):
                u = net.add_transpose(t, list(reversed(range(r))))
                v = net.add_transpose(u, list(reversed(range(r))))
                t = net.add_elementwise(v, net.add_transpose(u, list(reversed(range(r)))), "add")
            else:
                u = net.add_reshape(t, [int(np.prod(s))])
                t = net.add_elementwise(net.add_reshape(u, list(s)), t, "mul")
    net.mark_output(t, "y")
    return net, tuple(kinds)


@pytest.mark.parametrize("pipeline", PASSES + [",".join(PASSES)])
@SETTINGS
@given(drawn=cleanup_graphs())
def test_cleanup_passes_keep_graphs_of_noops_and_transposes_equal(pipeline, drawn):
    net, _ = drawn
    check(net.to_module(), pipeline)


@SETTINGS
@given(drawn=cleanup_graphs())
def test_after_the_three_passes_no_noop_and_no_composable_pair_is_left(drawn):
    net, _ = drawn
    m = net.to_module()
    check(m, ",".join(PASSES) + ",eliminate-noops")
    from ptxc.rewrite.passes.cancel_transposes import RESHAPE_LIKE
    from ptxc.rewrite.pattern import producer
    for op in m.walk():
        assert op.name not in ("graph.identity", "graph.dropout", "graph.constant_of_shape")
        if op.name == "graph.transpose":
            assert tuple(op.attr("perm")) != tuple(range(len(op.attr("perm"))))
            p = producer(op.operands[0])
            assert p is None or p.name != "graph.transpose"
        if op.name in RESHAPE_LIKE:
            assert op.result.type != op.operands[0].type
            p = producer(op.operands[0])
            assert p is None or p.name not in RESHAPE_LIKE
        if op.name == "graph.split":
            assert all(r.uses for r in op.results)
