"""The loop dialect: handwritten programs (elementwise, reductions through memory and through
carried values, matmul, strided views, scratch buffers, weights, sequential loops, nested
parallel loops) interpreted against numpy; verifier errors; print/parse round trip with layouts.

The ``PROGRAMS`` builders are shared with tests/test_loop_to_llvm.py, which compiles each and
expects the interpreter's result."""

import numpy as np
import pytest

from ptxc.dialects.loop import for_loop, parallel_loop, run_main
from ptxc.dialects.loop_memory import reshape_type, subview_type
from ptxc.errors import BindingError, CompileError, ParseError, VerifyError
from ptxc.ir import DenseElements, parse_ir, print_ir, verify
from ptxc.ir.types import F16, F32, F64, I1, I32, I64, INDEX, BufferType, ScalarType

from support.loop_ir import const as c, load, module, op, store


def buf(shape, el=F32, strides=None, offset=0):
    return BufferType(shape, el if isinstance(el, ScalarType) else ScalarType(el), strides, offset)


# ---- programs: name -> (module, inputs, numpy reference) -------------------------------------

def elementwise(el=F32, shape=(5, 7)):
    """y[i, j] = max(x[i, j] + bias[j], 0) * 2 (bias broadcast along rows)."""
    def body(b, x, bias, y):
        _, p, (i, j) = parallel_loop(b, (0, 0), shape)
        s = op(p, "arith.add", load(p, x, i, j), load(p, bias, j))
        r = op(p, "arith.max", s, c(p, 0, el))
        store(p, op(p, "arith.mul", r, c(p, 2, el)), y, i, j)
    m = module({"x": buf(shape, el), "bias": buf(shape[1:], el), "y": buf(shape, el)}, ["y"],
               body)
    rng = np.random.default_rng(0)
    dt = el.np_dtype
    x = (rng.standard_normal(shape) * 10).astype(dt)
    bias = (rng.standard_normal(shape[1:]) * 10).astype(dt)
    return m, {"x": x, "bias": bias}, lambda x, bias: {"y": np.maximum(x + bias, 0) * dt.type(2)}


def row_sum_memory(shape=(4, 9)):
    """Reduction through memory: y[i] = 0, then y[i] += x[i, k] in a loop.for."""
    def body(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), shape[:1])
        store(p, c(p, 0.0), y, i)
        _, f, k, _ = for_loop(p, 0, shape[1])
        store(f, op(f, "arith.add", load(f, y, i), load(f, x, i, k)), y, i)
    m = module({"x": buf(shape), "y": buf(shape[:1])}, ["y"], body)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    return m, {"x": x}, lambda x: {"y": _seq_sum(x)}


def _seq_sum(x):
    acc = np.zeros(x.shape[0], x.dtype)
    for k in range(x.shape[1]):
        acc = acc + x[:, k]
    return acc


def row_max_carried(shape=(6, 5), el=F32):
    """Reduction in registers: a loop.for carrying the running max (from -inf)."""
    def body(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), shape[:1])
        init = c(p, float("-inf"), el)
        loop, f, k, (acc,) = for_loop(p, 0, shape[1], inits=[init])
        f.create("loop.yield", [op(f, "arith.max", acc, load(f, x, i, k))])
        store(p, loop.results[0], y, i)
    m = module({"x": buf(shape, el), "y": buf(shape[:1], el)}, ["y"], body)
    x = np.random.default_rng(2).standard_normal(shape).astype(el.np_dtype)
    x[1, 2] = np.nan  # NaN propagates through max
    return m, {"x": x}, lambda x: {"y": np.max(x, axis=1)}


def matmul(M=6, K=5, N=7, el=F32):
    """C[i, j] = sum_k A[i, k] * B[k, j], accumulated in a carried value."""
    def body(b, a, bb, out):
        _, p, (i, j) = parallel_loop(b, (0, 0), (M, N))
        loop, f, k, (acc,) = for_loop(p, 0, K, inits=[c(p, 0.0, el)])
        prod = op(f, "arith.mul", load(f, a, i, k), load(f, bb, k, j))
        f.create("loop.yield", [op(f, "arith.add", acc, prod)])
        store(p, loop.results[0], out, i, j)
    m = module({"a": buf((M, K), el), "b": buf((K, N), el), "c": buf((M, N), el)}, ["c"], body)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((M, K)).astype(el.np_dtype)
    bm = rng.standard_normal((K, N)).astype(el.np_dtype)

    def ref(a, b):
        acc = np.zeros((M, N), a.dtype)
        for k in range(K):
            acc = acc + a[:, k:k + 1] * b[k:k + 1, :]
        return {"c": acc}
    return m, {"a": a, "b": bm}, ref


