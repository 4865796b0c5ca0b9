"""The passes that change weights and layout, on printed IR: fold-batchnorm (batch norm and
per-channel mul/div/add/sub folded into conv, conv-transpose, gemm and matmul weights),
merge-siblings (sibling layers reading one input merged and split), eliminate-concat (concats
marked in place); where each fires, where it must not and the reason --explain gives; the light
model-zoo models (Inception's 1x1 branches merged, every concat in place)."""

import collections

import numpy as np
import pytest

from support import light_models
from support.ir_text import body_lines as body_text
from support.ir_text import module
import ptxc
from ptxc.ir import interpret, print_ir
from ptxc.rewrite import Explain, PassManager, get_pass, producer

def run(pipeline: str, m) -> Explain:
    """Run ``pipeline`` with verification and check-numerics on; returns what explain saw."""
    ex = Explain()
    PassManager(pipeline, check_numerics=True, explain=ex).run(m)
    return ex


def reasons(ex: Explain) -> list[str]:
    return [r.reason for r in ex.not_fired()]


def unchanged(pipeline: str, m) -> list[str]:
    """Run ``pipeline``, expect no change; returns the explain reasons."""
    before = print_ir(m)
    ex = Explain()
    assert PassManager(pipeline, check_numerics=True, explain=ex).run(m) is False
    assert print_ir(m) == before
    return reasons(ex)


def ops(m) -> list[str]:
    return [op.name for op in m.walk()][2:-1]


def const(name: str, values, shape, loc: str | None = None) -> str:
    t = f"tensor<{'x'.join(map(str, shape))}xf32>"
    vals = ", ".join(repr(float(v)) for v in np.asarray(values, np.float64).reshape(-1))
    return (f'%{name} = "graph.constant"() {{value = dense<[{vals}]> : {t}}} : () -> {t}'
            + (f' loc("{loc}")' if loc else ""))


def bn(out: str, x: str, t: str, c: int, loc: str, params=None, eps="1.0e-05") -> str:
    """Constants s/b/m/v for ``c`` channels and a batch norm of ``x`` (type ``t``)."""
    p = params or [np.linspace(0.5, 1.5, c), np.linspace(-0.2, 0.3, c),
                   np.linspace(0.1, -0.1, c), np.linspace(0.8, 1.2, c)]
    lines = [const(f"{out}_{k}", v, (c,)) for k, v in zip("sbmv", p)]
    ct = f"tensor<{c}xf32>"
    lines.append(f'%{out} = "graph.batch_normalization"(%{x}, %{out}_s, %{out}_b, %{out}_m, '
                 f'%{out}_v) {{epsilon = {eps}}} : ({t}, {ct}, {ct}, {ct}, {ct}) -> {t} '
                 f'loc("{loc}")')
    return "\n".join(lines)


CONV_ATTRS = "dilations = [1, 1], group = 1, kernel_shape = [1, 1], pads = [0, 0, 0, 0], " \
             "strides = [1, 1]"
X4 = "tensor<1x2x2x2xf32>"


def conv(out, x, w, wt, b=None, bt=None, attrs=CONV_ATTRS, loc=None, xt=X4, yt=X4):
    ins = ", ".join(f"%{v}" for v in (x, w, b) if v)
    types = ", ".join([xt, wt] + ([bt] if b else []))
    return (f'%{out} = "graph.conv"({ins}) {{{attrs}}} : ({types}) -> {yt}'
            + (f' loc("{loc}")' if loc else ""))


# ==== fold-batchnorm ==============================================================================

def test_conv_bn_mul_add_all_fold_into_the_conv_weights_and_bias():
    """DenseNet / Inception-v2's pattern: conv, BatchNormalization, then Mul and Add by
    (unsqueezed, already folded) per-channel constants."""
    m = module(f"%x: {X4}", "\n".join([
        const("w", [1, 2, 3, 4], (2, 2, 1, 1), "w"),
        const("b", [0.5, -0.5], (2,), "b"),
        conv("c", "x", "w", "tensor<2x2x1x1xf32>", "b", "tensor<2xf32>", loc="conv_1"),
        bn("n", "c", X4, 2, "bn_2", params=[[2.0, 1.0], [0.5, -1.0], [1.0, 0.0], [4.0, 0.25]],
           eps="0.0"),
        const("k", [2.0, -1.0], (2, 1, 1)),
        f'%mu = "graph.mul"(%n, %k) : ({X4}, tensor<2x1x1xf32>) -> {X4} loc("mul_3")',
        const("d", [1.0, 2.0], (1, 2, 1, 1)),
        f'%ad = "graph.add"(%d, %mu) : (tensor<1x2x1x1xf32>, {X4}) -> {X4} loc("add_4")',
        f'%y = "graph.relu"(%ad) : ({X4}) -> {X4} loc("relu_5")',
    ]), [("%y", X4)])
    before = interpret(m, {"x": np.ones((1, 2, 2, 2), np.float32)})
    run("fold-batchnorm", m)
    # s = [1, 2] (bn) * [2, -1] (mul); b' = ((b - mean) * bn_s + bn_b) * k + d
    assert body_text(m) == [
        '%w = "graph.constant"() {value = dense<[2.0, 4.0, -6.0, -8.0]> : '
        'tensor<2x2x1x1xf32>} : () -> tensor<2x2x1x1xf32> loc("w")',
        '%b = "graph.constant"() {value = dense<[1.0, 4.0]> : tensor<2xf32>} : () -> '
        'tensor<2xf32> loc("b")',
        '%ad = "graph.conv"(%x, %w, %b) {dilations = [1, 1], group = 1, kernel_shape = [1, 1], '
        'pads = [0, 0, 0, 0], ptxc.fused = ["bn_2", "mul_3", "add_4"], strides = [1, 1]} : '
        '(tensor<1x2x2x2xf32>, tensor<2x2x1x1xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32> '
        'loc("conv_1")',
        '%y = "graph.relu"(%ad) : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32> loc("relu_5")',
        '"func.return"(%y) : (tensor<1x2x2x2xf32>) -> ()',
    ]
    after = interpret(m, {"x": np.ones((1, 2, 2, 2), np.float32)})
    np.testing.assert_allclose(after["r0"], before["r0"], rtol=1e-6)


