"""The cpu target's schedule pass (ptxc/lower/cpu_schedule.py) and what its attributes do.

Every candidate tactic of a convolution, a GEMM, a reduction, an average pool, pointwise and
integer kernels and a sequential recurrence computes what the default build computes (numpy
the reference): integer kernels exactly; floats within 1e-5 of the output's scale, as a forced
vector width lets LLVM reassociate a float sum (llvm_loop_hints), except the pool's window
sums, ordered, which stay bit for bit. The attributes land exactly on
the kernels asked for, and the codegen honours them: LLVM's optimized IR of a kernel has no
vector op at vector width 1, 8-lane ops and no 16-lane ones at width 8, more stores per
iteration as the unroll count grows; the threads reach the kernel table, the runtime's chunks
and plans. A build without tactics is the build of before, to the byte.
"""

import re
import threading
import types

import numpy as np
import pytest

import ptxc
from ptxc.codegen import build
from ptxc.driver.cpu import CpuProgram
from ptxc.driver.engine import Engine
from ptxc.driver.load import engine_from_plan
from ptxc.errors import CompileError, TuningError
from ptxc.frontend.load import as_module
from ptxc.ir.parser import parse_ir
from ptxc.ir.printer import print_ir
from ptxc.lower import cpu_schedule
from ptxc.lower.cpu_schedule import (CpuSchedule, host_vector_lanes, innermost_loops,
                                     innermost_trips)
from ptxc.lower.kernel_table import KernelInfo
from ptxc.lower.loop_to_llvm import lower_loop_to_llvm
from ptxc.pipeline import CompileOptions, build_pipeline, run_stages
from ptxc.plan.inspect import inspect_plan
from ptxc.plan.save import plan_to_bytes
from ptxc.rewrite.pass_ import example_options, get_pass
from ptxc.rewrite.pipeline import parse_pipeline
from ptxc.target import Target
from ptxc.tactic.kernels import KERNEL_OPS, kernel_key, kernels_of
from ptxc.tactic.tactic import DEFAULT, Tactic
from test_loop_dialect import PROGRAMS
from test_plan import edited, refused, split

RNG = np.random.default_rng(0)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- the kernels: (network, inputs, numpy reference of "y") -------------------------------

