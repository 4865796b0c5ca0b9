"""The static memory planner on the nine light models, for both targets: the arena it plans for
the scratch buffers of a real program lies between the live-bytes lower bound and 1.10x of it,
and no two buffers live at the same kernel overlap (``MemoryPlan.validate``). The programs are
lowered to the loop dialect and their kernel tables built (no LLVM optimization, no JIT, no
PTX): the planner only needs each buffer's size and first/last kernel."""

import pytest

from support import light_models as lm
import ptxc
from ptxc.compiler import run_stages
from ptxc.codegen.memory_plan import buffers_from_slots, plan_memory
from ptxc.lower.loop_to_llvm import lower_loop_to_llvm


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("name", lm.NAMES)
def test_light_model_arena_within_10_percent_of_the_lower_bound(name, target):
    module = run_stages(ptxc.import_onnx(lm.path(name)), "loop", target=target)
    table = lower_loop_to_llvm(module, target="nvptx" if target == "cuda" else "cpu").table
    scratch = [s for s in table.slots if s.kind == "alloc"]
    plan = plan_memory(buffers_from_slots(scratch))
    plan.validate()
    report = plan.report(table=False)
    assert len(scratch) > 0
    assert plan.lower_bound_bytes <= plan.arena_bytes <= 1.10 * plan.lower_bound_bytes, report
    assert plan.arena_bytes < plan.no_reuse_bytes, report   # reuse happened
    print(f"\n{name} {target}: arena {plan.arena_bytes:,} B, bound {plan.lower_bound_bytes:,} B, "
          f"without reuse {plan.no_reuse_bytes:,} B, {len(scratch)} buffers")
