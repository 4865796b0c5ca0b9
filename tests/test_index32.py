"""32-bit index arithmetic in GPU launches: gpu.launch's ``index_bits`` (the mma and wgmma
schedules ask, map-to-gpu's ``index32``), granted by loop_to_llvm.launch_index_bits only where
no index can leave i32, emitted by llvm_scalar (``index`` as i32, ``nsw``), llvm_kernel's
``address`` (each index widened, constant addends outside the extension) and ``access_align``
(pow2_divisor: alignment LLVM cannot see through the extensions).

The IR's meaning does not depend on the width, so the references are the interpreter (GPU runs)
and the 64-bit emission of the same launch (what the PTX must keep: vector accesses, no
spills)."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptxc.dialects import gpu
from ptxc.dialects.loop import for_loop, if_op, run_main
from ptxc.errors import VerifyError
from ptxc.ir import verify
from ptxc.ir.types import F16, F32, I32, I64, INDEX, ScalarType
from ptxc.lower import loop_to_llvm
from ptxc.lower.gpu_map import mma_prefetch
from ptxc.lower.llvm_kernel import pow2_divisor
from ptxc.lower.loop_to_llvm import lower_loop_to_llvm
from ptxc.ptx import assemble, ptxas_path
from ptxc.codegen import lower_to_ptx
from ptxc.rewrite import PassManager
from test_gpu_map_mma_flat_m import _check, _conv
from test_loop_dialect import buf, c, load, module, op, store

needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas is not installed here")


def idx(b, v):
    return c(b, v, INDEX)


def rows_launch(index_bits=32, rows=6, cols=8, block=32, wide_cast=None):
    """``y[r, 4 t + j] = x[r, 4 t + j] * 2`` for each thread t of a block, rows r in a loop.for,
    the four j unrolled: the offsets ``r * stride + 4 t + j`` are what a tile epilogue forms.
    ``wide_cast`` (a scalar type): the row also goes through a cast to it and back to index (a
    value of a tensor)."""
    n = block * 4

    def body(b, x, y):
        launch, k = gpu.launch_op(b, (1, 1, 1), (block, 1, 1), "handmade")
        if index_bits:
            launch.attributes["index_bits"] = index_bits
        t = gpu.thread_id(k, 0)
        _, lb, r = for_loop(k, 0, rows)[:3]
        if wide_cast:
            r = op(lb, "arith.cast", op(lb, "arith.cast", r, to=wide_cast), to=INDEX)
        base = op(lb, "arith.mul", t, idx(lb, 4))
        for j in range(4):
            col = op(lb, "arith.add", base, idx(lb, j))
            _, g = if_op(lb, op(lb, "arith.cmp", col, idx(lb, cols * 4), predicate="lt"))
            v = load(g, x, r, col)
            store(g, op(g, "arith.mul", v, c(g, 2.0, F16)), y, r, col)
    m = module({"x": buf((rows, n), F16), "y": buf((rows, n), F16)}, ["y"], body)
    x = np.random.default_rng(0).standard_normal((rows, n)).astype(np.float16)
    return m, {"x": x}


def _kernel_text(m) -> str:
    return lower_loop_to_llvm(m, target="nvptx").text


def test_the_verifier_takes_32_or_64():
    with pytest.raises(VerifyError, match="index_bits must be 32 or 64, is 16"):
        rows_launch(index_bits=16)   # (module() verifies)
    verify(rows_launch(index_bits=64)[0])


def test_a_32_bit_launch_does_its_index_math_in_i32():
    text32, text64 = _kernel_text(rows_launch(32)[0]), _kernel_text(rows_launch(None)[0])
    assert re.search(r"phi\s+i32 ", text32) and not re.search(r"phi\s+i64 ", text32)
    assert "add nsw i32" in text32 and "sext i32" in text32
    assert re.search(r"phi\s+i64 ", text64) and "sext i32" not in text64


def test_32_bits_only_where_every_buffer_is_small(monkeypatch):
    """A buffer of INDEX32_MAX_SPAN elements or more keeps the launch in 64 bits."""
    m, _ = rows_launch(32)
    span = 6 * 128
    monkeypatch.setattr(loop_to_llvm, "INDEX32_MAX_SPAN", span + 1)
    assert re.search(r"phi\s+i32 ", _kernel_text(m))
    monkeypatch.setattr(loop_to_llvm, "INDEX32_MAX_SPAN", span)
    text = _kernel_text(m)
    assert re.search(r"phi\s+i64 ", text) and not re.search(r"phi\s+i32 ", text)


def test_twin_launches_over_buffers_of_different_sizes_keep_their_own_widths(monkeypatch):
    """Two launches of the same code over equal views (made outside them) of a small and a
    large buffer: the emission shares one kernel's code between launches that key alike, and
    the width (which the views' types do not show) is part of that key."""
    def body(b, small, large, y0, y1):
        for src, y in ((small, y0), (large, y1)):
            v = b.create("loop.view", [src], {"shape": (64,), "strides": (1,)}).result
            launch, k = gpu.launch_op(b, (1, 1, 1), (64, 1, 1), "handmade")
            launch.attributes["index_bits"] = 32
            t = gpu.thread_id(k, 0)
            store(k, load(k, v, t), y, t)
    m = module({"small": buf((64,), F16), "large": buf((4096,), F16), "y0": buf((64,), F16),
                "y1": buf((64,), F16)}, ["y0", "y1"], body)
    monkeypatch.setattr(loop_to_llvm, "INDEX32_MAX_SPAN", 1024)
    prog = lower_loop_to_llvm(m, target="nvptx")
    assert not prog.twins
    k0, k1 = prog.text.split("define ptx_kernel")[1:3]
    assert "sext i32" in k0 and "sext i32" not in k1


@pytest.mark.parametrize("via, bits", [(I64, 64), (ScalarType("ui32"), 64), (F32, 64),
                                       (I32, 32), (ScalarType("ui16"), 32)])
def test_an_index_from_a_wider_integer_keeps_64_bits(via, bits):
    """i64, ui32 (over 2**31: no i32) and float sources keep 64 bits; i32 and narrower do not."""
    text = _kernel_text(rows_launch(32, wide_cast=via)[0])
    assert re.search(rf"phi\s+i{bits} ", text) and not re.search(rf"phi\s+i{96 - bits} ", text)


@needs_ptxas
def test_32_bit_offsets_keep_their_vector_accesses():
    """``4 t + j``: pow2_divisor proves the first of the four 8-byte aligned, so the four f16
    loads and stores stay one vector access each, as LLVM finds from 64-bit offsets."""
    vectors = []
    for bits in (32, None):
        p = lower_to_ptx(rows_launch(bits)[0], arch="sm_90")
        assemble(p.ptx, "sm_90")
        vectors.append(len(re.findall(r"(ld|st)\.global\.v[24]", p.ptx)))
    assert vectors[0] >= vectors[1] > 0, vectors


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [32, None])
def test_a_32_bit_launch_equals_the_interpreter_on_gpu(bits):
    from test_ptx import run_on_gpu
    m, x = rows_launch(bits)
    want = run_main(m, x)
    got = run_on_gpu(lower_to_ptx(m), x)
    np.testing.assert_array_equal(got["y"], want["y"])