def conv():
    w, b = _f32(8, 4, 3, 3), _f32(8)
    net = ptxc.Network("conv")
    x = net.add_input("x", (1, 4, 10, 10))
    net.mark_output(net.add_activation(net.add_conv(x, w, b, padding=1), "relu"), "y")
    xv = _f32(1, 4, 10, 10)
    xp = np.pad(xv, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((1, 8, 10, 10)) + b[None, :, None, None]
    for i in range(3):
        for j in range(3):
            ref += np.einsum("oc,nchw->nohw", w[:, :, i, j], xp[:, :, i:i + 10, j:j + 10])
    return net, {"x": xv}, np.maximum(ref, 0)


def gemm():
    w, b = _f32(24, 40), _f32(24)
    net = ptxc.Network("gemm")
    x = net.add_input("x", (16, 40))
    net.mark_output(net.add_fully_connected(x, w, b), "y")
    xv = _f32(16, 40)
    return net, {"x": xv}, xv.astype(np.float64) @ w.T + b


def reduction():
    net = ptxc.Network("reduction")
    x = net.add_input("x", (6, 200))
    net.mark_output(net.add_reduce(x, "sum", axes=[1], keepdims=False), "y")
    xv = _f32(6, 200)
    return net, {"x": xv}, xv.astype(np.float64).sum(axis=1)


def pointwise():
    net = ptxc.Network("pointwise")
    a, b = net.add_input("a", (3, 257)), net.add_input("b", (3, 257))
    net.mark_output(net.add_activation(net.add_elementwise(a, b, "add"), "relu"), "y")
    av, bv = _f32(3, 257), _f32(3, 257)
    return net, {"a": av, "b": bv}, np.maximum(av + bv, 0)


def integers():
    net = ptxc.Network("integers")
    a, b = net.add_input("a", (3, 300), np.int32), net.add_input("b", (3, 300), np.int32)
    s = net.add_elementwise(net.add_elementwise(a, b, "mul"), a, "add")
    net.mark_output(net.add_reduce(s, "sum", axes=[1], keepdims=False), "y")
    av = RNG.integers(-1000, 1000, (3, 300)).astype(np.int32)
    bv = RNG.integers(-1000, 1000, (3, 300)).astype(np.int32)
    return net, {"a": av, "b": bv}, (av * bv + av).sum(axis=1, dtype=np.int32)


def avgpool():
    net = ptxc.Network("avgpool")
    x = net.add_input("x", (1, 3, 12, 12))
    net.mark_output(net.add_pooling(x, "average", kernel=3, stride=1), "y")
    xv = _f32(1, 3, 12, 12)
    ref = sum(xv[:, :, i:i + 10, j:j + 10].astype(np.float64) for i in range(3)
              for j in range(3)) / 9
    return net, {"x": xv}, ref


MODELS = {"conv": conv, "gemm": gemm, "reduction": reduction, "pointwise": pointwise,
          "integers": integers, "avgpool": avgpool}


def loop_module(net):
    m = as_module(net)
    run_stages(m, "loop", CompileOptions.make("cpu"), progress=None)
    return m


def scheduled(m, **options):
    """A copy of loop module ``m`` after cpu-schedule with ``options``."""
    m = m.clone()
    CpuSchedule(**options).run(m)
    return m


def program(m, **options) -> CpuProgram:
    return CpuProgram(lower_loop_to_llvm(scheduled(m, **options)))


def kernel_ops(m):
    return [o for o in m.walk() if o.name in KERNEL_OPS and o.parent_op.name == "func.func"]


def kernel_text(text: str, name: str) -> str:
    """The definition of function ``name`` in LLVM IR text (quoted or not)."""
    start = re.search(rf'define [^\n]*@"?{name}"?\(', text).start()
    return text[start:text.index("\n}", start) + 2]


# ---- numerics: every candidate computes what the default computes -------------------------

def _check_candidates(name, level, m=None, inputs=None, ref=None):
    if m is None:
        net, inputs, ref = MODELS[name]()
        m = loop_module(net)
    p = CpuSchedule()
    cands = {k.key: p.candidates(k.op, level) for k in kernels_of(m)}
    default = program(m)(inputs)["y"]
    floats = np.issubdtype(default.dtype, np.floating)
    exact = not floats or name == "avgpool"    # (the pool's window sums are ordered)
    if not floats:
        np.testing.assert_array_equal(default, ref)
    else:
        np.testing.assert_allclose(default, ref, rtol=1e-4, atol=1e-4)
    for i in range(max(map(len, cands.values()))):
        tactics = {key: c[i % len(c)] for key, c in cands.items()}
        s = scheduled(m, tactics=tactics)
        assert sorted(o.attributes["tactic"] for o in kernel_ops(s)) == sorted(
            str(tactics[kernel_key(o)]) for o in kernel_ops(m))
        got = CpuProgram(lower_loop_to_llvm(s))(inputs)["y"]
        if exact:
            np.testing.assert_array_equal(got, default, err_msg=str(tactics))
        else:
            np.testing.assert_allclose(got, default, rtol=1e-5, atol=1e-5 * np.abs(ref).max(),
                                       err_msg=str(tactics))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_fast_candidates_compute_what_the_default_computes(name):
    _check_candidates(name, "fast")


@pytest.mark.parametrize("name", ["avgpool", "integers", "pointwise", "reduction"])
def test_every_candidate_of_small_kernels_computes_what_the_default_computes(name):
    _check_candidates(name, "full")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["conv", "gemm"])
def test_every_candidate_of_larger_kernels_computes_what_the_default_computes(name):
    _check_candidates(name, "full")


def test_every_candidate_of_a_sequential_recurrence_computes_the_prefix_sum():
    m, inputs, ref = PROGRAMS["prefix_sum"]()
    _check_candidates(None, "full", m, inputs, ref(**inputs)["y"])


# ---- attributes: exactly where asked ------------------------------------------------------

