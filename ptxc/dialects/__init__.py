"""The dialects; importing this package registers every op."""

from . import func, graph  # noqa: F401
