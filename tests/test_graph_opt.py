"""The graph-opt pipeline on the nine light models: numerics still match onnxruntime with random
weights, and the structure TensorRT's optimizer would give: no BatchNormalization left, every conv
carrying its BN, ReLU and residual add; Inception's sibling 1x1 convs merged; no copying concat;
no Dropout or Identity."""

import collections
import functools

import numpy as np
import pytest

from support import light_models as lm
import ptxc
from ptxc.dialects.func import func_body, get_func
from ptxc.explore import DEFAULT_GRAPH_PIPELINE, run_graph_stage


def optimized(model):
    module = ptxc.import_onnx(model)
    run_graph_stage(module)
    return module


def top_ops(module):
    return list(func_body(get_func(module)).ops)


def counts(module):
    return collections.Counter(op.name for op in top_ops(module))


@pytest.mark.slow
@pytest.mark.parametrize("name", lm.NAMES)
def test_graph_opt_keeps_numerics_vs_onnxruntime(name):
    model = lm.with_random_weights(lm.load(name), seed=3)
    inputs = lm.random_inputs(model, seed=4)
    ref = lm.onnxruntime_outputs(model, inputs)
    got = ptxc.interpret(optimized(model), inputs)
    for k in ref:
        lm.assert_matches_reference(got[k], ref[k])


@functools.lru_cache(maxsize=2)
def _light_optimized(name):
    return optimized(lm.load(name))


@pytest.fixture
def light_optimized():
    """The graph-opt module of a light model, shared by the tests that only read it. A cache
    beside the module, not a module-scoped fixture: the slow tier runs the light models' tests
    model by model across files (tests/conftest.py ``heaviest_first``), which would tear a
    module fixture down between them; the two most recent models are kept."""
    return _light_optimized


def test_default_pipeline_is_graph_opt():
    assert DEFAULT_GRAPH_PIPELINE == "graph-opt"


@pytest.mark.slow
@pytest.mark.parametrize("name", lm.NAMES)
def test_no_dropout_identity_or_constant_of_shape_left(light_optimized, name):
    c = counts(light_optimized(name))
    for op in ("graph.dropout", "graph.identity", "graph.constant_of_shape",
               "graph.batch_normalization"):
        assert c[op] == 0, (name, op, c[op])


@pytest.mark.slow
def test_resnet50_every_conv_carries_bn_relu_and_residual(light_optimized):
    m = light_optimized("resnet50")
    c = counts(m)
    raw = collections.Counter(n.op_type for n in lm.load("resnet50").graph.node)
    assert c["graph.batch_normalization"] == 0 and c["graph.relu"] == 0
    assert c["graph.sum"] == 0 and c["graph.add"] == 0
    fused = [op for op in top_ops(m) if op.name == "graph.fused_conv"]
    # every conv followed by a Relu in the model carries it; every Sum became an epilogue input
    with_residual = [op for op in fused if op.spec.split(op)[1]]
    assert len(with_residual) == raw["Sum"] == 16
    assert c["graph.fused_conv"] + c["graph.conv"] == raw["Conv"]
    assert len(fused) >= raw["Relu"] - 1  # the stem's relu follows its conv too; max_pool does not


@pytest.mark.slow
def test_inception_v1_sibling_convs_merged(light_optimized):
    m = light_optimized("inception_v1")
    readers = collections.defaultdict(list)
    for op in top_ops(m):
        if op.name in ("graph.conv", "graph.fused_conv"):
            readers[id(op.operands[0])].append(op)
    shared = [ops for ops in readers.values() if len(ops) > 1]
    for ops in shared:  # siblings that remain must differ in geometry
        geo = {(op.attr("kernel_shape"), op.attr("strides"), op.attr("pads")) for op in ops}
        assert len(geo) == len(ops), [op.loc for op in ops]
    assert counts(m)["graph.split"] >= 9  # one per inception block


@pytest.mark.slow
@pytest.mark.parametrize("name", ["densenet121", "inception_v1", "inception_v2", "squeezenet"])
def test_no_copying_concat(light_optimized, name):
    concats = [op for op in top_ops(light_optimized(name)) if op.name == "graph.concat"]
    assert concats
    copying = [op.loc for op in concats if not op.attr("in_place")]
    assert copying == []
