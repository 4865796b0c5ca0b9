"""The dialects; importing this package registers every op."""

from . import func, arith, math, graph, tensor, loop, gpu, gpu_tensorcore, gpu_wgmma  # noqa: F401