def views():
    """Strided views: a transposed view, a stepped slice with an offset, a reversed view, and a
    concat whose halves are written through views with loop.copy."""
    def body(b, x, t, s, r, cat):
        xt = b.create("loop.view", [x], {"shape": (6, 4), "strides": (1, 6)}).result
        _, p, (i, j) = parallel_loop(b, (0, 0), (6, 4))
        store(p, load(p, xt, i, j), t, i, j)
        sl = b.create("loop.view", [x], {"offset": 7, "shape": (2, 3), "strides": (6, 2)}).result
        _, p, (i, j) = parallel_loop(b, (0, 0), (2, 3))
        store(p, load(p, sl, i, j), s, i, j)
        rv = b.create("loop.view", [x], {"offset": 23, "shape": (24,), "strides": (-1,)}).result
        _, p, (i,) = parallel_loop(b, (0,), (24,))
        store(p, load(p, rv, i), r, i)
        top = b.create("loop.view", [cat], {"shape": (4, 6), "strides": (6, 1)}).result
        bot = b.create("loop.view", [cat], {"offset": 24, "shape": (4, 6),
                                            "strides": (6, 1)}).result
        b.create("loop.copy", [x, top])
        # a view of a view: offsets and strides count from the memory under both
        rows = b.create("loop.view", [xt], {"shape": (4, 6), "strides": (6, 1)}).result
        b.create("loop.copy", [rows, bot])
    m = module({"x": buf((4, 6)), "t": buf((6, 4)), "s": buf((2, 3)), "r": buf((24,)),
                "cat": buf((8, 6))}, ["t", "s", "r", "cat"], body)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)

    def ref(x):
        return {"t": x.T, "s": x[1:3, 1::2], "r": x.reshape(-1)[::-1],
                "cat": np.concatenate([x, x]).astype(np.float32)}
    return m, {"x": x}, ref


def softmax(shape=(3, 10)):
    """Three kernels and a scratch buffer: e = exp(x - max), then y = e / sum(e)."""
    def body(b, x, y):
        e = b.create("loop.alloc", [], result_types=[buf(shape)]).result
        mx = b.create("loop.alloc", [], result_types=[buf(shape[:1])]).result
        _, p, (i,) = parallel_loop(b, (0,), shape[:1])
        loop, f, k, (acc,) = for_loop(p, 0, shape[1], inits=[c(p, float("-inf"))])
        f.create("loop.yield", [op(f, "arith.max", acc, load(f, x, i, k))])
        store(p, loop.results[0], mx, i)
        _, p, (i, j) = parallel_loop(b, (0, 0), shape)
        d = op(p, "arith.sub", load(p, x, i, j), load(p, mx, i))
        store(p, op(p, "math.exp", d), e, i, j)
        _, p, (i,) = parallel_loop(b, (0,), shape[:1])
        loop, f, k, (acc,) = for_loop(p, 0, shape[1], inits=[c(p, 0.0)])
        f.create("loop.yield", [op(f, "arith.add", acc, load(f, e, i, k))])
        _, q, j, _ = for_loop(p, 0, shape[1])
        store(q, op(q, "arith.div", load(q, e, i, j), loop.results[0]), y, i, j)
    m = module({"x": buf(shape), "y": buf(shape)}, ["y"], body)
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32) * 5

    def ref(x):
        e = np.exp(x - x.max(1, keepdims=True))
        return {"y": e / e.sum(1, keepdims=True)}
    return m, {"x": x}, ref


def weights():
    """A loop.global weight multiplied in; the weight constant is large (a blob when printed)."""
    w = np.random.default_rng(5).standard_normal((3, 8)).astype(np.float32)

    def body(b, x, y):
        g = b.create("loop.global", [], {"name": "w", "value": DenseElements(w)}).result
        _, p, (i, j) = parallel_loop(b, (0, 0), (3, 8))
        store(p, op(p, "arith.mul", load(p, x, i, j), load(p, g, i, j)), y, i, j)
    m = module({"x": buf((3, 8)), "y": buf((3, 8))}, ["y"], body)
    x = np.random.default_rng(6).standard_normal((3, 8)).astype(np.float32)
    return m, {"x": x}, lambda x: {"y": x * w}


def prefix_sum(n=10):
    """A sequential top-level loop.for: y[0] = x[0]; y[i] = y[i-1] + x[i]."""
    def body(b, x, y):
        _, p, _ = parallel_loop(b, (), ())
        zero = p.create("arith.constant", [], {"value": 0, "type": INDEX}).result
        store(p, load(p, x, zero), y, zero)
        _, f, i, _ = for_loop(b, 1, n)
        prev = op(f, "arith.sub", i, f.create("arith.constant", [],
                                              {"value": 1, "type": INDEX}).result)
        store(f, op(f, "arith.add", load(f, y, prev), load(f, x, i)), y, i)
    m = module({"x": buf((n,)), "y": buf((n,))}, ["y"], body)
    x = np.random.default_rng(7).standard_normal(n).astype(np.float32)
    return m, {"x": x}, lambda x: {"y": np.cumsum(x, dtype=np.float32)}


