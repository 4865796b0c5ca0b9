"""Accumulator bounds of int8 contractions (contraction.accumulator_bound): the mma schedule's
staged epilogue marks its loads of the i32 sums with ``bound`` (loop.load: ``|value| <=
bound``, checked by the interpreter), and llvm_scalar converts a sum (plus a constant bias)
that stays under 2**22 to f32 with one f32 add instead of ``cvt.rn.f32.s32``. The bound must
hold for every input: an adversarial input reaches it exactly, and no input passes it."""

import numpy as np
import pytest

from support import int8_ir
import ptxc
from ptxc.dialects.loop import run_main
from ptxc.errors import CompileError, VerifyError
from ptxc.lower.gpu_map.contraction import accumulator_bound, analyze
from ptxc.codegen import lower_to_ptx
from ptxc.rewrite import PassManager


def _weights(model):
    return next(ptxc_array(i) for i in model.graph.initializer if i.name == "wq")


def ptxc_array(init):
    from onnx import numpy_helper
    return numpy_helper.to_array(init)


def _contraction(m):
    (c,) = [c for op in m.walk() if op.name == "loop.parallel" and (c := analyze(op))]
    return c


def test_the_bound_is_the_largest_column_sum_times_128():
    """gemm [M, K] x [N, K]^T with constant int8 weights: max_n sum_k |w[n, k]| x 128 (the int8
    range's largest magnitude), below K x 128 x max|w|."""
    model = int8_ir.gemm_model(64, 96, 40)
    w = _weights(model).astype(np.int64)
    c = _contraction(int8_ir.loop_module(model))
    assert c.kind == "s8"
    want = 128 * int(np.abs(w).sum(axis=1).max())
    assert accumulator_bound(c) == want < 96 * 128 * int(np.abs(w).max())


def test_an_adversarial_input_reaches_the_bound_and_none_passes_it():
    """x = -128 sign(w[n*]) on every row gives column n* nearly the bound (127 where w < 0); the
    mapped kernels' loads check it on every sum (interpreter), random inputs too."""
    model = int8_ir.gemm_model(64, 96, 40, relu=False)
    w = _weights(model).astype(np.int64)
    n_star = int(np.abs(w).sum(axis=1).argmax())
    x = np.tile((-128 * np.sign(w[n_star])).clip(-128, 127), (64, 1)).astype(np.int8)
    sums = x.astype(np.int64) @ w.T
    m = int8_ir.loop_module(model)
    bound = accumulator_bound(_contraction(m))
    # int8 has -128 but not +128: where w < 0 the input can only reach 127 |w|
    assert bound * 127 / 128 <= np.abs(sums).max() <= bound
    PassManager("map-to-gpu{mma-epilogue=staged}").run(m)
    loads = [o for o in m.walk() if o.name == "loop.load" and "bound" in o.attributes]
    assert loads and {o.attributes["bound"] for o in loads} == {bound}
    want = ptxc.interpret(ptxc.import_onnx(model), {"x": x})
    for feeds in ({"x": x}, int8_ir.inputs_for(model)):
        got = run_main(m, feeds)
        if feeds["x"] is x:
            np.testing.assert_array_equal(got["y"], want["y"])


def test_the_interpreter_refuses_a_load_over_its_bound():
    model = int8_ir.gemm_model(64, 96, 40, relu=False)
    m = int8_ir.loop_module(model)
    PassManager("map-to-gpu{mma-epilogue=staged}").run(m)
    for o in m.walk():
        if o.name == "loop.load" and "bound" in o.attributes:
            o.attributes["bound"] = 10
    with pytest.raises(CompileError, match="over the load's bound 10"):
        run_main(m, int8_ir.inputs_for(model))


def test_bound_is_checked_by_the_verifier():
    from ptxc import parse_ir
    from ptxc.ir.verifier import verify
    text = '''"builtin.module"() ({
  "func.func"() ({
  ^bb0(%x: buffer<4xf32>, %y: buffer<4xi32>):
    %i = "arith.constant"() {type = index, value = 0} : () -> index
    %a = "loop.load"(%y, %i) {bound = 7} : (buffer<4xi32>, index) -> i32
    %b = "loop.load"(%x, %i) {bound = 7} : (buffer<4xf32>, index) -> f32
    "func.return"() : () -> ()
  }) {arg_names = ["x", "y"], function_type = (buffer<4xf32>, buffer<4xi32>) -> (), sym_name = "main"} : () -> ()
}) : () -> ()'''
    with pytest.raises(VerifyError, match="bound must be"):
        verify(parse_ir(text))


@pytest.mark.parametrize("K, small", [(96, True), (2048, False)])
def test_small_sums_convert_without_cvt(K, small):
    """Staged int8 kernels: with sums (and the bias) under 2**22 the accumulator becomes f32 by
    the MAGIC add (no ``cvt.rn.f32.s32``); K = 2048 random weights (bound ~16.7M) keep it."""
    model = int8_ir.gemm_model(64, K, 48)
    m = int8_ir.loop_module(model)
    bound = accumulator_bound(_contraction(m))
    assert (bound < 1 << 22) == small
    PassManager("map-to-gpu{mma-epilogue=staged}").run(m)
    ptx = lower_to_ptx(m, arch="sm_90").ptx
    assert ("cvt.rn.f32.s32" not in ptx) == small


@pytest.mark.gpu
@pytest.mark.parametrize("K", [96, 256])
def test_adversarial_sums_on_gpu(K):
    """Sums up to the bound (K = 256: 128 x sum |w| near 2**22 when weights are large) on the
    device, converted by the MAGIC add: the interpreter's int8 answer bit for bit."""
    from test_ptx import run_on_gpu
    model = int8_ir.gemm_model(64, K, 40, relu=False)
    w = _weights(model).astype(np.int64)
    rows = [(-128 * np.sign(w[n])).clip(-128, 127) for n in range(40)]
    rng = np.random.default_rng(3)
    x = np.stack([rows[i % 40] if i % 2 else rng.integers(-128, 128, K)
                  for i in range(64)]).astype(np.int8)
    m = int8_ir.loop_module(model)
    PassManager("map-to-gpu{mma-epilogue=staged}").run(m)
    want = ptxc.interpret(ptxc.import_onnx(model), {"x": x})
    got = run_on_gpu(lower_to_ptx(m), {"x": x})
    np.testing.assert_array_equal(got["y"], want["y"])
