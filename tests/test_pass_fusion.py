"""fuse-epilogues and fuse-elementwise: exact IR after each positive case, the reasons --explain
gives where they decline, and numerics (every run has check-numerics on)."""

import textwrap

import numpy as np

import ptxc
from ptxc.ir import parse_ir, print_ir, verify
from ptxc.rewrite import Explain, PassManager

CONV = ('{dilations = [1, 1], group = 1, kernel_shape = [3, 3], pads = [1, 1, 1, 1], '
        'strides = [1, 1]}')
X = "tensor<1x2x4x4xf32>"
W = "tensor<2x2x3x3xf32>"


def module(args: str, body: str, results: list[tuple[str, str]]) -> str:
    """Module text: ``main(args)`` with ``body`` (dedented, re-indented) returning ``results``
    ((value, type) pairs)."""
    names = ", ".join(f'"{a.split(":")[0].strip()[1:]}"' for a in args.split(", "))
    types = ", ".join(a.split(": ", 1)[1] for a in args.split(", "))
    vals = ", ".join(v for v, _ in results)
    rtypes = ", ".join(t for _, t in results)
    rnames = ", ".join(f'"{v[1:]}"' for v, _ in results)
    body = textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
    return f'''"builtin.module"() ({{
  "func.func"() ({{
  ^bb0({args}):
{body}
    "func.return"({vals}) : ({rtypes}) -> ()
  }}) {{arg_names = [{names}], function_type = ({types}) -> ({rtypes}), result_names = [{rnames}], sym_name = "main"}} : () -> ()
}}) : () -> ()
'''


def run(text: str, pipeline: str, changed: bool = True):
    """Parse, run ``pipeline`` with check-numerics, return (module, printed, explain)."""
    m = parse_ir(text)
    verify(m)
    ex = Explain()
    assert PassManager(pipeline, check_numerics=True, explain=ex).run(m) is changed
    out = print_ir(m)
    assert print_ir(parse_ir(out)) == out  # round trip
    return m, out, ex


def reasons(ex: Explain) -> list[str]:
    return [r.reason for r in ex.not_fired()]


# ---- fuse-epilogues: positive ----------------------------------------------------------------

def test_conv_bias_relu_fuses():
    text = module(f"%x: {X}, %w: {W}, %b: tensor<2xf32>", f'''
        %c = "graph.conv"(%x, %w, %b) {CONV} : ({X}, {W}, tensor<2xf32>) -> {X} loc("conv_1")
        %y = "graph.relu"(%c) : ({X}) -> {X} loc("relu_2")
        ''', [("%y", X)])
    _, out, ex = run(text, "fuse-epilogues")
    assert out == module(f"%x: {X}, %w: {W}, %b: tensor<2xf32>", f'''
        %y = "graph.fused_conv"(%x, %w, %b) ({{
        ^bb0(%acc: f32):
          %0 = "arith.constant"() {{type = f32, value = 0.0}} : () -> f32
          %1 = "arith.max"(%acc, %0) : (f32, f32) -> f32
          "graph.yield"(%1) : (f32) -> ()
        }}) {{dilations = [1, 1], group = 1, kernel_shape = [3, 3], operand_segments = [1, 1, 1, 0], pads = [1, 1, 1, 1], ptxc.fused = ["relu_2"], strides = [1, 1]}} : ({X}, {W}, tensor<2xf32>) -> {X} loc("conv_1")
        ''', [("%y", X)])
    assert [str(r) for r in ex.fired()] == [
        '[fuse-epilogues] FuseEpilogue at "conv_1" (graph.conv): fired']


