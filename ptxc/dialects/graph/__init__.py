"""The graph dialect: one op per network layer, ONNX semantics, static shapes.

Conventions (the importer, the Network builder and every graph pass rely on them):

* An op is named ``graph.<onnx op type in snake_case>``: ``graph.conv``, ``graph.batch_normalization``,
  ``graph.global_average_pool``, ``graph.reduce_mean``, ``graph.arg_max`` (PRelu is ``graph.prelu``,
  LRN ``graph.lrn``, MatMul ``graph.matmul``).
* Operands are the ONNX inputs that carry data. Inputs that decide a shape (Reshape's ``shape``,
  Slice's ``starts``/``ends``/``axes``/``steps``, Squeeze's ``axes``, Pad's ``pads``, Resize's
  ``scales``/``sizes``, Tile's ``repeats``, Expand's ``shape``, Split's ``split``, a Reduce's
  ``axes``, ConstantOfShape's input) are compile-time constants and become attributes of the same
  name; the importer resolves them (ptxc's shapes are static).
* Attributes keep ONNX names and are normalized so that passes never re-derive ONNX defaults:
  negative axes made non-negative, ``auto_pad`` resolved into explicit ``pads``, ``strides``,
  ``dilations`` and ``kernel_shape`` always present, opset differences removed (an op means the
  same whatever opset the model came from).
* Every op infers its result types and has numpy reference semantics.
"""

from . import common, constant  # noqa: F401
from . import elementwise, activation, nn, linalg, shape, reduce, region  # noqa: F401
from . import pool, norm, resize, scalar_forms, logic, trig, positional, gather_scatter, topk, einsum  # noqa: F401
from . import sample, attention  # noqa: F401
from . import fused  # noqa: F401
from . import quant  # noqa: F401

#: the graph dialect's op declarations, module by module (ptxc.dialects.all_ops lists them)
OPS = (*constant.OPS, *elementwise.OPS, *activation.OPS, *nn.OPS, *linalg.OPS, *shape.OPS,
       *reduce.OPS, *region.OPS, *pool.OPS, *norm.OPS, *resize.OPS, *logic.OPS, *trig.OPS,
       *positional.OPS, *gather_scatter.OPS, *topk.OPS, *einsum.OPS, *sample.OPS,
       *attention.OPS, *fused.OPS, *quant.OPS)
