import functools
import os
import sys

import pytest
from hypothesis import settings

sys.path.insert(0, os.path.dirname(__file__))

# the compile cache (ptxc.plan.cache) is off in the suite: tests that change the compiler
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


def _light_model_weight(item) -> int:
    """The size in bytes of the light model a slow test is parametrized with (0 for any other
    test): a proxy for its node count, hence for how long the test compiles (the models whose
    random weights are large, vgg19, zfnet512 and bvlc_alexnet, are small files but still come
    before every test that is not a light model's)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or item.get_closest_marker("slow") is None:
        return 0
    from support import light_models as lm
    sizes = [os.path.getsize(lm.path(v)) for v in callspec.params.values()
             if isinstance(v, str) and v in lm.NAMES]
    return max(sizes, default=0)


def heaviest_first(items) -> None:
    """Put the slow tests of the light models first, the largest model first; every other test
    keeps its place after them (the sort is stable).

    Why: the slow tier runs on two xdist workers, and its longest tests (a whole model compiled
    for cpu or cuda) came last in collection order: the last of them ran on one worker while the
    other sat idle. Started first and handed out one at a time (``.ci/run``: ``--maxschedchunk
    1``), they spread over both workers, and the short tests fill the gaps at the end
    (longest-processing-time-first scheduling)."""
    weights = {id(item): _light_model_weight(item) for item in items}
    items.sort(key=lambda item: -weights[id(item)])


def pytest_collection_modifyitems(config, items):
    """Order the heaviest tests first (:func:`heaviest_first`); skip every test marked ``gpu``
    when no GPU is usable, with the reason."""
    heaviest_first(items)
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = gpu_unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {reason}")
    for item in gpu_items:
        item.add_marker(skip)