def test_a_tactic_sets_attributes_on_its_kernel_only_and_its_loops_metadata():
    net, inputs, ref = conv()
    m = loop_module(net)
    ks = kernels_of(m)
    keys = [k.key for k in ks]
    k = next(k for k in ks if keys.count(k.key) == 1 and len(innermost_trips(k.op)) >= 1
             and k.op.name == "loop.parallel")
    t = Tactic("cpu", {"vector_width": 8, "unroll": 2, "threads": 1})
    s = scheduled(m, tactics={k.key: t, "0" * 16: DEFAULT})   # (a key of no kernel: unused)
    ops = kernel_ops(s)
    mine = ops[k.index]
    assert [kernel_key(o) for o in ops] == keys    # (the schedule is no part of the key)
    assert {a: mine.attributes.get(a) for a in ("cpu.vector_width", "cpu.unroll",
                                                "cpu.threads", "tactic", "tuning_key")} == {
        "cpu.vector_width": 8, "cpu.unroll": 2, "cpu.threads": 1,
        "tactic": "cpu{threads=1 unroll=2 vector-width=8}", "tuning_key": k.key}
    for o in ops:
        if o is not mine:
            assert not any(a.startswith("cpu.") or a in ("tactic", "tuning_key")
                           for a in o.attributes), o.where
    llvm = lower_loop_to_llvm(s)
    assert [x.threads for x in llvm.table.kernels] == [1 if i == k.index else 0
                                                       for i in range(len(ks))]
    for i in range(len(ks)):
        body = kernel_text(llvm.text, f"kernel_{i}")
        ids = re.findall(r"!llvm\.loop (![0-9]+)", body)
        if i != k.index:
            assert not ids and "noimplicitfloat" not in body
            continue
        # one loop ID per innermost loop, each its own (self-referential) node
        assert len(ids) == len(set(ids)) == len(innermost_trips(k.op))
        assert _loop_properties(llvm.text, body) == [{
            '!"llvm.loop.vectorize.width", i32 8', '!"llvm.loop.vectorize.enable", i1 1',
            '!"llvm.loop.unroll.count", i32 2'}] * len(ids)
    np.testing.assert_allclose(CpuProgram(llvm)(inputs)["y"], ref, rtol=1e-4, atol=1e-4)


def _loop_properties(text: str, body: str) -> list:
    """The properties of each loop ID the function ``body`` refers to (module ``text``)."""
    out = []
    for ref_ in re.findall(r"!llvm\.loop (![0-9]+)", body):
        node = re.search(rf"^{ref_} = !{{ {ref_}, (.*) }}$", text, re.M).group(1)
        out.append({re.search(rf"^{p} = !{{ (.*) }}$", text, re.M).group(1)
                    for p in node.split(", ")})
    return out


def test_an_ordered_loop_takes_no_vector_width():
    """A pool's window sum (loop.for {ordered}) keeps its order: a vector width over 1, which
    would let LLVM reorder it, is not given; the unroll count is, and width 1 too."""
    m = loop_module(avgpool()[0])
    for options, want in (({"vector_width": 8, "unroll": 2}, ['!"llvm.loop.unroll.count", i32 2']),
                          ({"vector_width": 1}, ['!"llvm.loop.vectorize.width", i32 1',
                                                 '!"llvm.loop.interleave.count", i32 1'])):
        s = scheduled(m, **options)
        text = lower_loop_to_llvm(s).text
        for i, op in enumerate(kernel_ops(s)):
            assert [o for _, o in innermost_loops(op)] == [True]
            props = _loop_properties(text, kernel_text(text, f"kernel_{i}"))
            assert props == [set(want)] * len(innermost_trips(op)), options