# ---- pow2_divisor: against the values the interpreter computes --------------------------------

_OPS = ("arith.add", "arith.sub", "arith.mul", "arith.min", "arith.max")


@st.composite
def expressions(draw):
    """(lower, step, trips, a recipe): ``recipe`` builds an index expression of the loop's
    induction variable, the thread id and constants."""
    lower = draw(st.integers(0, 40))
    step = draw(st.sampled_from([1, 2, 3, 4, 8, 12, 16]))
    ops = draw(st.lists(st.tuples(st.sampled_from(_OPS), st.integers(0, 3),
                                  st.integers(0, 3), st.integers(-64, 64)), min_size=1,
                        max_size=6))
    return lower, step, draw(st.integers(1, 5)), ops


def _expression_launch(lower, step, trips, ops, block=8):
    """``y[t, i] = e`` for each thread t and iteration i: e is the last value of ``ops`` (each
    ``(name, a, b, k)``: ``name`` of values a and b of the list so far, seeded with the
    induction variable, the thread id and constants; k a constant appended first)."""
    found = {}

    def body(b, y):
        _, k = gpu.launch_op(b, (1, 1, 1), (block, 1, 1), "handmade")
        t = gpu.thread_id(k, 0)
        _, lb, iv = for_loop(k, lower, lower + trips * step, step)[:3]
        vals = [iv, t]
        for name, a, bb, const in ops:
            vals.append(idx(lb, const))
            vals.append(op(lb, name, vals[a % len(vals)], vals[bb % len(vals)]))
        i = op(lb, "arith.div", op(lb, "arith.sub", iv, idx(lb, lower)), idx(lb, step))
        store(lb, op(lb, "arith.cast", vals[-1], to=I64), y, t, i)
        found["e"] = vals[-1]
    m = module({"y": buf((block, trips), I64)}, ["y"], body)
    return m, found["e"]


@settings(max_examples=60, deadline=None)
@given(expressions())
def test_pow2_divisor_divides_every_value(case):
    m, e = _expression_launch(*case)
    d = pow2_divisor(e, {})
    assert d & (d - 1) == 0 and d >= 1
    got = run_main(m, {})["y"]
    assert np.all(got % d == 0), (d, got)


