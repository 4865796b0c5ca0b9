"""The cleanup passes on printed IR: eliminate-noops (and its canonicalization patterns),
fold-constants, cancel-transposes; each pattern where it fires and where it must not, the
reasons --explain gives, and the light model-zoo models' ConstantOfShape weights folded."""

import numpy as np
import pytest

from support import light_models
from support.ir_text import body_lines as body_text
from support.ir_text import module
import ptxc
from ptxc.ir import interpret, print_ir
from ptxc.rewrite import Explain, PassManager, get_pass
from ptxc.rewrite.canonicalization import canonicalization_patterns
from ptxc.rewrite.passes import eliminate_noops


def run(pipeline: str, m, **kw) -> bool:
    """Run ``pipeline`` with verification and check-numerics on; returns whether it changed."""
    return PassManager(pipeline, check_numerics=True, **kw).run(m)


def unchanged(pipeline: str, m) -> None:
    before = print_ir(m)
    assert run(pipeline, m) is False
    assert print_ir(m) == before


T = "tensor<2x3xf32>"


# ---- eliminate-noops ------------------------------------------------------------------------

def test_identity_and_dropout_are_removed_and_every_user_reads_the_input():
    m = module(f"%x: {T}", f'''
        %i = "graph.identity"(%x) : ({T}) -> {T} loc("identity_1")
        %d = "graph.dropout"(%i) {{ratio = 0.1}} : ({T}) -> {T} loc("dropout_2")
        %a = "graph.relu"(%d) : ({T}) -> {T} loc("relu_3")
        %y = "graph.add"(%a, %d) : ({T}, {T}) -> {T} loc("add_4")
    ''', [("%y", T)])
    assert run("eliminate-noops", m) is True
    assert body_text(m) == [
        f'%a = "graph.relu"(%x) : ({T}) -> {T} loc("relu_3")',
        f'%y = "graph.add"(%a, %x) : ({T}, {T}) -> {T} loc("add_4")',
        f'"func.return"(%y) : ({T}) -> ()']


def test_a_removed_output_returns_the_input_under_the_same_binding_name():
    m = module(f"%x: {T}", f'%y = "graph.identity"(%x) : ({T}) -> {T} loc("id")', [("%y", T)])
    assert run("eliminate-noops", m) is True
    assert body_text(m) == [f'"func.return"(%x) : ({T}) -> ()']
    assert 'result_names = ["r0"]' in print_ir(m)


@pytest.mark.parametrize("op,attrs,out", [
    ("graph.reshape", "{shape = [2, 3]}", T),
    ("graph.flatten", "{axis = 1}", T),
    ("graph.squeeze", "{axes = []}", T),
    ("graph.unsqueeze", "{axes = []}", T),
    ("graph.expand", "{shape = [3]}", T),
    ("graph.expand", "{shape = [1, 1]}", T),
    ("graph.transpose", "{perm = [0, 1]}", T),
    ("graph.cast", "{to = f32}", T),
    ("graph.pad", '{pads = [0, 0, 0, 0]}', T),
    ("graph.pad", '{mode = "reflect", pads = [0, 0, 0, 0]}', T),
    ("graph.concat", "{axis = 1}", T),
    ("graph.sum", "", T),
    ("graph.max", "", T),
    ("graph.min", "", T),
    ("graph.mean", "", T),
    ("graph.slice", "{ends = [2, 3], starts = [0, 0], steps = [1, 1]}", T),
    ("graph.tile", "{repeats = [1, 1]}", T),
])
def test_ops_that_change_nothing_are_removed(op, attrs, out):
    m = module(f"%x: {T}", f'''
        %n = "{op}"(%x) {attrs} : ({T}) -> {out} loc("noop_1")
        %y = "graph.relu"(%n) : ({out}) -> {out} loc("relu_2")
    ''', [("%y", out)])
    assert run("eliminate-noops", m) is True
    assert body_text(m) == [f'%y = "graph.relu"(%x) : ({T}) -> {T} loc("relu_2")',
                            f'"func.return"(%y) : ({T}) -> ()']


