"""The greedy pattern driver: applies a set of patterns to a fixpoint, as MLIR's
``applyPatternsGreedily``.

Each iteration puts every op nested in the root on a worklist (program order) and takes them one
by one: a pure op without uses is erased; otherwise the patterns rooted at its name (and those
rooted at any op) are tried by decreasing benefit until one fires. What a rewrite touches goes
back on the worklist, through the rewriter's notifications: new ops, ops modified in place, users
of replaced values, producers of the operands of erased ops. The iteration ends when the worklist
is empty; the driver has converged when an iteration changes nothing.

It fails loudly rather than looping or corrupting the IR:

* more than ``max_iterations`` iterations, or more than ``max_rewrites`` rewrites in one of them
  (ping-pong patterns), is a CompileError naming the patterns still firing and where;
* a pattern that returns False after changing the IR, or True without changing it, or that raises,
  is a CompileError naming the pattern and the op;
* with ``verify_each=True`` (debug mode) the IR is verified after every rewrite, and a broken
  invariant is a VerifyError naming the pattern that broke it.

Inside ``with rewrite_budget(n) as b:`` every driver stops applying patterns after ``n``
applications in all (dead-op erasure goes on), and logs each application in ``b.log`` (pattern,
op, ONNX node, pass): ``ptxc bisect`` replays a pipeline with growing budgets to find the first
application that changes the result.
"""

from __future__ import annotations

import contextvars
from collections import Counter, defaultdict
from contextlib import contextmanager

import attrs

from ..errors import CompileError, PtxcError, VerifyError
from ..ir.core import Operation, Value
from ..ir.spec import lookup
from ..ir.verifier import verify
from . import explain as _explain
from .explain import Explain, op_location
from .pattern import RewritePattern, as_pattern, producer
from .rewriter import PatternRewriter, RewriteListener


@attrs.frozen
class Application:
    """One pattern application: the pattern, the op it was applied to, its ONNX node, the pass."""

    pattern: str
    op: str
    loc: str | None
    pass_name: str | None


class RewriteBudget:
    """How many pattern applications remain allowed (None: no limit), and the log of those made;
    ``pass_name`` is set by whoever runs the passes (bisect)."""

    def __init__(self, limit: int | None):
        self.limit = limit
        self.log: list[Application] = []
        self.pass_name: str | None = None

    @property
    def spent(self) -> bool:
        return self.limit is not None and len(self.log) >= self.limit


_BUDGET: contextvars.ContextVar[RewriteBudget | None] = \
    contextvars.ContextVar("ptxc_rewrite_budget", default=None)


@contextmanager
def rewrite_budget(limit: int | None):
    """Within this block, at most ``limit`` pattern applications in all; yields the
    :class:`RewriteBudget`, whose ``log`` lists them."""
    budget = RewriteBudget(limit)
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def is_trivially_dead(op: Operation) -> bool:
    """A pure op whose results nobody reads."""
    spec = lookup(op.name)
    return spec is not None and spec.has_trait("pure") and not op.has_uses


