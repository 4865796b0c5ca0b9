"""What an ONNX op converter sees: the node, its inputs as IR values, its attributes decoded,
compile-time values of its inputs, and a builder that tags new ops with the node's name.

A converter is a function tagged with the ONNX op types it converts::

    @converter("Relu")
    def relu(ctx: ConvertContext) -> list[Value]:
        return ctx.emit("graph.relu", [ctx.input(0)])

It returns one value per ONNX output it produces (in order); outputs it does not produce (optional
ones such as Dropout's mask) must be unused by the rest of the model, or the importer says so.
The tag registers nothing: the table in ptxc/frontend/convert/table.py lists the converter
modules, and whoever makes a context passes it the table (``ConvertContext.converters``).

ONNX's element types (:data:`ONNX_TYPES`, :func:`scalar_type_of`) are here too, where both the
converters and the importer read them.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...errors import ModelError, ShapeInputError, VerifyError
from ...ir.builder import Builder
from ...ir.core import BlockArgument, Value
from ...ir.spec import lookup
from ...ir.types import ScalarType, TensorType

#: a value is folded during import (so its contents are known to later shape computations) when
#: every operand is known and the result has at most this many elements
FOLD_LIMIT = 1 << 16

#: ONNX element type -> ptxc scalar type name
ONNX_TYPES = {
    onnx.TensorProto.FLOAT: "f32", onnx.TensorProto.DOUBLE: "f64",
    onnx.TensorProto.FLOAT16: "f16", onnx.TensorProto.BFLOAT16: "bf16",
    onnx.TensorProto.INT64: "i64", onnx.TensorProto.INT32: "i32",
    onnx.TensorProto.INT16: "i16", onnx.TensorProto.INT8: "i8",
    onnx.TensorProto.UINT64: "ui64", onnx.TensorProto.UINT32: "ui32",
    onnx.TensorProto.UINT16: "ui16", onnx.TensorProto.UINT8: "ui8",
    onnx.TensorProto.BOOL: "i1",
}


def scalar_type_of(elem_type: int, where: str) -> ScalarType:
    try:
        return ScalarType(ONNX_TYPES[elem_type])
    except KeyError:
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in \
            onnx.TensorProto.DataType.values() else str(elem_type)
        raise ModelError(f"{where}: element type {name} is not supported") from None


def converter(*op_types: str):
    """Tag a function as the converter of the given ONNX op types (default domain); the
    converter table (ptxc/frontend/convert/table.py) collects the tagged functions."""
    if not op_types:
        raise ValueError("converter() needs at least one ONNX op type")

    def deco(fn):
        fn.onnx_op_types = getattr(fn, "onnx_op_types", ()) + op_types
        return fn
    return deco


class ConvertContext:
    """State of one import; ``node`` is the node being converted."""

    def __init__(self, builder: Builder, opset: int, values: dict[str, Value],
                 known: dict[Value, np.ndarray], model_name: str = "model", *,
                 converters: dict[str, Callable]):
        self.builder = builder
        self.converters = converters  # ONNX op type -> converter (table.converters())
        self.opset = opset
        self.values = values      # ONNX tensor name -> IR value
        self.known = known        # IR value -> its compile-time contents, where known
        self.model_name = model_name
        self.node: onnx.NodeProto | None = None
        self.node_name = ""
        #: initializers not yet used: materialized as graph.constant at their first use, so the
        #: IR keeps constants next to the layers that read them
        self.pending: dict[str, np.ndarray] = {}

    # ---- the node -----------------------------------------------------------------------------
    def error(self, message: str) -> ModelError:
        """A ModelError naming the node: raise ctx.error("...")."""
        return ModelError(f"{self.model_name}: node {self.node_name!r} ({self.node.op_type}): "
                          f"{message}")

    @property
    def num_inputs(self) -> int:
        """Number of inputs, trailing empty (absent optional) inputs not counted."""
        n = len(self.node.input)
        while n and not self.node.input[n - 1]:
            n -= 1
        return n

    def input(self, i: int) -> Value | None:
        """Input ``i`` as an IR value; None when absent (past the end or an empty name)."""
        if i >= len(self.node.input) or not self.node.input[i]:
            return None
        name = self.node.input[i]
        if name not in self.values and name in self.pending:
            self.values[name] = self._materialize(name)
        v = self.values[name]
        if isinstance(v, MissingOutput):
            v.fail()
        return v

    def inputs(self) -> list[Value | None]:
        return [self.input(i) for i in range(self.num_inputs)]

    def type(self, i: int) -> TensorType:
        v = self.input(i)
        if v is None:
            raise self.error(f"input #{i} is required")
        return v.type

    def attr(self, name: str, default=None):
        """An ONNX attribute decoded to Python (ints, floats, strs, tuples, numpy arrays)."""
        for a in self.node.attribute:
            if a.name == name:
                if a.ref_attr_name:
                    raise self.error(f"attribute {name} refers to a function attribute")
                v = helper.get_attribute_value(a)
                if isinstance(v, bytes):
                    return v.decode("utf-8")
                if isinstance(v, onnx.TensorProto):
                    return numpy_helper.to_array(v)
                if isinstance(v, list):
                    return tuple(x.decode("utf-8") if isinstance(x, bytes) else x for x in v)
                if isinstance(v, (onnx.GraphProto, onnx.SparseTensorProto)):
                    raise self.error(f"attribute {name}: graph and sparse attributes are not "
                                     "supported")
                return v
        return default

    def has_attr(self, name: str) -> bool:
        return any(a.name == name for a in self.node.attribute)

    # ---- compile-time values ----------------------------------------------------------------
    def is_const(self, i: int) -> bool:
        v = self.input(i)
        return v is not None and v in self.known

    def const(self, i: int, what: str | None = None) -> np.ndarray | None:
        """The compile-time contents of input ``i`` (None when the input is absent).

        Raises ShapeInputError, naming the graph inputs it depends on, when it is computed at run
        time: ptxc's shapes are static, so inputs that decide a shape must be known here.
        """
        v = self.input(i)
        if v is None:
            return None
        if v in self.known:
            return self.known[v]
        deps = sorted(_graph_inputs_reaching(v))
        what = what or f"input #{i} ({self.node.input[i]!r})"
        hint = (f"; it depends on graph input(s) {deps}: bind them with constant_inputs="
                if deps else "")
        raise ShapeInputError(
            f"{self.model_name}: node {self.node_name!r} ({self.node.op_type}): {what} decides "
            f"a shape and must be known at compile time{hint}", tuple(deps))

    # ---- building ------------------------------------------------------------------------------
    def emit(self, op_name: str, operands, attributes=None, result_types=None) -> list[Value]:
        """Create a registered op at the insertion point, tagged with this node's name; returns
        its results. Folds it when all operands are known and the result is small."""
        try:
            op = self.builder.create(op_name, operands, attributes, result_types,
                                     loc=self.node_name)
        except VerifyError as e:  # an op that cannot be built from this node: the model is bad
            raise ModelError(f"{self.model_name}: {e}") from None
        spec = lookup(op_name)
        if spec.has_trait("pure") and op.results and all(
                isinstance(r.type, TensorType) and r.type.size <= FOLD_LIMIT for r in op.results):
            if spec.has_trait("shape_only"):
                args = [np.broadcast_to(np.zeros((), v.type.element.np_dtype), v.type.shape)
                        for v in op.operands]
            elif all(v in self.known for v in op.operands):
                args = [self.known[v] for v in op.operands]
            else:
                args = None
            if args is not None:
                from ...ir.interpreter import Interpreter
                for r, x in zip(op.results, spec.reference(op, args, Interpreter())):
                    self.known[r] = np.asarray(x)
        return list(op.results)

    def emit1(self, op_name: str, operands, attributes=None) -> Value:
        return self.emit(op_name, operands, attributes)[0]

    def _materialize(self, name: str) -> Value:
        op = self.builder.create("graph.constant", [], {"value": self.pending.pop(name)},
                                 loc=name, result_names=[name])
        self.known[op.result] = op.attributes["value"].array
        return op.result

    def constant(self, array, name: str | None = None) -> Value:
        """A ``graph.constant`` holding ``array``."""
        from ...ir.attributes import DenseElements
        array = np.asarray(array)
        op = self.builder.create("graph.constant", [], {"value": DenseElements(array)},
                                 loc=self.node_name, result_names=[name] if name else None)
        self.known[op.result] = op.attributes["value"].array
        return op.result


class MissingOutput:
    """Stands for an ONNX output its converter does not produce; reading it is a ModelError."""

    def __init__(self, node_name: str, op_type: str, output: str):
        self.node_name, self.op_type, self.output = node_name, op_type, output

    def fail(self):
        raise ModelError(f"node {self.node_name!r} ({self.op_type}): output {self.output!r} is "
                         "used, but ptxc computes only the inference outputs of this op")


def _graph_inputs_reaching(v: Value) -> set[str]:
    """Names of the function arguments that ``v`` is computed from."""
    out, stack, seen = set(), [v], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, BlockArgument):
            if x.name_hint:
                out.add(x.name_hint)
        else:
            stack.extend(x.owner.operands)
    return out