def test_a_slice_reversing_an_axis_of_one_element_and_a_split_with_one_output_are_removed():
    t = "tensor<1x3xf32>"
    m = module(f"%x: {t}", f'''
        %s = "graph.slice"(%x) {{ends = [-1, 3], starts = [0, 0], steps = [-1, 1]}} : ({t}) -> {t}
        %y = "graph.split"(%s) {{axis = 1, split = [3]}} : ({t}) -> {t} loc("split_1")
    ''', [("%y", t)])
    assert run("eliminate-noops", m) is True
    assert body_text(m) == [f'"func.return"(%x) : ({t}) -> ()']


@pytest.mark.parametrize("op,attrs,out", [
    ("graph.reshape", "{shape = [3, 2]}", "tensor<3x2xf32>"),
    ("graph.flatten", "{axis = 0}", "tensor<1x6xf32>"),
    ("graph.unsqueeze", "{axes = [0]}", "tensor<1x2x3xf32>"),
    ("graph.expand", "{shape = [2, 2, 3]}", "tensor<2x2x3xf32>"),
    ("graph.transpose", "{perm = [1, 0]}", "tensor<3x2xf32>"),
    ("graph.cast", "{to = f16}", "tensor<2x3xf16>"),
    ("graph.pad", "{pads = [0, 1, 0, 0]}", "tensor<2x4xf32>"),
    ("graph.slice", "{ends = [2, -1], starts = [0, 2], steps = [1, -1]}", T),
    ("graph.slice", "{ends = [2, 3], starts = [0, 1], steps = [1, 1]}", "tensor<2x2xf32>"),
    ("graph.tile", "{repeats = [1, 2]}", "tensor<2x6xf32>"),
])
def test_ops_that_change_something_stay(op, attrs, out):
    m = module(f"%x: {T}", f'%y = "{op}"(%x) {attrs} : ({T}) -> {out} loc("op_1")',
               [("%y", out)])
    unchanged("eliminate-noops", m)


def test_variadic_ops_of_several_operands_and_arithmetic_identities_stay():
    m = module(f"%x: {T}", f'''
        %c = "graph.concat"(%x, %x) {{axis = 0}} : ({T}, {T}) -> tensor<4x3xf32> loc("concat_1")
        %s = "graph.sum"(%x, %x) : ({T}, {T}) -> {T} loc("sum_2")
        %zero = "graph.constant"() {{value = dense<0.0> : tensor<f32>}} : () -> tensor<f32>
        %one = "graph.constant"() {{value = dense<1.0> : tensor<f32>}} : () -> tensor<f32>
        %a = "graph.add"(%s, %zero) : ({T}, tensor<f32>) -> {T} loc("add_3")
        %y = "graph.mul"(%a, %one) : ({T}, tensor<f32>) -> {T} loc("mul_4")
    ''', [("%c", "tensor<4x3xf32>"), ("%y", T)])
    unchanged("eliminate-noops", m)


def test_a_split_with_unused_outputs_becomes_slices_of_the_used_ones():
    m = module("%x: tensor<2x6xf32>", '''
        %a, %b, %c = "graph.split"(%x) {axis = 1, split = [1, 2, 3]} : (tensor<2x6xf32>) -> (tensor<2x1xf32>, tensor<2x2xf32>, tensor<2x3xf32>) loc("split_1")
        %y = "graph.relu"(%c) : (tensor<2x3xf32>) -> tensor<2x3xf32> loc("relu_2")
    ''', [("%a", "tensor<2x1xf32>"), ("%y", "tensor<2x3xf32>")])
    assert run("eliminate-noops", m) is True
    assert body_text(m) == [
        '%a = "graph.slice"(%x) {ends = [2, 1], starts = [0, 0], steps = [1, 1]} : '
        '(tensor<2x6xf32>) -> tensor<2x1xf32> loc("split_1")',
        '%c = "graph.slice"(%x) {ends = [2, 6], starts = [0, 3], steps = [1, 1]} : '
        '(tensor<2x6xf32>) -> tensor<2x3xf32> loc("split_1")',
        '%y = "graph.relu"(%c) : (tensor<2x3xf32>) -> tensor<2x3xf32> loc("relu_2")',
        '"func.return"(%a, %y) : (tensor<2x1xf32>, tensor<2x3xf32>) -> ()']


