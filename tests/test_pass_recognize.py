"""recognize-patterns: decomposed GELU, LayerNorm, softmax and HardSwish become one graph op.

Per pattern: the exact IR after on one form, every operand order and spelling exporters use
(numerics equal to onnxruntime on the original ONNX model), and the near misses that must not
fire, with the reason --explain gives (wrong constant, extra user, other axis, dtype)."""

import numpy as np
import pytest

import ptxc
from support.light_models import onnxruntime_outputs
from ptxc.rewrite import Explain, PassManager
from ptxc.rewrite.numerics import random_inputs

F = np.float32


# ---- helpers ------------------------------------------------------------------------------------

def recognize(net, check_numerics=True):
    """The network's module after recognize-patterns, and the explain records."""
    m = net.to_module()
    ex = Explain()
    PassManager("recognize-patterns", check_numerics=check_numerics, explain=ex).run(m)
    return m, ex


def body(m) -> str:
    """The ops of main, one per line, without indentation."""
    lines = ptxc.print_ir(m).splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip().startswith("^bb0"))
    out = []
    for ln in lines[start + 1:]:
        if ln.strip().startswith("}) {arg_names"):
            break
        out.append(ln.strip())
    return "\n".join(out) + "\n"


def kinds(m) -> list[str]:
    """The op names of main, constants and the return left out."""
    from ptxc.dialects.func import func_body, get_func
    return [op.name for op in func_body(get_func(m)).ops
            if op.name not in ("graph.constant", "func.return")]


def reasons(ex: Explain) -> list[str]:
    return [r.reason for r in ex.not_fired()]


def assert_matches_onnxruntime(net, m, seed=0, rtol=1e-4, atol=1e-5):
    inputs = random_inputs(m, seed)
    inputs = {k: v * 3 for k, v in inputs.items()}  # reach the clipped and saturated ranges
    got = ptxc.interpret(m, inputs)
    ref = onnxruntime_outputs(net.to_onnx(), inputs)
    assert set(got) == set(ref)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=rtol, atol=atol, err_msg=k)


def assert_unchanged(net):
    """The pass leaves the network as it was; returns the explain records."""
    before = ptxc.print_ir(net.to_module())
    m, ex = recognize(net)
    assert ptxc.print_ir(m) == before
    return ex


# ---- GELU ---------------------------------------------------------------------------------------

def gelu_erf(scale="div", half="after", one_first=False, shape=(2, 4), sqrt2=1.4142135,
             one=1.0, halfc=0.5, dtype=F):
    """x * 0.5 * (1 + erf(x / sqrt 2)) in one of the exporters' spellings; ops named div_1/mul_1,
    erf_2, add_3, mul_4, mul_5/div_5."""
    net = ptxc.Network("gelu")
    c = lambda v: np.asarray(v, dtype)  # noqa: E731
    x = net.add_input("x", shape, dtype)
    if scale == "div":
        d = net.add_elementwise(x, c(sqrt2), "div", name="div_1")
    else:
        d = net.add_elementwise(c(1 / sqrt2), x, "mul", name="mul_1")
    e = net.add_unary(d, "erf", name="erf_2")
    a = (net.add_elementwise(c(one), e, "add", name="add_3") if one_first
         else net.add_elementwise(e, c(one), "add", name="add_3"))
    if half == "after":
        inner = net.add_elementwise(x, a, "mul", name="mul_4")
        y = net.add_elementwise(inner, c(halfc), "mul", name="mul_5")
    elif half == "first":
        inner = net.add_elementwise(c(halfc), x, "mul", name="mul_4")
        y = net.add_elementwise(inner, a, "mul", name="mul_5")
    elif half == "gate":
        inner = net.add_elementwise(a, c(halfc), "mul", name="mul_4")
        y = net.add_elementwise(x, inner, "mul", name="mul_5")
    else:  # divided by 2
        inner = net.add_elementwise(a, x, "mul", name="mul_4")
        y = net.add_elementwise(inner, c(1 / halfc), "div", name="div_5")
    net.mark_output(y, "y")
    return net, {"d": d, "e": e, "a": a, "inner": inner}


