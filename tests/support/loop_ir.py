"""Helpers for building loop-dialect modules by hand in tests (shared by the loop dialect, gpu
dialect and gpu mapping tests)::

    m = module({"x": buf, "y": buf}, ["y"], lambda b, x, y: store(b, load(b, x, i), y, i))
"""

from ptxc.dialects.func import func_body, new_func, new_module, set_func_results
from ptxc.dialects.loop import OUTPUTS_ATTR
from ptxc.ir import Builder, verify
from ptxc.ir.types import F32


def module(args, outputs, body, check=True):
    """A module whose main takes ``args`` (name -> buffer type), lists ``outputs`` as its output
    bindings and runs ``body(builder, *buffers)``; verified unless ``check`` is False."""
    m = new_module()
    f = new_func(m, "main", list(args.values()), list(args))
    body(Builder.at_end(func_body(f)), *func_body(f).args)
    set_func_results(f, [])
    f.attributes[OUTPUTS_ATTR] = tuple(outputs)
    if check:
        verify(m)
    return m


def const(b, value, t=F32):
    return b.create("arith.constant", [], {"value": value, "type": t}).result


def op(b, name, *args, **attrs):
    return b.create(name, list(args), attrs or None).result


def load(b, buffer, *idx):
    return b.create("loop.load", [buffer, list(idx)]).result


def store(b, value, buffer, *idx):
    b.create("loop.store", [value, buffer, list(idx)])
