"""The table of ONNX op converters, listed rather than registered by importing (as xDSL's
``get_all_passes``): :data:`MODULES` names every converter module, and :func:`converters` maps
each ONNX op type to the function of a listed module that ``@converter`` tags with it. Importing
a converter module changes no global state. A new converter module is added to :data:`MODULES`
(tests/test_architecture.py checks that every tagged converter is in the table).

The importer and the Network builder read the table and hand it to their ``ConvertContext``, so
converters that convert other nodes (ONNX functions' bodies) find it there, not by importing
this module.
"""

from __future__ import annotations

import functools
from typing import Callable

from . import (activation, attention, composite, data_dependent, elementwise,
               elementwise_composite, functions, gather_scatter, linalg, logic, nn, norm,
               positional, quant, reduce, resize, sample, shape, small_composites)

#: every converter module
MODULES = (elementwise, activation, nn, linalg, shape, reduce, quant, norm, resize, logic,
           positional, gather_scatter, composite, attention, data_dependent,
           elementwise_composite, functions, small_composites, sample)


@functools.cache
def converters() -> dict[str, Callable]:
    """ONNX op type (default domain) -> its converter, from the tagged functions of MODULES."""
    table: dict[str, Callable] = {}
    for module in MODULES:
        fns = {id(f): f for f in vars(module).values()
               if callable(f) and getattr(f, "__module__", None) == module.__name__
               and hasattr(f, "onnx_op_types")}
        for fn in fns.values():
            for t in fn.onnx_op_types:
                if t in table:
                    raise ValueError(f"converter for {t} registered twice: "
                                     f"{table[t].__module__}.{table[t].__name__} and "
                                     f"{module.__name__}.{fn.__name__}")
                table[t] = fn
    return table
