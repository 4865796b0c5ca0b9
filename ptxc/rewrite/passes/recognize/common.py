"""The base of the recognizer patterns: run a matcher, report its reason, build the replacement."""

from __future__ import annotations

from typing import ClassVar

import attrs
import numpy as np

from ....ir.attributes import DenseElements
from ....ir.core import Operation
from ...pattern import RewritePattern
from ...rewriter import PatternRewriter
from .match import Match, NoMatch, label


@attrs.frozen(eq=False)
class NewConstant:
    """An operand of a replacement that is a constant still to be made (only once the match is
    certain): ``array``, its result named ``name`` and located at ``loc``."""

    array: np.ndarray
    name: str | None = None
    loc: str | None = None


class Recognizer(RewritePattern):
    """A pattern rooted at any op of ``roots``: :meth:`recognize` returns the replacement (op
    name, operands, attributes) for a :class:`Match` it fills in, or raises :class:`NoMatch`;
    an operand may be a :class:`NewConstant`.
    The replacement takes the root's place, location and result name, and lists the locations of
    the ops it absorbed in ``ptxc.fused`` (program order)."""

    root = None
    roots: ClassVar[tuple[str, ...]] = ()
    #: how messages name the op being recognized ("GELU", "LayerNorm", ...)
    what: ClassVar[str] = ""

    def recognize(self, m: Match):  # pragma: no cover - abstract
        raise NotImplementedError

    def reason(self, m: Match, why: str) -> str:
        """The explain message when the shape matched but ``why`` stops the rewrite."""
        return f"{label(m.root)} not recognized as {self.what}: {why}"

    def provenance(self, m: Match) -> tuple[str | None, tuple[str, ...]]:
        """The replacement's loc and its ``ptxc.fused`` list: the root's loc and the locs of
        the other absorbed ops."""
        return m.root.loc, m.fused_locs()

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> bool:
        if op.name not in self.roots or len(op.results) != 1:
            return False
        m = Match(op, self.what)
        try:
            name, operands, attributes = self.recognize(m)
            m.check()
        except NoMatch as e:
            if e.reason is None:
                return False
            return rewriter.fail(op, self.reason(m, e.reason))
        loc, fused = self.provenance(m)
        attributes = {k: v for k, v in attributes.items() if k != "ptxc.fused"}
        if fused:
            attributes["ptxc.fused"] = fused
        operands = [rewriter.create("graph.constant", [], {"value": DenseElements(v.array)},
                                    loc=v.loc, result_names=[v.name]).results[0]
                    if isinstance(v, NewConstant) else v for v in operands]
        new = rewriter.create(name, operands, attributes, loc=loc)
        if new.results[0].type != op.results[0].type:  # a matcher bug, not the model's
            raise AssertionError(f"{self.name}: replacement has type {new.results[0].type}, "
                                 f"the matched root {op.results[0].type}")
        rewriter.replace_op(op, new.results)
        return True