class GreedyDriver(RewriteListener):
    """One run of :func:`apply_patterns_greedily` (kept as a class for its worklist state)."""

    def __init__(self, root: Operation, patterns, verify_each: bool = False,
                 explain: Explain | None = None, erase_dead: bool = True,
                 max_rewrites: int | None = None):
        self.root = root
        pats = [as_pattern(p) for p in patterns]
        order = sorted(range(len(pats)), key=lambda i: (-pats[i].benefit, i))
        self.patterns: list[RewritePattern] = [pats[i] for i in order]
        self._by_name: dict[str, list[RewritePattern]] = {}
        self.verify_each = verify_each
        ctx = _explain.current()
        self.pass_name = ctx[1] if ctx else None
        self.explain = explain if explain is not None else (ctx[0] if ctx else None)
        self.erase_dead = erase_dead
        self.max_rewrites = max_rewrites
        self.stack: list[Operation] = []
        self.pending: set[Operation] = set()
        self.current: RewritePattern | None = None
        self.fires: Counter[str] = Counter()
        self.sites: dict[str, list[str]] = defaultdict(list)
        self.dead_erased = 0

    # ---- worklist -----------------------------------------------------------------------------
    def patterns_for(self, name: str) -> list[RewritePattern]:
        pats = self._by_name.get(name)
        if pats is None:
            pats = [p for p in self.patterns if p.root is None or p.root == name]
            self._by_name[name] = pats
        return pats

    def push(self, op: Operation | None) -> None:
        if op is None or op is self.root:
            return
        self.pending.add(op)
        self.stack.append(op)

    # ---- listener -------------------------------------------------------------------------------
    def op_inserted(self, op: Operation) -> None:
        for o in op.walk():
            self.push(o)

    def op_modified(self, op: Operation) -> None:
        self.push(op)

    def op_erasing(self, op: Operation) -> None:
        inside = set(op.walk())
        for o in inside:
            for v in o.operands:
                p = producer(v)
                if p is not None and p not in inside:
                    self.push(p)
        self.pending.difference_update(inside)

    def value_replacing(self, old: Value, new: Value) -> None:
        for u in old.users:
            self.push(u)
        self.push(producer(old))

    def value_released(self, value: Value) -> None:
        self.push(producer(value))

    def match_failed(self, op: Operation, reason: str) -> None:
        if self.explain is not None and self.current is not None:
            self.explain.record(self.current.name, op, False, reason, self.pass_name)

    # ---- applying -------------------------------------------------------------------------------
    def apply(self, pattern: RewritePattern, op: Operation) -> bool:
        budget = _BUDGET.get()
        if budget is not None and budget.spent:
            return False
        rewriter = PatternRewriter(op, listener=self)
        where = op.where
        op_name, loc = op.name, op.loc
        self.current = pattern
        try:
            ok = pattern.match_and_rewrite(op, rewriter)
        except PtxcError as e:
            e.add_note(f"in pattern {pattern.name} applied to {where}")
            raise
        except Exception as e:
            raise CompileError(f"pattern {pattern.name} failed on {where}: "
                               f"{type(e).__name__}: {e}") from e
        finally:
            self.current = None
        if not isinstance(ok, bool):
            raise CompileError(f"pattern {pattern.name} returned {ok!r} on {where}, not a bool")
        if not ok:
            if rewriter.changes:
                raise CompileError(f"pattern {pattern.name} changed the IR at {where} but "
                                   f"returned False")
            return False
        if not rewriter.changes:
            raise CompileError(f"pattern {pattern.name} returned True at {where} without changing "
                               f"the IR through the rewriter")
        self.fires[pattern.name] += 1
        self.sites[pattern.name].append(op_location(op) or op.name)
        if budget is not None:
            budget.log.append(Application(pattern.name, op_name, loc,
                                          budget.pass_name or self.pass_name))
        if self.explain is not None:
            self.explain.record(pattern.name, op, True, None, self.pass_name)
        if self.verify_each:
            try:
                verify(self.root)
            except VerifyError as e:
                raise VerifyError(f"after pattern {pattern.name} rewrote {where}: {e}") from e
        return True

    def iterate(self) -> bool:
        """One sweep of the worklist; whether anything changed."""
        ops = [o for o in self.root.walk() if o is not self.root]
        self.stack = ops[::-1]
        self.pending = set(ops)
        self.fires.clear()
        self.sites.clear()
        self.dead_erased = 0
        limit = self.max_rewrites if self.max_rewrites is not None else 10 * len(ops) + 100
        rewrites = 0
        changed = False
        while self.stack:
            op = self.stack.pop()
            if op not in self.pending:
                continue
            self.pending.discard(op)
            if op.block is None:  # detached behind the rewriter's back
                continue
            if self.erase_dead and is_trivially_dead(op):
                self.op_erasing(op)
                op.erase()
                self.dead_erased += 1
                changed = True
                continue
            for pattern in self.patterns_for(op.name):
                if self.apply(pattern, op):
                    changed = True
                    rewrites += 1
                    if rewrites > limit:
                        raise CompileError(
                            f"patterns did not converge: more than {limit} rewrites in one sweep "
                            f"over {len(ops)} ops; firing: {self.firing_summary()}")
                    break
        return changed

    def firing_summary(self) -> str:
        parts = []
        for name, n in self.fires.most_common():
            sites = list(dict.fromkeys(self.sites[name]))
            shown = ", ".join(sites[:5]) + (f", ... ({len(sites) - 5} more)" if len(sites) > 5
                                            else "")
            parts.append(f"{name} x{n} (at {shown})")
        if self.dead_erased:
            parts.append(f"dead-op erasure x{self.dead_erased}")
        return "; ".join(parts) or "nothing"

    def run(self, max_iterations: int) -> bool:
        if self.verify_each:
            try:
                verify(self.root)
            except VerifyError as e:
                raise VerifyError(f"before any pattern was applied: {e}") from e
        changed = False
        for _ in range(max_iterations):
            if not self.iterate():
                return changed
            changed = True
        raise CompileError(f"patterns did not converge in {max_iterations} iterations; still "
                           f"firing in the last one: {self.firing_summary()}")


def apply_patterns_greedily(root_op: Operation, patterns, max_iterations: int = 10,
                            verify_each: bool = False, explain: Explain | None = None,
                            erase_dead: bool = True, max_rewrites: int | None = None) -> bool:
    """Apply ``patterns`` (instances or classes) to every op nested in ``root_op`` until none
    fires; returns whether the IR changed. See the module docstring for the rules.

    ``max_iterations``: sweeps allowed, the last of which must change nothing. ``verify_each``:
    verify after every rewrite (debug). ``explain``: an :class:`Explain` that records what fired
    and why the rest did not. ``erase_dead``: also erase pure ops without uses.
    ``max_rewrites``: rewrites allowed in one sweep (default 10 per op + 100).
    """
    if max_iterations < 1:
        raise CompileError(f"max_iterations must be at least 1, got {max_iterations}")
    return GreedyDriver(root_op, patterns, verify_each, explain, erase_dead,
                        max_rewrites).run(max_iterations)
