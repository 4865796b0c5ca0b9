"""The IR core: types, attributes, values, operations, blocks, regions; op specs; builder;
verifier; printer and parser; interpreter framework."""

from .attributes import DenseElements  # noqa: F401
from .builder import Builder  # noqa: F401
from .core import Block, BlockArgument, Operation, OpResult, Region, Value  # noqa: F401
from .interpreter import Interpreter, interpret  # noqa: F401
from .parser import parse_ir  # noqa: F401
from .printer import print_ir  # noqa: F401
from .spec import Attr, Operand, OpSpec, Result, lookup, make_op, register  # noqa: F401
from .types import (BufferType, FunctionType, ScalarType, TensorType,  # noqa: F401
                    F16, F32, F64, I1, I8, I32, I64, INDEX, tensor)
from .verifier import verify  # noqa: F401
