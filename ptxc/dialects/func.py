"""The structural ops every stage shares: ``func.func`` and ``func.return`` (``builtin.module``,
the container, is declared in ptxc/dialects/builtin.py).

A module holds functions; the function ``main`` is the model. Its attributes ``arg_names`` and
``result_names`` keep the binding names (ONNX input and output names) exactly, whatever the
printer does with SSA names:

    "builtin.module"() ({
      "func.func"() ({
      ^bb0(%x: tensor<2xf32>):
        %y = "graph.relu"(%x) : (tensor<2xf32>) -> tensor<2xf32>
        "func.return"(%y) : (tensor<2xf32>) -> ()
      }) {arg_names = ["x"], function_type = (tensor<2xf32>) -> (tensor<2xf32>),
          result_names = ["y"], sym_name = "main"} : () -> ()
    }) : () -> ()
"""

from __future__ import annotations

from ..ir.core import Block, Operation, Region
from ..ir.spec import Attr, Operand, OpSpec, fail
from ..ir.types import FunctionType


class FuncOp(OpSpec):
    """A function; its body's block arguments are the inputs, ``func.return`` gives the results."""

    name = "func.func"
    results = ()
    regions = 1
    traits = {"isolated"}
    attributes = {
        "sym_name": Attr("str", required=True),
        "function_type": Attr("type", required=True),
        "arg_names": Attr("strs"),
        "result_names": Attr("strs"),
    }

    def verify(self, op):
        ft = op.attributes["function_type"]
        if not isinstance(ft, FunctionType):
            fail(op, "function_type must be a function type")
        blocks = op.regions[0].blocks
        if len(blocks) != 1:
            fail(op, f"body must have one block, has {len(blocks)}")
        body = blocks[0]
        if [a.type for a in body.args] != list(ft.inputs):
            fail(op, "block argument types differ from function_type inputs")
        last = body.last_op
        if last is None or last.name != "func.return":
            fail(op, "body must end with func.return")
        if [v.type for v in last.operands] != list(ft.results):
            fail(op, "func.return operand types differ from function_type results")
        for key, n in (("arg_names", len(ft.inputs)), ("result_names", len(ft.results))):
            names = op.attributes.get(key)
            if names is not None and len(names) != n:
                fail(op, f"{key} has {len(names)} names for {n} values")

    def reference(self, op, args, interp):
        return interp.run_block(op.regions[0].blocks[0], args)


class ReturnOp(OpSpec):
    """Ends a function, returning its operands."""

    name = "func.return"
    operands = (Operand("values", variadic=True),)
    results = ()
    traits = {"terminator"}

    def reference(self, op, args, interp):
        return []


#: the op declarations of this module (ptxc.dialects.all_ops lists them)
OPS = (FuncOp, ReturnOp)


# ---- helpers to make and read modules --------------------------------------------------------

def new_module() -> Operation:
    return Operation("builtin.module", regions=[Region([Block()])])


def module_body(module: Operation) -> Block:
    return module.regions[0].blocks[0]


def new_func(module: Operation, name: str, arg_types, arg_names=None) -> Operation:
    """Append an (unfinished) function to ``module``; finish it with :func:`set_func_results`."""
    body = Block(list(arg_types), list(arg_names) if arg_names else None)
    func = Operation("func.func", attributes={
        "sym_name": name, "function_type": FunctionType(tuple(arg_types), ())},
        regions=[Region([body])])
    if arg_names is not None:
        func.attributes["arg_names"] = tuple(arg_names)
    module_body(module).append(func)
    return func


def func_body(func: Operation) -> Block:
    return func.regions[0].blocks[0]


def set_func_results(func: Operation, values, names=None) -> Operation:
    """End ``func`` with ``func.return values`` and update its type (and result names)."""
    body = func_body(func)
    if body.last_op is not None and body.last_op.name == "func.return":
        body.last_op.erase()
    ret = body.append(Operation("func.return", list(values)))
    func.attributes["function_type"] = FunctionType(
        tuple(a.type for a in body.args), tuple(v.type for v in values))
    if names is not None:
        func.attributes["result_names"] = tuple(names)
    return ret


def functions(module: Operation) -> list[Operation]:
    return [op for op in module_body(module).ops if op.name == "func.func"]


def get_func(module: Operation, name: str = "main") -> Operation:
    for f in functions(module):
        if f.attributes.get("sym_name") == name:
            return f
    raise KeyError(name)


def arg_names(func: Operation) -> list[str]:
    body = func_body(func)
    names = func.attributes.get("arg_names")
    return list(names) if names else [f"arg{i}" for i in range(len(body.args))]


def result_names(func: Operation) -> list[str]:
    names = func.attributes.get("result_names")
    n = len(func.attributes["function_type"].results)
    return list(names) if names else [f"result{i}" for i in range(n)]