def test_a_split_whose_outputs_are_all_used_stays_and_one_that_leaves_a_full_slice_goes():
    m = module("%x: tensor<2x6xf32>", '''
        %a, %b = "graph.split"(%x) {axis = 1, split = [2, 4]} : (tensor<2x6xf32>) -> (tensor<2x2xf32>, tensor<2x4xf32>) loc("split_1")
    ''', [("%a", "tensor<2x2xf32>"), ("%b", "tensor<2x4xf32>")])
    unchanged("eliminate-noops", m)
    m = module("%x: tensor<2x6xf32>", '''
        %a, %b = "graph.split"(%x) {axis = 1, split = [0, 6]} : (tensor<2x6xf32>) -> (tensor<2x0xf32>, tensor<2x6xf32>) loc("split_1")
        %y = "graph.relu"(%b) : (tensor<2x6xf32>) -> tensor<2x6xf32> loc("relu_2")
    ''', [("%y", "tensor<2x6xf32>")])
    assert run("eliminate-noops", m) is True
    assert body_text(m)[0] == ('%y = "graph.relu"(%x) : (tensor<2x6xf32>) -> tensor<2x6xf32> '
                               'loc("relu_2")')


def test_noop_patterns_are_canonicalization_patterns():
    names = {p.name for p in canonicalization_patterns()}
    assert {p.name for p in eliminate_noops.NOOP_PATTERNS} <= names
    m = module(f"%x: {T}", f'''
        %i = "graph.identity"(%x) : ({T}) -> {T} loc("identity_1")
        %y = "graph.transpose"(%i) {{perm = [0, 1]}} : ({T}) -> {T} loc("transpose_2")
    ''', [("%y", T)])
    assert run("canonicalize", m) is True
    assert body_text(m) == [f'"func.return"(%x) : ({T}) -> ()']


def test_canonicalize_narrows_a_split_only_where_that_adds_no_op():
    split = ('%a, %b, %c = "graph.split"(%x) {axis = 0, split = [1, 1, 1]} : (tensor<3xf32>) -> '
             '(tensor<1xf32>, tensor<1xf32>, tensor<1xf32>) loc("split_1")')
    two = module("%x: tensor<3xf32>", split, [("%a", "tensor<1xf32>"), ("%c", "tensor<1xf32>")])
    unchanged("canonicalize", two)
    assert run("eliminate-noops", two) is True
    assert print_ir(two).count('"graph.slice"') == 2
    one = module("%x: tensor<3xf32>", split, [("%b", "tensor<1xf32>")])
    assert run("canonicalize", one) is True
    assert body_text(one)[0] == ('%b = "graph.slice"(%x) {ends = [2], starts = [1], steps = [1]} '
                                 ': (tensor<3xf32>) -> tensor<1xf32> loc("split_1")')


# ---- fold-constants -------------------------------------------------------------------------

def test_constant_of_shape_becomes_a_constant_with_its_name_and_loc():
    m = module("%x: tensor<2x20xf32>", '''
        %w = "graph.constant_of_shape"() {shape = [20], value = dense<[0.5]> : tensor<1xf32>} : () -> tensor<20xf32> loc("ConstantOfShape_0")
        %y = "graph.add"(%x, %w) : (tensor<2x20xf32>, tensor<20xf32>) -> tensor<2x20xf32> loc("add_1")
    ''', [("%y", "tensor<2x20xf32>")])
    assert run("fold-constants", m) is True
    assert body_text(m)[0] == ('%w = "graph.constant"() {value = dense_resource<w> : '
                               'tensor<20xf32>} : () -> tensor<20xf32> loc("ConstantOfShape_0")')
    assert print_ir(m).count("graph.constant_of_shape") == 0
    assert f'w: "0x{np.full(20, 0.5, np.float32).tobytes().hex().upper()}"' in print_ir(m)


