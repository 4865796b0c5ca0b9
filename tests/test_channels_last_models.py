"""to-channels-last on the nine light models (random weights, so every channel and filter tap
counts): the interpreter gives the same outputs before and after the layout passes, the
transposes left are the ones docs/graph-opt.md ("Layout") accounts for (ResNet-50: one, at its
input), and compiled cpu engines with ``layout="nhwc"`` match onnxruntime."""

import numpy as np
import pytest

from support import light_models as lm
import ptxc
from ptxc.explore import op_counts
from ptxc.ir import interpret
from ptxc.rewrite import PassManager

LAYOUT = "to-channels-last,cancel-transposes,eliminate-concat,dce"

#: graph.transpose ops after graph-opt + the layout passes, and why (docs/graph-opt.md)
TRANSPOSES = {
    "bvlc_alexnet": 1,    # input (LRN runs channels-last; the flatten permutes the FC weight)
    "densenet121": 1,     # input
    "inception_v1": 1,    # input
    "inception_v2": 1,    # input
    "resnet50": 1,        # input
    "shufflenet": 17,     # input; the 16 channel shuffles (one data movement each, as in NCHW)
    "squeezenet": 1,      # input
    "vgg19": 1,           # input
    "zfnet512": 1,        # input
}


@pytest.mark.slow
@pytest.mark.parametrize("name", lm.NAMES)
def test_interpreter_same_before_and_after_layout(name):
    model = lm.with_random_weights(lm.load(name), seed=1)
    inputs = lm.random_inputs(model, seed=2)
    module = ptxc.import_onnx(model)
    PassManager("graph-opt").run(module)
    before = interpret(module, inputs)
    PassManager(LAYOUT).run(module)
    after = interpret(module, inputs)
    counts = op_counts(module)
    convs = [op for op in module.walk() if op.name in ("graph.conv", "graph.fused_conv")]
    assert convs and all(op.attr("layout") == "NHWC" for op in convs)
    assert counts.get("graph.transpose", 0) == TRANSPOSES[name], counts
    assert before.keys() == after.keys()
    for k in before:
        scale = max(1.0, float(np.max(np.abs(before[k]))))
        np.testing.assert_allclose(after[k], before[k], rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["squeezenet", "resnet50", "inception_v1", "shufflenet"])
def test_cpu_engine_with_layout_matches_onnxruntime(name):
    """Residual epilogues (resnet), concats written in place along the channels-last axis
    (squeezenet, inception's merged and scattered 1x1 siblings), channel shuffles (shufflenet)."""
    model = lm.with_random_weights(lm.load(name), seed=1)
    inputs = lm.random_inputs(model, seed=2)
    ref = lm.onnxruntime_outputs(model, inputs)
    got = ptxc.compile(model, target="cpu", layout="nhwc").run(inputs)
    for k in ref:
        assert np.std(ref[k]) > 1e-4, "degenerate reference output"
        lm.assert_matches_reference(got[k], ref[k])


@pytest.mark.slow
def test_cuda_compile_with_layout_assembles():
    """SqueezeNet for target cuda with layout nhwc (first conv's 3 channels padded to 8): every
    kernel assembles with ptxas; the channels-last convs take the tiled schedule."""
    ptx = pytest.importorskip("ptxc.ptx")
    if ptx.ptxas_path() is None:
        pytest.skip("no ptxas")
    from ptxc.compiler import as_module, run_stages
    module = as_module(lm.with_random_weights(lm.load("squeezenet"), seed=1))
    run_stages(module, "loop", target="cuda", layout="nhwc")
    prog = ptxc.codegen.lower_to_ptx(module, arch="sm_90")
    report = ptx.assemble(prog.ptx, "sm_90")
    tiled = [k for k in prog.table.kernels if k.schedule == "tiled"]
    assert len(tiled) >= 20  # squeezenet's 26 convs (merged siblings count once)
    for k in prog.table.kernels:
        assert k.name in report.kernels
