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
"""

from . import data, generic, named  # noqa: F401
from .generalize import NAMED_OPS, generalize  # noqa: F401
from .generic import build_generic  # noqa: F401