def test_gemm_trans_b_with_bias_and_beta_folds_bn_into_b_rows_and_c():
    g = "tensor<2x3xf32>"
    m = module("%x: tensor<2x2xf32>", "\n".join([
        const("w", [1, 2, 3, 4, 5, 6], (3, 2), "fc_w"),
        const("c", [1, 1, 1], (3,), "fc_b"),
        f'%g = "graph.gemm"(%x, %w, %c) {{beta = 0.5, transB = 1}} : (tensor<2x2xf32>, '
        f'tensor<3x2xf32>, tensor<3xf32>) -> {g} loc("fc_1")',
        bn("n", "g", g, 3, "bn_2", params=[[1, 2, 3], [0, 0, 1], [0.5, 0, 0], [1, 1, 1]],
           eps="0.0"),
    ]), [("%n", g)])
    run("fold-batchnorm", m)
    assert body_text(m) == [
        '%w = "graph.constant"() {value = dense<[1.0, 2.0, 6.0, 8.0, 15.0, 18.0]> : '
        'tensor<3x2xf32>} : () -> tensor<3x2xf32> loc("fc_w")',
        '%c = "graph.constant"() {value = dense<[0.0, 1.0, 2.5]> : tensor<3xf32>} : () -> '
        'tensor<3xf32> loc("fc_b")',
        '%n = "graph.gemm"(%x, %w, %c) {beta = 1.0, ptxc.fused = ["bn_2"], transB = 1} : '
        '(tensor<2x2xf32>, tensor<3x2xf32>, tensor<3xf32>) -> tensor<2x3xf32> loc("fc_1")',
        '"func.return"(%n) : (tensor<2x3xf32>) -> ()',
    ]


def test_matmul_bn_becomes_matmul_plus_bias_add_and_a_later_mul_updates_both():
    t = "tensor<2x2xf32>"
    m = module(f"%x: {t}", "\n".join([
        const("w", [1, 2, 3, 4], (2, 2), "w"),
        f'%mm = "graph.matmul"(%x, %w) : ({t}, {t}) -> {t} loc("mm_1")',
        bn("n", "mm", t, 2, "bn_2", params=[[1, 2], [1, 0], [0, 1], [1, 1]], eps="0.0"),
        const("k", [3, 0.5], (2,)),
        f'%y = "graph.mul"(%k, %n) : (tensor<2xf32>, {t}) -> {t} loc("mul_3")',
    ]), [("%y", t)])
    run("fold-batchnorm", m)
    assert body_text(m) == [
        '%w = "graph.constant"() {value = dense<[3.0, 2.0, 9.0, 4.0]> : tensor<2x2xf32>} : '
        '() -> tensor<2x2xf32> loc("w")',
        '%0 = "graph.matmul"(%x, %w) {ptxc.fused = ["bn_2", "mul_3"]} : (tensor<2x2xf32>, '
        'tensor<2x2xf32>) -> tensor<2x2xf32> loc("mm_1")',
        '%w_bias = "graph.constant"() {value = dense<[3.0, -1.0]> : tensor<2xf32>} : () -> '
        'tensor<2xf32> loc("bn_2")',
        '%y = "graph.add"(%0, %w_bias) : (tensor<2x2xf32>, tensor<2xf32>) -> tensor<2x2xf32> '
        'loc("bn_2")',
        '"func.return"(%y) : (tensor<2x2xf32>) -> ()',
    ]


