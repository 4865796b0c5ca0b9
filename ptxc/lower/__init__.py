"""Lowerings between dialects: graph to tensor, bufferization and tensor to loop, loop to LLVM IR
(docs/lowering.md).

:func:`lowering_passes` is this package's pass table (the root package installs it in the pass
registry with the graph passes; importing this package imports no lowering):
``lower-graph-to-tensor`` (graph_to_tensor/), ``generalize-named-ops`` and
``fuse-tensor-elementwise`` (tensor_passes.py), ``sink-collapse-reshapes`` (sink_reshapes.py),
``lower-tensor-to-loop`` (tensor_to_loop/), ``map-to-gpu`` (gpu_map/), ``cpu-schedule``
(cpu_schedule.py).
"""

from __future__ import annotations


def lowering_passes() -> dict[str, type]:
    """Every lowering pass class, by name."""
    from . import (cpu_schedule, graph_to_tensor, gpu_map, sink_reshapes, tensor_passes,
                   tensor_to_loop)
    passes = (graph_to_tensor.LowerGraphToTensor, tensor_passes.GeneralizeNamedOps,
              tensor_passes.FuseTensorElementwise, sink_reshapes.SinkCollapseReshapes,
              tensor_to_loop.LowerTensorToLoop, gpu_map.MapToGpu, cpu_schedule.CpuSchedule)
    return {p.name: p for p in passes}
