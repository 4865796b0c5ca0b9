"""Converters of logic, bit-shift, non-strict comparison, modulo and trigonometric ONNX ops
(ptxc/dialects/graph/logic.py, trig.py). One form across opsets: And/Or/Xor (7+),
LessOrEqual/GreaterOrEqual (12+), BitShift (11+), Mod (10+) and the trigonometric ops (7+) only
widened their type lists over the versions of the backend suite."""

from __future__ import annotations

from ...dialects.math import TRIG
from .context import ConvertContext, converter

_BINARY = {"And": "graph.and", "Or": "graph.or", "Xor": "graph.xor",
           "LessOrEqual": "graph.less_or_equal", "GreaterOrEqual": "graph.greater_or_equal"}


@converter(*_BINARY)
def binary(ctx: ConvertContext):
    return ctx.emit(_BINARY[ctx.node.op_type], [ctx.input(0), ctx.input(1)])


@converter("BitShift")
def bit_shift(ctx: ConvertContext):
    direction = ctx.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.error(f"attribute direction must be LEFT or RIGHT, got {direction!r}")
    return ctx.emit("graph.bit_shift", [ctx.input(0), ctx.input(1)], {"direction": direction})


@converter("Mod")
def mod(ctx: ConvertContext):
    fmod = ctx.attr("fmod", 0)
    if fmod not in (0, 1):
        raise ctx.error(f"attribute fmod must be 0 or 1, got {fmod!r}")
    return ctx.emit("graph.mod", [ctx.input(0), ctx.input(1)], {"fmod": int(fmod)})


_TRIG = {stem.title(): f"graph.{stem}" for stem in TRIG}


@converter(*_TRIG)
def trig(ctx: ConvertContext):
    return ctx.emit(_TRIG[ctx.node.op_type], [ctx.input(0)])
