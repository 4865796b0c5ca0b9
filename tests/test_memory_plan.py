"""The static memory planner on hand cases: exact offsets and report numbers for a chain, a
diamond, aliases (concat slices, views of views) that extend their root's lifetime, an in-place
accumulator, unused and empty buffers; greedy by size's known miss and the refinement that
closes it; validate() and from_json() refusing broken plans; the arena allocator in the CPU
runtime (``allocator="arena"``)."""

import json

import attrs
import numpy as np
import pytest

from ptxc.driver.cpu import CpuProgram
from ptxc.codegen.memory_plan import Buffer, MemoryPlan, buffers_from_slots, plan_memory
from ptxc.driver.arena import ArenaAllocator, aligned_view
from ptxc.errors import CompileError, PlanError

K = 1024


def test_chain_reuses_two_slots():
    """Equal buffers each live from producer to consumer alternate between two slots."""
    p = plan_memory([(f"t{i}", 4 * K, i, i + 1) for i in range(6)])
    assert [p.offsets[f"t{i}"] for i in range(6)] == [0, 4 * K] * 3
    assert (p.arena_bytes, p.lower_bound_bytes, p.no_reuse_bytes) == (8 * K, 8 * K, 24 * K)
    assert p.method == "greedy-by-size"
    p.validate()


def test_chain_of_shrinking_buffers():
    """A stage boundary: the big buffers take offset 0 and 16K; the small ones fit between."""
    p = plan_memory([("a", 16 * K, 0, 1), ("b", 16 * K, 1, 2), ("c", 4 * K, 2, 3),
                     ("d", 4 * K, 3, 4), ("e", 4 * K, 4, 5)])
    assert p.offsets == {"a": 0, "b": 16 * K, "c": 0, "d": 4 * K, "e": 0}
    assert (p.arena_bytes, p.lower_bound_bytes, p.no_reuse_bytes) == (32 * K, 32 * K, 44 * K)


def test_diamond():
    """k0 writes a; k1 reads a, writes b; k2 reads a, writes c; k3 reads b and c, writes d:
    a, b and c are live together at k2, b, c and d at k3."""
    bufs = [("a", 1 * K, 0, 2), ("b", 2 * K, 1, 3), ("c", 2 * K, 2, 3), ("d", 1 * K, 3, 4)]
    p = plan_memory(bufs)
    assert p.offsets == {"b": 0, "c": 2 * K, "a": 4 * K, "d": 4 * K}
    assert (p.arena_bytes, p.lower_bound_bytes, p.no_reuse_bytes) == (5 * K, 5 * K, 6 * K)
    assert p.live == {"a": (0, 2), "b": (1, 3), "c": (2, 3), "d": (3, 4)}
    p.validate()


def test_concat_slices_extend_the_concat_buffer():
    """Two producers write slices of ``cat`` at k0 and k2 and k3 reads it: ``cat`` is live over
    [0, 3] although only its slices are used before k3, so ``t`` (live at k1) cannot take its
    bytes; after k3 ``u`` can."""
    bufs = [Buffer("cat", 8 * K, 3, 3), Buffer("s0", 4 * K, 0, 0, "cat", 0),
            Buffer("s1", 4 * K, 2, 2, "cat", 4 * K), ("t", 8 * K, 1, 1), ("u", 8 * K, 4, 5)]
    p = plan_memory(bufs)
    assert p.live["cat"] == (0, 3) and "s0" not in p.live
    assert p.roots == {"cat": "cat", "s0": "cat", "s1": "cat", "t": "t", "u": "u"}
    assert p.offsets["cat"] == 0 and p.offsets["s0"] == 0 and p.offsets["s1"] == 4 * K
    assert p.offsets["t"] == 8 * K and p.offsets["u"] == 0
    # aliases have no storage: neither the bound nor the no-reuse size counts them
    assert (p.arena_bytes, p.lower_bound_bytes, p.no_reuse_bytes) == (16 * K, 16 * K, 24 * K)
    p.validate()
    # without the aliases cat would look live at k3 only and t would sit on it
    q = plan_memory([("cat", 8 * K, 3, 3), ("t", 8 * K, 1, 1), ("u", 8 * K, 4, 5)])
    assert q.offsets["t"] == q.offsets["cat"] == 0


