"""Loading a plan file: an Engine again, without recompiling the model.

    engine = ptxc.load("model.plan")       # load_plan(path, threads=None, key=None)
    engine = engine_from_plan(data)        # from the bytes

:mod:`ptxc.plan.load` reads and checks the file into a :class:`~ptxc.plan.load.LoadedPlan` (the
Artifact and the options the engine ran with; its module docstring says what loading runs and
what it refuses); this module makes the Engine of it, as after a compile
(:meth:`~ptxc.driver.engine.Engine.from_artifact`). A cpu plan whose stored LLVM IR does not
compile is refused here (cause ``code``), a cuda plan whose table cannot make a program
(cause ``header``).
"""

from __future__ import annotations

from ..errors import CompileError
from ..plan.format import _refuse
from ..plan.load import LoadedPlan, plan_from_bytes, read_plan
from .engine import Engine
from .memory_limit import _valid

__all__ = ["load_plan", "engine_from_plan", "engine_of_plan"]


def load_plan(path, *, threads: int | None = None, key=None, max_memory: int | None = None):
    """Read the plan at ``path`` into an Engine (:func:`ptxc.plan.load.read_plan`: its trust
    model and checks). ``max_memory``: the engine's memory budget, as ``compile``'s."""
    _valid(max_memory)
    engine = engine_of_plan(read_plan(path, key=key), threads=threads)
    engine.max_memory = max_memory
    return engine


def engine_from_plan(data, *, threads: int | None = None, source: str = "<plan>") -> Engine:
    """An Engine from the bytes of a plan file."""
    return engine_of_plan(plan_from_bytes(data, source=source), threads=threads)


def engine_of_plan(plan: LoadedPlan, *, threads: int | None = None) -> Engine:
    """The Engine of a read plan, with the options it was saved with."""
    timings = {"load": plan.load_seconds}
    if plan.artifact.kind == "cuda":
        try:
            engine = Engine.from_artifact(plan.artifact, cuda_graph=plan.cuda_graph,
                                          exact_arch=True, timings=timings)
        except CompileError as e:
            raise _refuse("header", f"the kernel table, arch or memory plan cannot make a cuda "
                          f"program: {e}", plan.source) from None
    else:
        try:
            engine = Engine.from_artifact(plan.artifact, threads=threads,
                                          min_parallel_work=plan.min_parallel_work,
                                          timings=timings)
        except CompileError as e:
            raise _refuse("code", f"the stored LLVM IR does not compile: {e}",
                          plan.source) from None
    engine.precision = plan.precision
    engine.precision_overrides = dict(plan.precision_overrides)
    engine.tuning = None if plan.tuning is None else [dict(r) for r in plan.tuning]
    return engine