def test_grouped_conv_transpose_sub_and_div_fold_numerically_exact():
    rng = np.random.default_rng(0)
    xt, yt = "tensor<1x4x3x3xf32>", "tensor<1x6x5x5xf32>"
    w = rng.standard_normal((4, 3, 3, 3)).round(2)   # (C, M/g, k, k), group 2 -> M = 6
    ct_attrs = ("dilations = [1, 1], group = 2, kernel_shape = [3, 3], output_padding = [0, 0], "
                "pads = [0, 0, 0, 0], strides = [1, 1]")
    body = "\n".join([
        const("w", w, w.shape),
        f'%ct = "graph.conv_transpose"(%x, %w) {{{ct_attrs}}} : ({xt}, tensor<4x3x3x3xf32>) -> '
        f'{yt} loc("deconv_1")',
        bn("n", "ct", yt, 6, "bn_2"),
        const("k", [1, 2, 3, 4, 5, 6], (6, 1, 1)),
        f'%s = "graph.sub"(%k, %n) : (tensor<6x1x1xf32>, {yt}) -> {yt} loc("sub_3")',
        const("q", [4.0], (1,)),
        f'%y = "graph.div"(%s, %q) : ({yt}, tensor<1xf32>) -> {yt} loc("div_4")',
    ])
    m = module(f"%x: {xt}", body, [("%y", yt)])
    run("fold-batchnorm", m)    # check-numerics compares before/after
    assert ops(m) == ["graph.constant", "graph.constant", "graph.conv_transpose"]
    (ct,) = [op for op in m.walk() if op.name == "graph.conv_transpose"]
    assert ct.attributes["ptxc.fused"] == ("bn_2", "sub_3", "div_4") and ct.loc == "deconv_1"


def test_gemm_without_bias_gets_one_and_int_gemm_is_left_alone():
    m = module("%x: tensor<1x2xf32>", "\n".join([
        const("w", [1, 2, 3, 4], (2, 2), "w"),
        '%g = "graph.gemm"(%x, %w) {alpha = 2.0} : (tensor<1x2xf32>, tensor<2x2xf32>) -> '
        'tensor<1x2xf32> loc("fc_1")',
        const("k", [1, -1], (1, 2)),
        '%y = "graph.sub"(%g, %k) : (tensor<1x2xf32>, tensor<1x2xf32>) -> tensor<1x2xf32> '
        'loc("sub_2")',
    ]), [("%y", "tensor<1x2xf32>")])
    run("fold-batchnorm", m)
    assert body_text(m)[1:3] == [
        '%w_bias = "graph.constant"() {value = dense<[-1.0, 1.0]> : tensor<2xf32>} : () -> '
        'tensor<2xf32> loc("fc_1")',
        '%y = "graph.gemm"(%x, %w, %w_bias) {alpha = 2.0, ptxc.fused = ["sub_2"]} : '
        '(tensor<1x2xf32>, tensor<2x2xf32>, tensor<2xf32>) -> tensor<1x2xf32> loc("fc_1")',
    ]
    i = "tensor<1x2xi32>"
    m = module(f"%x: {i}", "\n".join([
        '%w = "graph.constant"() {value = dense<[1, 2, 3, 4]> : tensor<2x2xi32>} : () -> '
        'tensor<2x2xi32>',
        f'%g = "graph.gemm"(%x, %w) : ({i}, tensor<2x2xi32>) -> {i} loc("fc_1")',
        '%k = "graph.constant"() {value = dense<[2, 3]> : tensor<2xi32>} : () -> tensor<2xi32>',
        f'%y = "graph.mul"(%g, %k) : ({i}, tensor<2xi32>) -> {i} loc("mul_2")',
    ]), [("%y", i)])
    assert unchanged("fold-batchnorm", m) == [
        "mul_2 not folded into fc_1: fc_1 computes i32, not a float type"]


def _conv_bn(extra: str = "", ret=("%n", X4), w_arg: bool = False, mean_arg: bool = False):
    args = f"%x: {X4}" + (", %w: tensor<2x2x1x1xf32>" if w_arg else "") + (
        ", %mean: tensor<2xf32>" if mean_arg else "")
    lines = [] if w_arg else [const("w", [1, 2, 3, 4], (2, 2, 1, 1))]
    lines += [conv("c", "x", "w", "tensor<2x2x1x1xf32>", loc="conv_2"), bn("n", "c", X4, 2, "bn_3")]
    if mean_arg:
        lines[-1] = "\n".join(ln for ln in lines[-1].replace("%n_m, ", "%mean, ").splitlines()
                              if not ln.startswith("%n_m ="))
    return module(args, "\n".join(lines + ([extra] if extra else [])),
                  [ret] if isinstance(ret, tuple) else ret)


@pytest.mark.parametrize("case, reason", [
    ("two_users", "bn_3 not folded into conv_2: conv_2 has 2 users"),
    ("conv_is_result", "bn_3 not folded into conv_2: conv_2 has 2 users"),
    ("weights_arg", "bn_3 not folded into conv_2: weights are not constant"),
    ("mean_arg", "bn_3 not folded into conv_2: the batch norm's parameters are not constant"),
])
def test_fold_batchnorm_declines_and_says_why(case, reason):
    if case == "two_users":
        m = _conv_bn(f'%r = "graph.relu"(%c) : ({X4}) -> {X4} loc("relu_4")',
                     ret=[("%n", X4), ("%r", X4)])
    elif case == "conv_is_result":
        m = _conv_bn(ret=[("%n", X4), ("%c", X4)])
    elif case == "weights_arg":
        m = _conv_bn(w_arg=True)
    else:
        m = _conv_bn(mean_arg=True)
    if case == "mean_arg":
        assert unchanged("fold-batchnorm", m) == [reason]
        return
    # the batch norm that cannot fold becomes a per-channel multiply and add
    assert reason in reasons(run("fold-batchnorm", m))
    assert "graph.batch_normalization" not in ops(m)
    assert {"graph.mul", "graph.add"} <= set(ops(m))


