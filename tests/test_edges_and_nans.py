"""Edges that random data rarely reaches, each against numpy written independently:

* insert_slice chains whose slices share one edge element: the later insert wins, so the
  bufferization must not let both producers write in place (two slices that touch are not
  disjoint);
* float max/min with a NaN in either operand, compiled for the CPU: numpy's maximum/minimum
  propagate it from both sides (LLVM's maxnum would drop it);
* the tiled schedule's edge threads on an operand it leaves in global memory, in a buffer of
  exactly the nest's size: the threads of a partial tile past the last point must not read
  past its end.
"""

import numpy as np
import pytest
from support.loop_ir import const, load, module, op
from test_tensor_to_loop import empty, generic, three_ways

from ptxc.dialects.loop import for_loop, parallel_loop, run_main
from ptxc.dialects.tensor.maps import identity_map
from ptxc.driver.cpu import CpuProgram
from ptxc.ir import verify
from ptxc.ir.types import F16, F32, F64, BufferType
from ptxc.lower.gpu_map import tiled as T
from ptxc.lower.loop_to_llvm import lower_loop_to_llvm
from ptxc.target import Target

SM90 = Target.preset("sm_90")    # an H100 SXM: 132 SMs, 227 KiB of shared memory per block

RNG = np.random.default_rng(2026)


def _scaled(b, x, k):
    return generic(b, [x], [empty(b, x.type.shape)], x.type.shape, [identity_map(1)] * 2,
                   ["parallel"], lambda bb, v: [bb.create(
                       "arith.mul", [v[0], bb.create("arith.constant", [], {
                           "value": k, "type": F32}).result]).result]).result


def test_insert_slices_that_share_an_edge_element_keep_the_later_insert():
    """y[0:3] = -2 a (inserted last), y[2:5] = 3 c (inserted first): y[2] is -2 a[2]. The
    producers run in the other order (-2 a first), so writing both in place would leave 3 c[0]."""
    def build(b, args):
        a, c = args
        p1 = _scaled(b, a, -2.0)
        p2 = _scaled(b, c, 3.0)
        bottom = b.create("tensor.insert_slice", [p2, empty(b, (5,))], {
            "offsets": [2], "sizes": [3], "strides": [1]}).result
        return b.create("tensor.insert_slice", [p1, bottom], {
            "offsets": [0], "sizes": [3], "strides": [1]}).result

    a, c = RNG.standard_normal(3).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    _, got = three_ways({"a": a, "c": c}, build)
    np.testing.assert_array_equal(got["y0"], np.concatenate([-2 * a, 3 * c[1:]]))


def _max_min_program(el):
    t = BufferType((16,), el)

    def body(b, x, y, mx, mn):
        _, p, (i,) = parallel_loop(b, (0,), (16,))
        u, v = load(p, x, i), load(p, y, i)
        p.create("loop.store", [op(p, "arith.max", u, v), mx, [i]])
        p.create("loop.store", [op(p, "arith.min", u, v), mn, [i]])
    return module({"x": t, "y": t, "mx": t, "mn": t}, ["mx", "mn"], body)


def test_compiled_float_max_min_propagate_nan_from_either_side():
    for el in (F32, F64, F16):
        dt = el.np_dtype
        x = np.array([np.nan, 1, np.nan, -np.inf, 0.0, -0.0, np.nan, 5] * 2, dt)
        y = np.array([1, np.nan, np.nan, np.nan, -0.0, 0.0, -np.inf, -5] * 2, dt)
        got = CpuProgram(lower_loop_to_llvm(_max_min_program(el)))({"x": x, "y": y})
        for name, f in (("mx", np.maximum), ("mn", np.minimum)):
            want = f(x, y)
            np.testing.assert_array_equal(np.isnan(got[name]), np.isnan(want), err_msg=name)
            np.testing.assert_array_equal(got[name], want, err_msg=f"{name} {el}")


@pytest.mark.parametrize("el", [F32, F64, F16])
def test_compiled_max_min_against_signed_zeros_match_numpy(el):
    """max(x, +0.0) (a relu) and min(x, -0.0) compile to llvm.maximum/minimum for f32/f64
    (llvm_bounds' _tie_free_bound): NaN propagates and a tie gives numpy's zero; max(x, -0.0)
    and min(x, +0.0), whose ties numpy breaks the other way, stay compare-and-select. All four
    equal numpy on NaN, +-0, +-inf and ordinary values, sign of zero included."""
    t = BufferType((8,), el)
    x = np.array([np.nan, 0.0, -0.0, 1.5, -1.5, np.inf, -np.inf, 3.0], el.np_dtype)

    def body(b, xb, *outs):
        _, p, (i,) = parallel_loop(b, (0,), (8,))
        u = load(p, xb, i)
        for out, (name, zero) in zip(outs, CASES):
            p.create("loop.store", [op(p, name, u, const(p, zero, el)), out, [i]])
    CASES = [("arith.max", 0.0), ("arith.min", -0.0), ("arith.max", -0.0), ("arith.min", 0.0)]
    names = [f"y{k}" for k in range(len(CASES))]
    mod = module({"x": t, **{n: t for n in names}}, names, body)
    got = CpuProgram(lower_loop_to_llvm(mod))({"x": x})
    for n, (name, zero) in zip(names, CASES):
        f = np.maximum if name == "arith.max" else np.minimum
        want = f(x, np.asarray(zero, el.np_dtype))
        np.testing.assert_array_equal(np.isnan(got[n]), np.isnan(want), err_msg=n)
        np.testing.assert_array_equal(np.signbit(got[n]), np.signbit(want), err_msg=n)
        np.testing.assert_array_equal(got[n], want, err_msg=f"{name} {zero} {el}")


