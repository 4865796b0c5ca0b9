"""The interpreter framework: runs any module at any stage with each op's numpy semantics.

Each op's spec provides ``reference(op, args, interp)``; the interpreter walks a function's body in
order, keeps one array per value, and checks every result against its declared type, so a
reference implementation that disagrees with its own type inference is caught where it happens.
"""

from __future__ import annotations

import numpy as np

from ..errors import BindingError, CompileError, PtxcError
from .core import Block, Operation, Value
from .spec import lookup
from .types import BufferType, ScalarType, TensorType


class Interpreter:
    def __init__(self, check_types: bool = True):
        self.check_types = check_types
        self.env: dict[Value, object] = {}

    def run_block(self, block: Block, args) -> list:
        """Run ``block`` with its arguments bound to ``args``; returns its terminator's operands."""
        for a, x in zip(block.args, args, strict=True):
            self.env[a] = x
        for op in block.ops:
            spec = lookup(op.name)
            if spec is None:
                raise CompileError(f"{op.where}: unknown op, cannot interpret")
            vals = [self.env[v] for v in op.operands]
            if spec.has_trait("terminator"):
                return vals
            try:
                outs = spec.reference(op, vals, self)
            except PtxcError:
                raise
            except Exception as e:  # numpy errors inside a reference: name the op
                raise CompileError(f"{op.where}: reference semantics failed: "
                                   f"{type(e).__name__}: {e}") from e
            if len(outs) != len(op.results):
                raise CompileError(f"{op.where}: reference gave {len(outs)} results "
                                   f"for {len(op.results)}")
            for r, x in zip(op.results, outs):
                if self.check_types:
                    x = _conform(op, r.index, r.type, x)
                self.env[r] = x
        return []

    def run_func(self, func: Operation, args) -> list:
        return self.run_block(func.regions[0].blocks[0], args)


def _conform(op: Operation, index: int, t, x):
    """Check a reference result against its type; numpy scalars of rank-0 results are wrapped."""
    if isinstance(t, (TensorType, BufferType)):
        x = np.asarray(x)
        want = t.element.np_dtype
        if x.shape != t.shape or x.dtype != want:
            raise CompileError(f"{op.where}: reference result #{index} is {x.dtype}{list(x.shape)}"
                               f", declared {t}")
    elif isinstance(t, ScalarType):
        x = np.asarray(x, dtype=t.np_dtype)[()]
    return x


def check_inputs(names: list[str], types: list, inputs: dict, where: str = "model") -> list:
    """Match a dict of input arrays to bindings; a wrong name, shape or dtype is a BindingError."""
    if not isinstance(inputs, dict):
        raise BindingError(f"{where}: inputs must be a dict name -> array, got "
                           f"{type(inputs).__name__}")
    unknown = sorted(set(inputs) - set(names))
    missing = [n for n in names if n not in inputs]
    if unknown or missing:
        parts = []
        if unknown:
            parts.append(f"unknown input(s) {unknown}")
        if missing:
            parts.append(f"missing input(s) {missing}")
        raise BindingError(f"{where}: {'; '.join(parts)}; the inputs are "
                           + ", ".join(f"{n}: {t}" for n, t in zip(names, types)))
    out = []
    for n, t in zip(names, types):
        x = inputs[n]
        try:
            x = np.asarray(x)
        except Exception as e:
            raise BindingError(f"{where}: input {n!r} is not array-like: {e}") from None
        want = t.element.np_dtype
        if x.dtype != want:
            raise BindingError(f"{where}: input {n!r} has dtype {x.dtype}, expected {want} ({t})")
        if tuple(x.shape) != t.shape:
            raise BindingError(f"{where}: input {n!r} has shape {list(x.shape)}, expected "
                               f"{list(t.shape)} ({t})")
        out.append(x)
    return out


def interpret(module: Operation, inputs: dict, func: str = "main") -> dict:
    """Run ``func`` of ``module`` on ``inputs`` (name -> array) with the reference semantics;
    returns the outputs by name. The module op's spec binds the names (``OpSpec.run``;
    ``builtin.module``'s, in ptxc/dialects/builtin.py, knows the value-level and the loop-level
    calling conventions), so the IR core names no dialect."""
    spec = lookup(module.name)
    if spec is None:
        raise CompileError(f"{module.where}: unknown op, cannot interpret")
    return spec.run(module, inputs, func)
