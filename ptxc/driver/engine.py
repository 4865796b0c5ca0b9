"""The Engine: a compiled model, its bindings and its runtime program.

    engine = ptxc.compile("model.onnx", target="cpu")
    engine.inputs, engine.outputs        # {name: TensorType}
    outputs = engine.run({"data": x})    # dict[str, np.ndarray] -> dict[str, np.ndarray]
    engine.memory_report()               # arena peak beside the live-bytes lower bound
    engine.timings                       # seconds per compile stage
    engine.save("model.plan")            # a plan file; ptxc.load("model.plan") reads it back

A wrong input name, shape or dtype is a BindingError naming the binding and what it expects.
"""

from __future__ import annotations

import time

from ..errors import BindingError
from ..ir.core import Operation
from ..ir.interpreter import check_inputs
from ..ir.types import TensorType


class Engine:
    def __init__(self, target: str, program, inputs: dict, outputs: dict, timings: dict,
                 llvm_text: str = "", kernels=None):
        self.target = target
        self.program = program
        self.inputs = inputs      # name -> TensorType, in binding order
        self.outputs = outputs    # name -> TensorType, in binding order
        self.timings = timings
        self.llvm_text = llvm_text
        self.kernels = kernels
        self.memory_plan = None   # a MemoryPlan when the runtime uses the planned arena

    @classmethod
    def for_cpu(cls, loop_module: Operation, timings: dict | None = None, threads=None):
        """JIT-compile a loop-level module for the host CPU."""
        from ..driver.cpu import CpuProgram
        from ..lower.loop_to_llvm import lower_loop_to_llvm
        timings = dict(timings or {})
        t0 = time.perf_counter()
        program = lower_loop_to_llvm(loop_module)
        timings["llvm"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        # the static memory plan: every scratch buffer at an offset of one arena
        from .memory_plan import ArenaAllocator, buffers_from_slots, plan_memory
        t0 = time.perf_counter()
        plan = plan_memory(buffers_from_slots([s for s in program.table.slots
                                               if s.kind == "alloc"]))
        plan.validate()
        timings["memory_plan"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        kwargs = {} if threads is None else {"threads": threads}
        cpu = CpuProgram(program, allocator=ArenaAllocator(plan=plan), **kwargs)
        timings["jit"] = time.perf_counter() - t0
        slots = {s.name: s for s in program.table.slots if s.kind == "arg"}
        tensor = lambda n: TensorType(slots[n].shape, slots[n].type.element)  # noqa: E731
        inputs = {n: tensor(n) for n in program.table.inputs}
        outputs = {n: tensor(n) for n in program.table.outputs}
        engine = cls("cpu", cpu, inputs, outputs, timings, program.text, program.table)
        engine.memory_plan = plan
        return engine

    def memory_report(self) -> dict:
        """The arena's peak bytes beside the live-bytes lower bound and the sum without reuse
        (intermediate buffers only: bindings and weights are the caller's and the engine's)."""
        p = self.memory_plan
        if p is None:
            return {"arena_bytes": None, "lower_bound_bytes": None, "no_reuse_bytes": None}
        return {"arena_bytes": p.arena_bytes, "lower_bound_bytes": p.lower_bound_bytes,
                "no_reuse_bytes": p.no_reuse_bytes, "buffers": len(p.buffers)}

    def save(self, path) -> None:
        """Write this engine to a plan file; ``ptxc.load(path)`` reads it back without
        recompiling the model (see :mod:`ptxc.driver.plan`)."""
        from .plan import save_plan
        save_plan(self, path)

    def run(self, inputs: dict) -> dict:
        """Run one inference: inputs by name, outputs by name (fresh arrays)."""
        if not isinstance(inputs, dict):
            raise BindingError(f"Engine.run takes a dict name -> array, got "
                               f"{type(inputs).__name__}")
        arrays = check_inputs(list(self.inputs), list(self.inputs.values()), inputs, "engine")
        # (np.ascontiguousarray would turn rank-0 inputs into rank 1)
        feeds = {n: x if x.flags.c_contiguous else x.copy() for n, x in zip(self.inputs, arrays)}
        out = self.program(feeds)
        return {n: out[n] for n in self.outputs}

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {t}" for n, t in self.inputs.items())
        outs = ", ".join(f"{n}: {t}" for n, t in self.outputs.items())
        return f"<Engine {self.target} ({ins}) -> ({outs})>"
