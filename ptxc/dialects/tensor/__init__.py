"""The tensor dialect: structured ops on immutable tensors, destination-passing style
(docs/lowering.md is the design of record).

* data.py: ``tensor.constant``, ``empty``, ``fill``, ``extract_slice``, ``insert_slice``,
  ``reshape``, ``pad``;
* generic.py: ``tensor.generic`` (indexing maps + scalar body), ``yield``, ``index``, ``extract``,
  and :func:`build_generic`;
* named.py: ``tensor.matmul``, ``conv``, ``pool``, ``reduce``;
* generalize.py: :func:`generalize`, a named op as the equivalent generic;
* maps.py: indexing maps and the numpy gather/scatter the references use.

Every op has vectorized numpy reference semantics, so a module at the tensor stage runs in the
interpreter like a graph-stage one.

Where docs/lowering.md is silent, ptxc decides (each op's docstring says why):

* ``tensor.empty``'s reference holds NaN (floats), the lowest integer, or true: reading an
  element nobody wrote shows up in check-numerics;
* ``tensor.matmul`` has ``transpose_a`` / ``transpose_b`` (Gemm's transA/transB read in place);
* named ops may accumulate f16 ins into an f32 out (sums of f16 data are taken in f32 and
  rounded once, as the graph references do);
* ``tensor.insert_slice`` carries ``in_place`` (from an in-place ``graph.concat``): the
  bufferizer makes the source's producer write into the destination's view;
* slices keep their rank and may have negative strides; ``tensor.pad`` pads by non-negative
  amounts only (crops are ``extract_slice``), with a scalar ``value`` operand or attribute;
* ``tensor.conv`` / ``tensor.pool`` outputs follow the floor formula, so the input may extend
  less than a stride past the last window;
* ``tensor.generic``'s out maps read every parallel loop dim (of extent > 1) and no reduction
  dim, and every map stays inside its operand: the verifier checks both;
* ``tensor.extract`` may also stand outside a body (a run-time scalar, e.g. a pad value).
"""

from . import data, generic, named
from .generalize import NAMED_OPS, generalize  # noqa: F401
from .generic import build_generic  # noqa: F401

#: the tensor dialect's op declarations, module by module (ptxc.dialects.all_ops lists them)
OPS = (*data.OPS, *generic.OPS, *named.OPS)