def nested_parallel(shape=(3, 4, 5)):
    """A loop.parallel inside a loop.parallel; the inner one reads the outer induction value."""
    def body(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), shape[:1])
        fi = op(p, "arith.cast", i, to=F32)
        _, q, (j, k) = parallel_loop(p, (0, 0), shape[1:])
        v = op(q, "arith.mul", load(q, x, i, j, k), fi)
        store(q, op(q, "arith.add", v, op(q, "arith.cast", k, to=F32)), y, i, j, k)
    m = module({"x": buf(shape), "y": buf(shape)}, ["y"], body)
    x = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
    i = np.arange(shape[0], dtype=np.float32)[:, None, None]
    k = np.arange(shape[2], dtype=np.float32)
    return m, {"x": x}, lambda x: {"y": x * i + k}


def int_and_bool(n=12):
    """i64 arithmetic (division by zero gives the dividend), comparisons into an i1 buffer, and
    i1 -> i64 casts."""
    def body(b, x, d, q, pos, cnt):
        _, p, (i,) = parallel_loop(b, (0,), (n,))
        xv, dv = load(p, x, i), load(p, d, i)
        store(p, op(p, "arith.div", xv, dv), q, i)
        gt = op(p, "arith.cmp", xv, dv, predicate="gt")
        store(p, gt, pos, i)
        store(p, op(p, "arith.add", op(p, "arith.cast", gt, to=I64), xv), cnt, i)
    m = module({"x": buf((n,), I64), "d": buf((n,), I64), "q": buf((n,), I64),
                "pos": buf((n,), I1), "cnt": buf((n,), I64)}, ["q", "pos", "cnt"], body)
    x = np.array([7, -7, 7, -7, 0, 5, 100, -100, 3, 9, -1, 6], np.int64)
    d = np.array([2, 2, -2, -2, 3, 0, 7, 7, 0, -1, -1, 6], np.int64)

    def ref(x, d):
        q = np.where(d == 0, x, np.trunc(x / np.where(d == 0, 1, d))).astype(np.int64)
        return {"q": q, "pos": x > d, "cnt": (x > d).astype(np.int64) + x}
    return m, {"x": x, "d": d}, ref


PROGRAMS = {
    "elementwise_f32": elementwise, "elementwise_f64": lambda: elementwise(F64),
    "elementwise_f16": lambda: elementwise(F16), "elementwise_i32": lambda: elementwise(I32),
    "row_sum_memory": row_sum_memory, "row_max_carried": row_max_carried, "matmul": matmul,
    "matmul_f64": lambda: matmul(4, 3, 5, F64), "views": views, "softmax": softmax,
    "weights": weights, "prefix_sum": prefix_sum, "nested_parallel": nested_parallel,
    "int_and_bool": int_and_bool,
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_interpreter_matches_numpy(name):
    m, inputs, ref = PROGRAMS[name]()
    got = run_main(m, inputs)
    want = ref(**inputs)
    assert set(got) == set(want)
    for k in want:
        assert got[k].dtype == want[k].dtype, k
        tol = {"softmax": 1e-6}.get(name, 0)
        np.testing.assert_allclose(got[k], want[k], rtol=tol, atol=tol, err_msg=k)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_print_parse_round_trip(name):
    m = PROGRAMS[name]()[0]
    text = print_ir(m)
    again = parse_ir(text)
    verify(again)
    assert print_ir(again) == text


def test_layouts_print_and_parse():
    m = module({"x": buf((4, 8), F32, (16, 1), 4), "y": buf((3,), F32, (-2,), 5)}, [],
               lambda b, x, y: None)
    text = print_ir(m)
    assert "buffer<4x8xf32, strides [16, 1], offset 4>" in text
    assert "buffer<3xf32, strides [-2], offset 5>" in text
    assert print_ir(parse_ir(text)) == text
    assert str(buf((4, 8), F32, (8, 1), 0)) == "buffer<4x8xf32>"
    assert buf((4, 8)) == buf((4, 8), F32, (8, 1))
    assert str(buf((4,), F32, None, 2)) == "buffer<4xf32, offset 2>"
    with pytest.raises(ParseError, match="before the base pointer"):
        parse_ir(text.replace("offset 5", "offset 3"))
    with pytest.raises(ParseError, match="only buffers"):
        parse_ir(text.replace("buffer<4x8xf32, strides [16, 1], offset 4>",
                              "tensor<4x8xf32, offset 4>"))


def test_view_writes_land_in_the_source():
    # out = zeros; write through a transposed view of out, read out directly
    def body(b, x, out):
        v = b.create("loop.view", [out], {"shape": (3, 2), "strides": (1, 3)}).result
        _, p, (i, j) = parallel_loop(b, (0, 0), (3, 2))
        store(p, load(p, x, i, j), v, i, j)
    m = module({"x": buf((3, 2)), "out": buf((2, 3))}, ["out"], body)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_array_equal(run_main(m, {"x": x})["out"], x.T)


def test_layout_helpers():
    src = buf((4, 6), F32, (12, 2), 3)  # every other column of a 4x12 buffer, from element 3
    sub = subview_type(src, (1, 2), (2, 2), (2, 1))
    assert sub == buf((2, 2), F32, (24, 2), 3 + 12 + 4)
    assert reshape_type(buf((4, 6)), (24,)) == buf((24,))
    assert reshape_type(src, (2, 2, 6)) == buf((2, 2, 6), F32, (24, 12, 2), 3)
    assert reshape_type(src, (24,)) == buf((24,), F32, (2,), 3)  # rows follow each other
    gap = buf((4, 6), F32, (16, 2), 3)  # rows with a gap between them
    assert reshape_type(gap, (24,)) is None  # cannot be flattened without a copy
    with pytest.raises(ValueError):
        subview_type(src, (3, 0), (2, 1), (1, 1))


def test_argument_with_a_layout():
    # main reads x through its declared layout: x is every other element of its memory
    def body(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), (4,))
        store(p, load(p, x, i), y, i)
    m = module({"x": buf((4,), F32, (2,), 1), "y": buf((4,))}, ["y"], body)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(run_main(m, {"x": x})["y"], x)