def test_shape_gather_concat_chains_fold_to_one_constant_and_shape_folds_from_types():
    m = module("%x: tensor<2x3x5xf32>", '''
        %s = "graph.shape"(%x) : (tensor<2x3x5xf32>) -> tensor<3xi64> loc("shape_1")
        %i = "graph.constant"() {value = dense<[2, 0]> : tensor<2xi64>} : () -> tensor<2xi64>
        %g = "graph.gather"(%s, %i) : (tensor<3xi64>, tensor<2xi64>) -> tensor<2xi64> loc("gather_2")
        %m = "graph.constant"() {value = dense<[-1]> : tensor<1xi64>} : () -> tensor<1xi64>
        %y = "graph.concat"(%g, %m) {axis = 0} : (tensor<2xi64>, tensor<1xi64>) -> tensor<3xi64> loc("concat_3")
    ''', [("%y", "tensor<3xi64>")])
    assert run("fold-constants", m) is True
    assert body_text(m) == [
        '%y = "graph.constant"() {value = dense<[5, 2, -1]> : tensor<3xi64>} : () -> '
        'tensor<3xi64> loc("concat_3")',
        '"func.return"(%y) : (tensor<3xi64>) -> ()']


def test_ops_with_several_results_fold_into_one_constant_each():
    m = module("%x: tensor<4xf32>", '''
        %c = "graph.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>} : () -> tensor<4xf32>
        %a, %b = "graph.split"(%c) {axis = 0, split = [1, 3]} : (tensor<4xf32>) -> (tensor<1xf32>, tensor<3xf32>) loc("split_1")
        %y = "graph.add"(%x, %a) : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32> loc("add_2")
    ''', [("%y", "tensor<4xf32>"), ("%b", "tensor<3xf32>")])
    assert run("fold-constants", m) is True
    assert body_text(m)[:2] == [
        '%a = "graph.constant"() {value = dense<[1.0]> : tensor<1xf32>} : () -> tensor<1xf32> '
        'loc("split_1")',
        '%b = "graph.constant"() {value = dense<[2.0, 3.0, 4.0]> : tensor<3xf32>} : () -> '
        'tensor<3xf32> loc("split_1")']


def test_ops_reading_a_runtime_value_or_with_regions_are_not_folded():
    m = module("%x: tensor<2xf32>", '''
        %c = "graph.constant"() {value = dense<[1.0, -2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
        %a = "graph.add"(%x, %c) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32> loc("add_1")
        %e = "graph.elementwise"(%c) ({
        ^bb0(%v: f32):
          %z = "arith.constant"() {type = f32, value = 0.0} : () -> f32
          %o = "arith.max"(%v, %z) : (f32, f32) -> f32
          "graph.yield"(%o) : (f32) -> ()
        }) : (tensor<2xf32>) -> tensor<2xf32> loc("fused_2")
    ''', [("%a", "tensor<2xf32>"), ("%e", "tensor<2xf32>")])
    unchanged("fold-constants", m)


def test_max_elements_leaves_large_results_and_explain_says_why():
    m = module("%x: tensor<4x8xf32>", '''
        %c = "graph.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
        %t = "graph.tile"(%c) {repeats = [16]} : (tensor<2xf32>) -> tensor<32xf32> loc("tile_1")
        %r = "graph.reshape"(%t) {shape = [4, 8]} : (tensor<32xf32>) -> tensor<4x8xf32> loc("reshape_2")
        %n = "graph.neg"(%c) : (tensor<2xf32>) -> tensor<2xf32> loc("neg_3")
        %y = "graph.add"(%x, %r) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> loc("add_4")
    ''', [("%y", "tensor<4x8xf32>"), ("%n", "tensor<2xf32>")])
    explain = Explain()
    assert run("fold-constants{max-elements=16}", m, explain=explain) is True
    text = "\n".join(body_text(m))
    assert '"graph.tile"' in text and '"graph.reshape"' in text and '"graph.neg"' not in text
    assert ('[fold-constants] FoldConstantOp at "tile_1" (graph.tile): not fired: tile_1 not '
            'folded: its result has 32 elements, more than max-elements=16') in explain.format()
    assert run("fold-constants", m) is True  # unlimited by default
    assert '"graph.tile"' not in print_ir(m)
    with pytest.raises(ptxc.PtxcError, match="max_elements.*>= 0"):
        get_pass("fold-constants", max_elements=-1)


