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


@converter("BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot")
def bitwise(ctx: ConvertContext):
    """BitwiseAnd/Or/Xor (18): ``graph.bitwise``; BitwiseNot: ``x ^ ~0`` (all ones)."""
    import numpy as np
    t = ctx.type(0)
    if t.element.is_float or t.element.name == "i1":
        raise ctx.error(f"needs integer inputs, got {t}")
    kind = ctx.node.op_type[len("Bitwise"):].lower()
    if kind == "not":
        ones = ctx.constant(np.array(-1).astype(t.element.np_dtype))
        return ctx.emit("graph.bitwise", [ctx.input(0), ones], {"kind": "xor"})
    return ctx.emit("graph.bitwise", [ctx.input(0), ctx.input(1)], {"kind": kind})


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
