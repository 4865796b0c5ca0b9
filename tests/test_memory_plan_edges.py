"""The memory planner's edges, on hand-made lifetimes whose right plan is worked out here:

* first fit over placed buffers sorted by offset, where one lies inside another's bytes (two
  buffers that never live together share memory, a third sits above the smaller one): the
  candidate offset must never move back below the end of a buffer it already cleared;
* lifetimes that touch (one buffer's last step is another's first) conflict, in the placement,
  in ``validate`` and in the live-bytes lower bound;
* the plan is used as it is by the CPU runtime's arena: buffers that are live together never
  share a byte there either.
"""

import pytest

from ptxc.codegen.memory_plan import Buffer, plan_memory
from ptxc.errors import CompileError


def test_first_fit_never_steps_back_below_a_buffer_it_cleared():
    # A [0, 1] 1000 B, D [2, 3] 500 B (reuses A's bytes), C [2, 3] 300 B (above D, inside A's
    # bytes), E [1, 2] 200 B: E meets A at step 1 and C, D at step 2, so it goes above A.
    bufs = [Buffer("A", 1000, 0, 1), Buffer("D", 500, 2, 3), Buffer("C", 300, 2, 3),
            Buffer("E", 200, 1, 2)]
    plan = plan_memory(bufs, alignment=1, refine=0)
    plan.validate()
    assert plan.offsets == {"A": 0, "D": 0, "C": 500, "E": 1000}
    assert plan.arena_bytes == plan.lower_bound_bytes == 1200
    plan_memory(bufs, alignment=1).validate()


@pytest.mark.parametrize("refine", [0, 96])
def test_lifetimes_that_touch_never_share_bytes(refine):
    # b is written at step 1, where a is read for the last time: the same kernel uses both
    bufs = [Buffer("a", 512, 0, 1), Buffer("b", 512, 1, 2), Buffer("c", 512, 2, 3)]
    plan = plan_memory(bufs, alignment=256, refine=refine)
    plan.validate()
    assert plan.offsets["a"] != plan.offsets["b"] and plan.offsets["b"] != plan.offsets["c"]
    assert plan.offsets["a"] == plan.offsets["c"]          # a and c never meet: one slot
    assert plan.lower_bound_bytes == plan.arena_bytes == 1024


def test_validate_refuses_touching_lifetimes_in_the_same_bytes():
    plan = plan_memory([Buffer("a", 512, 0, 1), Buffer("b", 512, 2, 3)], alignment=256)
    assert plan.offsets == {"a": 0, "b": 0}
    plan.validate()
    bad = plan_memory([Buffer("a", 512, 0, 1), Buffer("b", 512, 1, 3)], alignment=256)
    forged = type(bad)(bad.buffers, bad.alignment, {"a": 0, "b": 0}, bad.roots, bad.live,
                       512, bad.lower_bound_bytes, bad.no_reuse_bytes)
    with pytest.raises(CompileError, match="overlap in memory while both are live"):
        forged.validate()


def test_a_view_used_last_keeps_its_root_alive():
    # v views r and is read at step 3; x (step 2-3) must not take r's bytes
    bufs = [Buffer("r", 1024, 0, 1), Buffer("v", 512, 3, 3, alias_of="r", alias_offset=512),
            Buffer("x", 1024, 2, 3)]
    plan = plan_memory(bufs, alignment=256)
    plan.validate()
    assert plan.live["r"] == (0, 3)
    assert plan.offsets["x"] >= 1024 or plan.offsets["r"] >= 1024


def test_a_scratch_buffer_lives_from_its_first_kernel_to_its_last():
    """t is written by kernel 0 and read by kernel 3; u lives from kernel 1 to kernel 2. The
    kernel table must give t the interval [0, 3], so the arena keeps u out of t's bytes."""
    import numpy as np
    from support.loop_ir import const, load, module, op, store

    from ptxc.dialects.loop import parallel_loop
    from ptxc.driver.cpu import CpuProgram
    from ptxc.ir.types import F32, BufferType

    v16 = BufferType((16,), F32)

    def body(b, x, y, z):
        t = b.create("loop.alloc", [], result_types=[v16]).result
        u = b.create("loop.alloc", [], result_types=[v16]).result
        for src, dst, k, how in ((x, t, 2.0, "arith.mul"), (x, u, 1.0, "arith.add"),
                                 (u, z, 3.0, "arith.mul"), (t, y, 5.0, "arith.add")):
            _, p, (i,) = parallel_loop(b, (0,), (16,))
            store(p, op(p, how, load(p, src, i), const(p, k)), dst, i)

    m = module({"x": v16, "y": v16, "z": v16}, ["y", "z"], body)
    prog = CpuProgram.from_module(m, threads=1, allocator="arena")
    spans = {(s.first, s.last) for s in prog.table.slots if s.kind == "alloc"}
    assert spans == {(0, 3), (1, 2)}
    x = np.arange(16, dtype=np.float32)
    for _ in range(2):
        got = prog({"x": x})
        np.testing.assert_array_equal(got["y"], x * 2 + 5)
        np.testing.assert_array_equal(got["z"], (x + 1) * 3)
