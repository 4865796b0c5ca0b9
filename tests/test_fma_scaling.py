"""The fma form of an int8 epilogue's scaling (llvm_scalar ``_scaled_small_int``): ``float(i) *
m``, with ``i`` an int small enough for the MAGIC conversion (``float_bits(MAGIC_BITS + i) -
MAGIC``) and ``m`` a multiplier whose ``MAGIC * m`` is an f32 exactly (``magic_exact``), is one
``fma(float_bits(MAGIC_BITS + i), m, -MAGIC * m)``: the same number with one instruction less
(an int8 layer does it for every output element, and its residual once more). fold-qdq's
``fma-multipliers`` (set for implicit int8) rounds the multipliers onto that grid by at most 2
ulps; a model's own Q/DQ multipliers stay onnxruntime's. The wgmma schedule's i32 sums carry
their bound (``gpu.wgmma_wait {bound}``) so that its epilogue takes the MAGIC form (no
``cvt.rn.f32.s32``) and the fma too.
"""

import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from support import int8_ir
import ptxc
from ptxc.compiler import run_stages, as_module
from ptxc.pipeline import CompileOptions, build_pipeline
from ptxc.rewrite.pipeline import parse_pipeline
from ptxc.dialects.loop import parallel_loop, run_main
from ptxc.driver.cpu import CpuProgram
from ptxc.errors import CompileError, VerifyError
from ptxc.ir import DenseElements
from ptxc.ir.types import F32, ScalarType
from ptxc.dialects.arith_magic import MAGIC, magic_exact, round_to_magic_exact
from ptxc.rewrite.pass_manager import PassManager
from ptxc.rewrite.passes.graph_opt import GRAPH_OPT
from support.loop_ir import load, module, op, store
from test_loop_dialect import buf
from test_magic_conversions import _ptx

F32_BITS = st.integers(0, 2 ** 32 - 1).map(lambda b: np.array([b], np.uint32).view(np.float32))
TINY = np.finfo(np.float32).tiny


# ---- the grid ----------------------------------------------------------------------------------

@settings(max_examples=400, deadline=None)
@given(F32_BITS)
def test_rounding_lands_on_the_grid_within_two_ulps(m):
    r = round_to_magic_exact(m)
    x = float(m[0])
    if np.isfinite(x) and TINY <= x < 3e38 / MAGIC:
        assert magic_exact(r)
        assert abs(float(r[0]) - x) <= 2 * float(np.spacing(m[0]))
    else:   # zero, negative, subnormal, huge, inf, NaN: unchanged
        assert r.view(np.uint32)[0] == m.view(np.uint32)[0]
        if not (np.isfinite(x) and x > 0):
            assert not magic_exact(m)


def test_the_grid_examples():
    assert not magic_exact(np.float32(0.7880036)) and magic_exact(np.float32(0.7880037))
    assert round_to_magic_exact(np.array([0x3F49BA9B], np.uint32).view(np.float32)) \
        .view(np.uint32)[0] == 0x3F49BA9C
    assert magic_exact(np.float32(0.5)) and magic_exact(np.float32(3.0))   # 3 * 3 = 9: fits
    assert not magic_exact(np.float32(-0.5)) and not magic_exact(np.float32(0.0))


@settings(max_examples=400, deadline=None)
@given(st.integers(0x00800000, 0x4A000000), st.integers(-2 ** 22, 2 ** 22))
def test_the_fma_is_the_product_of_the_exact_conversion(m_bits, i):
    """fma(MAGIC + i, m, -MAGIC m) rounds ``i m`` once: emulated in f64, where (MAGIC + i) m
    (48 bits), -MAGIC m (an f32) and their sum i m (47 bits) are all exact."""
    m = round_to_magic_exact(np.array([m_bits], np.uint32).view(np.float32))[0]
    c = np.float32(-MAGIC * np.float64(m))
    assert np.float64(c) == -MAGIC * np.float64(m)                      # the constant is exact
    fma = np.float32(np.float64(MAGIC + i) * np.float64(m) + np.float64(c))
    assert fma.view(np.uint32) == (np.float32(i) * m).view(np.uint32)


