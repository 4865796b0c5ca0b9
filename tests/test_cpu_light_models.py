"""The nine light model-zoo models (tests/support/light_models.py) compiled for the CPU: imported,
optimized by ``graph-opt``, lowered to tensors, bufferized into loop nests, emitted as LLVM IR
and JIT-compiled; each program's output equals the expected output shipped with onnx. Compile
and run times are printed (never asserted)."""

import time

import numpy as np
import pytest

from support import light_models as lm
import ptxc
from ptxc.driver.cpu import CpuProgram
from ptxc.lower.loop_to_llvm import lower_loop_to_llvm
from ptxc.pipeline import run_stages


@pytest.mark.slow
@pytest.mark.parametrize("name", lm.NAMES)
def test_light_model_compiled_for_cpu_matches_expected_output(name):
    model = lm.load(name)
    t0 = time.perf_counter()
    module = ptxc.import_onnx(lm.path(name))
    run_stages(module, "loop", target="cpu", layout="nchw")   # graph-opt, tensor, loops
    left = [op.name for op in module.walk() if op.name.split(".")[0] in ("graph", "tensor")]
    assert not left, left
    t1 = time.perf_counter()
    program = CpuProgram(lower_loop_to_llvm(module))
    t2 = time.perf_counter()
    (out,) = program(lm.dummy_inputs(model)).values()
    t3 = time.perf_counter()
    print(f"\n{name}: passes {t1 - t0:.1f} s, LLVM + JIT {t2 - t1:.1f} s "
          f"({len(program.table.kernels)} kernels), run {t3 - t2:.2f} s")
    np.testing.assert_allclose(out, lm.expected_output(name), rtol=1e-3, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["squeezenet", "inception_v1", "resnet50"])
def test_light_model_with_random_weights_compiled_for_cpu_matches_onnxruntime(name):
    """The shipped weights are constants, so the expected outputs are nearly uniform; random
    weights make every channel count: concats written in place (squeezenet), merged and
    scattered siblings (inception), residual epilogues (resnet)."""
    model = lm.with_random_weights(lm.load(name), seed=1)
    inputs = lm.random_inputs(model, seed=2)
    ref = lm.onnxruntime_outputs(model, inputs)
    module = ptxc.import_onnx(model)
    run_stages(module, "loop", target="cpu", layout="nchw")   # graph-opt, tensor, loops
    got = CpuProgram(lower_loop_to_llvm(module))(inputs)
    assert list(got) == list(ref)
    for k in ref:
        assert np.std(ref[k]) > 1e-4, "degenerate reference output"
        lm.assert_matches_reference(got[k], ref[k])
