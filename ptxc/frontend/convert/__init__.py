"""ONNX op converters: one function per ONNX op type, tagged with :func:`converter`; the table
of them is :func:`ptxc.frontend.convert.table.converters`."""

from .context import ConvertContext, converter  # noqa: F401