def test_view_of_a_view_extends_transitively():
    """A reshape view of a slice of ``x`` used at k5 keeps ``x`` live to k5; offsets add up."""
    bufs = [("x", 4 * K, 0, 1), ("sl", 2 * K, -1, -1, "x", 1 * K),
            ("r", 1 * K, 5, 5, "sl", 512), ("y", 4 * K, 3, 3)]
    p = plan_memory(bufs)
    assert p.live["x"] == (0, 5) and p.roots["r"] == "x"
    assert p.offsets["r"] == p.offsets["x"] + 1 * K + 512
    assert p.offsets["y"] != p.offsets["x"]
    p.validate()


def test_in_place_update_is_one_interval():
    """An accumulator written at k0 and updated in place at k1..k3 is one buffer [0, 3]: the
    buffers of k1..k3 stay off it, the one after reuses it."""
    bufs = [("acc", 4 * K, 0, 3), ("t1", 4 * K, 1, 1), ("t2", 4 * K, 2, 2), ("t3", 4 * K, 3, 3),
            ("after", 4 * K, 4, 5)]
    p = plan_memory(bufs)
    assert p.offsets["acc"] == 0 and p.offsets["after"] == 0
    assert all(p.offsets[t] == 4 * K for t in ("t1", "t2", "t3"))
    assert (p.arena_bytes, p.lower_bound_bytes) == (8 * K, 8 * K)


def test_unused_and_empty_buffers_take_no_memory():
    p = plan_memory([("a", 4 * K, 0, 1), ("dead", 64 * K, -1, -1), ("none", 64 * K, None, None),
                     ("empty", 0, 0, 1), ("b", 4 * K, 1, 2)])
    assert p.live["dead"] is None and p.live["none"] is None
    assert p.offsets["dead"] == p.offsets["empty"] == 0
    assert (p.arena_bytes, p.lower_bound_bytes, p.no_reuse_bytes) == (8 * K, 8 * K, 8 * K)
    assert "2 unused" in p.report()
    p.validate()


def test_alignment():
    bufs = [("a", 100, 0, 1), ("b", 10, 1, 2), ("c", 300, 1, 1)]
    p = plan_memory(bufs)  # 256 by default
    assert all(o % 256 == 0 for o in p.offsets.values())
    assert p.offsets == {"c": 0, "a": 512, "b": 768}
    assert (p.arena_bytes, p.lower_bound_bytes, p.no_reuse_bytes) == (1024, 1024, 1024)
    q = plan_memory(bufs, alignment=1)
    assert q.offsets == {"c": 0, "a": 300, "b": 400}
    assert (q.arena_bytes, q.lower_bound_bytes, q.no_reuse_bytes) == (410, 410, 410)
    for bad in (0, 3, -4, 2.0):
        with pytest.raises(CompileError, match="power of two"):
            plan_memory(bufs, alignment=bad)


def test_greedy_by_size_miss_and_refinement():
    """The chain 10, 9, 5, 8 (module docstring): greedy by size needs 24 for a bound of 19; the
    hill-climb finds 19."""
    bufs = [("b0", 10, 0, 1), ("b1", 9, 1, 2), ("b2", 5, 2, 3), ("b3", 8, 3, 4)]
    g = plan_memory(bufs, alignment=1, refine=0)
    assert g.offsets == {"b0": 0, "b1": 10, "b2": 19, "b3": 0}
    assert (g.arena_bytes, g.lower_bound_bytes, g.no_reuse_bytes) == (24, 19, 32)
    r = plan_memory(bufs, alignment=1)
    assert (r.arena_bytes, r.lower_bound_bytes) == (19, 19)
    assert r.method.startswith("hill-climb from ")
    r.validate()
    assert plan_memory(bufs, alignment=1) == r  # deterministic


