"""``arith.round_tf32`` and the f16 contraction nest, on every target.

* The reference (:func:`ptxc.dialects.arith.round_tf32`) against an independent one in float64
  arithmetic (round |x| to the nearest multiple of the tf32 quantum, ties away from zero), on
  hand-picked cases (ties, carries into the exponent, denormals, overflow, NaN payloads) and on
  random bit patterns of every class.
* The CPU JIT and (on a GPU) NVPTX equal the reference bit for bit; ptxas assembles both.
* The nests ``precision=`` gives the mma schedule (docs/lowering.md, "Precision"): f16 operands
  loaded, widened to f32, multiplied and summed into an f32 carried value, stored as f16; and
  the tf32 form (f32 loads each followed by ``arith.round_tf32``): the JIT equals the
  interpreter bit for bit; map-to-gpu gives both to the mma schedule, ptxas assembles them.
"""

import numpy as np
import pytest

from ptxc.dialects.arith import round_tf32
from ptxc.dialects.loop import for_loop, parallel_loop, run_main
from ptxc.driver.cpu import CpuProgram
from ptxc.errors import VerifyError
from ptxc.ir import parse_ir, print_ir
from ptxc.ir.types import F16, F32
from ptxc.ptx import assemble, ptxas_path
from ptxc.codegen import lower_to_ptx
from test_loop_dialect import buf, c, load, module, op, store

needs_ptxas = pytest.mark.skipif(ptxas_path() is None,
                                 reason="ptxas (CUDA toolkit) is not installed on this machine")


def independent_tf32(x: np.ndarray) -> np.ndarray:
    """tf32 rounding computed in float64 from the value, not its bits: tf32 keeps 11
    significant bits (10 stored), its smallest quantum is f32's denormal quantum times 2^13."""
    with np.errstate(invalid="ignore"):
        x = np.asarray(x, np.float32).astype(np.float64)
    out = np.empty_like(x)
    for i, v in np.ndenumerate(x):
        if not np.isfinite(v) or v == 0:
            out[i] = v
            continue
        _, e = np.frexp(abs(v))                    # |v| = m * 2^e, m in [0.5, 1)
        q = max(np.ldexp(1.0, int(e) - 11), np.ldexp(1.0, -136))
        n = np.floor(abs(v) / q + 0.5)            # ties away from zero (on the magnitude)
        r = np.copysign(n * q, v)
        out[i] = r if abs(r) < 2.0 ** 128 else np.copysign(np.inf, v)
    return out.astype(np.float32)


def bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def random_f32(n=4000, seed=0) -> np.ndarray:
    """Random bit patterns: normals of every exponent, denormals, values near the top, ties."""
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    b[: n // 8] &= np.uint32(0x807FFFFF)                    # denormals and zeros
    b[n // 8: n // 4] |= np.uint32(0x7F000000)              # near the top of the range
    b[n // 4: n // 2] = (b[n // 4: n // 2] & np.uint32(0xFFFFE000)) | np.uint32(0x1000)  # ties
    specials = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001,
                         0xFFC12345, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FF000, 0x00000001, 0x00001000,
                         0x00001FFF, 0x007FF000, 0x3F801000, 0xBF801000], np.uint32)
    return np.concatenate([specials, b]).view(np.float32)


def test_reference_matches_an_independent_rounding():
    x = random_f32()
    got, want = round_tf32(x), independent_tf32(x)
    nan = np.isnan(x)
    np.testing.assert_array_equal(bits(got[~nan]), bits(want[~nan]))
    np.testing.assert_array_equal(bits(got[nan]), bits(x[nan]))  # NaN payloads kept
    assert not (bits(got[np.isfinite(got)]) & np.uint32(0x1FFF)).any()


@pytest.mark.parametrize("x, want", [
    (1 + 2 ** -11, 1 + 2 ** -10),                 # a tie rounds away from zero
    (-(1 + 2 ** -11), -(1 + 2 ** -10)),
    (1 + 2 ** -11 - 2 ** -23, 1.0),               # just below the tie rounds down
    (1 + 3 * 2 ** -11, 1 + 2 * 2 ** -10),         # a tie with an odd last bit: away, not even
    (2 - 2 ** -23, 2.0),                          # carry into the exponent
    (np.float32(3.4028235e38), np.inf),           # largest f32: past tf32's largest, to inf
    (np.inf, np.inf), (-np.inf, -np.inf), (0.0, 0.0), (-0.0, -0.0),
    (np.float32(2 ** -149), 0.0),                 # smallest denormal rounds to zero
    (np.float32(2 ** -137), 2 ** -136),           # half the smallest tf32 quantum: a tie
])
def test_reference_cases(x, want):
    got = round_tf32(np.float32(x))
    assert bits(got) == bits(np.float32(want)), (x, got, want)


def test_nan_is_preserved_and_f16_is_refused():
    assert np.isnan(round_tf32(np.float32(np.nan)))

    def body(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), (4,))
        store(p, op(p, "arith.round_tf32", load(p, x, i)), y, i)
    with pytest.raises(VerifyError, match="round_tf32.*must be f32"):
        module({"x": buf((4,), F16), "y": buf((4,), F16)}, ["y"], body)


