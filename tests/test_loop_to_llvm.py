"""loop -> LLVM IR -> CPU JIT: every handwritten loop program of tests/test_loop_dialect.py
compiled and run equals the loop interpreter; scalar ops and math functions against the
interpreter over wide ranges with inf and NaN; threads give the same bits as one thread; the
kernel table; errors for what cannot be lowered or bound."""

import re

import numpy as np
import pytest

from ptxc.dialects.loop import parallel_loop, for_loop, run_main
from ptxc.driver.cpu import CpuProgram
from ptxc.errors import BindingError, CompileError
from ptxc.ir.types import F16, F32, F64, I1, I8, I32, I64, INDEX, UI8, ScalarType
from ptxc.lower.loop_to_llvm import KernelTable, lower_loop_to_llvm
from test_loop_dialect import PROGRAMS, buf, c, load, module, op, store

# programs whose math (exp) is not exact in numpy either: compared within a few ulps
_INEXACT = {"softmax"}


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in units of the last place between same-typed float arrays (NaN vs NaN and
    equal infinities are 0; NaN vs a number is huge)."""
    a, b = np.asarray(a), np.asarray(b)
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]

    def ordered(x):
        i = x.view(bits).astype(np.int64)
        return np.where(i < 0, np.iinfo(bits).min - i, i)
    d = np.abs(ordered(a) - ordered(b))
    both_nan = np.isnan(a) & np.isnan(b)
    one_nan = np.isnan(a) ^ np.isnan(b)
    return np.where(both_nan, 0, np.where(one_nan, 1 << 40, d))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_jit_matches_interpreter(name):
    m, inputs, _ = PROGRAMS[name]()
    want = run_main(m, inputs)
    got = CpuProgram.from_module(m)(inputs)
    assert set(got) == set(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        if name in _INEXACT:
            assert ulps(got[k], want[k]).max() <= 4, k
        else:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.mark.parametrize("name", ["matmul", "softmax", "views", "nested_parallel"])
def test_threads_give_the_same_bits(name):
    m, inputs, _ = PROGRAMS[name]()
    one = CpuProgram.from_module(m, threads=1)(inputs)
    many = CpuProgram.from_module(m, threads=4, min_parallel_work=0)(inputs)
    for k in one:
        assert one[k].tobytes() == many[k].tobytes(), k


def test_threads_on_a_larger_matmul():
    from test_loop_dialect import matmul
    m, inputs, _ = matmul(67, 33, 45)
    prog = lower_loop_to_llvm(m)
    (k,) = prog.table.kernels
    assert k.parallel and k.trip_count == 67 and k.work >= 67 * 45 * 33
    one = CpuProgram(prog, threads=1)(inputs)
    many = CpuProgram(prog, threads=5, min_parallel_work=0)(inputs)
    assert one["c"].tobytes() == many["c"].tobytes()
    np.testing.assert_allclose(one["c"], inputs["a"] @ inputs["b"], rtol=1e-4, atol=1e-4)


def unary_program(name, el, n):
    def body(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), (n,))
        store(p, op(p, name, load(p, x, i)), y, i)
    return module({"x": buf((n,), el), "y": buf((n,), el)}, ["y"], body)


def special_values(el: ScalarType) -> np.ndarray:
    dt = el.np_dtype
    info = np.finfo(dt)
    xs = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, info.tiny,
          -info.tiny, info.tiny / 4, info.max, -info.max, info.eps, 1e-3, 7.0, 88.0, 89.0,
          -87.0, -104.0, 700.0, 710.0, -745.0, 11.0, 12.0, 5.9, -5.9]
    wide = np.concatenate([np.linspace(-30, 30, 301), np.geomspace(1e-30, 1e30, 121),
                           -np.geomspace(1e-30, 1e30, 121)])
    with np.errstate(over="ignore"):
        return np.concatenate([np.array(xs), wide]).astype(dt)


# the worst distance in ulps from numpy's result we accept per math op; exact ops are 0
_MATH_ULPS = {"exp": 2, "log": 2, "tanh": 2, "erf": 2, "sqrt": 0, "abs": 0, "floor": 0,
              "ceil": 0}


@pytest.mark.parametrize("el", [F32, F64, F16], ids=str)
@pytest.mark.parametrize("fn", sorted(_MATH_ULPS))
def test_math_functions_match_numpy(fn, el):
    x = special_values(el)
    m = unary_program(f"math.{fn}", el, x.size)
    want = run_main(m, {"x": x})["y"]
    got = CpuProgram.from_module(m)({"x": x})["y"]
    d = ulps(got, want)
    worst = int(np.argmax(d))
    # the reference's f64 erf is a Chebyshev fit good to 2e-14 relative (~90 ulps); libm's is
    # within an ulp
    limit = 128 if (fn, el) == ("erf", F64) else _MATH_ULPS[fn]
    assert d.max() <= limit, (fn, x[worst], got[worst], want[worst])


def binary_program(name, el, n, out=None, **attrs):
    def body(b, x, z, y):
        _, p, (i,) = parallel_loop(b, (0,), (n,))
        store(p, op(p, name, load(p, x, i), load(p, z, i), **attrs), y, i)
    return module({"x": buf((n,), el), "z": buf((n,), el), "y": buf((n,), out or el)}, ["y"],
                  body)


def _pairs(el: ScalarType):
    dt = el.np_dtype
    if el.is_float:
        v = special_values(el)[:40]
    elif el == I1:
        v = np.array([False, True])
    else:
        info = np.iinfo(dt)
        v = np.array([0, 1, -1, 2, -2, 3, 7, -7, 100, info.max, info.min + 1, info.min],
                     dtype=np.int64).astype(dt)
    a, b = np.meshgrid(v, v)
    return a.reshape(-1).copy(), b.reshape(-1).copy()


_BINARY = ["add", "sub", "mul", "div", "max", "min"]


@pytest.mark.parametrize("el", [F32, F64, F16, I64, I32, I8, UI8], ids=str)
@pytest.mark.parametrize("name", _BINARY + ["rem", "pow", "cmp"])
def test_arith_matches_interpreter(name, el):
    x, z = _pairs(el)
    if name == "div" and el.is_int and el.is_signed:
        # the reference's abs() misreads INT_MIN as a dividend or a divisor
        x[x == np.iinfo(x.dtype).min] = 0
        z[z == np.iinfo(z.dtype).min] = 0
    if name == "pow" and el.is_int:
        z = np.abs(z) % 9 if el.is_signed else z % 9  # numpy refuses negative integer powers
    preds = ["eq", "ne", "lt", "le", "gt", "ge"] if name == "cmp" else [None]
    for pred in preds:
        attrs = {"predicate": pred} if pred else {}
        m = binary_program(f"arith.{name}", el, x.size, I1 if pred else None, **attrs)
        want = run_main(m, {"x": x, "z": z})["y"]
        got = CpuProgram.from_module(m)({"x": x, "z": z})["y"]
        if name == "pow" and el.is_float:
            assert ulps(got, want).max() <= 1, name
        else:
            bad = np.flatnonzero(~((got == want) | (np.isnan(got) & np.isnan(want)
                                                    if el.is_float and not pred else False)))
            assert bad.size == 0, (name, pred, x[bad[:5]], z[bad[:5]], got[bad[:5]],
                                   want[bad[:5]])
            if el.is_float and not pred:  # signed zeros too (max/min ties break as numpy's)
                sign = np.flatnonzero(~np.isnan(want) & (np.signbit(got) != np.signbit(want)))
                assert sign.size == 0, (name, x[sign[:5]], z[sign[:5]], got[sign[:5]])


_CASTS = [(F32, F16), (F16, F32), (F64, F32), (F64, F16), (F32, F64), (F32, I32), (F64, I64),
          (F32, I8), (F32, UI8), (I64, F32), (I32, F64), (UI8, F32), (I64, I32), (I32, I64),
          (I8, I64), (UI8, I64), (I64, UI8), (F32, I1), (I32, I1), (I1, F32), (I1, I64),
          (I64, INDEX), (INDEX, I32)]


@pytest.mark.parametrize("src,dst", _CASTS, ids=lambda t: str(t))
def test_casts_match_interpreter(src, dst):
    if src.is_float:
        x = special_values(src)
        if dst.is_int and dst != I1:  # float -> int is defined in range only: truncation
            info = np.iinfo(dst.np_dtype)
            x = x[np.isfinite(x) & (x > info.min) & (x < info.max)]
            x = np.concatenate([x, np.array([2.5, -2.5, 0.99, -0.99, 127.9], src.np_dtype)])
            x = x[(x > info.min) & (x < info.max)]
    elif src == I1:
        x = np.array([True, False, True])
    else:
        x = _pairs(src)[0]

    def body(b, xb, y):
        _, p, (i,) = parallel_loop(b, (0,), (x.size,))
        store(p, op(p, "arith.cast", load(p, xb, i), to=dst), y, i)
    mem = I64 if dst == INDEX else dst  # buffers of index are i64 memory
    if dst == INDEX:
        def body(b, xb, y):  # noqa: F811
            _, p, (i,) = parallel_loop(b, (0,), (x.size,))
            v = op(p, "arith.cast", load(p, xb, i), to=INDEX)
            store(p, op(p, "arith.cast", v, to=I64), y, i)
    if src == INDEX:
        x = np.arange(-3, 40, dtype=np.int64) * 123456789

        def body(b, xb, y):  # noqa: F811
            _, p, (i,) = parallel_loop(b, (0,), (x.size,))
            v = op(p, "arith.cast", load(p, xb, i), to=INDEX)
            store(p, op(p, "arith.cast", v, to=dst), y, i)
    m = module({"x": buf((x.size,), I64 if src == INDEX else src), "y": buf((x.size,), mem)},
               ["y"], body)
    want = run_main(m, {"x": x})["y"]
    got = CpuProgram.from_module(m)({"x": x})["y"]
    np.testing.assert_array_equal(got, want)
    if dst.is_float:
        assert (np.signbit(got) == np.signbit(want)).all()


def test_select_not_and_or_on_bools_and_ints():
    n = 8
    x = np.array([0, 1, 2, -3, 0, 5, 0, 7], np.int32)
    z = np.array([0, 0, 9, 0, 4, -1, 0, 3], np.int32)

    def body(b, xb, zb, y, w):
        _, p, (i,) = parallel_loop(b, (0,), (n,))
        a, bb = load(p, xb, i), load(p, zb, i)
        both = op(p, "arith.and", a, bb)
        either = op(p, "arith.or", op(p, "arith.not", a), bb)
        store(p, op(p, "arith.add", both, either), y, i)
        gt = op(p, "arith.cmp", a, bb, predicate="gt")
        store(p, op(p, "arith.select", op(p, "arith.not", gt), a, bb), w, i)
    m = module({"x": buf((n,), I32), "z": buf((n,), I32), "y": buf((n,), I32),
                "w": buf((n,), I32)}, ["y", "w"], body)
    want = run_main(m, {"x": x, "z": z})
    got = CpuProgram.from_module(m)({"x": x, "z": z})
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    np.testing.assert_array_equal(got["w"], np.minimum(x, z))


def test_kernel_table_and_llvm_text():
    m, inputs, _ = PROGRAMS["softmax"]()
    prog = lower_loop_to_llvm(m)
    t = prog.table
    assert [k.name for k in t.kernels] == ["kernel_0", "kernel_1", "kernel_2"]
    assert "define void @\"kernel_0\"(ptr noalias dereferenceable(" in prog.text
    trip = t.kernels[0].trip_count  # the footprint: the range of begin/end is [0, trip]
    assert (f'i64 range(i64 0, {trip + 1}) %"begin", i64 range(i64 0, {trip + 1}) %"end")'
            in prog.text)
    kinds = {s.name: s.kind for s in t.slots}
    assert kinds["x"] == kinds["y"] == "arg" and list(kinds.values()).count("alloc") == 2
    scratch = [s for s in t.slots if s.kind == "alloc"]
    assert [(s.first, s.last) for s in scratch] == [(1, 2), (0, 1)]  # e, then mx
    assert t.inputs == ("x",) and t.outputs == ("y",)
    assert KernelTable.from_json(t.to_json()) == t
    seq = lower_loop_to_llvm(PROGRAMS["prefix_sum"]()[0]).table.kernels
    assert [k.parallel for k in seq] == [True, False] and seq[1].trip_count == 9
    vector = re.compile(r"<(4|8|16) x float>")  # vectorized, at whatever width LLVM chose
    assert vector.search(CpuProgram(prog).optimized_text) and vector.search(
        CpuProgram(lower_loop_to_llvm(PROGRAMS["elementwise_f32"]()[0])).optimized_text)


def test_weights_are_arguments_not_constants():
    m, inputs, _ = PROGRAMS["weights"]()
    prog = lower_loop_to_llvm(m)
    assert [s.kind for s in prog.table.slots] == ["arg", "arg", "global"]
    assert set(prog.globals) == {"w"}
    assert "constant" not in prog.text and prog.text.count("ptr noalias") == 3


def test_run_in_place_and_binding_errors():
    m, inputs, _ = PROGRAMS["elementwise_f32"]()
    p = CpuProgram.from_module(m)
    y = np.zeros((5, 7), np.float32)
    p.run({**inputs, "y": y})
    np.testing.assert_array_equal(y, run_main(m, inputs)["y"])
    with pytest.raises(BindingError, match="missing"):
        p.run(inputs)
    with pytest.raises(BindingError, match="dtype"):
        p.run({**inputs, "y": y.astype(np.float64)})
    with pytest.raises(BindingError, match="C-contiguous"):
        p.run({**inputs, "y": np.zeros((7, 5), np.float32).T})
    with pytest.raises(BindingError, match="overlap"):
        p.run({**inputs, "y": inputs["x"]})
    with pytest.raises(BindingError, match="unknown"):
        p({**inputs, "zz": y})


def test_argument_with_a_layout_takes_its_base():
    def body(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), (4,))
        store(p, load(p, x, i), y, i)
    m = module({"x": buf((4,), F32, (2,), 1), "y": buf((4,))}, ["y"], body)
    p = CpuProgram.from_module(m)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(p({"x": x})["y"], x)
    base, y = np.arange(8, dtype=np.float32), np.zeros(4, np.float32)
    p.run({"x": base, "y": y})
    np.testing.assert_array_equal(y, base[1::2])
    with pytest.raises(BindingError, match="1-d base"):
        p.run({"x": x, "y": y})


def test_what_cannot_be_lowered_is_listed_at_once():
    def body(b, x, y):
        v = load(b, x, c(b, 0, INDEX))  # a load outside any loop
        _, p, (i,) = parallel_loop(b, (0,), (4,))
        store(p, v, y, i)
        loop, f, k, (acc,) = for_loop(b, 0, 4, inits=[c(b, 0.0)])
        f.create("loop.yield", [acc])
        _, p, (i,) = parallel_loop(b, (0,), (4,))
        store(p, loop.results[0], y, i)
    m = module({"x": buf((4,)), "y": buf((4,))}, ["y"], body)
    with pytest.raises(CompileError) as e:
        lower_loop_to_llvm(m)
    msg = str(e.value)
    assert "2 op(s)" in msg and "loop.load" in msg and "loop.for" in msg


def test_edge_kernels():
    """Rank-0 buffers and copies, an empty loop, steps and lower bounds, a copy through a
    reversed view, a top-level loop.for with a step."""
    def body(b, s, x, s2, y, z):
        b.create("loop.copy", [s, s2])
        _, p, (i,) = parallel_loop(b, (3,), (3,))  # no iterations
        store(p, c(p, 99.0), y, i, c(p, 0, INDEX))
        _, p, (i, j) = parallel_loop(b, (1, 0), (10, 6), (2, 3))
        store(p, op(p, "arith.add", load(p, x, i, j), load(p, s)), y, i, j)
        rev = b.create("loop.view", [x], {"offset": 59, "shape": (10, 6),
                                          "strides": (-6, -1)}).result
        b.create("loop.copy", [rev, z])
        _, f, k, _ = for_loop(b, 0, 6, 3)
        store(f, c(f, -1.0), z, c(f, 0, INDEX), k)
    m = module({"s": buf(()), "x": buf((10, 6)), "s2": buf(()), "y": buf((10, 6)),
                "z": buf((10, 6))}, ["s2", "y", "z"], body)
    x = np.arange(60, dtype=np.float32).reshape(10, 6)
    inputs = {"s": np.array(0.5, np.float32), "x": x}
    want = run_main(m, inputs)
    prog = lower_loop_to_llvm(m)
    assert [k.trip_count for k in prog.table.kernels] == [1, 0, 5, 10, 2]
    for threads in (1, 3):
        got = CpuProgram(prog, threads=threads, min_parallel_work=0)(inputs)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    assert want["s2"] == 0.5 and want["z"][0, 0] == -1.0 and want["z"][1, 0] == x[8, 5]


def test_scratch_allocator_interface():
    """A planner-like allocator (one arena, slots placed by live range) drops in; a wrong one is
    refused before any kernel runs."""
    m, inputs, _ = PROGRAMS["softmax"]()
    want = run_main(m, inputs)

    class Arena:
        def allocate(self, slots):
            sizes = [s.nbytes for s in slots]
            arena = np.zeros(sum(sizes) + 64 * len(sizes), np.uint8)
            out, at = [], 0
            for s, n in zip(slots, sizes):
                out.append(arena[at:at + n].view(s.dtype))
                at += -(-(n + 1) // 64) * 64
            return out

    got = CpuProgram.from_module(m, allocator=Arena())(inputs)
    assert ulps(got["y"], want["y"]).max() <= 4

    class TooSmall:
        def allocate(self, slots):
            return [np.zeros(1, s.dtype) for s in slots]
    with pytest.raises(CompileError, match="allocator gave"):
        CpuProgram.from_module(m, allocator=TooSmall())(inputs)


# ---- target="nvptx" (after map-to-gpu) --------------------------------------------------------

def _mapped(name):
    from ptxc.rewrite import PassManager
    m, inputs, _ = PROGRAMS[name]()
    cpu = lower_loop_to_llvm(m)
    PassManager("map-to-gpu").run(m)
    return m, cpu


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_nvptx_keeps_the_cpu_buffers_and_verifies(name):
    """Every hand-written program, mapped: LLVM IR that verifies, one ptx_kernel per launch with
    only addrspace(1) pointers (no range arguments), and the same root buffers as the CPU
    lowering (slots, kinds, sizes), so one memory planner serves both targets."""
    m, cpu = _mapped(name)
    prog = lower_loop_to_llvm(m, target="nvptx")
    assert prog.triple == "nvptx64-nvidia-cuda" and prog.data_layout.startswith("e-")
    assert [(s.kind, s.name, s.dtype, s.span) for s in prog.table.slots] == \
        [(s.kind, s.name, s.dtype, s.span) for s in cpu.table.slots]
    assert prog.table.inputs == cpu.table.inputs and prog.table.outputs == cpu.table.outputs
    assert "begin" not in prog.text and "define void" not in prog.text
    assert prog.text.count("define ptx_kernel void") == len(prog.table.kernels)
    assert "ptr noalias" not in prog.text  # every kernel pointer is a global one
    for k in prog.table.kernels:
        assert k.trip_count == 1 and not k.parallel and len(k.grid) == len(k.block) == 3
        assert k.schedule and k.work >= 1
    assert KernelTable.from_json(prog.table.to_json()) == prog.table


def test_kernel_table_json_without_launch_fields_still_loads():
    """Plans written before the GPU fields existed have no grid/block/shared_bytes/schedule."""
    m, inputs, _ = PROGRAMS["softmax"]()
    t = lower_loop_to_llvm(m).table
    d = t.to_json()
    for k in d["kernels"]:
        for f in ("grid", "block", "shared_bytes", "schedule"):
            del k[f]
    assert KernelTable.from_json(d) == t
    assert all(k.grid is None and k.shared_bytes == 0 for k in t.kernels)


def test_nvptx_refuses_unmapped_nests_all_at_once():
    m, _, _ = PROGRAMS["softmax"]()
    with pytest.raises(CompileError) as e:
        lower_loop_to_llvm(m, target="nvptx")
    msg = str(e.value)
    assert "3 op(s)" in msg and msg.count("map-to-gpu") == 3 and "nvptx" in msg
