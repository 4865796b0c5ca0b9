"""The CPU runtime's scratch memory over a static memory plan: one numpy arena, a view per slot.

    alloc = ArenaAllocator(plan=artifact.memory_plan)   # the plan code generation made
    CpuProgram(llvm_program, allocator=alloc)           # every run's scratch buffers: views of it

The plan itself (offsets from live ranges) is code generation's, :mod:`ptxc.codegen.memory_plan`;
this module only carves an arena by it. An allocator given no plan plans the slots at its first
run (``CpuProgram(..., allocator="arena")``, the tests' way to run a program without a build).
"""

from __future__ import annotations

import numpy as np

from ..codegen.memory_plan import MemoryPlan, buffers_from_slots, plan_memory
from ..errors import CompileError

__all__ = ["ArenaAllocator", "aligned_view"]


def aligned_view(raw: np.ndarray, n: int, alignment: int) -> np.ndarray:
    """The first ``n`` bytes of ``raw`` that start at a multiple of ``alignment``; ``raw`` holds
    ``n + alignment`` bytes or more. numpy gives no alignment beyond 16 bytes, so the arena is
    over-allocated and carved here (a pure function, so a test can hand it any misalignment)."""
    shift = (-raw.ctypes.data) % alignment
    if shift + n > raw.nbytes:
        raise ValueError(f"aligned_view: {raw.nbytes} bytes cannot hold {n} aligned to {alignment}")
    return raw[shift:shift + n]


class ArenaAllocator:
    """A :class:`~ptxc.driver.cpu.BufferAllocator` over one planned arena: the scratch slots are
    planned on the first run (``plan``; replanned only if the slots change), one numpy arena of
    ``plan.arena_bytes`` is allocated with its base aligned to ``alignment``, and each slot is a
    view at its offset. An unused or empty slot gets its own small array (it is never touched,
    but the runtime checks its size). A ``plan`` given here (one loaded from a plan file) is
    used as it is, after checking it matches the slots.

    ``persistent=True`` (the default, an engine's arena): the arena is kept and reused by every
    run, so two runs of one program sharing this allocator must not overlap in time (as with one
    TensorRT execution context: the program forks one allocator per context, ``fork``);
    ``persistent=False`` allocates a fresh arena per run."""

    def __init__(self, alignment: int = 256, persistent: bool = True, refine: int = 96,
                 plan: MemoryPlan | None = None):
        self.alignment = plan.alignment if plan is not None else alignment
        self.persistent = persistent
        self.refine = refine
        self.plan: MemoryPlan | None = plan
        self._given = plan is not None
        self._key = None
        self._arena: np.ndarray | None = None

    def fork(self) -> "ArenaAllocator":
        """An allocator for another execution context: the same plan (once there is one), an
        arena of its own."""
        return ArenaAllocator(self.alignment, self.persistent, self.refine, plan=self.plan)

    def _new_arena(self) -> np.ndarray:
        n = self.plan.arena_bytes
        return aligned_view(np.empty(n + self.alignment, np.uint8), n, self.alignment)

    def _check_given(self, wanted: list) -> None:
        have = [(b.name, b.size, b.first, b.last) for b in self.plan.buffers]
        want = [(b.name, b.size, b.first, b.last) for b in wanted]
        if have != want:
            diff = next((h, w) for h, w in zip(have + [None] * len(want),
                                               want + [None] * len(have)) if h != w)
            raise CompileError(f"memory plan does not match the program's scratch buffers: "
                               f"plan has {diff[0]}, program needs {diff[1]} "
                               "(name, bytes, first, last)")
        self.plan.validate()

    def allocate(self, slots) -> list[np.ndarray]:
        key = tuple((s.name, s.nbytes, s.first, s.last, s.dtype) for s in slots)
        if key != self._key:
            wanted = buffers_from_slots(slots)
            if self._given:
                self._check_given(wanted)
            else:
                self.plan = plan_memory(wanted, self.alignment, refine=self.refine)
                self.plan.validate()
            self._key, self._arena = key, None
        if self._arena is None or not self.persistent:
            self._arena = self._new_arena()
        out = []
        for s, b in zip(slots, self.plan.buffers):
            if self.plan.live[b.name] is None or b.size == 0:
                out.append(np.empty(max(s.span, 1), s.dtype))
                continue
            off = self.plan.offsets[b.name]
            out.append(self._arena[off:off + b.size].view(s.dtype))
        return out
