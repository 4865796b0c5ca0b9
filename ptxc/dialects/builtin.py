"""The builtin dialect: ``builtin.module``, the top-level container of functions, and how a
function of a module runs by name in the interpreter.

:func:`ptxc.ir.interpreter.interpret` asks the module op's spec to run a function
(``OpSpec.run``), so the IR core knows no calling convention. Both conventions are here, above
the dialects that define them: a value-level function (``func.func``) takes its inputs by
``arg_names`` and gives its outputs by ``result_names``; a loop-level one (with ``loop.outputs``)
writes its outputs into arguments (:func:`ptxc.dialects.loop.run_main`).
"""

from __future__ import annotations

import numpy as np

from ..errors import BindingError
from ..ir.interpreter import Interpreter, check_inputs
from ..ir.spec import OpSpec, fail
from .func import arg_names, func_body, get_func, result_names
from .loop import OUTPUTS_ATTR, run_main


class ModuleOp(OpSpec):
    """The top-level container: one region with one block of functions."""

    name = "builtin.module"
    results = ()
    regions = 1
    traits = {"isolated"}

    def verify(self, op):
        if len(op.regions[0].blocks) != 1 or op.regions[0].blocks[0].args:
            fail(op, "must hold exactly one block without arguments")

    def run(self, op, inputs, func):
        """Run function ``func`` on ``inputs`` (name -> array); returns its outputs by name. A
        loop-level function runs through :func:`~ptxc.dialects.loop.run_main`: ``inputs`` name
        its input arguments, the outputs come back by their argument names."""
        try:
            f = get_func(op, func)
        except KeyError:
            raise BindingError(f"module has no function {func!r}") from None
        if OUTPUTS_ATTR in f.attributes:  # loop level: outputs are arguments the function writes
            return run_main(op, inputs, func)
        body = func_body(f)
        args = check_inputs(arg_names(f), [a.type for a in body.args], inputs)
        outs = Interpreter().run_func(f, args)
        return {n: np.asarray(x) for n, x in zip(result_names(f), outs)}


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (ModuleOp,)
