"""A graph-dialect module from whatever names a model: a path, bytes, an ``onnx.ModelProto``, a
:class:`~ptxc.frontend.network.Network` or a module.

    module = as_module("model.onnx", input_shapes={"x": (8, 3, 224, 224)})
    module = as_module(net)            # Network.to_module()
    module = as_module(module)         # a copy: the passes that follow change it in place

The one entry point every consumer of a model shares (compile, explore, calibration, the tools),
so it lives with the importers and needs nothing of the compiler.
"""

from __future__ import annotations

from ..ir.core import Operation

__all__ = ["as_module"]


def as_module(model, input_shapes=None, constant_inputs=None) -> Operation:
    """A graph-dialect module from a path, bytes, ModelProto, Network or module (copied)."""
    if isinstance(model, Operation):
        return model.clone()
    from .network import Network
    if isinstance(model, Network):
        return model.to_module()
    from .onnx_import import import_onnx
    return import_onnx(model, input_shapes=input_shapes, constant_inputs=constant_inputs)
