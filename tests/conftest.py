import functools
import os
import sys

import pytest
from hypothesis import settings

sys.path.insert(0, os.path.dirname(__file__))

# the compile cache (ptxc.driver.cache) is off in the suite: tests that change the compiler
# (monkeypatched passes) must compile; tests of the cache turn it on with their own folder
os.environ.setdefault("PTXC_CACHE", "0")

# CI runs the property tests derandomized (the same examples every run, so a red CI is
# reproducible and never a coin toss); local runs explore new examples each time.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@functools.lru_cache(maxsize=None)
def gpu_unavailable_reason() -> str | None:
    """None when a CUDA GPU can run tests here, else why not.

    Asked once per process and only when a ``gpu`` test was collected, so collection never needs
    a GPU. Anything that goes wrong while asking (numba-cuda missing or broken, no driver, a
    driver that fails to initialize) means "no GPU": the tests are skipped with the cause rather
    than erroring on a machine that was never meant to run them."""
    try:
        from numba import cuda
    except Exception as e:  # noqa: BLE001  (any import failure means no usable GPU)
        return f"numba.cuda does not import ({type(e).__name__}: {e})"
    try:
        if not cuda.is_available():
            return "no CUDA GPU: numba.cuda.is_available() is False"
    except Exception as e:  # noqa: BLE001
        return f"numba.cuda.is_available() failed ({type(e).__name__}: {e})"
    return None


def pytest_collection_modifyitems(config, items):
    """Skip every test marked ``gpu`` when no GPU is usable, with the reason."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = gpu_unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {reason}")
    for item in gpu_items:
        item.add_marker(skip)