# ---- the lowering ------------------------------------------------------------------------------

def _scaled(m_values: np.ndarray, src: str):
    """y[i, j] = float(x[i]) * m[j], m a loop.global of multipliers."""
    n = 1 << ScalarType(src).bitwidth

    def body(b, xb, yb):
        g = b.create("loop.global", [], {"name": "m", "value": DenseElements(m_values)}).result
        _, p, (i, j) = parallel_loop(b, (0, 0), (n, m_values.size))
        f = op(p, "arith.cast", load(p, xb, i), to=F32)
        store(p, op(p, "arith.mul", f, load(p, g, j)), yb, i, j)
    return lambda: module({"x": buf((n,), src), "y": buf((n, m_values.size), F32)}, ["y"], body)


@pytest.mark.parametrize("src", ["i8", "i16"])
@pytest.mark.parametrize("on_grid", [True, False])
def test_every_small_int_times_every_multiplier(src, on_grid):
    """Every int8 / int16 value times multipliers of every magnitude: the CPU JIT (the GPU's
    LLVM code) equals the interpreter bit for bit; the fma form where every multiplier is on
    the grid, the add and multiply where one is not."""
    rng = np.random.default_rng(3)
    m = (rng.uniform(1, 2, 6) * np.exp2(rng.integers(-30, 20, 6))).astype(np.float32)
    m = round_to_magic_exact(m)
    if not on_grid:
        m[2] = np.nextafter(m[2], np.float32(np.inf))     # significand ends in 01: off the grid
        assert not magic_exact(m)
    info = np.iinfo(ScalarType(src).np_dtype)
    x = np.arange(info.min, info.max + 1).astype(ScalarType(src).np_dtype)
    mk = _scaled(m, src)
    prog = CpuProgram.from_module(mk())
    got = prog({"x": x})["y"]
    want = run_main(mk(), {"x": x})["y"]
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(got, x.astype(np.float32)[:, None] * m[None, :])
    assert ("@llvm.fma." in prog.optimized_text) == on_grid     # vectorized: llvm.fma.v8f32
    ptx = _ptx(mk())
    assert ("fma.rn.f32" in ptx) == on_grid
    # the MAGIC subtraction the fma absorbs (-MAGIC m, once per multiplier, is a mul)
    assert bool(re.search(r"add\.rn\.f32\s+%r\d+, %r\d+, 0fCB400000", ptx)) != on_grid


# ---- fold-qdq's option -------------------------------------------------------------------------

def _folded(model, fma: bool):
    m = as_module(model)
    passes = GRAPH_OPT.replace("fold-qdq", "fold-qdq{fma-multipliers=true}") if fma else None
    run_stages(m, "graph", graph_passes=passes)
    return m


def _multipliers(m):
    """The multipliers of the int8 layers and the scales of the DQs their residuals read."""
    from ptxc.rewrite.passes.fold_constants import constant_value
    out = {}
    for o in m.walk():
        if o.name in ("graph.qlinear_matmul", "graph.qlinear_conv"):
            g = ptxc.ir.spec.lookup(o.name).groups(o)
            out["layer"] = constant_value(g["multiplier"])
        if o.name == "graph.dequantize_linear" and o.results[0].users and \
                o.results[0].users[0].name.startswith("graph.qlinear"):
            out["residual"] = constant_value(o.operands[1])
    return out


