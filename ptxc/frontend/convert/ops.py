"""Imports every converter module so that they register."""

from . import elementwise, activation, nn, linalg, shape, reduce  # noqa: F401
from . import norm, resize  # noqa: F401
from . import quant  # noqa: F401