def test_tiled_edge_threads_read_nothing_past_a_global_operand():
    """y[i, j] = sum_k a[i, k] * b[k, j] * d[i, j, k] over 37 x 21 points in 16 x 16 tiles:
    a and b are staged in shared memory, d (every thread reads its own elements: nothing to
    share) stays in global memory, in a buffer of exactly the nest's size, so an edge thread
    clamped one past the last point reads out of bounds (on a GPU: garbage or a fault)."""
    m_, n_, k_ = 37, 21, 40

    def body(bld, a, b, d, y):
        _, p, (i, j) = parallel_loop(bld, (0, 0), (m_, n_))
        loop, fb, kk, (acc,) = for_loop(p, 0, k_, inits=[const(p, 0.0)])
        x = op(fb, "arith.mul", load(fb, a, i, kk), load(fb, b, kk, j))
        fb.create("loop.yield", [op(fb, "arith.add", acc,
                                    op(fb, "arith.mul", x, load(fb, d, i, j, kk)))])
        p.create("loop.store", [loop.results[0], y, [i, j]])

    mod = module({"a": BufferType((m_, k_), F32), "b": BufferType((k_, n_), F32),
                  "d": BufferType((m_, n_, k_), F32), "y": BufferType((m_, n_), F32)},
                 ["y"], body)
    (nest,) = [o for o in mod.walk() if o.name == "loop.parallel"]
    plan = T.plan(T.analyze(nest), SM90)
    assert sorted(box.group.buffer.type.shape for box in plan.boxes) == [(m_, k_), (k_, n_)]
    launch = T.schedule(nest, None)
    nest.erase()
    verify(mod)
    (gx, gy, _), (bx, by, _) = launch.attributes["grid"], launch.attributes["block"]
    assert gx * bx > n_ and gy * by > m_    # partial tiles along both dims
    ins = {"a": RNG.standard_normal((m_, k_)).astype(np.float32),
           "b": RNG.standard_normal((k_, n_)).astype(np.float32),
           "d": RNG.standard_normal((m_, n_, k_)).astype(np.float32)}
    got = run_main(mod, ins)["y"]
    want = np.einsum("ik,kj,ijk->ij", ins["a"].astype(np.float64), ins["b"], ins["d"])
    bound = 2 * k_ * np.finfo(np.float32).eps * np.einsum(
        "ik,kj,ijk->ij", np.abs(ins["a"]).astype(np.float64), np.abs(ins["b"]), np.abs(ins["d"]))
    assert (np.abs(got - want) <= bound).all()


@pytest.mark.parametrize("m_,n_,k_", [(47, 21, 40), (16, 31, 40), (37, 21, 63)])
def test_tiled_staging_stops_at_the_last_row_and_column(m_, n_, k_):
    """Tiles of 16 over 47 rows (or 31 columns, or 63 reduction steps in chunks of 32) reach
    exactly one past the last one: the cooperative copy into shared memory must guard it."""
    def body(bld, a, b, y):
        _, p, (i, j) = parallel_loop(bld, (0, 0), (m_, n_))
        loop, fb, kk, (acc,) = for_loop(p, 0, k_, inits=[const(p, 0.0)])
        x = op(fb, "arith.mul", load(fb, a, i, kk), load(fb, b, kk, j))
        fb.create("loop.yield", [op(fb, "arith.add", acc, x)])
        p.create("loop.store", [loop.results[0], y, [i, j]])

    mod = module({"a": BufferType((m_, k_), F32), "b": BufferType((k_, n_), F32),
                  "y": BufferType((m_, n_), F32)}, ["y"], body)
    (nest,) = [o for o in mod.walk() if o.name == "loop.parallel"]
    launch = T.schedule(nest, None)
    assert launch is not None and launch.attributes["block"][:2] == (16, 16)
    nest.erase()
    verify(mod)
    a = RNG.standard_normal((m_, k_)).astype(np.float32)
    b = RNG.standard_normal((k_, n_)).astype(np.float32)
    got = run_main(mod, {"a": a, "b": b})["y"]
    want = a.astype(np.float64) @ b
    bound = 2 * k_ * np.finfo(np.float32).eps * (np.abs(a).astype(np.float64) @ np.abs(b))
    assert (np.abs(got - want) <= bound).all()