def test_gelu_erf_exact_ir():
    net, _ = gelu_erf()
    m, ex = recognize(net)
    assert body(m) == (
        '%y = "graph.gelu"(%x) {approximate = "none", ptxc.fused = ["div_1", "erf_2", "add_3", '
        '"mul_4"]} : (tensor<2x4xf32>) -> tensor<2x4xf32> loc("mul_5")\n'
        '"func.return"(%y) : (tensor<2x4xf32>) -> ()\n')
    assert [str(r) for r in ex.fired()] == [
        '[recognize-patterns] RecognizeGelu at "mul_5" (graph.mul): fired']
    assert_matches_onnxruntime(net, m)


@pytest.mark.parametrize("scale", ["div", "mul"])
@pytest.mark.parametrize("half", ["after", "first", "gate", "div2"])
@pytest.mark.parametrize("one_first", [False, True])
def test_gelu_erf_every_spelling(scale, half, one_first):
    net, _ = gelu_erf(scale, half, one_first, shape=(2, 3, 5))
    m, _ = recognize(net)
    assert kinds(m) == ["graph.gelu"]
    assert_matches_onnxruntime(net, m)


def test_gelu_constants_written_in_double_or_float():
    for sqrt2 in (1.4142135, 1.4142135623730951, float(F(np.sqrt(2)))):
        net, _ = gelu_erf(sqrt2=sqrt2)
        assert kinds(recognize(net)[0]) == ["graph.gelu"]


def test_gelu_float16_matches_with_float16_constants():
    net, _ = gelu_erf(scale="mul", dtype=np.float16)
    m, _ = recognize(net, check_numerics=False)
    assert kinds(m) == ["graph.gelu"]
    x = (np.random.default_rng(0).standard_normal((2, 4)) * 3).astype(np.float16)
    ref = onnxruntime_outputs(net.to_onnx(), {"x": x})["y"]
    np.testing.assert_allclose(ptxc.interpret(m, {"x": x})["y"].astype(F), ref.astype(F),
                               rtol=4e-3, atol=4e-3)


@pytest.mark.parametrize("kw, reason", [
    (dict(sqrt2=1.5), "mul_5 not recognized as GELU: div_1 divides by 1.5, not sqrt(2)"),
    (dict(sqrt2=1.4142), "mul_5 not recognized as GELU: div_1 divides by 1.4142, not sqrt(2)"),
    (dict(scale="mul", sqrt2=1 / 0.7), "mul_5 not recognized as GELU: mul_1 multiplies by 0.7, "
                                       "not 1/sqrt(2)"),
    (dict(one=2.0), "mul_5 not recognized as GELU: add_3 adds 2, not 1"),
    (dict(halfc=0.6), "mul_5 not recognized as GELU: mul_5 multiplies by 0.6, not 0.5"),
    (dict(half="div2", halfc=1 / 3), "div_5 not recognized as GELU: div_5 divides by 3, not 2"),
])
def test_gelu_wrong_constant_is_not_recognized_and_says_why(kw, reason):
    net, _ = gelu_erf(**kw)
    assert reasons(assert_unchanged(net)) == [reason]


@pytest.mark.parametrize("extra", ["d", "e", "a"])
def test_gelu_with_an_intermediate_read_elsewhere_is_not_recognized(extra):
    net, vals = gelu_erf()
    net.mark_output(vals[extra], "extra")
    name = {"d": "div_1", "e": "erf_2", "a": "add_3"}[extra]
    assert reasons(assert_unchanged(net)) == [
        f"mul_5 not recognized as GELU: {name} has 2 users"]


@pytest.mark.parametrize("half", ["after", "first", "gate"])
def test_gelu_inner_product_read_elsewhere_is_not_recognized(half):
    net, vals = gelu_erf(half=half)
    net.mark_output(net.add_activation(vals["inner"], "relu"), "extra")
    assert reasons(assert_unchanged(net)) == ["mul_5 not recognized as GELU: mul_4 has 2 users"]


