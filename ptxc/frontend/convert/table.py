"""Imports every converter module so that they register."""

from . import elementwise, activation, nn, linalg, shape, reduce  # noqa: F401
from . import quant  # noqa: F401
from . import norm, resize, logic, positional, gather_scatter, composite, attention  # noqa: F401
from . import data_dependent, elementwise_composite  # noqa: F401
from . import functions, small_composites  # noqa: F401
from . import sample  # noqa: F401
