"""recognize-patterns alone keeps random graphs verified and numerically equal (check-numerics):
the shared strategy's graphs (which hold no decomposed patterns: nothing fires, nothing is
explained), and chains of decomposed GELU / LayerNorm / softmax / HardSwish blocks in random
spellings, some with an intermediate read elsewhere, between ordinary layers: every clean block
becomes its one op and every block with an extra reader stays and says why."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptxc
from ptxc.dialects.func import func_body, get_func
from ptxc.rewrite import Explain, PassManager

from .strategies import graphs
from .tolerance import numerics_options

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

F = np.float32


def run(module) -> Explain:
    ex = Explain()
    PassManager("recognize-patterns", check_numerics=True, explain=ex,
                **numerics_options(module)).run(module)
    return ex


@SETTINGS
@given(case=graphs())
def test_recognize_alone_keeps_random_graphs_equal_and_quiet(case):
    module = case.network.to_module()
    before = ptxc.print_ir(module)
    ex = run(module)
    assert ex.not_fired() == []
    after = ptxc.print_ir(module)
    r = case.recipe
    if any(r[i:i + 3] == ("matmul", "softmax", "matmul") for i in range(len(r) - 2)):
        # an exported attention chain, MatMul -> Softmax -> MatMul (issue 11): the strategy can
        # draw one, and recognize-patterns fuses it (numerics checked by check_numerics)
        assert '"graph.attention"' in after
    else:
        assert after == before  # nothing decomposed to recognize


# ---- chains of decomposed blocks ----------------------------------------------------------------

class _Blocks:
    """Adds one decomposed block to ``net`` in a drawn spelling; returns (output, the op it
    should become, an intermediate tensor a spoiler could read)."""

    def __init__(self, draw, net):
        self.draw, self.net = draw, net

    def flip(self, a, b, op):
        n = self.net
        return n.add_elementwise(b, a, op) if self.draw(st.booleans()) else \
            n.add_elementwise(a, b, op)

    def gelu(self, x):
        n, d = self.net, self.draw
        if d(st.booleans()):
            arg = n.add_elementwise(x, F(d(st.sampled_from([1.4142135, 1.4142135623730951]))),
                                    "div")
        else:
            arg = self.flip(x, F(0.70710677), "mul")
        inner = n.add_unary(arg, "erf")
        gate = self.flip(inner, F(1.0), "add")
        how = d(st.sampled_from(["after", "first", "gate", "div2"]))
        if how == "after":
            y = self.flip(self.flip(x, gate, "mul"), F(0.5), "mul")
        elif how == "first":
            y = self.flip(self.flip(x, F(0.5), "mul"), gate, "mul")
        elif how == "gate":
            y = self.flip(x, self.flip(gate, F(0.5), "mul"), "mul")
        else:
            y = n.add_elementwise(self.flip(x, gate, "mul"), F(2.0), "div")
        return y, "graph.gelu", d(st.sampled_from([arg, inner, gate]))

    def gelu_tanh(self, x):
        n, d = self.net, self.draw
        cube = n.add_elementwise(x, F(3.0), "pow") if d(st.booleans()) else \
            self.flip(x, self.flip(x, x, "mul"), "mul")
        poly = self.flip(x, self.flip(cube, F(0.044715), "mul"), "add")
        t = n.add_activation(self.flip(poly, F(0.7978846), "mul"), "tanh")
        gate = self.flip(t, F(1.0), "add")
        y = self.flip(self.flip(x, F(0.5), "mul"), gate, "mul")
        return y, "graph.gelu", d(st.sampled_from([cube, poly, t]))

    def layer_norm(self, x):
        n, d = self.net, self.draw
        rank = len(x.shape)
        first = d(st.integers(max(1, rank - 2), rank - 1))
        axes = list(range(first, rank))
        mean = n.add_reduce(x, "mean", axes=axes)
        diff = n.add_elementwise(x, mean, "sub")
        sq = n.add_elementwise(diff, F(2.0), "pow") if d(st.booleans()) else \
            n.add_elementwise(diff, diff, "mul")
        var = n.add_reduce(sq, "mean", axes=axes)
        sd = n.add_unary(self.flip(var, F(d(st.sampled_from([1e-5, 1e-6, 1e-12]))), "add"),
                         "sqrt")
        if d(st.booleans()):
            y = n.add_elementwise(diff, sd, "div")
        else:
            y = self.flip(diff, n.add_unary(sd, "recip"), "mul")
        norm = x.shape[first:]
        rng = np.random.default_rng(d(st.integers(0, 1000)))
        if d(st.booleans()):
            y = self.flip(y, rng.uniform(0.5, 1.5, norm).astype(F), "mul")
        if d(st.booleans()):
            y = self.flip(y, rng.standard_normal(norm).astype(F), "add")
        return y, "graph.layer_normalization", d(st.sampled_from([mean, diff, sq, sd]))

    def softmax(self, x):
        n, d = self.net, self.draw
        axis = d(st.integers(0, len(x.shape) - 1))
        t = x
        if d(st.booleans()):
            t = n.add_elementwise(x, n.add_reduce(x, "max", axes=[axis]), "sub")
        e = n.add_unary(t, "exp")
        s = n.add_reduce(e, "sum", axes=[axis])
        y = n.add_elementwise(e, s, "div") if d(st.booleans()) else \
            self.flip(e, n.add_unary(s, "recip"), "mul")
        return y, "graph.softmax", d(st.sampled_from([e, s]))

    def hard_swish(self, x):
        n, d = self.net, self.draw
        if d(st.integers(0, 3)) == 0:
            h = n.add_activation(x, "hard_sigmoid", alpha=1 / 6, beta=0.5)
            return self.flip(x, h, "mul"), "graph.hard_swish", h
        t = self.flip(x, F(3.0), "add")
        kind = d(st.sampled_from(["clip", "minmax", "maxmin", "relumin"]))
        if kind == "clip":
            g = n.add_activation(t, "clip", alpha=0.0, beta=6.0)
        elif kind == "minmax":
            g = self.flip(self.flip(t, F(0.0), "max"), F(6.0), "min")
        elif kind == "maxmin":
            g = self.flip(self.flip(t, F(6.0), "min"), F(0.0), "max")
        else:
            g = self.flip(n.add_activation(t, "relu"), F(6.0), "min")
        how = d(st.sampled_from(["div", "mul", "gate"]))
        if how == "div":
            y = n.add_elementwise(self.flip(x, g, "mul"), F(6.0), "div")
        elif how == "mul":
            y = self.flip(self.flip(x, g, "mul"), F(1 / 6), "mul")
        else:
            y = self.flip(x, n.add_elementwise(g, F(6.0), "div"), "mul")
        return y, "graph.hard_swish", d(st.sampled_from([t, g]))


@st.composite
def decomposed_graphs(draw):
    """(network, recognized op names expected in order, how many blocks were spoiled)."""
    net = ptxc.Network("decomposed")
    rank = draw(st.integers(2, 3))
    # dims of at least 2: over an axis of size 1 a softmax is exactly 1 when recognized but
    # 1 +- ulp written out, and a following LayerNorm of that near-constant tensor amplifies the
    # difference to O(1): a conditioning artifact of the generator, not a fault of the pass
    shape = tuple(draw(st.lists(st.integers(2, 5), min_size=rank, max_size=rank)))
    x = net.add_input("x", shape)
    blocks = _Blocks(draw, net)
    rng = np.random.default_rng(draw(st.integers(0, 1000)))
    expected, spoiled = [], 0
    for i in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["gelu", "gelu_tanh", "layer_norm", "softmax", "hard_swish",
                                     "plain"]))
        if kind == "plain":
            x = net.add_elementwise(x, rng.standard_normal(shape[-1]).astype(F), "add")
            continue
        x, op, inner = getattr(blocks, kind)(x)
        if draw(st.integers(0, 4)) == 0:
            net.mark_output(inner, f"spoiler_{i}")   # read elsewhere: must stay as it is
            spoiled += 1
        else:
            expected.append(op)
    net.mark_output(x, "y")
    return net, expected, spoiled


_RECOGNIZED = {"graph.gelu", "graph.layer_normalization", "graph.softmax", "graph.hard_swish"}


@SETTINGS
@given(decomposed_graphs())
def test_recognize_turns_every_clean_block_into_one_op(case):
    net, expected, spoiled = case
    module = net.to_module()
    ex = run(module)
    got = [op.name for op in func_body(get_func(module)).ops if op.name in _RECOGNIZED]
    assert got == expected
    not_fired = [r for r in ex.not_fired() if r.pattern.startswith("Recognize")]
    assert len(not_fired) == spoiled, ex.format()
    assert all("not recognized as" in r.reason and "user" in r.reason for r in not_fired)