def test_gelu_of_another_tensor_is_not_recognized():
    # x * 0.5 * (1 + erf(z / sqrt 2)) with z != x: not a GELU, and nothing to explain
    net = ptxc.Network("g")
    x = net.add_input("x", (2, 4))
    z = net.add_input("z", (2, 4))
    e = net.add_unary(net.add_elementwise(z, F(1.4142135), "div"), "erf")
    a = net.add_elementwise(e, F(1.0), "add")
    net.mark_output(net.add_elementwise(net.add_elementwise(x, a, "mul"), F(0.5), "mul"), "y")
    assert reasons(assert_unchanged(net)) == []


def test_gelu_with_a_broadcasting_constant_is_not_recognized():
    net = ptxc.Network("g")
    x = net.add_input("x", (4,))
    e = net.add_unary(net.add_elementwise(x, F(1.4142135), "div", name="div_1"), "erf")
    a = net.add_elementwise(e, F(1.0), "add")
    m4 = net.add_elementwise(x, a, "mul")
    net.mark_output(net.add_elementwise(m4, np.full((3, 1), 0.5, F), "mul", name="gelu"), "y")
    assert reasons(assert_unchanged(net)) == [
        "gelu not recognized as GELU: its constants broadcast tensor<4xf32> to "
        "tensor<3x4xf32>"]


def gelu_tanh(cube="pow", order=0, k=0.7978845608028654, c=0.044715, shape=(2, 5)):
    net = ptxc.Network("gelu_tanh")
    x = net.add_input("x", shape)
    h = net.add_elementwise(x, F(0.5), "mul", name="mul_1")
    if cube == "pow":
        p = net.add_elementwise(x, F(3.0), "pow", name="pow_2")
    elif cube == "mul_left":
        p = net.add_elementwise(net.add_elementwise(x, x, "mul", name="sq_2"), x, "mul",
                                name="cube_2")
    else:
        p = net.add_elementwise(x, net.add_elementwise(x, x, "mul", name="sq_2"), "mul",
                                name="cube_2")
    cc = net.add_elementwise(F(c), p, "mul", name="mul_3") if order else \
        net.add_elementwise(p, F(c), "mul", name="mul_3")
    s = net.add_elementwise(cc, x, "add", name="add_4") if order else \
        net.add_elementwise(x, cc, "add", name="add_4")
    kk = net.add_elementwise(F(k), s, "mul", name="mul_5")
    t = net.add_activation(kk, "tanh", name="tanh_6")
    a = net.add_elementwise(t, F(1.0), "add", name="add_7")
    y = net.add_elementwise(h, a, "mul", name="mul_8") if order else \
        net.add_elementwise(a, h, "mul", name="mul_8")
    net.mark_output(y, "y")
    return net


def test_gelu_tanh_exact_ir():
    net = gelu_tanh()
    m, _ = recognize(net)
    assert body(m) == (
        '%y = "graph.gelu"(%x) {approximate = "tanh", ptxc.fused = ["mul_1", "pow_2", "mul_3", '
        '"add_4", "mul_5", "tanh_6", "add_7"]} : (tensor<2x5xf32>) -> tensor<2x5xf32> '
        'loc("mul_8")\n'
        '"func.return"(%y) : (tensor<2x5xf32>) -> ()\n')
    assert_matches_onnxruntime(net, m)


@pytest.mark.parametrize("cube", ["pow", "mul_left", "mul_right"])
@pytest.mark.parametrize("order", [0, 1])
def test_gelu_tanh_every_spelling(cube, order):
    net = gelu_tanh(cube, order, k=0.7978846)
    m, _ = recognize(net)
    assert kinds(m) == ["graph.gelu"]
    assert_matches_onnxruntime(net, m)


