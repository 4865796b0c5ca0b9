"""A user memory limit for an engine: ``compile(..., max_memory=N)``, ``ptxc.load(path,
max_memory=N)`` or ``engine.max_memory = N`` (bytes; None: no limit but the host's and the
device's).

Why: an engine's memory is known before anything is allocated (the weights, and per execution
context the planned scratch arena and the binding buffers), so a budget can be refused up front,
naming the layer whose buffer is the largest, instead of failing with a bare MemoryError (host) or
an allocation failure (device) in the middle of a run, or silently taking the memory another
engine of the process needed.

What counts (:func:`engine_bytes`): ``weights`` (every ``global`` slot, shared by all contexts)
plus, per execution context, ``arena`` (the memory plan's arena; without a plan, every scratch
slot) and ``bindings`` (every input and output slot: a cpu run allocates its outputs, a cuda
context holds device copies of all bindings). An engine needs ``weights + arena + bindings`` for
one context; that over ``max_memory`` is a :class:`~ptxc.errors.CompileError` at compile or
load. Several threads running ``Engine.run`` at once each take a context; under a limit the
program's context pool holds only as many as fit (:func:`contexts_that_fit`), so further runs
wait for a free context rather than exceed it, and an explicit ``engine.create_context()``
past the limit is an :class:`~ptxc.errors.OutOfMemoryError`.

Example: a 4 MiB limit on an engine whose Conv output needs an 8 MiB scratch buffer::

    ptxc.compile(model, target="cpu", max_memory=4 << 20)
    -> CompileError: max_memory=4,194,304 bytes is less than the engine needs for one context
       (12,582,912 bytes: weights 1,728, scratch arena 8,388,608, bindings 4,192,576): the
       largest scratch buffer 'conv_out' (8,388,608 bytes) is written by layer 'conv1'
"""

from __future__ import annotations

import numpy as np

from ..errors import CompileError, OutOfMemoryError

__all__ = ["engine_bytes", "check_max_memory", "contexts_that_fit"]


def _slot_bytes(s) -> int:
    return int(s.span) * np.dtype(s.dtype).itemsize


def engine_bytes(engine) -> dict:
    """``{"weights", "arena", "bindings", "context", "total"}`` in bytes: ``context`` is one
    execution context's (arena + bindings), ``total`` the engine's with one context."""
    table = engine.kernels
    slots = table.slots if table is not None else []
    weights = sum(_slot_bytes(s) for s in slots if s.kind == "global")
    bindings = sum(_slot_bytes(s) for s in slots if s.kind == "arg")
    plan = getattr(engine, "memory_plan", None)
    arena = plan.arena_bytes if plan is not None else sum(
        _slot_bytes(s) for s in slots if s.kind == "alloc")
    return {"weights": weights, "arena": arena, "bindings": bindings,
            "context": arena + bindings, "total": weights + arena + bindings}


def _largest_buffer(engine) -> str:
    """Which scratch buffer is largest and which layer (ONNX node) first writes it."""
    table = engine.kernels
    allocs = [s for s in (table.slots if table is not None else []) if s.kind == "alloc"]
    if not allocs:
        return "the engine has no scratch buffers"
    big = max(allocs, key=_slot_bytes)
    layer = table.kernels[big.first].loc if 0 <= big.first < len(table.kernels) else None
    return (f"the largest scratch buffer {big.name!r} ({_slot_bytes(big):,} bytes) is written "
            f"by layer {layer!r}")


def _valid(max_memory) -> int | None:
    if max_memory is None:
        return None
    if not isinstance(max_memory, (int, np.integer)) or isinstance(max_memory, bool) \
            or max_memory <= 0:
        raise CompileError(f"max_memory must be a positive number of bytes or None, not "
                           f"{max_memory!r}")
    return int(max_memory)


def contexts_that_fit(engine, max_memory: int) -> int:
    """How many execution contexts fit in ``max_memory`` beside the weights (at least 1)."""
    need = engine_bytes(engine)
    per = max(need["context"], 1)
    return max(1, (max_memory - need["weights"]) // per)


def check_max_memory(engine, max_memory) -> None:
    """Set ``engine``'s limit after refusing (CompileError) an engine that needs more than
    ``max_memory`` bytes for one context; caps the program's context pool to what fits."""
    limit = _valid(max_memory)
    if limit is not None:
        need = engine_bytes(engine)
        if need["total"] > limit:
            raise CompileError(
                f"max_memory={limit:,} bytes is less than the engine needs for one context "
                f"({need['total']:,} bytes: weights {need['weights']:,}, scratch arena "
                f"{need['arena']:,}, bindings {need['bindings']:,}): {_largest_buffer(engine)}")
    pool = getattr(engine.program, "_contexts", None)
    if pool is not None and hasattr(pool, "cap"):
        pool.cap(None if limit is None else contexts_that_fit(engine, limit))
    engine._max_memory = limit


def check_new_context(engine, held: int) -> None:
    """An explicit context beyond what the limit allows is an OutOfMemoryError; ``held`` is
    how many contexts the engine has already (its pool's and earlier explicit ones)."""
    limit = getattr(engine, "_max_memory", None)
    if limit is None:
        return
    need = engine_bytes(engine)
    want = need["weights"] + (held + 1) * need["context"]
    if want > limit:
        raise OutOfMemoryError(
            f"engine: another execution context needs {need['context']:,} bytes (arena "
            f"{need['arena']:,}, bindings {need['bindings']:,}); with the weights and the "
            f"{held} context(s) held that is {want:,} bytes, over max_memory={limit:,}")