def _expect_verify_error(body, args, match):
    with pytest.raises(VerifyError, match=match):
        module(args, [], body)


def test_verifier_errors():
    a = {"x": buf((4, 4)), "y": buf((4,), I32)}

    def wrong_index_count(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), (4,))
        p.create("loop.load", [x, [i]])
    _expect_verify_error(wrong_index_count, a, "needs 2 indices")

    def store_type(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), (4,))
        store(p, c(p, 1.0), y, i)
    _expect_verify_error(store_type, a, "stores a f32 into")

    def view_outside(b, x, y):
        b.create("loop.view", [x], {"offset": 10, "shape": (4,), "strides": (2,)})
    _expect_verify_error(view_outside, a, "reaches outside")

    def alloc_in_loop(b, x, y):
        _, p, _ = parallel_loop(b, (0,), (4,))
        p.create("loop.alloc", [], result_types=[buf((2,))])
    _expect_verify_error(alloc_in_loop, a, "top level")

    def bad_step(b, x, y):
        parallel_loop(b, (0,), (4,), (0,))
    _expect_verify_error(bad_step, a, "positive")

    def copy_shapes(b, x, y):
        b.create("loop.copy", [x, y])
    _expect_verify_error(copy_shapes, a, "must match")

    def yield_types(b, x, y):
        loop, f, k, (acc,) = for_loop(b, 0, 4, inits=[c(b, 0.0)])
        f.create("loop.yield", [])
    _expect_verify_error(yield_types, a, "loop.yield must give f32")


def test_runtime_errors_name_the_op():
    def oob(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), (5,))
        store(p, load(p, x, i), y, c(p, 0, INDEX))
    m = module({"x": buf((4,)), "y": buf((4,))}, ["y"], oob)
    with pytest.raises(CompileError, match="loop.load.*out of bounds"):
        run_main(m, {"x": np.zeros(4, np.float32)})

    def into_global(b, x, y):
        g = b.create("loop.global", [], {"name": "w", "value": DenseElements(
            np.zeros(4, np.float32))}).result
        _, p, (i,) = parallel_loop(b, (0,), (4,))
        store(p, load(p, x, i), g, i)
    m = module({"x": buf((4,)), "y": buf((4,))}, ["y"], into_global)
    with pytest.raises(CompileError, match="read-only"):
        run_main(m, {"x": np.zeros(4, np.float32)})
    with pytest.raises(BindingError, match="missing"):
        run_main(m, {})
    with pytest.raises(BindingError, match="expected"):
        run_main(m, {"x": np.zeros(3, np.float32)})


def test_unwritten_scratch_reads_as_nan():
    def body(b, x, y):
        t = b.create("loop.alloc", [], result_types=[buf((4,))]).result
        _, p, (i,) = parallel_loop(b, (0,), (4,))
        store(p, load(p, t, i), y, i)
    m = module({"x": buf((4,)), "y": buf((4,))}, ["y"], body)
    assert np.isnan(run_main(m, {"x": np.zeros(4, np.float32)})["y"]).all()