def test_gelu_tanh_wrong_constant_says_why():
    assert reasons(assert_unchanged(gelu_tanh(c=0.05))) == [
        "mul_8 not recognized as GELU: mul_3 multiplies by 0.05, not 0.044715"]
    assert reasons(assert_unchanged(gelu_tanh(k=0.8))) == [
        "mul_8 not recognized as GELU: mul_5 multiplies by 0.8, not sqrt(2/pi)"]


# ---- LayerNorm ----------------------------------------------------------------------------------

def layer_norm(shape=(2, 3, 4), axes=(-1,), axes2=None, square="pow", recip=False, gamma=True,
               beta=True, eps=1e-5, exponent=2.0, gamma_shape=None):
    """The decomposed LayerNorm; ops named rm_1, sub_2, pow_3/mul_3, rm_4, add_5, sqrt_6,
    div_7 (or recip_7 + mul_7), mul_8, add_9."""
    net = ptxc.Network("ln")
    x = net.add_input("x", shape)
    mean = net.add_reduce(x, "mean", axes=list(axes), name="rm_1")
    d = net.add_elementwise(x, mean, "sub", name="sub_2")
    sq = net.add_elementwise(d, F(exponent), "pow", name="pow_3") if square == "pow" else \
        net.add_elementwise(d, d, "mul", name="mul_3")
    var = net.add_reduce(sq, "mean", axes=list(axes2 or axes), name="rm_4")
    ve = net.add_elementwise(F(eps), var, "add", name="add_5")
    sd = net.add_unary(ve, "sqrt", name="sqrt_6")
    if recip:
        n = net.add_elementwise(net.add_unary(sd, "recip", name="recip_7"), d, "mul",
                                name="mul_7")
    else:
        n = net.add_elementwise(d, sd, "div", name="div_7")
    c = shape[-1]
    y = n
    if gamma:
        g = np.linspace(0.5, 1.5, c).astype(F).reshape(gamma_shape or (c,))
        y = net.add_elementwise(g, y, "mul", name="mul_8")
    if beta:
        y = net.add_elementwise(y, np.linspace(-1, 1, c).astype(F), "add", name="add_9")
    net.mark_output(y, "y")
    return net, {"mean": mean, "d": d, "sq": sq, "var": var, "sd": sd, "n": n}


def test_layer_norm_exact_ir():
    net, _ = layer_norm()
    m, ex = recognize(net)
    assert body(m) == (
        '%const_5 = "graph.constant"() {value = dense<[0.5, 0.8333333, 1.1666666, 1.5]> : '
        'tensor<4xf32>} : () -> tensor<4xf32> loc("const_5")\n'
        '%const_6 = "graph.constant"() {value = dense<[-1.0, -0.33333334, 0.33333334, 1.0]> : '
        'tensor<4xf32>} : () -> tensor<4xf32> loc("const_6")\n'
        '%y = "graph.layer_normalization"(%x, %const_5, %const_6) {axis = 2, epsilon = 1e-05, '
        'ptxc.fused = ["rm_1", "sub_2", "pow_3", "rm_4", "add_5", "sqrt_6", "mul_8", "add_9"]} : '
        '(tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32> loc("div_7")\n'
        '"func.return"(%y) : (tensor<2x3x4xf32>) -> ()\n')
    assert [(r.pattern, r.location) for r in ex.fired()] == [
        ("RecognizeLayerNorm", "div_7"), ("FoldLayerNormScale", "mul_8"),
        ("FoldLayerNormBias", "add_9")]
    assert_matches_onnxruntime(net, m)


def test_layer_norm_without_gamma_gets_a_scale_of_ones():
    net, _ = layer_norm(shape=(3, 4), gamma=False, beta=False, eps=1e-6)
    m, _ = recognize(net)
    assert body(m) == (
        '%div_7_scale = "graph.constant"() {value = dense<[1.0, 1.0, 1.0, 1.0]> : tensor<4xf32>} '
        ': () -> tensor<4xf32> loc("div_7")\n'
        '%y = "graph.layer_normalization"(%x, %div_7_scale) {axis = 1, epsilon = 1e-06, '
        'ptxc.fused = ["rm_1", "sub_2", "pow_3", "rm_4", "add_5", "sqrt_6"]} : '
        '(tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32> loc("div_7")\n'
        '"func.return"(%y) : (tensor<3x4xf32>) -> ()\n')
    assert_matches_onnxruntime(net, m)


