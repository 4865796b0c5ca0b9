"""Planner invariants on random buffers, the 1.10x bound where it was measured, and the arena
allocator in the CPU runtime.

* Random interval sets (with aliases, views of views, unused and empty buffers, alignments 1 to
  256): the plan passes ``validate()`` and an independent pairwise check, the lower bound equals
  a step-by-step count, ``lower_bound <= arena <= no_reuse``, refinement never loses to greedy
  by size, plans are deterministic and survive JSON. No ratio is asserted here: greedy by size
  reaches 1.39x on such sets (module docstring of ptxc/codegen/memory_plan.py).
* CNN-like lifetimes: networks built layer by layer (one kernel per layer, residual adds in
  place, concat slices as aliases) with random depths (up to 3x the usual blocks: 12-layer
  transformers, 36-layer dense blocks), widths, batch and resolution, from eight families.
  Greedy by size alone was measured at exactly the lower bound on 3000 networks of each of VGG,
  ResNet basic/bottleneck, DenseNet and U-Net: there 1.10x is asserted. On MobileNet-v2,
  Inception and transformer lifetimes greedy alone reached 1.25x, 1.30x and 1.17x (a big
  short-lived buffer at offset 0 pushes a residual spanning it above the peak), so only the
  refined plan (the bound on all but one of 24000, that one at 1.05x) is held to 1.10x on
  every family; two pinned cases show greedy's miss and the refinement closing it.
* The CPU runtime: a loop program whose three scratch buffers let the planner reuse memory gives
  the same bits with ``allocator="arena"`` as with fresh memory, over random inputs and runs
  that reuse the one arena; a plan that puts two live buffers together is caught (the check can
  fail).
"""

