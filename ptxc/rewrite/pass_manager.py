"""The pass manager: runs a pipeline of passes over a module, with MLIR's debugging aids.

    pm = PassManager("dce,cse,canonicalize", check_numerics=True, dump_dir="dumps")
    changed = pm.run(module)

* ``verify_each`` (on by default): verify the input, then the IR after every pass; a failure is a
  VerifyError naming the pass.
* ``print_ir_after_all`` / ``print_ir_after_change``: after each pass (each pass after which the
  printed IR, constants elided, differs from before it, whatever the pass reported), write
  ``// -----// IR Dump After <pass> //----- //`` and the IR, constants elided, to ``stream``
  (default: ``sys.stderr`` at the time of writing).
* ``dump_dir``: write ``00-input.mlir``, ``01-<pass>.mlir``, ... , the text of the IR, each
  written as soon as its pass has run, so a failing pipeline leaves the IR that failed.
  Constants of more than ``DUMP_ELIDE_BYTES`` are elided (MLIR's
  ``--mlir-elide-elementsattrs-if-larger``: every dump of ResNet-50 would otherwise carry its
  100 MB of weights); ``dump_constants=True`` keeps them all, and then each dump parses back.
* ``timing``: print a wall-clock report per pass at the end; :meth:`PassManager.timing_report`
  returns it (timings are always collected).
* ``check_numerics``: interpret ``main`` on seeded random inputs before the first pass and after
  every pass; a pass whose outputs are not ``allclose`` (``numerics_rtol``, ``numerics_atol``) to
  those before it is a NumericsError naming the pass, the output and the largest errors.
  The outputs after one pass are the reference for the next, so the module is interpreted
  ``len(passes) + 1`` times; a pass that reports "no change" is re-checked too. Output elements
  that are ill-conditioned at the random inputs (rounding-level input changes move them beyond
  the tolerance, in the module before the pass or after it: :func:`numerics.compare_modules`;
  the module before each pass is kept as a shallow clone for that) are not counted against the
  pass; ``ill_conditioned`` lists (pass, outputs) where that happened, and it is logged.
* ``explain``: an :class:`~ptxc.rewrite.explain.Explain` that the pattern drivers inside the
  passes record into, under each pass's name.
* ``before_pass``: a function called with each pass just before it runs (``ptxc bisect`` names
  the pass its rewrite budget is spent in).

Errors raised inside a pass keep their type and get a note naming the pass; an unexpected Python
exception becomes a CompileError naming the pass.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections import Counter

from ..errors import CompileError, NumericsError, PtxcError, VerifyError

#: dumps elide constants larger than this (bytes) unless dump_constants is set
DUMP_ELIDE_BYTES = 1024
from ..ir.core import Operation
from ..ir.printer import print_ir
from ..ir.verifier import verify
from . import numerics
from .explain import Explain, collecting
from .pass_ import Pass
from .pipeline import format_pipeline, parse_pipeline

_log = logging.getLogger("ptxc.check-numerics")


def _as_passes(passes) -> list[Pass]:
    if isinstance(passes, str):
        return parse_pipeline(passes)
    out: list[Pass] = []
    for p in passes:
        if isinstance(p, Pass):
            out.append(p)
        elif isinstance(p, str):
            out += parse_pipeline(p)
        else:
            raise TypeError(f"{p!r} is not a Pass or pipeline text")
    return out


class PassManager:
    """Runs passes over a module; see the module docstring."""

    def __init__(self, passes, verify_each: bool = True, print_ir_after_all: bool = False,
                 print_ir_after_change: bool = False, dump_dir: str | os.PathLike | None = None,
                 timing: bool = False, check_numerics: bool = False,
                 numerics_rtol: float = 1e-4, numerics_atol: float = 1e-5, stream=None,
                 seed: int = 0, explain: Explain | None = None, dump_constants: bool = False,
                 before_pass=None):
        self.passes = _as_passes(passes)
        self.verify_each = verify_each
        self.print_ir_after_all = print_ir_after_all
        self.print_ir_after_change = print_ir_after_change
        self.dump_dir = dump_dir
        self.timing = timing
        self.check_numerics = check_numerics
        self.numerics_rtol = numerics_rtol
        self.numerics_atol = numerics_atol
        self.stream = stream
        self.seed = seed
        self.explain = explain
        self.dump_constants = dump_constants
        self.before_pass = before_pass
        #: (pass text, seconds, changed) for each pass of the last run
        self.pass_times: list[tuple[str, float, bool]] = []
        #: seconds spent in verification, numerics checks, printing and dumps in the last run
        self.overhead: Counter[str] = Counter()
        self.total_time = 0.0
        #: (pass text, names of differing outputs not compared: ill-conditioned), last run
        self.ill_conditioned: list[tuple[str, list]] = []

    @property
    def pipeline(self) -> str:
        return format_pipeline(self.passes)

    def _out(self):
        return self.stream if self.stream is not None else sys.stderr

    # ---- running ------------------------------------------------------------------------------
    def run(self, module: Operation) -> bool:
        """Run every pass on ``module`` in place; returns whether any pass changed it."""
        self.pass_times = []
        self.overhead = Counter()
        self.ill_conditioned = []
        start = time.perf_counter()
        width = max(2, len(str(len(self.passes))))
        if self.verify_each:
            self._verify(module, "the pipeline's input does not verify")
        if self.dump_dir is not None:
            os.makedirs(self.dump_dir, exist_ok=True)
            self._dump(module, f"{0:0{width}d}-input.mlir")
        inputs = reference = None
        if self.check_numerics:
            t0 = time.perf_counter()
            inputs = numerics.random_inputs(module, self.seed)
            try:
                reference = numerics.run(module, inputs)
            except PtxcError as e:
                raise CompileError(f"check-numerics: cannot interpret the pipeline's input: {e}") \
                    from e
            self.overhead["check-numerics"] += time.perf_counter() - t0
        changed_any = False
        for i, p in enumerate(self.passes, 1):
            label = str(p)
            before = None
            # the module before the pass (attributes shared): an ill-conditioned mismatch is
            # judged on both sides (numerics.compare_modules)
            previous = module.clone() if self.check_numerics else None
            if self.print_ir_after_change and not self.print_ir_after_all:
                before = self._text(module)
            changed = self._run_pass(p, label, module)
            changed_any |= changed
            if self.dump_dir is not None:
                self._dump(module, f"{i:0{width}d}-{p.name}.mlir")
            if self.print_ir_after_all or self.print_ir_after_change:
                t0 = time.perf_counter()
                text = self._text(module)
                if self.print_ir_after_all or text != before:
                    self._out().write(f"// -----// IR Dump After {label} //----- //\n{text}\n")
                self.overhead["print-ir"] += time.perf_counter() - t0
            if self.verify_each:
                self._verify(module, f"after pass '{label}'")
            if self.check_numerics:
                reference = self._check(module, label, inputs, reference, previous)
        self.total_time = time.perf_counter() - start
        if self.timing:
            self._out().write(self.timing_report())
        return changed_any

    def _run_pass(self, p: Pass, label: str, module: Operation) -> bool:
        if self.before_pass is not None:
            self.before_pass(p)
        t0 = time.perf_counter()
        try:
            with collecting(self.explain, p.name):
                changed = p.run(module)
        except PtxcError as e:
            e.add_note(f"in pass '{label}'")
            raise
        except Exception as e:
            raise CompileError(f"pass '{label}' failed: {type(e).__name__}: {e}") from e
        seconds = time.perf_counter() - t0
        if not isinstance(changed, bool):
            raise CompileError(f"pass '{label}' returned {changed!r} from run(), not a bool "
                               f"(whether it changed the module)")
        self.pass_times.append((label, seconds, changed))
        return changed

    def _verify(self, module: Operation, context: str) -> None:
        t0 = time.perf_counter()
        try:
            verify(module)
        except VerifyError as e:
            raise VerifyError(f"{context}: {e}") from e
        finally:
            self.overhead["verify"] += time.perf_counter() - t0

    def _check(self, module: Operation, label: str, inputs: dict, reference: dict,
               previous: Operation) -> dict:
        t0 = time.perf_counter()
        try:
            try:
                after = numerics.run(module, inputs)
            except NumericsError as e:
                raise NumericsError(f"check-numerics: pass '{label}': {e}") from None
            except PtxcError as e:
                raise CompileError(f"check-numerics: after pass '{label}' the module no longer "
                                   f"runs: {e}") from e
            rtol, atol = numerics.tolerances(module, self.numerics_rtol, self.numerics_atol)
            problem, left = numerics.compare_modules(previous, reference, module, after, inputs,
                                                     rtol, atol)
            if left:
                _log.info("check-numerics: pass '%s': outputs %s differ but are "
                          "ill-conditioned at the random inputs (rounding-level input changes "
                          "move them beyond tolerance); not compared", label, left)
                self.ill_conditioned.append((label, left))
            if problem:
                err = NumericsError(f"check-numerics: pass '{label}' changed the results: "
                                    f"{problem} (random inputs, seed {self.seed})")
                err.pass_name = label
                raise err
            return after
        finally:
            self.overhead["check-numerics"] += time.perf_counter() - t0

    # ---- output ---------------------------------------------------------------------------------
    @staticmethod
    def _text(module: Operation) -> str:
        try:
            return print_ir(module, elide_constants=True)
        except Exception as e:  # IR a pass left broken: verification reports it next
            return f"// (the IR could not be printed: {type(e).__name__}: {e})\n"

    def _dump(self, module: Operation, filename: str) -> None:
        t0 = time.perf_counter()
        try:
            text = print_ir(module, elide_larger_than=None if self.dump_constants
                            else DUMP_ELIDE_BYTES)
        except Exception as e:
            text = f"// (the IR could not be printed: {type(e).__name__}: {e})\n"
        with open(os.path.join(self.dump_dir, filename), "w") as f:
            f.write(text)
        self.overhead["dump"] += time.perf_counter() - t0

    def timing_report(self) -> str:
        """Wall time per pass of the last run, then the checks' overhead and the total."""
        if not self.pass_times and not self.total_time:
            return "pass timing: no pipeline has run\n"
        total = self.total_time or sum(t for _, t, _ in self.pass_times) or 1e-12
        rows = [(label + ("" if changed else " (no change)"), t)
                for label, t, changed in self.pass_times]
        rows += [(f"({k})", t) for k, t in sorted(self.overhead.items())]
        width = max(len(r[0]) for r in rows) if rows else 5
        lines = ["===- pass execution timing report -===",
                 f"  total wall time: {total:.4f} s",
                 f"  {'seconds':>10}  {'share':>6}  pass"]
        for name, t in rows:
            lines.append(f"  {t:10.4f}  {100 * t / total:5.1f}%  {name}")
        lines.append(f"  {total:10.4f}  {100.0:5.1f}%  {'total':<{width}}".rstrip())
        return "\n".join(lines) + "\n"
