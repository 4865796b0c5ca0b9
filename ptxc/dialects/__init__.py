"""The dialects, and the table of every op they declare.

The op registry is a table, not an import side effect (as xDSL's ``get_all_dialects``):
``ptxc.ir`` is the lowest layer and never imports a dialect, so it cannot find the ops by
importing them. Instead each dialect module lists its declarations in a tuple ``OPS``,
:func:`all_ops` gathers them, and the root package installs :func:`all_ops` in the registry
(``ptxc/__init__.py`` calls :func:`ptxc.ir.spec.install_op_table`); the first op lookup calls it.
Importing this package imports no dialect: :func:`all_ops` imports them when it is called.

A new op is declared in its dialect's module and added to that module's ``OPS``; a new dialect
module is added here (tests/test_architecture.py checks that every declared op is registered).
"""

from __future__ import annotations


def all_ops() -> tuple:
    """Every op declaration (``OpSpec`` subclass) of every dialect, dialect by dialect."""
    from . import arith, builtin, func, gpu, gpu_tensorcore, gpu_wgmma, graph, loop, math, tensor
    return (*builtin.OPS, *func.OPS, *arith.OPS, *math.OPS, *graph.OPS, *tensor.OPS, *loop.OPS, *gpu.OPS,
            *gpu_tensorcore.OPS, *gpu_wgmma.OPS)