def test_an_op_whose_reference_fails_on_its_constants_is_left_for_run_time_with_a_reason():
    m = module("%x: tensor<3xf32>", '''
        %d = "graph.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
        %i = "graph.constant"() {value = dense<[7]> : tensor<1xi64>} : () -> tensor<1xi64>
        %g = "graph.gather"(%d, %i) : (tensor<3xf32>, tensor<1xi64>) -> tensor<1xf32> loc("gather_1")
        %y = "graph.add"(%x, %g) : (tensor<3xf32>, tensor<1xf32>) -> tensor<3xf32> loc("add_2")
    ''', [("%y", "tensor<3xf32>")])
    explain = Explain()
    assert PassManager("fold-constants", explain=explain).run(m) is False
    assert "gather_1 not folded: its reference semantics fail on its constant operands" in \
        explain.format()
    assert "out of range" in explain.format()


@pytest.mark.parametrize("name", ["squeezenet", "densenet121", "shufflenet"])
def test_light_models_weights_are_plain_constants_after_folding(name):
    model = light_models.load(name)
    m = ptxc.import_onnx(model)
    inputs = light_models.dummy_inputs(model)
    assert run("fold-constants", m) is True
    text = print_ir(m, elide_constants=True)
    assert "graph.constant_of_shape" not in text
    if name == "densenet121":  # its unsqueezed batch-norm weights fold too
        assert "graph.unsqueeze" not in text
    if name == "squeezenet":
        # its softmax of ~6.8e9 logits is ill-conditioned: compare the folded logits with
        # onnxruntime's (light_models.softmax_is_ill_conditioned)
        logits = light_models.without_final_softmax(model)
        folded = ptxc.import_onnx(logits)
        assert run("fold-constants", folded) is True
        (ref,) = light_models.onnxruntime_outputs(logits, inputs).values()
        assert light_models.softmax_is_ill_conditioned(ref)
        (got,) = interpret(folded, inputs).values()
        light_models.assert_matches_reference(got, ref)


# ---- cancel-transposes ----------------------------------------------------------------------

T3 = "tensor<2x3x4xf32>"


def test_transposes_compose_and_a_chain_that_comes_back_is_removed():
    m = module(f"%x: {T3}", f'''
        %a = "graph.transpose"(%x) {{perm = [1, 2, 0]}} : ({T3}) -> tensor<3x4x2xf32> loc("transpose_1")
        %b = "graph.transpose"(%a) {{perm = [0, 2, 1]}} : (tensor<3x4x2xf32>) -> tensor<3x2x4xf32> loc("transpose_2")
        %y = "graph.relu"(%b) : (tensor<3x2x4xf32>) -> tensor<3x2x4xf32> loc("relu_3")
        %c = "graph.transpose"(%b) {{perm = [1, 0, 2]}} : (tensor<3x2x4xf32>) -> {T3} loc("transpose_4")
    ''', [("%y", "tensor<3x2x4xf32>"), ("%c", T3)])
    assert run("cancel-transposes", m) is True
    assert body_text(m) == [
        f'%b = "graph.transpose"(%x) {{perm = [1, 0, 2]}} : ({T3}) -> tensor<3x2x4xf32> '
        'loc("transpose_2")',
        '%y = "graph.relu"(%b) : (tensor<3x2x4xf32>) -> tensor<3x2x4xf32> loc("relu_3")',
        f'"func.return"(%y, %x) : (tensor<3x2x4xf32>, {T3}) -> ()']


def test_a_transpose_with_other_users_stays_for_them_and_the_outer_one_reads_its_input():
    m = module(f"%x: {T3}", f'''
        %a = "graph.transpose"(%x) {{perm = [0, 2, 1]}} : ({T3}) -> tensor<2x4x3xf32> loc("transpose_1")
        %r = "graph.relu"(%a) : (tensor<2x4x3xf32>) -> tensor<2x4x3xf32> loc("relu_2")
        %b = "graph.transpose"(%a) {{perm = [2, 0, 1]}} : (tensor<2x4x3xf32>) -> tensor<3x2x4xf32> loc("transpose_3")
    ''', [("%r", "tensor<2x4x3xf32>"), ("%b", "tensor<3x2x4xf32>")])
    assert run("cancel-transposes", m) is True
    assert body_text(m) == [
        f'%a = "graph.transpose"(%x) {{perm = [0, 2, 1]}} : ({T3}) -> tensor<2x4x3xf32> '
        'loc("transpose_1")',
        '%r = "graph.relu"(%a) : (tensor<2x4x3xf32>) -> tensor<2x4x3xf32> loc("relu_2")',
        f'%b = "graph.transpose"(%x) {{perm = [1, 0, 2]}} : ({T3}) -> tensor<3x2x4xf32> '
        'loc("transpose_3")',
        '"func.return"(%r, %b) : (tensor<2x4x3xf32>, tensor<3x2x4xf32>) -> ()']


