"""The CUDA graphs of one execution context, by the pointers their launches hold.

A captured CUDA graph replays kernel launches with the pointer arguments they had at capture.
The engine's own bindings never move, so ``run`` needs one graph, captured at its first run.
``run_device`` binds the caller's memory into the kernels where it can
(:mod:`ptxc.driver.cuda_interop`), so the pointers of an inference depend on the caller's
tensors: a graph is then right only for the pointer set it was captured with. This cache keeps
a few graphs per context, keyed by that pointer set (``None``: the engine's bindings)::

    cache = GraphCache(size=4)
    graph = cache.lookup(key, capture)   # a graph to replay, or None: launch kernel by kernel
    cache.close()

Policy (why): a graph replays a launch in a fraction of the host time a direct launch takes
(docs/design.md, "facts" on CUDA graphs), but capturing and instantiating one costs more than launching its kernels once.
Callers that reuse their tensors (static input/output buffers, torch's caching allocator handing
back the same block) hit the cache on every run after the second; a caller whose pointers are new
every time must not pay a capture per run. So a pointer set seen for the first time is launched
directly and remembered (the last ``remember`` sets); seen again, it is captured and replayed from
then on. The engine's own bindings (``key=None``, ``eager``) are captured at once, as before.
The least recently used graph goes when more than ``size`` are kept (``close()``d: a graph and
the builder that captured it hold driver resources).

Example: keys a, b, a, a -> launch directly (a new), directly (b new), capture a and replay,
replay a.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable

__all__ = ["GraphCache"]


class GraphCache:
    """See the module docstring. ``capture()`` returns ``(graph, builder)``; both get
    ``close()`` when evicted."""

    def __init__(self, size: int = 4, remember: int = 16):
        self.size = max(1, size)
        self.remember = max(0, remember)
        self._graphs: OrderedDict = OrderedDict()   # key -> (graph, builder)
        self._seen: OrderedDict = OrderedDict()     # keys launched directly once
        self.captures = 0

    def __len__(self) -> int:
        return len(self._graphs)

    def __contains__(self, key) -> bool:
        return key in self._graphs

    def lookup(self, key, capture: Callable[[], tuple], eager: bool = False):
        """The graph to replay for ``key``, capturing it when due; None: launch directly."""
        hit = self._graphs.get(key)
        if hit is not None:
            self._graphs.move_to_end(key)
            return hit[0]
        if not eager and key not in self._seen:
            self._seen[key] = None
            while len(self._seen) > self.remember:
                self._seen.popitem(last=False)
            return None
        self._seen.pop(key, None)
        graph, builder = capture()
        self.captures += 1
        self._graphs[key] = (graph, builder)
        while len(self._graphs) > self.size:
            _, old = self._graphs.popitem(last=False)
            _close(*old)
        return graph

    def close(self) -> None:
        """Free every graph (the context is released)."""
        for pair in self._graphs.values():
            _close(*pair)
        self._graphs.clear()
        self._seen.clear()


def _close(*objs) -> None:
    for obj in objs:
        try:
            if obj is not None:
                obj.close()
        except Exception:  # noqa: BLE001  (teardown of a possibly broken context)
            pass