@pytest.mark.parametrize("square", ["pow", "mul"])
@pytest.mark.parametrize("recip", [False, True])
@pytest.mark.parametrize("gamma, beta", [(True, True), (True, False), (False, True)])
def test_layer_norm_every_spelling(square, recip, gamma, beta):
    net, _ = layer_norm(square=square, recip=recip, gamma=gamma, beta=beta)
    m, _ = recognize(net)
    assert kinds(m) == ["graph.layer_normalization"]
    assert_matches_onnxruntime(net, m)


def test_layer_norm_over_the_last_two_axes_and_a_gamma_with_leading_ones():
    net, _ = layer_norm(shape=(2, 3, 4), axes=(1, 2), gamma_shape=(1, 1, 4))
    m, _ = recognize(net)
    assert kinds(m) == ["graph.layer_normalization"]
    text = body(m)
    # normalized shape [3, 4]: gamma [1, 1, 4] is reshaped to [1, 4], beta [4] broadcasts
    assert "axis = 1" in text and "(tensor<2x3x4xf32>, tensor<1x4xf32>, tensor<4xf32>)" in text
    assert_matches_onnxruntime(net, m)


def test_real_layer_norm_takes_a_following_bias_add():
    net = ptxc.Network("ln")
    x = net.add_input("x", (2, 4))
    # (an empty optional B input crashes onnxruntime: give LayerNormalization two inputs)
    y = net.add_layer("LayerNormalization", [x, np.linspace(0.5, 1.5, 4).astype(F)],
                      name="ln_1", axis=-1, epsilon=1e-5)[0]
    y = net.add_elementwise(y, np.arange(4, dtype=F), "add", name="add_2")
    y = net.add_elementwise(y, np.arange(4, dtype=F), "add", name="add_3")
    net.mark_output(y, "y")
    m, _ = recognize(net)
    assert kinds(m) == ["graph.layer_normalization", "graph.add"]
    assert 'ptxc.fused = ["add_2"]' in body(m) and 'loc("ln_1")' in body(m)
    assert_matches_onnxruntime(net, m)


def test_residual_add_after_a_layer_norm_is_not_folded():
    net = ptxc.Network("ln")
    x = net.add_input("x", (2, 4))
    y = net.add_layer("LayerNormalization", [x, np.ones(4, F)], name="ln_1", axis=-1)[0]
    net.mark_output(net.add_elementwise(y, x, "add", name="add_2"), "y")
    assert reasons(assert_unchanged(net)) == []


@pytest.mark.parametrize("kw, reason", [
    (dict(axes=(1,)), "div_7 not recognized as LayerNorm: rm_1 averages over axes [1], not the "
                      "trailing axes of a rank-3 tensor"),
    (dict(axes2=(1, 2)), "div_7 not recognized as LayerNorm: rm_1 averages over axes [2] but "
                         "rm_4 over [1, 2]"),
    (dict(exponent=3.0), "div_7 not recognized as LayerNorm: pow_3 raises to 3, not 2"),
])
def test_layer_norm_other_axes_or_constants_say_why(kw, reason):
    net, _ = layer_norm(gamma=False, beta=False, **kw)
    assert reasons(assert_unchanged(net)) == [reason]


@pytest.mark.parametrize("extra, name, users", [
    ("d", "sub_2", "3 users (2 inside the pattern)"), ("sq", "pow_3", "2 users"),
    ("sd", "sqrt_6", "2 users"), ("mean", "rm_1", "2 users")])
def test_layer_norm_with_an_intermediate_read_elsewhere_says_why(extra, name, users):
    net, vals = layer_norm(gamma=False, beta=False)
    net.mark_output(vals[extra], "extra")
    assert reasons(assert_unchanged(net)) == [
        f"div_7 not recognized as LayerNorm: {name} {'has ' + users}"]