def test_report_numbers():
    p = plan_memory([("x", 3 << 20, 0, 1), ("y", 3 << 20, 1, 2), ("z", 3 << 20, 2, 3),
                     ("v", 1 << 20, 2, 3, "y", 1 << 20)])
    text = p.report()
    lines = text.splitlines()
    assert lines[0] == ("memory plan: 4 buffers (1 aliases, 0 unused), alignment 256, "
                        "greedy-by-size")
    assert "6.00 MiB  (6291456 B)" in lines[1]
    assert "6.00 MiB  (6291456 B; arena/bound 1.00x)" in lines[2]
    assert "9.00 MiB  (9437184 B; reuse saves 33.3%)" in lines[3]
    assert any(l.split()[:4] == ["4194304", "1048576", "[1,", "3]"] and "v  -> y + 1048576" in l
               for l in lines)
    assert len(p.report(table=False).splitlines()) == 4


def test_validate_names_overlapping_buffers():
    p = plan_memory([("a", 4 * K, 0, 1), ("b", 4 * K, 1, 2), ("c", 4 * K, 2, 3)])
    bad = attrs.evolve(p, offsets={**p.offsets, "b": 2 * K})
    with pytest.raises(CompileError, match=r"'a' \[0, 4096\) live \[0, 1\] and 'b' "
                                           r"\[2048, 6144\) live \[1, 2\] overlap"):
        bad.validate()
    with pytest.raises(CompileError, match="'b' at offset 100 is not aligned"):
        attrs.evolve(p, offsets={**p.offsets, "b": 100}).validate()
    with pytest.raises(CompileError, match="ends past the arena"):
        attrs.evolve(p, arena_bytes=4 * K).validate()
    q = plan_memory([("x", 4 * K, 0, 1), ("v", 1 * K, 1, 1, "x", 0)])
    with pytest.raises(CompileError, match="alias 'v' .* leaves its root 'x'"):
        attrs.evolve(q, offsets={**q.offsets, "v": 4 * K}).validate()


@pytest.mark.parametrize("bufs, message", [
    ([("a", 1, 0, 0), ("a", 1, 1, 1)], "two buffers named 'a'"),
    ([("a", -1, 0, 0)], "negative size"),
    ([("a", 1, 3, 1)], "last used at step 1, before its first use at step 3"),
    ([("a", 1, 0, 0, "nope")], "'a' aliases unknown buffer 'nope'"),
    ([("a", 1, 0, 0, "b"), ("b", 1, 0, 0, "a")], "alias cycle"),
    ([("a", 8, 0, 0), ("v", 4, 0, 0, "a", 6)], "alias 'v' .* does not fit in 'a'"),
    ([("a", 8, 0, 0), ("v", 4, 0, 0, "a", -1)], "does not fit"),
    ([("", 8, 0, 0)], "non-empty string"),
])
def test_bad_buffers(bufs, message):
    with pytest.raises(CompileError, match=message):
        plan_memory(bufs)


def test_json_round_trip_and_refusals():
    p = plan_memory([Buffer("cat", 8 * K, 3, 3), Buffer("s0", 4 * K, 0, 0, "cat", 0),
                     ("t", 8 * K, 1, 1), ("dead", 4, -1, -1)])
    text = json.dumps(p.to_json())
    assert MemoryPlan.from_json(text) == p
    assert MemoryPlan.from_json(json.loads(text)) == p

    def tampered(**changes):
        d = json.loads(text)
        d.update(changes)
        return d
    with pytest.raises(PlanError, match="stored arena_bytes"):
        MemoryPlan.from_json(tampered(arena_bytes=p.arena_bytes * 2))
    with pytest.raises(PlanError, match="format"):
        MemoryPlan.from_json(tampered(format=99))
    with pytest.raises(PlanError, match="malformed"):
        MemoryPlan.from_json(tampered(buffers=[{"name": "x"}]))
    with pytest.raises(PlanError, match="malformed"):
        MemoryPlan.from_json("[1, 2]")
    d = json.loads(text)
    d["buffers"][2]["offset"] = 0  # t onto cat while both are live
    with pytest.raises(PlanError, match="inconsistent plan: .*'cat'.*'t'.*overlap"):
        MemoryPlan.from_json(d)
    d = json.loads(text)
    d["buffers"][1]["offset"] = 256  # an alias away from its root
    with pytest.raises(PlanError, match="alias offsets"):
        MemoryPlan.from_json(d)