def test_fold_qdq_rounds_the_multipliers_only_with_its_option():
    """An int8 GEMM with a residual: with ``fma-multipliers`` every multiplier (xs ws / ys per
    channel, the residual's rs / ys) is on the grid and within 2 ulps of onnxruntime's; the
    layer's outputs are at most one step from the model's, and the compiled cpu engine equals
    the interpreter bit for bit."""
    model = int8_ir.gemm_model(40, 96, 48, residual=True)
    x = int8_ir.inputs_for(model)
    plain, rounded = _folded(model, False), _folded(model, True)
    a, b = _multipliers(plain), _multipliers(rounded)
    assert sorted(a) == sorted(b) == ["layer", "residual"]
    assert not magic_exact(a["layer"])               # 48 channels: some off the grid
    for k in a:
        p, r = a[k], b[k]
        assert magic_exact(r)
        assert np.all(np.abs(r.astype(np.float64) - p) <= 2 * np.spacing(p))
    want = ptxc.interpret(rounded, x)["y"]
    ref = ptxc.interpret(plain, x)["y"]
    assert np.max(np.abs(want.astype(np.int32) - ref)) <= 1
    m = as_module(model)
    run_stages(m, "loop", graph_passes=GRAPH_OPT.replace("fold-qdq",
                                                         "fold-qdq{fma-multipliers=true}"))
    got = CpuProgram.from_module(m)(dict(x))["y"]
    np.testing.assert_array_equal(got, want)


def test_implicit_int8_sets_the_option():
    def graph(graph_passes, precision):
        options = CompileOptions.make("cpu", precision=precision, graph_passes=graph_passes)
        return build_pipeline(options, "graph", layout="nchw")
    texts = [str(p) for p in graph(None, "int8")]
    assert "fold-qdq{fma-multipliers=true}" in texts
    assert not any("fma-multipliers" in str(p) for p in graph(None, "fp32"))
    own = GRAPH_OPT.replace("fold-qdq", "fold-qdq{fma-multipliers=false}")
    assert graph(own, "int8") == parse_pipeline(own)   # a pipeline that says so keeps its own


# ---- the wgmma schedule's bound ----------------------------------------------------------------

def _wgmma(model):
    m = int8_ir.loop_module(model)
    PassManager("map-to-gpu{wgmma=on arch=sm_90}").run(m)
    return m


def test_wgmma_sums_carry_their_bound_and_convert_without_cvt():
    """An int8 GEMM of K = 96 in the wgmma form: its waits carry the contraction's bound, the
    mapped kernel still equals the interpreter bit for bit (which checks the bound on every
    sum), and the PTX converts the sums by the MAGIC add and scales them by fma."""
    from test_accumulator_bound import _contraction
    from ptxc.lower.gpu_map.contraction import accumulator_bound
    model = int8_ir.gemm_model(128, 96, 64)
    bound = accumulator_bound(_contraction(int8_ir.loop_module(model)))
    m = _wgmma(model)
    waits = [o for o in m.walk() if o.name == "gpu.wgmma_wait"]
    assert waits and {o.attributes.get("bound") for o in waits} == {bound}
    x = int8_ir.inputs_for(model)
    np.testing.assert_array_equal(run_main(m, x)["y"],
                                  ptxc.interpret(ptxc.import_onnx(model), x)["y"])
    ptx = ptxc.codegen.lower_to_ptx(m, arch="sm_90a").ptx
    assert "cvt.rn.f32.s32" not in ptx


def test_the_interpreter_refuses_a_sum_over_the_waits_bound():
    model = int8_ir.gemm_model(128, 96, 64, relu=False)
    m = _wgmma(model)
    for o in m.walk():
        if o.name == "gpu.wgmma_wait":
            o.attributes["bound"] = 10
    with pytest.raises(CompileError, match="over the wait's bound 10"):
        run_main(m, int8_ir.inputs_for(model))


def test_a_bound_on_f32_sums_is_refused():
    from ptxc.ir.verifier import verify
    m = _wgmma(int8_ir.gemm_model(128, 96, 64))
    (wait, *_) = [o for o in m.walk() if o.name == "gpu.wgmma_wait"]
    wait.attributes["bound"] = -1
    with pytest.raises(VerifyError, match="bound must be"):
        verify(m)