def test_reshape_like_chains_become_one_reshape_or_nothing():
    m = module(f"%x: {T3}", f'''
        %u = "graph.unsqueeze"(%x) {{axes = [0, 4]}} : ({T3}) -> tensor<1x2x3x4x1xf32> loc("unsqueeze_1")
        %f = "graph.flatten"(%u) {{axis = 3}} : (tensor<1x2x3x4x1xf32>) -> tensor<6x4xf32> loc("flatten_2")
        %y = "graph.reshape"(%f) {{shape = [24]}} : (tensor<6x4xf32>) -> tensor<24xf32> loc("reshape_3")
        %s = "graph.squeeze"(%u) {{axes = [0, 4]}} : (tensor<1x2x3x4x1xf32>) -> {T3} loc("squeeze_4")
    ''', [("%y", "tensor<24xf32>"), ("%s", T3)])
    assert run("cancel-transposes", m) is True
    assert body_text(m) == [
        f'%y = "graph.reshape"(%x) {{shape = [24]}} : ({T3}) -> tensor<24xf32> loc("reshape_3")',
        f'"func.return"(%y, %x) : (tensor<24xf32>, {T3}) -> ()']


def test_a_reshape_with_other_users_stays_for_them():
    m = module(f"%x: {T3}", f'''
        %f = "graph.reshape"(%x) {{shape = [6, 4]}} : ({T3}) -> tensor<6x4xf32> loc("reshape_1")
        %r = "graph.relu"(%f) : (tensor<6x4xf32>) -> tensor<6x4xf32> loc("relu_2")
        %y = "graph.flatten"(%f) {{axis = 0}} : (tensor<6x4xf32>) -> tensor<1x24xf32> loc("flatten_3")
    ''', [("%r", "tensor<6x4xf32>"), ("%y", "tensor<1x24xf32>")])
    assert run("cancel-transposes", m) is True
    assert body_text(m)[:3] == [
        f'%f = "graph.reshape"(%x) {{shape = [6, 4]}} : ({T3}) -> tensor<6x4xf32> '
        'loc("reshape_1")',
        '%r = "graph.relu"(%f) : (tensor<6x4xf32>) -> tensor<6x4xf32> loc("relu_2")',
        f'%y = "graph.reshape"(%x) {{shape = [1, 24]}} : ({T3}) -> tensor<1x24xf32> '
        'loc("flatten_3")']


def test_transposes_and_reshapes_do_not_compose_with_each_other():
    # the channel shuffle: reshape -> transpose -> reshape
    m = module("%x: tensor<1x6x2x2xf32>", '''
        %a = "graph.reshape"(%x) {shape = [1, 2, 3, 2, 2]} : (tensor<1x6x2x2xf32>) -> tensor<1x2x3x2x2xf32> loc("n7")
        %b = "graph.transpose"(%a) {perm = [0, 2, 1, 3, 4]} : (tensor<1x2x3x2x2xf32>) -> tensor<1x3x2x2x2xf32> loc("n8")
        %y = "graph.reshape"(%b) {shape = [1, 6, 2, 2]} : (tensor<1x3x2x2x2xf32>) -> tensor<1x6x2x2xf32> loc("n9")
    ''', [("%y", "tensor<1x6x2x2xf32>")])
    unchanged("cancel-transposes", m)


def test_the_three_passes_together_on_a_light_model_keep_its_output():
    model = light_models.load("shufflenet")
    m = ptxc.import_onnx(model)
    assert run("fold-constants,eliminate-noops,cancel-transposes", m) is True
    text = print_ir(m, elide_constants=True)
    assert "graph.constant_of_shape" not in text and text.count("graph.transpose") == 16
