"""The mutation tier runs only when asked for by name: ``pytest -m mutation`` (as ``.ci/run``
does) or ``python -m tests.mutation``. Without a ``-m`` expression that names it, its tests are
deselected (reported as such), so the README's test command never starts it; the cheap check
that the catalogue still applies is not marked and always runs."""


def pytest_collection_modifyitems(config, items):
    if "mutation" in (config.getoption("markexpr", "") or ""):
        return
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("mutation") is not None else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
