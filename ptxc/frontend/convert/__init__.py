"""ONNX op converters: one function per ONNX op type, registered with :func:`converter`."""

from .context import ConvertContext, converter, converters  # noqa: F401