def test_residual_block_fuses_add_and_relu_into_one_fused_conv():
    """ResNet's basic block without batch norm: relu(conv2(relu(conv1(x))) + x)."""
    rng = np.random.default_rng(0)
    net = ptxc.Network("block")
    x = net.add_input("x", (1, 4, 6, 6))
    w = lambda: (rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(np.float32)  # noqa: E731
    b = lambda: (rng.standard_normal(4) * 0.1).astype(np.float32)  # noqa: E731
    h = net.add_activation(net.add_conv(x, w(), b(), padding=1, name="conv_1"), "relu",
                           name="relu_2")
    h = net.add_conv(h, w(), b(), padding=1, name="conv_3")
    h = net.add_elementwise(h, x, "add", name="add_4")
    net.mark_output(net.add_activation(h, "relu", name="relu_5"), "y")
    m = net.to_module()
    feeds = {"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)}
    want = ptxc.interpret(m, feeds)["y"]
    PassManager("fuse-epilogues", check_numerics=True).run(m)
    ops = [op for op in m.walk() if op.name.startswith("graph.")
           and op.parent_op is not None and op.parent_op.name == "func.func"]
    assert [op.name for op in ops if op.name != "graph.constant"] == ["graph.fused_conv"] * 2
    second = ops[-1]
    assert second.loc == "conv_3" and second.attributes["ptxc.fused"] == ("add_4", "relu_5")
    assert second.operands[-1] is next(op for op in m.walk() if op.name == "func.func") \
        .regions[0].blocks[0].args[0]  # the shortcut is the epilogue input
    assert [o.name for o in second.regions[0].blocks[0].ops] == [
        "arith.add", "arith.constant", "arith.max", "graph.yield"]
    np.testing.assert_allclose(ptxc.interpret(m, feeds)["y"], want, rtol=1e-6, atol=1e-6)


def test_gemm_bias_sigmoid_and_scalar_constant_become_one_epilogue():
    text = module("%a: tensor<2x3xf32>, %b: tensor<4x3xf32>, %c: tensor<4xf32>", '''
        %k = "graph.constant"() {value = dense<[0.5]> : tensor<1xf32>} : () -> tensor<1xf32>
        %g = "graph.gemm"(%a, %b) {transB = 1} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32> loc("gemm_1")
        %s = "graph.add"(%g, %c) : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32> loc("add_2")
        %m = "graph.mul"(%k, %s) : (tensor<1xf32>, tensor<2x4xf32>) -> tensor<2x4xf32> loc("mul_3")
        %y = "graph.sigmoid"(%m) : (tensor<2x4xf32>) -> tensor<2x4xf32> loc("sigmoid_4")
        ''', [("%y", "tensor<2x4xf32>")])
    _, out, _ = run(text, "fuse-epilogues")
    assert out == module("%a: tensor<2x3xf32>, %b: tensor<4x3xf32>, %c: tensor<4xf32>", '''
        %y = "graph.fused_gemm"(%a, %b, %c) ({
        ^bb0(%acc: f32, %0: f32):
          %1 = "arith.add"(%acc, %0) : (f32, f32) -> f32
          %2 = "arith.constant"() {type = f32, value = 0.5} : () -> f32
          %3 = "arith.mul"(%2, %1) : (f32, f32) -> f32
          %4 = "math.abs"(%3) : (f32) -> f32
          %5 = "arith.neg"(%4) : (f32) -> f32
          %6 = "math.exp"(%5) : (f32) -> f32
          %7 = "arith.constant"() {type = f32, value = 1.0} : () -> f32
          %8 = "arith.add"(%7, %6) : (f32, f32) -> f32
          %9 = "arith.constant"() {type = f32, value = 0.0} : () -> f32
          %10 = "arith.cmp"(%3, %9) {predicate = "ge"} : (f32, f32) -> i1
          %11 = "arith.div"(%7, %8) : (f32, f32) -> f32
          %12 = "arith.div"(%6, %8) : (f32, f32) -> f32
          %13 = "arith.select"(%10, %11, %12) : (i1, f32, f32) -> f32
          "graph.yield"(%13) : (f32) -> ()
        }) {operand_segments = [1, 1, 0, 1], ptxc.fused = ["add_2", "mul_3", "sigmoid_4"], transB = 1} : (tensor<2x3xf32>, tensor<4x3xf32>, tensor<4xf32>) -> tensor<2x4xf32> loc("gemm_1")
        ''', [("%y", "tensor<2x4xf32>")])


def test_matmul_relu6_with_clip_constants_and_per_channel_scale():
    text = module("%a: tensor<2x3xf32>, %b: tensor<3x4xf32>, %s: tensor<1x4xf32>", '''
        %lo = "graph.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
        %hi = "graph.constant"() {value = dense<6.0> : tensor<f32>} : () -> tensor<f32>
        %p = "graph.matmul"(%a, %b) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32> loc("mm_1")
        %q = "graph.mul"(%p, %s) : (tensor<2x4xf32>, tensor<1x4xf32>) -> tensor<2x4xf32> loc("mul_2")
        %y = "graph.clip"(%q, %lo, %hi) {operand_segments = [1, 1, 1]} : (tensor<2x4xf32>, tensor<f32>, tensor<f32>) -> tensor<2x4xf32> loc("clip_3")
        ''', [("%y", "tensor<2x4xf32>")])
    _, out, _ = run(text, "fuse-epilogues")
    assert out == module("%a: tensor<2x3xf32>, %b: tensor<3x4xf32>, %s: tensor<1x4xf32>", '''
        %y = "graph.fused_matmul"(%a, %b, %s) ({
        ^bb0(%acc: f32, %0: f32):
          %1 = "arith.mul"(%acc, %0) : (f32, f32) -> f32
          %2 = "arith.constant"() {type = f32, value = 0.0} : () -> f32
          %3 = "arith.constant"() {type = f32, value = 6.0} : () -> f32
          %4 = "arith.max"(%1, %2) : (f32, f32) -> f32
          %5 = "arith.min"(%4, %3) : (f32, f32) -> f32
          "graph.yield"(%5) : (f32) -> ()
        }) {ptxc.fused = ["mul_2", "clip_3"]} : (tensor<2x3xf32>, tensor<3x4xf32>, tensor<1x4xf32>) -> tensor<2x4xf32> loc("mm_1")
        ''', [("%y", "tensor<2x4xf32>")])


def test_an_already_fused_conv_takes_more_and_dedups_its_inputs():
    text = module(f"%x: {X}, %w: {W}, %r: {X}", f'''
        %c = "graph.fused_conv"(%x, %w, %r) ({{
        ^bb0(%acc: f32, %e: f32):
          %s = "arith.add"(%acc, %e) : (f32, f32) -> f32
          "graph.yield"(%s) : (f32) -> ()
        }}) {{dilations = [1, 1], group = 1, kernel_shape = [3, 3], operand_segments = [1, 1, 0, 1], pads = [1, 1, 1, 1], ptxc.fused = ["add_2"], strides = [1, 1]}} : ({X}, {W}, {X}) -> {X} loc("conv_1")
        %y = "graph.sub"(%c, %r) : ({X}, {X}) -> {X} loc("sub_3")
        ''', [("%y", X)])
    _, out, _ = run(text, "fuse-epilogues")
    assert out == module(f"%x: {X}, %w: {W}, %r: {X}", f'''
        %y = "graph.fused_conv"(%x, %w, %r) ({{
        ^bb0(%acc: f32, %0: f32):
          %s = "arith.add"(%acc, %0) : (f32, f32) -> f32
          %1 = "arith.sub"(%s, %0) : (f32, f32) -> f32
          "graph.yield"(%1) : (f32) -> ()
        }}) {{dilations = [1, 1], group = 1, kernel_shape = [3, 3], operand_segments = [1, 1, 0, 1], pads = [1, 1, 1, 1], ptxc.fused = ["add_2", "sub_3"], strides = [1, 1]}} : ({X}, {W}, {X}) -> {X} loc("conv_1")
        ''', [("%y", X)])


# ---- fuse-epilogues: negative ----------------------------------------------------------------

def test_conv_with_two_users_is_not_fused_and_says_why():
    text = module(f"%x: {X}, %w: {W}", f'''
        %c = "graph.conv"(%x, %w) {CONV} : ({X}, {W}) -> {X} loc("conv_12")
        %y = "graph.relu"(%c) : ({X}) -> {X} loc("relu_13")
        %z = "graph.sigmoid"(%c) : ({X}) -> {X} loc("sigmoid_14")
        ''', [("%y", X), ("%z", X)])
    _, out, ex = run(text, "fuse-epilogues", changed=False)
    assert out == text
    assert reasons(ex) == ["conv_12 + relu_13 not fused: conv_12 has 2 users"]
    assert ex.format() == ('[fuse-epilogues] FuseEpilogue at "conv_12" (graph.conv): not fired: '
                           'conv_12 + relu_13 not fused: conv_12 has 2 users\n')


def test_a_conv_that_is_also_an_output_is_not_fused():
    text = module(f"%x: {X}, %w: {W}", f'''
        %c = "graph.conv"(%x, %w) {CONV} : ({X}, {W}) -> {X} loc("conv_1")
        %y = "graph.relu"(%c) : ({X}) -> {X} loc("relu_2")
        ''', [("%y", X), ("%c", X)])
    _, out, ex = run(text, "fuse-epilogues", changed=False)
    assert reasons(ex) == ["conv_1 + relu_2 not fused: conv_1 has 2 users"]


def test_operand_that_would_broadcast_the_result_is_not_fused():
    big = "tensor<2x2x4x4xf32>"
    text = module(f"%x: {X}, %w: {W}, %r: {big}", f'''
        %c = "graph.conv"(%x, %w) {CONV} : ({X}, {W}) -> {X} loc("conv_1")
        %y = "graph.add"(%c, %r) : ({X}, {big}) -> {big} loc("add_5")
        ''', [("%y", big)])
    _, out, ex = run(text, "fuse-epilogues", changed=False)
    assert out == text
    assert reasons(ex) == [f"conv_1 + add_5 not fused: add_5's other operand {big} would "
                           f"broadcast the result {X}"]


def test_elementwise_consumer_with_a_larger_result_is_not_fused():
    big = "tensor<3x2x3xf32>"
    text = module("%a: tensor<2x3xf32>, %b: tensor<3x3xf32>", f'''
        %p = "graph.matmul"(%a, %b) : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32> loc("mm_1")
        %y = "graph.elementwise"(%p) ({{
        ^bb0(%e: f32):
          "graph.yield"(%e) : (f32) -> ()
        }}) : (tensor<2x3xf32>) -> {big} loc("ew_2")
        ''', [("%y", big)])
    _, out, ex = run(text, "fuse-epilogues", changed=False)
    assert reasons(ex) == [f"mm_1 + ew_2 not fused: ew_2's result {big} is larger than "
                           "tensor<2x3xf32>"]


def test_consumer_without_scalar_form_or_other_element_type_is_not_fused():
    text = module("%a: tensor<2x3xf32>, %b: tensor<3x4xf32>", '''
        %p = "graph.matmul"(%a, %b) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32> loc("mm_1")
        %y = "graph.softmax"(%p) {axis = 1} : (tensor<2x4xf32>) -> tensor<2x4xf32> loc("softmax_2")
        %q = "graph.matmul"(%a, %b) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32> loc("mm_3")
        %z = "graph.cast"(%q) {to = f16} : (tensor<2x4xf32>) -> tensor<2x4xf16> loc("cast_4")
        ''', [("%y", "tensor<2x4xf32>"), ("%z", "tensor<2x4xf16>")])
    _, out, ex = run(text, "fuse-epilogues", changed=False)
    assert out == text
    assert reasons(ex) == [
        "mm_1 + softmax_2 not fused: graph.softmax has no scalar form",
        "mm_3 + cast_4 not fused: cast_4 gives tensor<2x4xf16>, the epilogue must give f32"]


# ---- fuse-elementwise ------------------------------------------------------------------------

def test_elementwise_dag_with_shared_input_becomes_one_op():
    T = "tensor<2x3xf32>"
    text = module(f"%x: {T}, %z: {T}", f'''
        %r = "graph.relu"(%x) : ({T}) -> {T} loc("relu_1")
        %s = "graph.sigmoid"(%z) : ({T}) -> {T} loc("sigmoid_2")
        %c = "graph.less"(%r, %x) : ({T}, {T}) -> tensor<2x3xi1> loc("less_3")
        %y = "graph.where"(%c, %s, %x) : (tensor<2x3xi1>, {T}, {T}) -> {T} loc("where_4")
        ''', [("%y", T)])
    m, out, ex = run(text, "fuse-elementwise")
    ops = [op for op in m.walk() if op.name.startswith("graph.") and
           op.parent_op.name == "func.func"]
    assert [op.name for op in ops] == ["graph.elementwise"]
    (e,) = ops
    assert e.loc == "where_4"
    assert e.attributes["ptxc.fused"] == ("relu_1", "less_3", "sigmoid_2", "where_4")
    assert [v.name_hint for v in e.operands] == ["x", "z"]  # x is read three times, once here


def test_lone_elementwise_op_is_left_alone():
    T = "tensor<2x3xf32>"
    text = module(f"%x: {T}", f'''
        %k = "graph.constant"() {{value = dense<2.0> : tensor<f32>}} : () -> tensor<f32>
        %y = "graph.mul"(%x, %k) : ({T}, tensor<f32>) -> {T} loc("mul_1")
        ''', [("%y", T)])
    _, out, ex = run(text, "fuse-elementwise", changed=False)
    assert out == text and len(ex) == 0


def test_elementwise_producer_with_two_users_or_broadcast_result_is_not_fused():
    T = "tensor<2x3xf32>"
    text = module(f"%x: {T}, %b: tensor<3xf32>", f'''
        %r = "graph.relu"(%x) : ({T}) -> {T} loc("relu_1")
        %t = "graph.tanh"(%r) : ({T}) -> {T} loc("tanh_2")
        %e = "graph.exp"(%b) : (tensor<3xf32>) -> tensor<3xf32> loc("exp_3")
        %y = "graph.add"(%r, %e) : ({T}, tensor<3xf32>) -> {T} loc("add_4")
        ''', [("%y", T), ("%t", T)])
    _, out, ex = run(text, "fuse-elementwise", changed=False)
    assert out == text
    assert reasons(ex) == [
        "relu_1 + tanh_2 not fused: relu_1 has 2 users",
        "relu_1 + add_4 not fused: relu_1 has 2 users; exp_3 + add_4 not fused: exp_3's result "
        "tensor<3xf32> would be broadcast to tensor<2x3xf32>"]


def test_elementwise_then_epilogue_fusion_composes():
    text = module(f"%x: {X}, %w: {W}, %r: {X}", f'''
        %c = "graph.conv"(%x, %w) {CONV} : ({X}, {W}) -> {X} loc("conv_1")
        %n = "graph.neg"(%r) : ({X}) -> {X} loc("neg_2")
        %s = "graph.add"(%c, %n) : ({X}, {X}) -> {X} loc("add_3")
        %y = "graph.hard_swish"(%s) : ({X}) -> {X} loc("hswish_4")
        ''', [("%y", X)])
    m, out, _ = run(text, "fuse-elementwise,fuse-epilogues")
    ops = [op for op in m.walk() if op.name.startswith("graph.") and
           op.parent_op.name == "func.func"]
    assert [op.name for op in ops] == ["graph.fused_conv"]
    assert ops[0].attributes["ptxc.fused"] == ("neg_2", "add_3", "hswish_4")
    assert [v.name_hint for v in ops[0].operands] == ["x", "w", "r"]