def test_fold_declines_for_non_channel_constants_and_batched_matmul_axes():
    m = _conv_bn("\n".join([
        const("k", [1, 2, 3, 4], (1, 1, 2, 2)),
        conv("c2", "x", "w", "tensor<2x2x1x1xf32>", loc="conv_4"),
        f'%y = "graph.mul"(%c2, %k) : ({X4}, tensor<1x1x2x2xf32>) -> {X4} loc("mul_5")',
    ]), ret=[("%n", X4), ("%c", X4), ("%y", X4)])
    got = reasons(run("fold-batchnorm", m))
    assert "bn_3 not folded into conv_2: conv_2 has 2 users" in got
    assert "mul_5 not folded into conv_4: the constant [1, 1, 2, 2] is not per output channel" \
        in got
    t3 = "tensor<2x2x2xf32>"
    m = module(f"%x: {t3}", "\n".join([
        const("w", [1, 2, 3, 4], (2, 2)),
        f'%mm = "graph.matmul"(%x, %w) : ({t3}, tensor<2x2xf32>) -> {t3} loc("mm_1")',
        bn("n", "mm", t3, 2, "bn_2"),
    ]), [("%n", t3)])
    assert "bn_2 not folded into mm_1: the normalized axis 1 is not its output channel axis 2" \
        in reasons(run("fold-batchnorm", m))
    assert "graph.batch_normalization" not in ops(m)


def test_a_batch_norm_that_folds_nowhere_becomes_mul_and_add():
    m = module(f"%x: {X4}", "\n".join([
        f'%p = "graph.max_pool"(%x) {{ceil_mode = 0, dilations = [1, 1], kernel_shape = [1, 1], '
        f'pads = [0, 0, 0, 0], strides = [1, 1]}} : ({X4}) -> {X4} loc("pool_1")',
        bn("n", "p", X4, 2, "bn_2", params=[[2.0, 1.0], [0.5, 0.0], [1.0, 0.0], [4.0, 0.25]],
           eps="0.0"),
    ]), [("%n", X4)])
    assert reasons(run("fold-batchnorm", m)) == []
    assert body_text(m)[1:5] == [
        '%n_scale = "graph.constant"() {value = dense<[1.0, 2.0]> : tensor<2x1x1xf32>} : () -> '
        'tensor<2x1x1xf32> loc("bn_2")',
        '%0 = "graph.mul"(%p, %n_scale) : (tensor<1x2x2x2xf32>, tensor<2x1x1xf32>) -> '
        'tensor<1x2x2x2xf32> loc("bn_2")',
        '%n_shift = "graph.constant"() {value = dense<[-0.5, 0.0]> : tensor<2x1x1xf32>} : () -> '
        'tensor<2x1x1xf32> loc("bn_2")',
        '%n = "graph.add"(%0, %n_shift) : (tensor<1x2x2x2xf32>, tensor<2x1x1xf32>) -> '
        'tensor<1x2x2x2xf32> loc("bn_2")',
    ]


def test_matmul_plus_constant_is_the_bias_form_and_stays():
    t = "tensor<2x2xf32>"
    m = module(f"%x: {t}", "\n".join([
        const("w", [1, 2, 3, 4], (2, 2)),
        f'%mm = "graph.matmul"(%x, %w) : ({t}, {t}) -> {t} loc("mm_1")',
        const("k", [1, 2], (2,)),
        f'%y = "graph.add"(%mm, %k) : ({t}, tensor<2xf32>) -> {t} loc("add_2")',
    ]), [("%y", t)])
    assert unchanged("fold-batchnorm", m) == []


# ==== merge-siblings ==============================================================================

def test_qkv_gemms_merge_with_trans_b_normalized_and_alpha_folded():
    a, o = "tensor<2x2xf32>", "tensor<2x2xf32>"
    m = module(f"%x: {a}", "\n".join([
        const("wq", [1, 2, 3, 4], (2, 2), "q_w"),
        const("bq", [0.5, 0.25], (2,), "q_b"),
        f'%q = "graph.gemm"(%x, %wq, %bq) {{transB = 1}} : ({a}, {a}, tensor<2xf32>) -> {o} '
        f'loc("q_proj")',
        const("wk", [5, 6, 7, 8], (2, 2), "k_w"),
        f'%k = "graph.gemm"(%x, %wk) {{transB = 1}} : ({a}, {a}) -> {o} loc("k_proj")',
        const("wv", [1, 0, 0, 1], (2, 2), "v_w"),
        const("bv", [1, 2], (1, 2), "v_b"),
        f'%v = "graph.gemm"(%x, %wv, %bv) {{alpha = 2.0}} : ({a}, {a}, tensor<1x2xf32>) -> {o} '
        f'loc("v_proj")',
    ]), [("%q", o), ("%k", o), ("%v", o)])
    run("merge-siblings", m)
    assert body_text(m) == [
        '%wq_merged = "graph.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, '
        '2.0, 0.0, 0.0, 2.0]> : tensor<6x2xf32>} : () -> tensor<6x2xf32> loc("q_proj")',
        '%bq_merged = "graph.constant"() {value = dense<[0.5, 0.25, 0.0, 0.0, 1.0, 2.0]> : '
        'tensor<6xf32>} : () -> tensor<6xf32> loc("q_proj")',
        '%q_merged = "graph.gemm"(%x, %wq_merged, %bq_merged) {alpha = 1.0, ptxc.merged = '
        '["q_proj", "k_proj", "v_proj"], transB = 1} : (tensor<2x2xf32>, tensor<6x2xf32>, '
        'tensor<6xf32>) -> tensor<2x6xf32> loc("q_proj")',
        '%q, %k, %v = "graph.split"(%q_merged) {axis = 1, split = [2, 2, 2]} : '
        '(tensor<2x6xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) '
        'loc("q_proj")',
        '"func.return"(%q, %k, %v) : (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) -> ()',
    ]