# ---- the CPU runtime ---------------------------------------------------------------------------

def test_arena_allocator_in_the_cpu_runtime():
    """softmax (two scratch buffers live together) through ``allocator="arena"``: same bits as
    fresh memory; the arena is one aligned block, kept across runs."""
    from test_loop_dialect import PROGRAMS
    m, inputs, _ = PROGRAMS["softmax"]()
    want = CpuProgram.from_module(m, threads=1)(inputs)
    prog = CpuProgram.from_module(m, threads=1, allocator="arena")
    alloc = prog.allocator
    assert isinstance(alloc, ArenaAllocator) and alloc.plan is None
    got = prog(inputs)
    assert got["y"].tobytes() == want["y"].tobytes()
    plan = alloc.plan
    assert len(plan.buffers) == 2 and plan.arena_bytes == plan.no_reuse_bytes  # both live at k2
    base = alloc._arena.ctypes.data
    assert base % 256 == 0
    assert prog(inputs)["y"].tobytes() == want["y"].tobytes()
    assert alloc._arena.ctypes.data == base and alloc.plan is plan
    with pytest.raises(CompileError, match="unknown allocator 'pool'"):
        CpuProgram.from_module(m, allocator="pool")


def test_arena_base_is_aligned_whatever_numpy_returns():
    """The arena is carved from an over-allocated block at every misalignment numpy might hand
    back (numpy promises 16 bytes; whether a block is 256-aligned is luck, so the runtime test
    above cannot see a wrong shift by itself)."""
    block = np.empty(1024 + 2 * 256, np.uint8)
    skew = (-block.ctypes.data) % 256
    for off in range(256):
        raw = block[skew + off:]
        assert raw.ctypes.data % 256 == off
        view = aligned_view(raw, 1024, 256)
        assert view.ctypes.data % 256 == 0 and view.nbytes == 1024
        assert raw.ctypes.data <= view.ctypes.data < raw.ctypes.data + 256
    with pytest.raises(ValueError, match="cannot hold"):
        aligned_view(block[skew + 1:skew + 1 + 1024 + 16], 1024, 256)


def test_given_plan_must_match_the_slots():
    from test_loop_dialect import PROGRAMS
    m, inputs, _ = PROGRAMS["softmax"]()
    prog = CpuProgram.from_module(m, threads=1, allocator="arena")
    want = prog(inputs)
    plan = MemoryPlan.from_json(json.loads(json.dumps(prog.allocator.plan.to_json())))
    again = CpuProgram(prog.program, threads=1, allocator=ArenaAllocator(plan=plan))
    assert again(inputs)["y"].tobytes() == want["y"].tobytes()
    other = plan_memory([("e", 8, 0, 1)])
    wrong = CpuProgram(prog.program, threads=1, allocator=ArenaAllocator(plan=other))
    with pytest.raises(CompileError, match="does not match the program's scratch buffers"):
        wrong(inputs)


def test_buffers_from_slots_names():
    from ptxc.lower.loop_to_llvm import BufferSlot
    slots = [BufferSlot("alloc", "t", "float32", (4,), (1,), 0, 4, 0, 2),
             BufferSlot("alloc", "t", "float64", (2,), (1,), 0, 2, -1, -1),
             BufferSlot("alloc", "t#1", "int8", (3,), (1,), 0, 3, 1, 1)]
    assert buffers_from_slots(slots) == [Buffer("t", 16, 0, 2), Buffer("t#1", 16, -1, -1),
                                         Buffer("t#1#1", 3, 1, 1)]
