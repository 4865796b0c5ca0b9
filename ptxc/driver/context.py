"""Execution contexts: the per-inference state of a program, so one engine serves many threads.

A compiled program (its code, kernel table, weights, memory plan) is immutable and shared; what
one inference writes (the scratch arena, the binding buffers, the error flag, on cuda a stream
and a captured CUDA graph) belongs to an *execution context*, as TensorRT's
``IExecutionContext``. One context runs one inference at a time; several contexts of one program
run at once from several threads::

    ctx = engine.create_context()          # its own arena (cuda: also stream, bindings, graph)
    ctx.run({"x": x})                      # never touches another context's memory

``Engine.run`` (and a program's ``run``/``__call__``) is safe to call from any number of threads:
it takes a free context from the program's :class:`ContextPool`, creating one when every
existing context is busy, and gives it back after the run. So N threads running one engine at
once hold N contexts (N arenas) and run concurrently, not one after another; contexts are kept
for later runs (the pool never shrinks while the program lives). A program whose per-run state
cannot be duplicated (a CPU allocator without ``fork``) gets a pool of one context, and the
runs are serialized on it.

Why a pool rather than a lock around one context: a lock makes eight threads as slow as one;
a context per thread (thread-local) keeps an arena alive for every thread that ever ran the
engine. The pool holds as many contexts as there were concurrent runs, at most.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable

__all__ = ["ContextPool"]


class ContextPool:
    """Free contexts of one program. ``make(first)`` creates a context (``first`` is True for
    the pool's first one, which may use the program's own state, e.g. its allocator);
    ``limit`` caps how many exist (None: no cap), and a run waits for a free one at the cap."""

    def __init__(self, make: Callable[[bool], object], limit: int | None = None):
        self._make = make
        self._limit = limit
        self._free: list = []
        self._all: list = []
        self._cond = threading.Condition()
        self._creating = 0
        self._gen = 0
        self._cap: int | None = None

    def cap(self, n: int | None) -> None:
        """At most ``n`` contexts from now on (None: no cap beyond ``limit``): a memory limit's
        (:mod:`ptxc.driver.memory_limit`). Contexts already made are kept; runs past the cap
        wait for a free one."""
        with self._cond:
            self._cap = n
            self._cond.notify_all()

    def _most(self) -> int | None:
        caps = [c for c in (self._limit, self._cap) if c is not None]
        return min(caps) if caps else None

    @property
    def contexts(self) -> list:
        """Every context the pool has created (free or busy)."""
        with self._cond:
            return list(self._all)

    @contextlib.contextmanager
    def take(self):
        """A free context for one run (``with pool.take() as ctx: ...``)."""
        ctx = None
        with self._cond:
            gen = self._gen
            while not self._free and self._most() is not None \
                    and len(self._all) + self._creating >= self._most():
                self._cond.wait()
            if self._free:
                ctx = self._free.pop()
            else:
                self._creating += 1
                first = not self._all and self._creating == 1
        if ctx is None:
            try:
                ctx = self._make(first)  # outside the lock: may be slow (a device setup)
            finally:
                with self._cond:
                    self._creating -= 1
                    if ctx is not None and gen == self._gen:
                        self._all.append(ctx)
                    self._cond.notify()
        try:
            yield ctx
        finally:
            with self._cond:
                if gen == self._gen:  # a context from before clear() is dropped
                    self._free.append(ctx)
                self._cond.notify()

    def clear(self) -> list:
        """Forget every context (the program's state changed); returns them, for release."""
        with self._cond:
            old, self._all, self._free = self._all, [], []
            self._gen += 1
            self._cond.notify_all()
            return old