def test_matmul_siblings_merge_along_the_last_axis_before_the_first_reader():
    a = "tensor<2x1x3xf32>"
    m = module(f"%x: {a}", "\n".join([
        const("w1", [1, 2, 3, 4, 5, 6], (3, 2)),
        f'%m1 = "graph.matmul"(%x, %w1) : ({a}, tensor<3x2xf32>) -> tensor<2x1x2xf32> '
        f'loc("mm_1")',
        '%r1 = "graph.relu"(%m1) : (tensor<2x1x2xf32>) -> tensor<2x1x2xf32> loc("relu_2")',
        const("w2", [7, 8, 9], (3, 1)),
        f'%m2 = "graph.matmul"(%x, %w2) : ({a}, tensor<3x1xf32>) -> tensor<2x1x1xf32> '
        f'loc("mm_3")',
    ]), [("%r1", "tensor<2x1x2xf32>"), ("%m2", "tensor<2x1x1xf32>")])
    run("merge-siblings", m)
    assert body_text(m)[:4] == [
        '%w1_merged = "graph.constant"() {value = dense<[1.0, 2.0, 7.0, 3.0, 4.0, 8.0, 5.0, 6.0, '
        '9.0]> : tensor<3x3xf32>} : () -> tensor<3x3xf32> loc("mm_1")',
        '%m1_merged = "graph.matmul"(%x, %w1_merged) {ptxc.merged = ["mm_1", "mm_3"]} : '
        '(tensor<2x1x3xf32>, tensor<3x3xf32>) -> tensor<2x1x3xf32> loc("mm_1")',
        '%m1, %m2 = "graph.split"(%m1_merged) {axis = 2, split = [2, 1]} : (tensor<2x1x3xf32>) '
        '-> (tensor<2x1x2xf32>, tensor<2x1x1xf32>) loc("mm_1")',
        '%r1 = "graph.relu"(%m1) : (tensor<2x1x2xf32>) -> tensor<2x1x2xf32> loc("relu_2")',
    ]


def fused_conv(out, w, wt, body_op: str, loc: str, extra: str = "", extra_t: str = "") -> str:
    """A fused 1x1 conv of %x (no bias) whose epilogue applies ``body_op`` (a math op name
    applied to the accumulator, or "max0" for relu); with ``extra``, it adds that tensor."""
    if extra:
        body = [f'%{out}_o = "arith.add"(%{out}_acc, %{out}_e) : (f32, f32) -> f32']
    elif body_op == "max0":
        body = [f'%{out}_z = "arith.constant"() {{type = f32, value = 0.0}} : () -> f32',
                f'%{out}_o = "arith.max"(%{out}_acc, %{out}_z) : (f32, f32) -> f32']
    else:
        body = [f'%{out}_o = "{body_op}"(%{out}_acc) : (f32) -> f32']
    args = f"%{out}_acc: f32" + (f", %{out}_e: f32" if extra else "")
    seg = "[1, 1, 0, 1]" if extra else "[1, 1, 0, 0]"
    ins = f"%x, %{w}" + (f", %{extra}" if extra else "")
    types = f"{X4}, {wt}" + (f", {extra_t}" if extra else "")
    lines = [f'%{out} = "graph.fused_conv"({ins}) ({{', f"^bb0({args}):"] + body + [
        f'"graph.yield"(%{out}_o) : (f32) -> ()',
        f'}}) {{{CONV_ATTRS}, operand_segments = {seg}}} : ({types}) -> {X4} loc("{loc}")']
    return "\n".join(lines)