def test_global_options_apply_to_every_kernel_and_write_no_tactic():
    m = loop_module(conv()[0])
    s = scheduled(m, unroll=4)
    for o in kernel_ops(s):
        assert {a: v for a, v in o.attributes.items() if a.startswith("cpu.")
                or a in ("tactic", "tuning_key")} == {"cpu.unroll": 4}
    # a tactic's params win over the global option, for its kernel alone
    key = kernels_of(m)[0].key
    s = scheduled(m, unroll=4, tactics={key: Tactic("cpu", {"unroll": 8, "vector_width": 1})})
    first = kernel_ops(s)[0]
    assert first.attributes["cpu.unroll"] == 8 and first.attributes["cpu.vector_width"] == 1
    assert "noimplicitfloat" in kernel_text(lower_loop_to_llvm(s).text, "kernel_0")
    # scheduled again: a tactic sets its kernel's schedule whole (the old unroll goes), the
    # default options touch nothing (hand-written attributes stay)
    CpuSchedule(tactics={key: Tactic("cpu", {"vector_width": 4})}).run(s)
    first = kernel_ops(s)[0]
    assert first.attributes["cpu.vector_width"] == 4 and "cpu.unroll" not in first.attributes
    assert all(o.attributes["cpu.unroll"] == 4 for o in kernel_ops(s)[1:])
    assert CpuSchedule().run(s) is False and kernel_ops(s)[1].attributes["cpu.unroll"] == 4


def test_the_default_tactic_records_itself_and_changes_no_code():
    m = loop_module(gemm()[0])
    keys = {k.key: DEFAULT for k in kernels_of(m)}
    s = scheduled(m, tactics=keys)
    for o in kernel_ops(s):
        assert o.attributes["tactic"] == "auto" and o.attributes["tuning_key"] in keys
        assert not any(a.startswith("cpu.") for a in o.attributes)
    assert lower_loop_to_llvm(s).text == lower_loop_to_llvm(m).text
    # the printed module parses back with its attributes (the loop dialect declares them)
    assert print_ir(parse_ir(print_ir(s))) == print_ir(s)


def test_a_tactic_of_another_schedule_or_a_bad_option_is_a_tuning_error():
    m = loop_module(gemm()[0])
    (k,) = kernels_of(m)
    with pytest.raises(TuningError, match=r"tactic mma\{mma-stages=4\}.*node 'gemm_.*'mma'"):
        scheduled(m, tactics={k.key: Tactic("mma", {"mma_stages": 4})})
    with pytest.raises(TuningError, match=r"node .*cpu\{vector-width=3\}.*vector-width must be"):
        scheduled(m, tactics={k.key: Tactic("cpu", {"vector_width": 3})})
    with pytest.raises(TuningError, match=r"cpu\{block-size=3\}.*has no option block_size"):
        scheduled(m, tactics={k.key: Tactic("cpu", {"block_size": 3})})
    # the failed runs left the module as it was
    assert not any(a.startswith("cpu.") for o in kernel_ops(m) for a in o.attributes)


# ---- options and pipeline text ------------------------------------------------------------

def test_options_text_validation_and_the_cpu_loop_stage():
    p = parse_pipeline("cpu-schedule{vector-width=8 unroll=4 threads=2}")[0]
    assert (p.vector_width, p.unroll, p.threads) == (8, 4, 2)
    assert str(p) == "cpu-schedule{vector-width=8 unroll=4 threads=2}"
    host = Target.host()
    q = CpuSchedule(unroll=4, target=host, tactics={"k": DEFAULT})
    assert str(q) == "cpu-schedule{unroll=4}" and str(CpuSchedule(target=host)) == "cpu-schedule"
    assert hash(q) == hash(CpuSchedule(unroll=4, target=host, tactics={"k": DEFAULT}))
    assert q != CpuSchedule(unroll=4, target=host, tactics={"k": Tactic("cpu", {"unroll": 2})})
    for bad in ({"vector_width": 3}, {"unroll": 17}, {"threads": -1},
                {"vector_width": True}):
        with pytest.raises(CompileError, match="cpu-schedule"):
            get_pass("cpu-schedule", **bad)
    with pytest.raises(TuningError, match="mapping of kernel keys"):
        get_pass("cpu-schedule", tactics="k=auto")
    with pytest.raises(ValueError, match="cpu kernels"):
        CpuSchedule(target=Target.preset("sm_90"))
    assert Tactic.parse("cpu{vector-width=8 unroll=2}", CpuSchedule) == \
        Tactic("cpu", {"vector_width": 8, "unroll": 2})
    last = build_pipeline(CompileOptions.make("cpu"), "loop")[-1]
    assert isinstance(last, CpuSchedule) and last.target == CompileOptions.make("cpu").target
    assert example_options(CpuSchedule) == "vector-width=8 unroll=4 threads=2"


