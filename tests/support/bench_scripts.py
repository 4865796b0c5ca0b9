"""A script of bench/ as a module, for tests that check what it computes (bench/ is no package:
its scripts run as ``python3 bench/NAME.py``). Example: ``load("digits_int8").load_split()``."""

import importlib.util
import os

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")


def load(name: str):
    """bench/``name``.py, imported under the module name ``name``."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(BENCH, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