def test_fused_convs_with_equal_epilogues_merge_and_keep_the_epilogue():
    m = module(f"%x: {X4}", "\n".join([
        const("w1", [1, 2, 3, 4], (2, 2, 1, 1)),
        fused_conv("a", "w1", "tensor<2x2x1x1xf32>", "max0", "conv_1"),
        const("w2", [5, 6, 7, 8], (2, 2, 1, 1)),
        fused_conv("b", "w2", "tensor<2x2x1x1xf32>", "max0", "conv_2"),
        const("w3", [1, 1, 1, 1], (2, 2, 1, 1)),
        fused_conv("c", "w3", "tensor<2x2x1x1xf32>", "math.tanh", "conv_3"),
    ]), [("%a", X4), ("%b", X4), ("%c", X4)])
    ex = run("merge-siblings", m)
    # the merged op goes just before the first reader of a sibling (here func.return)
    assert body_text(m)[6:] == [
        '%w1_merged = "graph.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]> '
        ': tensor<4x2x1x1xf32>} : () -> tensor<4x2x1x1xf32> loc("conv_1")',
        '%a_merged = "graph.fused_conv"(%x, %w1_merged) ({',
        '^bb0(%a_acc: f32):',
        '%a_z = "arith.constant"() {type = f32, value = 0.0} : () -> f32',
        '%a_o = "arith.max"(%a_acc, %a_z) : (f32, f32) -> f32',
        '"graph.yield"(%a_o) : (f32) -> ()',
        '}) {dilations = [1, 1], group = 1, kernel_shape = [1, 1], operand_segments = '
        '[1, 1, 0, 0], pads = [0, 0, 0, 0], ptxc.merged = ["conv_1", "conv_2"], strides = '
        '[1, 1]} : (tensor<1x2x2x2xf32>, tensor<4x2x1x1xf32>) -> tensor<1x4x2x2xf32> '
        'loc("conv_1")',
        '%a, %b = "graph.split"(%a_merged) {axis = 1, split = [2, 2]} : (tensor<1x4x2x2xf32>) '
        '-> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) loc("conv_1")',
        '"func.return"(%a, %b, %c) : (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>, '
        'tensor<1x2x2x2xf32>) -> ()',
    ]
    assert "conv_3 and conv_1 read the same input but differ in epilogue" in reasons(ex)


@pytest.mark.parametrize("case, reason", [
    ("strides", "conv_3 and conv_5 read the same input but differ in strides"),
    ("pads", "conv_3 and conv_5 read the same input but differ in pads"),
    ("dilations", "conv_3 and conv_5 read the same input but differ in dilations"),
    ("group", "conv_3 and conv_5 read the same input but conv_5 is a grouped convolution "
              "(group 2)"),
    ("weights", "conv_3 and conv_5 read the same input but conv_5's weights are not constant"),
    ("kind", "conv_3 and conv_5 read the same input but differ in epilogue"),
])
def test_merge_siblings_declines_and_says_why(case, reason):
    wt = "tensor<2x2x1x1xf32>"
    second = conv("b", "x", "w2", wt, loc="conv_5")
    args = f"%x: {X4}"
    lines = [const("w1", [1, 2, 3, 4], (2, 2, 1, 1)), conv("a", "x", "w1", wt, loc="conv_3")]
    if case == "strides":
        second = conv("b", "x", "w2", wt, loc="conv_5", yt="tensor<1x2x1x1xf32>",
                      attrs=CONV_ATTRS.replace("strides = [1, 1]", "strides = [2, 2]"))
    elif case == "pads":
        second = conv("b", "x", "w2", wt, loc="conv_5", yt="tensor<1x2x4x4xf32>",
                      attrs=CONV_ATTRS.replace("pads = [0, 0, 0, 0]", "pads = [1, 1, 1, 1]"))
    elif case == "dilations":  # (a 1x1 kernel: the same shape, the merge itself would pass)
        second = conv("b", "x", "w2", wt, loc="conv_5",
                      attrs=CONV_ATTRS.replace("dilations = [1, 1]", "dilations = [2, 2]"))
    elif case == "group":
        second = conv("b", "x", "w2", "tensor<2x1x1x1xf32>", loc="conv_5",
                      attrs=CONV_ATTRS.replace("group = 1", "group = 2"))
    elif case == "kind":
        second = fused_conv("b", "w2", wt, "max0", "conv_5")
    if case == "weights":
        args += f", %w2: {wt}"
    else:
        shape = (2, 1, 1, 1) if case == "group" else (2, 2, 1, 1)
        lines.append(const("w2", np.arange(np.prod(shape)), shape))
    lines.append(second)
    yt = second.split("-> ")[-1].split(" loc")[0]
    m = module(args, "\n".join(lines), [("%a", X4), ("%b", yt)])
    got = unchanged("merge-siblings", m)
    assert got[0] == reason
    if case != "weights" and case != "group":
        assert len(got) == 2 and got[1].startswith("conv_5 and conv_3 read the same input but ")