def test_a_default_build_is_the_build_without_the_pass():
    """The cpu loop stage with cpu-schedule (default options, no tactics) and without it give
    the same loop module and the same LLVM text, for a model of several kernel kinds."""
    net, _, _ = conv()
    with_pass = as_module(net)
    run_stages(with_pass, "loop", CompileOptions.make("cpu"), progress=None)
    without = as_module(net)
    run_stages(without, "loop", CompileOptions.make(
        "cpu", stage_passes={"loop": "lower-tensor-to-loop"}), progress=None)
    assert print_ir(with_pass) == print_ir(without)
    assert lower_loop_to_llvm(with_pass).text == lower_loop_to_llvm(without).text
    assert CpuSchedule().run(with_pass) is False


# ---- candidates ---------------------------------------------------------------------------

def test_candidates_are_deterministic_default_first_and_fast_within_full(monkeypatch):
    monkeypatch.setattr(cpu_schedule, "pool_size", lambda: 4)
    m = loop_module(conv()[0])
    p = CpuSchedule()
    again = kernel_ops(loop_module(conv()[0]))
    for op, other in zip(kernel_ops(m), again):
        full, fast = p.candidates(op), p.candidates(op, "fast")
        assert full == p.candidates(other) and fast == p.candidates(other, "fast")
        assert full[0] == fast[0] == DEFAULT and len(set(full)) == len(full)
        assert set(fast) <= set(full) and len(fast) <= 6
        assert all(t.schedule == "cpu" and t.params for t in full[1:])
        for t in full:     # each one valid for the pass
            t.apply(p)
        params = {k for t in full for k in t.options}
        assert params == {"vector_width", "unroll", "threads"}
        assert {t.options.get("threads", 0) for t in full} == {0, 1, 4}
        assert {t.options.get("unroll", 0) for t in full} == {0, 1, 2, 4, 8}
        widths = {t.options.get("vector_width", 0) for t in full}
        assert widths == {0} | {w for w in (1, 2, 4, 8, 16) if w <= host_vector_lanes()}
        assert len(full) == len(widths) * 5 * 3
    with pytest.raises(TuningError, match="level 'all'"):
        p.candidates(kernel_ops(m)[0], "all")
    with pytest.raises(TuningError, match="no top-level kernel"):
        p.candidates(next(o for o in m.walk() if o.name == "loop.load"))


def test_candidates_follow_the_host_and_prune_what_cannot_matter(monkeypatch):
    assert host_vector_lanes({"avx512f", "avx2"}) == 16
    assert host_vector_lanes({"avx2", "fma"}) == 8 and host_vector_lanes(set()) == 4
    monkeypatch.setattr(cpu_schedule, "_host_features", lambda: frozenset({"avx2"}))
    monkeypatch.setattr(cpu_schedule, "pool_size", lambda: 4)
    p = CpuSchedule()
    (op,) = kernel_ops(loop_module(gemm()[0]))
    fast = p.candidates(op, "fast")
    assert [str(t) for t in fast] == ["auto", "cpu{vector-width=8}", "cpu{vector-width=4}",
                                      "cpu{unroll=1}", "cpu{unroll=4}", "cpu{threads=1}"]
    assert max(t.options.get("vector_width", 0) for t in p.candidates(op)) == 8
    # a prefix sum: a 0-d store (nothing loops, one outer iteration: only the default), then a
    # sequential loop.for (vector widths and unroll counts, no threads)
    m, _, _ = PROGRAMS["prefix_sum"]()
    store0, seq = kernel_ops(m)
    assert innermost_trips(store0) == [1] and p.candidates(store0) == [DEFAULT]
    assert innermost_trips(seq) == [9]
    assert not any("threads" in t.options for t in p.candidates(seq))
    assert len(p.candidates(seq)) == 5 * 5     # widths 0, 1, 2, 4, 8; unroll 0, 1, 2, 4, 8
    # a pool of one thread: threads cannot matter
    monkeypatch.setattr(cpu_schedule, "pool_size", lambda: 1)
    assert not any("threads" in t.options for t in p.candidates(op))