def test_pow2_divisor_sees_steps_and_constants():
    m, e = _expression_launch(16, 8, 3, [("arith.add", 0, 0, 0)])   # iv + iv: 16 + 8k, twice
    assert pow2_divisor(e, {}) == 8
    m, e = _expression_launch(16, 8, 3, [("arith.mul", 1, 2, 4)])   # t * 4
    assert pow2_divisor(e, {}) == 4


# ---- the mma schedule's launches ---------------------------------------------------------------

@pytest.fixture
def tiles_everywhere(monkeypatch):
    monkeypatch.setattr(mma_prefetch, "MIN_WAVES", 0)


def _mma_launches(m):
    return [o for o in m.walk() if o.name == "gpu.launch" and o.attributes["schedule"] == "mma"]


def test_mma_launches_ask_for_32_bits_except_flat_rows(tiles_everywhere):
    make, _ = _conv("int8")
    for opts, want in (("mma-flat-m=false", {32}), ("mma-flat-m=false index32=false", {None})):
        m = make()
        PassManager(f"map-to-gpu{{mma-epilogue=staged {opts}}}").run(m)
        assert {o.attributes.get("index_bits") for o in _mma_launches(m)} == want, opts
    m = make()
    PassManager("map-to-gpu{mma-epilogue=staged mma-flat-m=true}").run(m)
    for o in _mma_launches(m):   # a flat-row store (into a rank-1 view) keeps 64 bits
        flat = any(x.name == "loop.store" and x.operands[1].type.rank == 1 for x in o.walk())
        assert o.attributes.get("index_bits") == (None if flat else 32)


@needs_ptxas
@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_a_32_bit_mma_kernel_does_less_64_bit_arithmetic(precision, tiles_everywhere):
    make, _ = _conv(precision, N=4, H=16, W=16)
    counts, vectors = [], []
    for opts in ("mma-flat-m=false index32=false", "mma-flat-m=false"):
        m = make()
        PassManager(f"map-to-gpu{{mma-epilogue=staged {opts}}}").run(m)
        p = lower_to_ptx(m, arch="sm_90")
        rep = assemble(p.ptx, "sm_90")
        assert all(k.spill_stores == 0 and k.spill_loads == 0 for k in rep.kernels.values())
        counts.append(sum(p.ptx.count(i) for i in ("add.s64", "mad.lo.s64", "mul.lo.s64",
                                                    "shl.b64", "or.b64", "min.s64")))
        vectors.append(len(re.findall(r"(ld|st)\.(global|shared)\.v[24]", p.ptx)))
    assert counts[1] < counts[0], counts
    assert vectors[1] >= vectors[0], vectors


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_a_32_bit_mma_kernel_equals_the_nest_on_gpu(precision):
    from test_ptx import run_on_gpu
    make, x = _conv(precision, N=4, H=14, W=14)
    m = make()
    want = run_main(m, x)
    m = make()
    PassManager("map-to-gpu{mma-epilogue=staged mma-flat-m=false}").run(m)
    assert {o.attributes.get("index_bits") for o in _mma_launches(m)} == {32}
    _check(run_on_gpu(lower_to_ptx(m), x), want, precision)


def test_an_i32_cast_of_a_32_bit_index_is_no_instruction():
    """Casts compare LLVM widths: index -> i32 in a 32-bit launch is the value itself."""
    def body(b, y):
        launch, k = gpu.launch_op(b, (1, 1, 1), (8, 1, 1), "handmade")
        launch.attributes["index_bits"] = 32
        t = gpu.thread_id(k, 0)
        store(k, op(k, "arith.cast", t, to=I32), y, t)
    m = module({"y": buf((8,), I32)}, ["y"], body)
    text = _kernel_text(m)
    assert "trunc" not in text and "zext" not in text
    np.testing.assert_array_equal(run_main(m, {})["y"], np.arange(8, dtype=np.int32))


@needs_ptxas
def test_a_32_bit_int8_wgmma_epilogue_stores_byte_pairs():
    """The wgmma fragment's two neighbouring int8 columns: one ``st.global.v2.b8`` once
    access_align declares the pair's 2-byte alignment, which LLVM does not see through the
    32-bit offsets' sign extensions (nor finds in 64 bits)."""
    make, _ = _conv("int8", N=2, H=7, W=7)
    pairs = []
    for opts in ("", " index32=false"):
        m = make()
        PassManager(f"map-to-gpu{{wgmma=on arch=sm_90 mma-epilogue=staged "
                    f"wgmma-epilogue=fragment{opts}}}").run(m)
        assert {o.attributes["schedule"] for o in m.walk() if o.name == "gpu.launch"} >= \
            {"wgmma"}
        p = lower_to_ptx(m, arch="sm_90")
        pairs.append((len(re.findall(r"st\.global\.v2\.b8", p.ptx)),
                      len(re.findall(r"st\.global\.b8", p.ptx))))
    (v32, b32), (v64, b64) = pairs
    assert v32 > v64 and b32 < b64, pairs