def rounding_program(n):
    def body(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), (n,))
        store(p, op(p, "arith.round_tf32", load(p, x, i)), y, i)
    return module({"x": buf((n,)), "y": buf((n,))}, ["y"], body)


def test_interpreter_and_cpu_jit_equal_the_reference_bitwise():
    x = random_f32()
    m = rounding_program(x.size)
    assert print_ir(parse_ir(print_ir(m))) == print_ir(m)
    want = round_tf32(x)
    np.testing.assert_array_equal(bits(run_main(m, {"x": x})["y"]), bits(want))
    np.testing.assert_array_equal(bits(CpuProgram.from_module(m)({"x": x})["y"]), bits(want))


# ---- the contraction nests precision= hands to the mma schedule -----------------------------

def contraction(m_, n_, k_, precision):
    """y[i, j] = sum_k A[i, k] * B[k, j] as the loop lowering writes it in ``precision``:
    fp16: f16 buffers, each load widened to f32, an f32 carried sum, relu in f32, an f16 store;
    tf32: f32 buffers, each load rounded by arith.round_tf32; the nest annotated as a
    matmul's."""
    el = F16 if precision == "fp16" else F32

    def body(b, a, bb, y):
        nest, p, (i, j) = parallel_loop(b, (0, 0), (m_, n_))
        # what lower-tensor-to-loop says of a matmul's nest (ptxc/dialects/loop_contraction.py)
        nest.attributes["contraction"] = ("matmul", "f16" if precision == "fp16" else "tf32",
                                          "MN", "K")
        loop, f, k, (acc,) = for_loop(p, 0, k_, inits=[c(p, 0.0)])
        xs = []
        for v in (load(f, a, i, k), load(f, bb, k, j)):
            xs.append(op(f, "arith.cast", v, to=F32) if precision == "fp16"
                      else op(f, "arith.round_tf32", v))
        f.create("loop.yield", [op(f, "arith.add", acc, op(f, "arith.mul", *xs))])
        r = op(p, "arith.max", loop.results[0], c(p, 0.0))
        store(p, op(p, "arith.cast", r, to=el) if el != F32 else r, y, i, j)
    m = module({"a": buf((m_, k_), el), "b": buf((k_, n_), el), "y": buf((m_, n_), el)}, ["y"],
               body)
    rng = np.random.default_rng(3)
    inputs = {"a": rng.standard_normal((m_, k_)).astype(el.np_dtype),
              "b": rng.standard_normal((k_, n_)).astype(el.np_dtype)}
    return m, inputs


@pytest.mark.parametrize("precision", ["fp16", "tf32"])
def test_contraction_nest_jit_equals_interpreter(precision):
    m, inputs = contraction(13, 10, 37, precision)
    want = run_main(m, inputs)["y"]
    got = CpuProgram.from_module(m)(inputs)["y"]
    assert got.dtype == want.dtype == (np.float16 if precision == "fp16" else np.float32)
    np.testing.assert_array_equal(got, want)
    a, b = (inputs[k].astype(np.float64) for k in "ab")
    if precision == "tf32":
        a, b = (round_tf32(inputs[k]).astype(np.float64) for k in "ab")
    exact = np.maximum(a @ b, 0)
    store = 2.0 ** -11 if precision == "fp16" else 2.0 ** -24  # rounding of the store
    bound = store * np.abs(exact) + 37 * 2.0 ** -24 * (np.abs(a) @ np.abs(b))  # + f32 sums
    assert (np.abs(want.astype(np.float64) - exact) <= bound).all()


@needs_ptxas
@pytest.mark.parametrize("precision", ["fp16", "tf32"])
def test_contraction_nest_assembles_for_nvptx(precision):
    from ptxc.rewrite.pass_manager import PassManager
    m, _ = contraction(64, 48, 40, precision)
    PassManager("map-to-gpu").run(m)
    p = lower_to_ptx(m)
    # the contract: the mma schedule (ptxc/lower/gpu_map/mma.py) recognizes this nest
    (k,) = p.table.kernels
    assert k.schedule == "mma" and "mma.sync" in p.ptx
    assert k.tile.startswith({"fp16": "f16 ", "tf32": "tf32 "}[precision])
    rep = assemble(p.ptx, "sm_90")
    assert all(k.spill_stores == 0 for k in rep.kernels.values())


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "tf32"])
def test_rounding_and_nests_on_gpu_bitwise(precision):
    from test_ptx import run_on_gpu
    from ptxc.rewrite.pass_manager import PassManager
    x = random_f32()
    m = rounding_program(x.size)
    PassManager("map-to-gpu").run(m)
    got = run_on_gpu(lower_to_ptx(m), {"x": x})["y"]
    np.testing.assert_array_equal(bits(got), bits(round_tf32(x)))
    m, inputs = contraction(64, 48, 40, precision)
    PassManager("map-to-gpu").run(m)
    want = run_main(m, inputs)["y"]
    got = run_on_gpu(lower_to_ptx(m), inputs)["y"]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3,
                               atol=1e-3)  # the gpu schedule may sum in another order