def _sum_and_scale(rows=4, n=64):
    """One kernel of two innermost loops: ``y[i]``, the sum of row ``i`` in order (a
    ``loop.for {ordered}``, as a pool window's), and ``z[i, :] = 2 x[i, :]`` (a plain
    ``loop.for``)."""
    from ptxc.dialects.loop import for_loop, parallel_loop
    from ptxc.ir.types import BufferType, F32
    from support.loop_ir import const, load, module, op, store

    def body(b, x, y, z):
        _, p, (i,) = parallel_loop(b, (0,), (rows,))
        summed, f, j, (acc,) = for_loop(p, 0, n, inits=[const(p, 0.0)])
        f.create("loop.yield", [op(f, "arith.add", acc, load(f, x, i, j))])
        summed.attributes["ordered"] = True
        store(p, summed.results[0], y, i)
        _, g, j2, _ = for_loop(p, 0, n)
        store(g, op(g, "arith.mul", load(g, x, i, j2), const(g, 2.0)), z, i, j2)
    return module({"x": BufferType((rows, n), F32), "y": BufferType((rows,), F32),
                   "z": BufferType((rows, n), F32)}, ["y", "z"], body)


def test_one_ordered_loop_keeps_vector_widths_for_the_others(monkeypatch):
    """A vector width reaches only the kernel's unordered innermost loops (llvm_kernel), so a
    kernel with one ordered loop among others still has its widths to try; only a kernel whose
    every innermost loop is ordered has none over 1. Each candidate computes the row sums
    bit for bit in order (numpy's sequential sum) and ``z`` exactly."""
    monkeypatch.setattr(cpu_schedule, "_host_features", lambda: frozenset({"avx2"}))
    monkeypatch.setattr(cpu_schedule, "pool_size", lambda: 2)
    m = _sum_and_scale()
    (op,) = kernel_ops(m)
    assert innermost_loops(op) == [(64, True), (64, False)]
    p = CpuSchedule()
    full = p.candidates(op)
    assert {t.options.get("vector_width", 0) for t in full} == {0, 1, 2, 4, 8}
    assert [str(t) for t in p.candidates(op, "fast")][:3] == [
        "auto", "cpu{vector-width=8}", "cpu{vector-width=4}"]
    x = RNG.standard_normal((4, 64)).astype(np.float32)
    y = np.zeros(4, np.float32)
    for j in range(64):
        y = y + x[:, j]
    key = kernel_key(op)
    for t in full[::7] + [Tactic("cpu", {"vector_width": 8})]:
        got = CpuProgram(lower_loop_to_llvm(scheduled(m, tactics={key: t})))({"x": x})
        np.testing.assert_array_equal(got["y"], y, err_msg=str(t))
        np.testing.assert_array_equal(got["z"], 2 * x, err_msg=str(t))
    # the pool's kernels, every innermost loop ordered: width 1 alone
    for op in kernel_ops(loop_module(avgpool()[0])):
        assert {t.options.get("vector_width", 0) for t in p.candidates(op)} <= {0, 1}

# ---- the codegen honours the attributes ----------------------------------------------------

def _optimized_kernel(m, **options) -> str:
    return kernel_text(program(m, **options).optimized_text, "kernel_0")


def _relu_4096():
    net = ptxc.Network("relu")
    x = net.add_input("x", (4, 4096))
    net.mark_output(net.add_activation(x, "relu"), "y")
    return loop_module(net)


def test_vector_width_reaches_the_optimized_code():
    m = _relu_4096()
    widths = lambda text: set(re.findall(r"<(\d+) x float>", text))   # noqa: E731
    assert widths(_optimized_kernel(m, vector_width=1)) == set()
    assert widths(_optimized_kernel(m, vector_width=8)) == {"8"}
    assert widths(_optimized_kernel(m, vector_width=4)) == {"4"}
    # a GEMM's jammed accumulators are vectorized in straight-line code (SLP) by default; a
    # scalar kernel has no vector op at all
    g = loop_module(gemm()[0])
    assert widths(_optimized_kernel(g))
    assert widths(_optimized_kernel(g, vector_width=1)) == set()