def test_sibling_convs_that_differ_only_in_dilation_match_onnxruntime():
    """Two 3x3 convs of one input with the same strides and pads and dilations 1 and 2 (an
    ASPP-like pair) compute different windows and shapes: they stay apart, and the compiled
    model matches onnxruntime."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 3, 9, 9)).astype(np.float32)
    ws = [rng.standard_normal((4, 3, 3, 3)).astype(np.float32) for _ in range(2)]
    nodes = [helper.make_node("Conv", ["x", f"w{d}"], [f"y{d}"], kernel_shape=[3, 3],
                              pads=[2, 2, 2, 2], dilations=[d, d]) for d in (1, 2)]
    g = helper.make_graph(
        nodes, "aspp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 9])],
        [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, 4, 11, 11]),
         helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 4, 9, 9])],
        [numpy_helper.from_array(w, f"w{d}") for d, w in zip((1, 2), ws)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip(["y1", "y2"], sess.run(None, {"x": x})))
    got = ptxc.compile(model, target="cpu", cache=False).run({"x": x})
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-4, err_msg=k)


def test_fused_siblings_with_epilogue_inputs_stay_apart():
    m = module(f"%x: {X4}, %r: {X4}", "\n".join([
        const("w1", [1, 2, 3, 4], (2, 2, 1, 1)),
        fused_conv("a", "w1", "tensor<2x2x1x1xf32>", "add", "conv_1", extra="r", extra_t=X4),
        const("w2", [5, 6, 7, 8], (2, 2, 1, 1)),
        fused_conv("b", "w2", "tensor<2x2x1x1xf32>", "max0", "conv_2"),
    ]), [("%a", X4), ("%b", X4)])
    assert unchanged("merge-siblings", m)[0] == \
        "conv_1 and conv_2 read the same input but conv_1's epilogue reads other tensors"


def test_inception_v1_sibling_1x1_convs_are_merged():
    m = ptxc.import_onnx(light_models.path("inception_v1"))
    PassManager("fold-constants,merge-siblings").run(m)
    convs = collections.defaultdict(list)
    for op in m.walk():
        if op.name == "graph.conv" and op.attr("group") == 1:
            key = tuple(op.attr(k) for k in ("kernel_shape", "strides", "pads", "dilations"))
            convs[(id(op.operands[0]), key)].append(op.loc)
    assert all(len(v) == 1 for v in convs.values()), [v for v in convs.values() if len(v) > 1]
    merged = [op for op in m.walk() if "ptxc.merged" in op.attributes]
    assert len(merged) == 9 and all(len(op.attributes["ptxc.merged"]) == 3 for op in merged)


# ==== eliminate-concat ============================================================================

T = "tensor<1x2x4xf32>"


def test_densenet_chain_of_concats_is_in_place_nested():
    t4, t6 = "tensor<1x4x4xf32>", "tensor<1x6x4xf32>"
    m = module(f"%x: {T}", "\n".join([
        f'%p = "graph.relu"(%x) : ({T}) -> {T} loc("relu_1")',
        f'%q = "graph.tanh"(%p) : ({T}) -> {T} loc("tanh_2")',
        f'%c1 = "graph.concat"(%p, %q) {{axis = 1}} : ({T}, {T}) -> {t4} loc("concat_3")',
        f'%s = "graph.reduce_sum"(%c1) {{axes = [1], keepdims = 1}} : ({t4}) -> '
        'tensor<1x1x4xf32> loc("sum_4")',
        f'%e = "graph.expand"(%s) {{shape = [1, 2, 4]}} : (tensor<1x1x4xf32>) -> {T} loc("e_5")',
        f'%c2 = "graph.concat"(%c1, %e) {{axis = 1}} : ({t4}, {T}) -> {t6} loc("concat_6")',
    ]), [("%c2", t6)])
    run("eliminate-concat", m)
    text = body_text(m)
    assert text[2] == ('%c1 = "graph.concat"(%p, %q) {axis = 1, in_place = true} : '
                       '(tensor<1x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x4x4xf32> '
                       'loc("concat_3")')
    assert text[5] == ('%c2 = "graph.concat"(%c1, %e) {axis = 1, in_place = true} : '
                       '(tensor<1x4x4xf32>, tensor<1x2x4xf32>) -> tensor<1x6x4xf32> '
                       'loc("concat_6")')
    assert get_pass("eliminate-concat").run(m) is False


@pytest.mark.parametrize("operands, reason", [
    ("%x, %a", "concat_9 stays a copy: operand #0 is the function argument 'x'"),
    ("%a, %k", "concat_9 stays a copy: operand #1 is the constant 'k_1'"),
    ("%a, %a", "concat_9 stays a copy: operand #1 repeats operand #0"),
    ("%a, %r", "concat_9 stays a copy: operand #1 (relu_3) is also a function result"),
    ("%b, %a", "concat_9 stays a copy: operand #0 (tanh_4) is also an operand of concat_10"),
    ("%a, %s0", "concat_9 stays a copy: operand #1 is a view (graph.split 'split_5') of "
                "another tensor"),
])
def test_concat_stays_a_copy_and_says_why(operands, reason):
    h = "tensor<1x2x2xf32>"
    types = ", ".join(h if v == "%s0" else T for v in operands.split(", "))
    ct = f"tensor<1x2x{4 + (2 if '%s0' in operands else 4)}xf32>"
    m = module(f"%x: {T}", "\n".join([
        const("k", np.ones(8), (1, 2, 4), "k_1"),
        f'%a = "graph.sigmoid"(%x) : ({T}) -> {T} loc("sigmoid_2")',
        f'%r = "graph.relu"(%x) : ({T}) -> {T} loc("relu_3")',
        f'%b = "graph.tanh"(%x) : ({T}) -> {T} loc("tanh_4")',
        f'%s0, %s1 = "graph.split"(%a) {{axis = 2, split = [2, 2]}} : ({T}) -> ({h}, {h}) '
        'loc("split_5")',
        f'%o = "graph.concat"(%b, %r) {{axis = 1}} : ({T}, {T}) -> tensor<1x4x4xf32> '
        'loc("concat_10")',
        f'%c = "graph.concat"({operands}) {{axis = 2}} : ({types}) -> {ct} loc("concat_9")',
    ]), [("%c", ct), ("%r", T), ("%o", "tensor<1x4x4xf32>")])
    got = reasons(run("eliminate-concat", m))
    assert reason in got


def test_a_concat_marked_in_place_that_breaks_the_rule_goes_back_to_a_copy():
    m = module(f"%x: {T}", "\n".join([
        f'%a = "graph.relu"(%x) : ({T}) -> {T} loc("relu_1")',
        f'%c = "graph.concat"(%x, %a) {{axis = 1, in_place = true}} : ({T}, {T}) -> '
        'tensor<1x4x4xf32> loc("concat_2")',
    ]), [("%c", "tensor<1x4x4xf32>")])
    run("eliminate-concat", m)
    (c,) = [op for op in m.walk() if op.name == "graph.concat"]
    assert "in_place" not in c.attributes and c.attr("in_place") is False


def test_a_concat_that_undoes_a_split_reads_the_split_input():
    """merge-siblings then eliminate-concat on siblings that were concatenated: no split and no
    concat remain (the merged layer writes the concat's result)."""
    t3 = "tensor<1x3x2x2xf32>"
    m = module(f"%x: {X4}, %z: tensor<1x1x2x2xf32>", "\n".join([
        const("w1", [1, 2], (1, 2, 1, 1)),
        conv("a", "x", "w1", "tensor<1x2x1x1xf32>", yt="tensor<1x1x2x2xf32>", loc="conv_1"),
        const("w2", [3, 4, 5, 6], (2, 2, 1, 1)),
        conv("b", "x", "w2", "tensor<2x2x1x1xf32>", loc="conv_2"),
        f'%c = "graph.concat"(%a, %b) {{axis = 1}} : (tensor<1x1x2x2xf32>, {X4}) -> {t3} '
        'loc("concat_3")',
        f'%d = "graph.concat"(%z, %a, %b) {{axis = 1}} : (tensor<1x1x2x2xf32>, '
        f'tensor<1x1x2x2xf32>, {X4}) -> tensor<1x4x2x2xf32> loc("concat_4")',
    ]), [("%c", t3), ("%d", "tensor<1x4x2x2xf32>")])
    run("merge-siblings,eliminate-concat", m)
    assert ops(m) == ["graph.constant", "graph.conv", "graph.concat"]
    assert body_text(m)[2:] == [
        '%d = "graph.concat"(%z, %a_merged) {axis = 1} : (tensor<1x1x2x2xf32>, '
        'tensor<1x3x2x2xf32>) -> tensor<1x4x2x2xf32> loc("concat_4")',
        '"func.return"(%a_merged, %d) : (tensor<1x3x2x2xf32>, tensor<1x4x2x2xf32>) -> ()',
    ]


def test_a_split_of_a_merged_layer_can_feed_an_in_place_concat():
    """Inception after fuse-epilogues + merge-siblings: the merged layer's first range goes
    straight to the concat; the split has no buffer of its own (nothing else reads the merged
    result), so the concat is in place. With another reader of the merged result it is a view."""
    def build(extra_reader: bool):
        h = "tensor<1x1x2x2xf32>"
        lines = [
            const("w", [1, 2, 3, 4], (2, 2, 1, 1)),
            conv("m", "x", "w", "tensor<2x2x1x1xf32>", loc="conv_1"),
            f'%s0, %s1 = "graph.split"(%m) {{axis = 1, split = [1, 1]}} : ({X4}) -> ({h}, {h}) '
            'loc("conv_1")',
            f'%t = "graph.tanh"(%s1) : ({h}) -> {h} loc("tanh_2")',
            f'%c = "graph.concat"(%s0, %t) {{axis = 1}} : ({h}, {h}) -> {X4} loc("concat_3")',
        ]
        rets = [("%c", X4)]
        if extra_reader:
            lines.append(f'%r = "graph.relu"(%m) : ({X4}) -> {X4} loc("relu_4")')
            rets.append(("%r", X4))
        return module(f"%x: {X4}", "\n".join(lines), rets)

    m = build(False)
    run("eliminate-concat", m)
    (c,) = [op for op in m.walk() if op.name == "graph.concat"]
    assert c.attr("in_place") is True
    m = build(True)
    assert unchanged("eliminate-concat", m) == [
        "concat_3 stays a copy: operand #0 is a view (graph.split 'conv_1') of another tensor"]


@pytest.mark.parametrize("name", ["densenet121", "inception_v1", "inception_v2", "squeezenet"])
def test_light_models_keep_no_copying_concat(name):
    m = ptxc.import_onnx(light_models.path(name))
    ex = Explain()
    PassManager("fold-constants,fold-batchnorm,merge-siblings,eliminate-concat",
                explain=ex).run(m)
    concats = [op for op in m.walk() if op.name == "graph.concat"]
    assert concats and all(op.attr("in_place") is True for op in concats), \
        ex.format(only_not_fired=True)
    # every batch norm after a conv was folded into it (DenseNet keeps its pre-activation ones)
    bns = [op for op in m.walk() if op.name == "graph.batch_normalization"]
    assert not any(getattr(producer(op.operands[0]), "name", None) == "graph.conv" for op in bns)