import functools

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ptxc.compiler import run_stages
from ptxc.dialects.loop import parallel_loop, run_main
from ptxc.driver.cpu import CpuProgram, PerRunAllocator
from ptxc.codegen.memory_plan import MemoryPlan, plan_memory
from ptxc.driver.arena import ArenaAllocator
from ptxc.errors import CompileError
from ptxc.ir.types import F32, F64
from property.strategies import graphs
from property.tolerance import scaled_tolerance
from test_loop_dialect import buf, c, load, module, op, store

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _align(n, a):
    return -(-n // a) * a


# ---- random interval sets ----------------------------------------------------------------------

@st.composite
def interval_sets(draw):
    n = draw(st.integers(1, 24))
    horizon = draw(st.integers(0, 30))
    bufs = []
    for i in range(n):
        kind = draw(st.sampled_from(["root"] * 5 + ["alias", "unused", "empty"]))
        if kind == "alias" and bufs:
            src = draw(st.sampled_from(bufs))
            if src[1] == 0:
                kind = "root"
            else:
                size = draw(st.integers(0, src[1]))
                off = draw(st.integers(0, src[1] - size))
                used = draw(st.booleans())
                f = draw(st.integers(0, horizon)) if used else -1
                l = draw(st.integers(f, horizon)) if used else -1
                bufs.append((f"v{i}", size, f, l, src[0], off))
                continue
        size = 0 if kind == "empty" else draw(st.sampled_from([1, 3, 64, 100, 256, 1000, 4096,
                                                              5000, 65536]))
        if kind == "unused":
            bufs.append((f"b{i}", size, -1, -1))
            continue
        f = draw(st.integers(0, horizon))
        l = draw(st.integers(f, min(horizon, f + draw(st.integers(0, 12)))))
        bufs.append((f"b{i}", size, f, l))
    return bufs, draw(st.sampled_from([1, 16, 64, 256]))


def _independent_check(plan: MemoryPlan, bufs: list, alignment: int) -> None:
    """The plan's claims, recomputed from the records without the planner's helpers."""
    by = {b[0]: b for b in bufs}

    def root(name):
        off = 0
        while len(by[name]) > 4 and by[name][4] is not None:
            off += by[name][5]
            name = by[name][4]
        return name, off
    live = {}
    for b in bufs:
        if b[2] >= 0:
            r, _ = root(b[0])
            f, l = live.get(r, (b[2], b[3]))
            live[r] = (min(f, b[2]), max(l, b[3]))
    holding = [b for b in bufs if root(b[0])[0] == b[0] and b[0] in live and b[1] > 0]
    for b in bufs:
        r, off = root(b[0])
        assert plan.offsets[b[0]] == plan.offsets[r] + off
    for i, a in enumerate(holding):
        oa = plan.offsets[a[0]]
        assert oa % alignment == 0 and oa + a[1] <= plan.arena_bytes
        for b in holding[i + 1:]:
            (fa, la), (fb, lb) = live[a[0]], live[b[0]]
            if fa <= lb and fb <= la:
                ob = plan.offsets[b[0]]
                assert oa + a[1] <= ob or ob + b[1] <= oa, (a, b, oa, ob)
    steps = range(max([l for _, l in live.values()], default=-1) + 1)
    bound = max([sum(_align(b[1], alignment) for b in holding
                     if live[b[0]][0] <= t <= live[b[0]][1]) for t in steps], default=0)
    assert plan.lower_bound_bytes == bound
    assert plan.no_reuse_bytes == sum(_align(b[1], alignment) for b in holding)


@SETTINGS
@given(interval_sets())
def test_random_interval_sets(case):
    bufs, alignment = case
    greedy = plan_memory(bufs, alignment, refine=0)
    plan = plan_memory(bufs, alignment)
    for p in (greedy, plan):
        p.validate()
        _independent_check(p, bufs, alignment)
        assert p.lower_bound_bytes <= p.arena_bytes <= p.no_reuse_bytes
        assert MemoryPlan.from_json(p.to_json()) == p
    assert plan.arena_bytes <= greedy.arena_bytes
    assert plan == plan_memory(bufs, alignment)


# ---- CNN-like lifetimes ------------------------------------------------------------------------

class Net:
    """Records buffer lifetimes of a network run one kernel per step: ``op`` reads buffers and
    writes a new one (or ``into`` an existing buffer or slice: an in-place update)."""

    def __init__(self):
        self.step, self.bufs = 0, {}

    def new(self, size, alias_of=None, offset=0):
        name = f"t{len(self.bufs)}"
        self.bufs[name] = [size, -1, -1, alias_of, offset]
        return name

    def op(self, reads, size=None, into=None):
        out = self.new(size) if into is None else into
        for name in [*reads, out]:
            b = self.bufs[name]
            b[1] = self.step if b[1] < 0 else b[1]
            b[2] = self.step
        self.step += 1
        return out

    def records(self):
        return [(n, *b) for n, b in self.bufs.items()]


def nb(n, ch, h):
    return 4 * n * ch * h * h


def vgg(r, n, h, k):
    net = Net()
    x, ch = net.op([], nb(n, 3, h)), 64
    for _ in range(r.randint(2, 5)):
        for _ in range(r.randint(1, 4 * k)):
            x = net.op([x], nb(n, ch, h))
        h //= 2
        x = net.op([x], nb(n, ch, h))
        ch = min(2 * ch, 512)
    for f in (4096, 4096, 1000)[r.randint(0, 2):]:
        x = net.op([x], 4 * n * f)
    return net


def resnet(r, n, h, k, bottleneck):
    net = Net()
    x = net.op([], nb(n, 3, h))
    x = net.op([x], nb(n, 64, h // 2))
    h //= 4
    x = net.op([x], nb(n, 64, h))
    width = cin = 64
    for s in range(r.randint(1, 4)):
        for blk in range(r.randint(1, 6 * k)):
            stride = 2 if s > 0 and blk == 0 else 1
            ho, cout = h // stride, 4 * width if bottleneck else width
            if bottleneck:
                a = net.op([net.op([x], nb(n, width, h))], nb(n, width, ho))
            else:
                a = net.op([x], nb(n, width, ho))
            y = net.op([a], nb(n, cout, ho))
            short = net.op([x], nb(n, cout, ho)) if stride > 1 or cin != cout else x
            net.op([y, short], into=y)  # residual add + relu in place
            x, h, cin = y, ho, cout
        width *= 2
    net.op([net.op([x], 4 * n * cin)], 4 * n * 1000)
    return net


def mobilenet(r, n, h, k):
    net = Net()
    x = net.op([net.op([], nb(n, 3, h))], nb(n, 32, h // 2))
    h, ch = h // 2, 32
    spec = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
            (6, 160, 3, 2), (6, 320, 1, 1)]
    for t, co, reps, s in spec[:r.randint(2, 7)]:
        t = t if t == 1 else r.choice([3, 4, 6])
        for i in range(r.randint(1, (reps + 1) * k)):
            stride = s if i == 0 else 1
            ho = h // stride
            e = net.op([x], nb(n, ch * t, h)) if t != 1 else x
            p = net.op([net.op([e], nb(n, ch * t, ho))], nb(n, co, ho))
            if stride == 1 and ch == co:
                net.op([p, x], into=p)
            x, h, ch = p, ho, co
    net.op([net.op([net.op([x], nb(n, 1280, h))], 4 * n * 1280)], 4 * n * 1000)
    return net


def densenet(r, n, h, k):
    """Each dense block is one concat buffer; layers write their slices, read prefixes."""
    net = Net()
    h //= 4
    x, ch, g = net.op([net.op([], nb(n, 3, 4 * h))], nb(n, 64, h)), 64, r.choice([12, 24, 32])
    for _ in range(r.randint(1, 4)):
        layers = r.randint(2, 12 * k)
        cat = net.new(nb(n, ch + layers * g, h))
        net.op([x], into=net.new(nb(n, ch, h), cat, 0))
        for i in range(layers):
            pre = net.new(nb(n, ch + i * g, h), cat, 0)
            bottleneck = net.op([pre], nb(n, 4 * g, h))
            net.op([bottleneck], into=net.new(nb(n, g, h), cat, nb(n, ch + i * g, h)))
        whole = net.new(nb(n, ch + layers * g, h), cat, 0)
        ch, h = (ch + layers * g) // 2, h // 2
        x = net.op([whole], nb(n, ch, h))
    net.op([x], 4 * n * 1000)
    return net


def inception(r, n, h, k):
    net = Net()
    h //= 8
    x, ch = net.op([net.op([], nb(n, 3, 8 * h))], nb(n, 192, h)), 192
    for _ in range(r.randint(1, 3)):
        for _ in range(r.randint(1, 4 * k)):
            parts = [r.choice([32, 64, 96, 128, 192]) for _ in range(4)]
            cat, at = net.new(nb(n, sum(parts), h)), 0
            for p in parts:
                y = x
                for _ in range(r.randint(0, 2)):
                    y = net.op([y], nb(n, r.choice([p // 2, p, 3 * p // 2]), h))
                net.op([y], into=net.new(nb(n, p, h), cat, at))
                at += nb(n, p, h)
            x, ch = cat, sum(parts)
        h //= 2
        x = net.op([x], nb(n, ch, h))
    net.op([x], 4 * n * 1000)
    return net


def unet(r, n, h, k):
    """Encoder features stay live until the decoder concatenates them (long-lived skips)."""
    net = Net()
    x, ch, skips = net.op([], nb(n, 3, h)), r.choice([16, 32, 64]), []
    for _ in range(r.randint(2, 4)):
        x = net.op([net.op([x], nb(n, ch, h))], nb(n, ch, h))
        skips.append((x, ch, h))
        h //= 2
        x = net.op([x], nb(n, ch, h))
        ch *= 2
    x = net.op([x], nb(n, ch, h))
    for skip, ch, h in reversed(skips):
        cat = net.new(nb(n, 2 * ch, h))
        net.op([x], into=net.new(nb(n, ch, h), cat, 0))
        net.op([skip], into=net.new(nb(n, ch, h), cat, nb(n, ch, h)))
        x = net.op([net.op([cat], nb(n, ch, h))], nb(n, ch, h))
    net.op([x], nb(n, 2, h))
    return net


def transformer(r, n, h, k):
    t, d, heads = r.choice([64, 128, 256, 512]), r.choice([256, 512, 768]), r.choice([4, 8, 12])
    act = 4 * n * t * d
    net = Net()
    x = net.op([], act)
    for _ in range(r.randint(1, 4 * k)):
        qkv = net.op([net.op([x], act)], 3 * act)
        scores = net.op([qkv], 4 * n * heads * t * t)
        net.op([scores], into=scores)  # softmax in place
        proj = net.op([net.op([scores, qkv], act)], act)
        net.op([proj, x], into=proj)
        hidden = net.op([net.op([proj], act)], 4 * act)
        net.op([hidden], into=hidden)  # gelu in place
        out = net.op([hidden], act)
        net.op([out, proj], into=out)
        x = out
    return net


EXACT = {"vgg": vgg, "resnet": lambda r, n, h, k: resnet(r, n, h, k, False),
         "bottleneck": lambda r, n, h, k: resnet(r, n, h, k, True), "densenet": densenet,
         "unet": unet}
FAMILIES = {**EXACT, "mobilenet": mobilenet, "inception": inception, "transformer": transformer}


@st.composite
def networks(draw, families):
    family = draw(st.sampled_from(sorted(families)))
    r = draw(st.randoms(use_true_random=False))
    n, h = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([64, 96, 128, 160, 224]))
    deep = draw(st.sampled_from([1, 1, 3]))  # 3: up to 3x the blocks (12-layer transformers)
    return family, families[family](r, n, h, deep).records()


@settings(SETTINGS, max_examples=300)
@given(networks(EXACT))
def test_greedy_by_size_within_10_percent_on_cnn_lifetimes(case):
    family, records = case
    plan = plan_memory(records, refine=0)
    plan.validate()
    assert plan.arena_bytes <= 1.10 * plan.lower_bound_bytes, (family, plan.report())
    assert plan.arena_bytes < plan.no_reuse_bytes


@settings(SETTINGS, max_examples=300)
@given(networks(FAMILIES))
def test_refined_plan_within_10_percent_on_every_family(case):
    family, records = case
    plan = plan_memory(records)
    plan.validate()
    assert plan.arena_bytes <= 1.10 * plan.lower_bound_bytes, (family, plan.report())
    assert plan.arena_bytes <= plan_memory(records, refine=0).arena_bytes


@pytest.mark.parametrize("family, deep", [("mobilenet", 1), ("transformer", 6)])
def test_pinned_cases_where_greedy_by_size_misses(family, deep):
    """The worst of 40 seeded MobileNet-v2-like networks (inverted residuals) and of 40 deep
    transformers (up to 24 identical layers, each reaching the peak): greedy by size is above
    1.10x the bound and the refinement reaches it; the docstrings' numbers are not wishful."""
    import random
    nets = [FAMILIES[family](random.Random(s), 1, 160, deep).records() for s in range(40)]
    worst = max((plan_memory(recs, refine=0) for recs in nets),
                key=lambda p: p.arena_bytes / p.lower_bound_bytes)
    assert worst.arena_bytes > 1.10 * worst.lower_bound_bytes
    refined = plan_memory(worst.buffers)
    refined.validate()
    assert refined.arena_bytes == refined.lower_bound_bytes
    assert "hill-climb" in refined.method


# ---- the CPU runtime ---------------------------------------------------------------------------

def three_scratch(shape):
    """x -> a = 2x (f32) -> b = f64(a + 1) -> s = f32(b * b) - x -> y = s + 0.5. Scratch a, b,
    s are live over kernels [0, 1], [1, 2], [2, 3]: s can take a's bytes (b is the largest)."""
    def body(bb, x, y):
        a = bb.create("loop.alloc", [], result_types=[buf(shape)]).result
        b = bb.create("loop.alloc", [], result_types=[buf(shape, F64)]).result
        s = bb.create("loop.alloc", [], result_types=[buf(shape)]).result
        _, p, idx = parallel_loop(bb, (0, 0), shape)
        store(p, op(p, "arith.mul", load(p, x, *idx), c(p, 2.0)), a, *idx)
        _, p, idx = parallel_loop(bb, (0, 0), shape)
        store(p, op(p, "arith.cast", op(p, "arith.add", load(p, a, *idx), c(p, 1.0)), to=F64),
              b, *idx)
        _, p, idx = parallel_loop(bb, (0, 0), shape)
        v = load(p, b, *idx)
        sq = op(p, "arith.cast", op(p, "arith.mul", v, v), to=F32)
        store(p, op(p, "arith.sub", sq, load(p, x, *idx)), s, *idx)
        _, p, idx = parallel_loop(bb, (0, 0), shape)
        store(p, op(p, "arith.add", load(p, s, *idx), c(p, 0.5)), y, *idx)
    return module({"x": buf(shape), "y": buf(shape)}, ["y"], body)


@functools.lru_cache(maxsize=None)
def programs(shape):
    m = three_scratch(shape)
    fresh = CpuProgram.from_module(m, min_parallel_work=0)
    arena = CpuProgram(fresh.program, min_parallel_work=0, allocator="arena")
    return m, fresh, arena


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([(3, 5), (16, 33), (64, 70)]), st.integers(0, 2**32 - 1))
def test_arena_gives_the_same_results_as_fresh_memory(shape, seed):
    m, fresh, arena = programs(shape)
    rng = np.random.default_rng(seed)
    for _ in range(2):  # the second run reuses the arena the first one left dirty
        x = (rng.standard_normal(shape) * 100).astype(np.float32)
        x.flat[rng.integers(0, x.size, 3)] = [np.inf, -np.inf, np.nan]
        want = fresh({"x": x})["y"]
        assert arena({"x": x})["y"].tobytes() == want.tobytes()
    plan = arena.allocator.plan
    a, b, s = (bb.name for bb in plan.buffers)
    assert plan.offsets[a] == plan.offsets[s] != plan.offsets[b]  # memory was reused
    assert plan.arena_bytes < plan.no_reuse_bytes
    np.testing.assert_array_equal(want, run_main(m, {"x": x})["y"])


def test_a_plan_with_live_buffers_together_changes_the_result():
    """The comparison above can fail: put b over a (both live at kernel 1, which writes b[i]
    over a[2i] and a[2i + 1] before reading them) and bypass validate(); the result differs.
    The planner's allocator refuses that plan outright."""
    m, fresh, _ = programs((16, 33))
    x = np.random.default_rng(0).standard_normal((16, 33)).astype(np.float32)
    want = fresh({"x": x})["y"]
    probe = CpuProgram(fresh.program, allocator="arena")
    probe({"x": x})
    good = probe.allocator.plan
    a, b, s = (bb.name for bb in good.buffers)
    offsets = {**good.offsets, b: good.offsets[a]}
    end = max(offsets[bb.name] + bb.size for bb in good.buffers)
    bad = attrs.evolve(good, offsets=offsets, arena_bytes=-(-end // 256) * 256)

    class Unchecked(ArenaAllocator):
        def allocate(self, slots):
            arena = np.zeros(bad.arena_bytes, np.uint8)
            return [arena[bad.offsets[bb.name]:bad.offsets[bb.name] + bb.size].view(sl.dtype)
                    for sl, bb in zip(slots, bad.buffers)]
    got = CpuProgram(fresh.program, allocator=Unchecked())({"x": x})["y"]
    assert got.tobytes() != want.tobytes()
    with pytest.raises(CompileError, match="overlap in memory while both are live"):
        CpuProgram(fresh.program, allocator=ArenaAllocator(plan=bad))({"x": x})
    assert isinstance(fresh.allocator, PerRunAllocator)


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=graphs())
def test_random_graphs_same_outputs_with_the_planner_on_and_off(case):
    """Random networks (the shared strategy) lowered to loops and compiled for the CPU: the
    planned arena (buffers sharing memory where their lives do not meet) computes the same bytes
    as fresh memory per buffer, twice in a row (the arena left dirty), and both match the loop
    interpreter."""
    module = case.network.to_module()
    rtol, atol = scaled_tolerance(module, case.inputs)
    run_stages(module, "loop")
    fresh = CpuProgram.from_module(module, min_parallel_work=0)
    arena = CpuProgram(fresh.program, min_parallel_work=0, allocator="arena")
    want = run_main(module, case.inputs)
    for _ in range(2):
        got_fresh, got_arena = fresh(case.inputs), arena(case.inputs)
        for name in want:
            assert got_arena[name].tobytes() == got_fresh[name].tobytes(), name
            np.testing.assert_allclose(got_arena[name], want[name], rtol=rtol, atol=atol,
                                       err_msg=name)