def _stores_per_loop_iteration(body: str) -> set:
    """The stores of each single-block loop of an optimized function (a block that branches
    to itself: an innermost loop, its copies where LLVM unrolled the loop around it)."""
    counts = set()
    for label, block in re.findall(r"^([\w.]+):[^\n]*\n(.*?)(?=^[\w.]+:|^\})", body,
                                   re.M | re.S):
        if re.search(rf"label %{re.escape(label)}\b", block.strip().splitlines()[-1]):
            counts.add(block.count("store "))
    return counts


def test_unroll_count_reaches_the_optimized_code():
    """Scalar loops (width 1, so LoopVectorize does not interleave): the innermost loop's body
    holds one copy of the point per unrolled iteration."""
    m = _relu_4096()
    for u in (1, 2, 4, 8):
        assert _stores_per_loop_iteration(_optimized_kernel(m, vector_width=1, unroll=u)) \
            == {u}, u
    # vectorized 16 wide: unroll 1 is one vector store per iteration (no interleaving
    # either); above, the count multiplies LoopVectorize's own interleave count
    n = []
    for u in (1, 2, 4, 8):
        body = _optimized_kernel(m, vector_width=16, unroll=u)
        assert "store <16 x float>" in body
        (k,) = _stores_per_loop_iteration(body)
        n.append(k)
    assert n[0] == 1 and n[1] > 1 and n[2] == 2 * n[1] and n[3] == 2 * n[2], n


# ---- threads: the kernel table, the runtime, plans -----------------------------------------

def test_threads_decide_the_runtimes_chunks():
    calls = []

    def fn(*args):
        calls.append((args[-2], args[-1], threading.get_ident()))

    def run(threads, work=10, parallel=True, runtime_threads=8):
        calls.clear()
        k = KernelInfo("k", (0,), 10, parallel, work, threads=threads)
        me = types.SimpleNamespace(threads=runtime_threads, min_parallel_work=1 << 15)
        CpuProgram._run_kernel(me, k, fn, [0])
        return sorted(c[:2] for c in calls), {c[2] for c in calls}

    assert run(0) == ([(0, 10)], {threading.get_ident()})       # little work: one call
    assert run(1, work=1 << 20) == ([(0, 10)], {threading.get_ident()})
    assert run(3)[0] == [(0, 3), (3, 6), (6, 10)]               # whatever the work
    assert run(32)[0] == [(i, i + 1) for i in range(10)]        # at most one per iteration
    assert run(0, work=1 << 20, runtime_threads=2)[0] == [(0, 5), (5, 10)]
    assert run(4, parallel=False)[0] == [(0, 10)]               # a sequential loop.for


def test_threads_round_trip_through_a_plan(tmp_path):
    net, inputs, ref = gemm()
    m = scheduled(loop_module(net), threads=2)
    engine = Engine.from_artifact(build(m, Target.host()))
    assert [k.threads for k in engine.kernels.kernels] == [2]
    data = plan_to_bytes(engine)
    loaded = engine_from_plan(data)
    assert loaded.kernels == engine.kernels
    np.testing.assert_allclose(loaded.run(inputs)["y"], ref, rtol=1e-4, atol=1e-4)
    (tmp_path / "m.plan").write_bytes(data)
    assert "(parallel)  threads 2" in inspect_plan(tmp_path / "m.plan")
    # a plan written before the field: its kernels load with 0
    header, _ = split(data)
    assert header["kernel_table"]["kernels"][0]["threads"] == 2

    def drop(h):
        for k in h["kernel_table"]["kernels"]:
            del k["threads"]
    old = engine_from_plan(edited(data, drop))
    assert [k.threads for k in old.kernels.kernels] == [0]
    np.testing.assert_allclose(old.run(inputs)["y"], ref, rtol=1e-4, atol=1e-4)
    for bad in (-1, True, 1 << 17, "2"):
        refused(edited(data, lambda h: h["kernel_table"]["kernels"][0].update(threads=bad)),
                "header", "threads")