def test_layer_norm_read_before_its_gamma_keeps_the_gamma_multiply():
    net, vals = layer_norm()
    net.mark_output(vals["n"], "normalized")
    m, ex = recognize(net)
    assert kinds(m) == ["graph.layer_normalization", "graph.mul", "graph.add"]
    assert "mul_8 not folded into the LayerNorm: div_7 has 2 users" in reasons(ex)
    assert_matches_onnxruntime(net, m)


# ---- softmax ------------------------------------------------------------------------------------

def softmax(shape=(2, 5), axis=1, use_max=True, recip=False, sum_axes=None, max_axes=None):
    """Ops named rmax_1, sub_2, exp_3, rsum_4, div_5 (or recip_5 + mul_5)."""
    net = ptxc.Network("sm")
    x = net.add_input("x", shape)
    t = x
    if use_max:
        mx = net.add_reduce(x, "max", axes=list(max_axes or [axis]), name="rmax_1")
        t = net.add_elementwise(x, mx, "sub", name="sub_2")
    e = net.add_unary(t, "exp", name="exp_3")
    s = net.add_reduce(e, "sum", axes=list(sum_axes or [axis]), name="rsum_4")
    if recip:
        y = net.add_elementwise(e, net.add_unary(s, "recip", name="recip_5"), "mul", name="mul_5")
    else:
        y = net.add_elementwise(e, s, "div", name="div_5")
    net.mark_output(y, "y")
    return net, {"t": t, "e": e, "s": s}


def test_softmax_exact_ir():
    net, _ = softmax()
    m, _ = recognize(net)
    assert body(m) == (
        '%y = "graph.softmax"(%x) {axis = 1, ptxc.fused = ["rmax_1", "sub_2", "exp_3", '
        '"rsum_4"]} : (tensor<2x5xf32>) -> tensor<2x5xf32> loc("div_5")\n'
        '"func.return"(%y) : (tensor<2x5xf32>) -> ()\n')
    assert_matches_onnxruntime(net, m)


@pytest.mark.parametrize("use_max", [True, False])
@pytest.mark.parametrize("recip", [False, True])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_softmax_every_spelling(use_max, recip, axis):
    net, _ = softmax(shape=(2, 3, 4), axis=axis, use_max=use_max, recip=recip)
    m, _ = recognize(net)
    assert kinds(m) == ["graph.softmax"]
    assert f"axis = {axis}" in body(m)
    assert_matches_onnxruntime(net, m)


def test_softmax_keeps_a_max_read_elsewhere_and_normalizes_the_difference():
    net, vals = softmax()
    net.mark_output(vals["t"], "shifted")
    m, _ = recognize(net)
    assert kinds(m) == ["graph.reduce_max", "graph.sub", "graph.softmax"]
    assert_matches_onnxruntime(net, m)


def test_softmax_with_a_max_over_another_axis_is_softmax_of_the_difference():
    net, _ = softmax(shape=(2, 3, 4), axis=2, max_axes=[1])
    m, _ = recognize(net)
    assert kinds(m) == ["graph.reduce_max", "graph.sub", "graph.softmax"]
    assert_matches_onnxruntime(net, m)


def test_softmax_over_two_axes_or_exp_read_elsewhere_says_why():
    net, _ = softmax(shape=(2, 3, 4), axis=1, sum_axes=[1, 2])
    assert reasons(assert_unchanged(net)) == [
        "div_5 not recognized as softmax: rsum_4 sums over axes [1, 2]; softmax takes one axis"]
    net, vals = softmax()
    net.mark_output(vals["e"], "exp")
    assert reasons(assert_unchanged(net)) == [
        "div_5 not recognized as softmax: exp_3 has 3 users (2 inside the pattern)"]
    net, vals = softmax()
    net.mark_output(vals["s"], "sum")
    assert reasons(assert_unchanged(net)) == [
        "div_5 not recognized as softmax: rsum_4 has 2 users"]


