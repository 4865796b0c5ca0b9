"""Lowerings between dialects: graph to tensor, bufferization and tensor to loop, loop to LLVM IR
(docs/lowering.md).

Importing this package registers the lowering passes (the pass registry imports it with the
builtin passes): ``lower-graph-to-tensor`` (graph_to_tensor/), ``generalize-named-ops`` and
``fuse-tensor-elementwise`` (tensor_passes.py), ``lower-tensor-to-loop`` (tensor_to_loop/),
``map-to-gpu`` (gpu_map/).
"""

from . import graph_to_tensor, tensor_passes, sink_reshapes, tensor_to_loop, gpu_map  # noqa: F401