def test_exp_divided_by_another_sum_is_not_softmax():
    net = ptxc.Network("sm")
    x = net.add_input("x", (2, 5))
    e = net.add_unary(x, "exp")
    s = net.add_reduce(net.add_unary(e, "exp"), "sum", axes=[1])
    net.mark_output(net.add_elementwise(e, s, "div"), "y")
    assert reasons(assert_unchanged(net)) == []


# ---- HardSwish ----------------------------------------------------------------------------------

def hard_swish(relu6="clip", scale="div", three=3.0, six=6.0, shape=(2, 5), dtype=F):
    """x * relu6(x + 3) / 6; ops named add_1, clip_2 (or lo_2 + hi_2), mul_3, div_4/mul_4."""
    net = ptxc.Network("hs")
    c = lambda v: np.asarray(v, dtype)  # noqa: E731
    x = net.add_input("x", shape, dtype)
    t = net.add_elementwise(c(three), x, "add", name="add_1")
    if relu6 == "clip":
        g = net.add_activation(t, "clip", alpha=0.0, beta=six, name="clip_2")
    elif relu6 == "minmax":
        g = net.add_elementwise(net.add_elementwise(t, c(0), "max", name="lo_2"), c(six), "min",
                                name="hi_2")
    elif relu6 == "maxmin":
        g = net.add_elementwise(c(0), net.add_elementwise(c(six), t, "min", name="hi_2"), "max",
                                name="lo_2")
    else:
        g = net.add_elementwise(net.add_activation(t, "relu", name="lo_2"), c(six), "min",
                                name="hi_2")
    if scale == "div":
        y = net.add_elementwise(net.add_elementwise(x, g, "mul", name="mul_3"), c(6), "div",
                                name="div_4")
    elif scale == "mul":
        y = net.add_elementwise(net.add_elementwise(g, x, "mul", name="mul_3"), c(1 / 6), "mul",
                                name="mul_4")
    else:  # x * (relu6 / 6)
        y = net.add_elementwise(x, net.add_elementwise(g, c(6), "div", name="div_3"), "mul",
                                name="mul_4")
    net.mark_output(y, "y")
    return net, {"t": t, "g": g}


def test_hard_swish_exact_ir():
    net, _ = hard_swish()
    m, _ = recognize(net)
    assert body(m) == (
        '%y = "graph.hard_swish"(%x) {ptxc.fused = ["add_1", "clip_2", "mul_3"]} : '
        '(tensor<2x5xf32>) -> tensor<2x5xf32> loc("div_4")\n'
        '"func.return"(%y) : (tensor<2x5xf32>) -> ()\n')
    assert_matches_onnxruntime(net, m)


@pytest.mark.parametrize("relu6", ["clip", "minmax", "maxmin", "relumin"])
@pytest.mark.parametrize("scale", ["div", "mul", "gate"])
def test_hard_swish_every_spelling(relu6, scale):
    net, _ = hard_swish(relu6, scale, shape=(2, 3, 4))
    m, _ = recognize(net)
    assert kinds(m) == ["graph.hard_swish"]
    assert_matches_onnxruntime(net, m)


def test_hard_swish_from_hard_sigmoid():
    net = ptxc.Network("hs")
    x = net.add_input("x", (2, 5))
    h = net.add_activation(x, "hard_sigmoid", alpha=1 / 6, beta=0.5, name="hsig_1")
    net.mark_output(net.add_elementwise(h, x, "mul", name="mul_2"), "y")
    m, _ = recognize(net)
    assert body(m) == (
        '%y = "graph.hard_swish"(%x) {ptxc.fused = ["hsig_1"]} : (tensor<2x5xf32>) -> '
        'tensor<2x5xf32> loc("mul_2")\n'
        '"func.return"(%y) : (tensor<2x5xf32>) -> ()\n')
    assert_matches_onnxruntime(net, m)


def test_hard_sigmoid_with_other_slope_is_not_hard_swish():
    net = ptxc.Network("hs")
    x = net.add_input("x", (2, 5))
    h = net.add_activation(x, "hard_sigmoid", name="hsig_1")  # ONNX default alpha 0.2
    net.mark_output(net.add_elementwise(x, h, "mul", name="mul_2"), "y")
    assert reasons(assert_unchanged(net)) == [
        "mul_2 not recognized as HardSwish: hsig_1 has alpha 0.2, beta 0.5; hard-swish needs "
        "1/6 and 0.5"]


@pytest.mark.parametrize("kw, reason", [
    (dict(three=2.0), "div_4 not recognized as HardSwish: add_1 adds 2, not 3"),
    (dict(six=5.0), "div_4 not recognized as HardSwish: clip_2 clips above at 5, not 6"),
    (dict(relu6="minmax", six=8.0), "div_4 not recognized as HardSwish: hi_2 clips above at 8, "
                                    "not 6"),
])
def test_hard_swish_wrong_constant_says_why(kw, reason):
    net, _ = hard_swish(**kw)
    assert reasons(assert_unchanged(net)) == [reason]


def test_hard_swish_divided_by_another_number_says_why():
    net = ptxc.Network("hs")
    x = net.add_input("x", (2, 5))
    g = net.add_activation(net.add_elementwise(x, F(3), "add"), "clip", alpha=0.0, beta=6.0)
    net.mark_output(net.add_elementwise(net.add_elementwise(x, g, "mul"), F(5), "div",
                                        name="div_4"), "y")
    assert reasons(assert_unchanged(net)) == [
        "div_4 not recognized as HardSwish: div_4 divides by 5, not 6"]


def test_hard_swish_with_relu6_read_elsewhere_says_why():
    net, vals = hard_swish()
    net.mark_output(vals["g"], "relu6")
    assert reasons(assert_unchanged(net)) == [
        "div_4 not recognized as HardSwish: clip_2 has 2 users"]


def test_integer_hard_swish_is_not_recognized():
    # integer division truncates: x * clip(x + 3, 0, 6) / 6 is not hard_swish on int32
    net, _ = hard_swish(dtype=np.int32)
    assert reasons(assert_unchanged(net)) == []


# ---- several patterns in one model --------------------------------------------------------------

def test_transformer_block_written_out_becomes_three_ops():
    """LayerNorm -> MatMul -> GELU -> MatMul -> softmax, all decomposed, with x read by both the
    LayerNorm and a residual add: the pass leaves layer_normalization, gelu and softmax."""
    rng = np.random.default_rng(0)
    net = ptxc.Network("block")
    x = net.add_input("x", (2, 3, 8))
    mean = net.add_reduce(x, "mean", axes=[2])
    d = net.add_elementwise(x, mean, "sub")
    var = net.add_reduce(net.add_elementwise(d, d, "mul"), "mean", axes=[2])
    n = net.add_elementwise(d, net.add_unary(net.add_elementwise(var, F(1e-6), "add"), "sqrt"),
                            "div")
    n = net.add_elementwise(net.add_elementwise(n, rng.uniform(0.5, 1.5, 8).astype(F), "mul"),
                            rng.standard_normal(8).astype(F), "add")
    h = net.add_matmul(n, rng.standard_normal((8, 8)).astype(F))
    gate = net.add_elementwise(net.add_unary(net.add_elementwise(h, F(0.70710677), "mul"), "erf"),
                               F(1.0), "add")
    g = net.add_elementwise(net.add_elementwise(h, F(0.5), "mul"), gate, "mul")
    r = net.add_elementwise(net.add_matmul(g, rng.standard_normal((8, 8)).astype(F)), x, "add")
    e = net.add_unary(net.add_elementwise(r, net.add_reduce(r, "max", axes=[2]), "sub"), "exp")
    net.mark_output(net.add_elementwise(e, net.add_reduce(e, "sum", axes=[2]), "div"), "y")
    m, ex = recognize(net)
    assert kinds(m) == ["graph.layer_normalization", "graph.matmul", "graph.gelu",
                        "graph.matmul", "graph.add", "graph.softmax"]
    assert reasons(ex) == []
    assert_matches_onnxruntime(net, m)
