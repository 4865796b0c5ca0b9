"""Every typed error ptxc raises is part of its public API: each subclass of ``ptxc.PtxcError``
defined anywhere in ptxc is defined in ptxc/errors.py (one hierarchy, one place to read it) and
exported from ``ptxc`` (and listed in ``ptxc.__all__``), so a user can catch it by its name."""

import importlib
import pkgutil

import ptxc
from ptxc.errors import PtxcError


def _import_every_module() -> list[str]:
    failed = []
    for info in pkgutil.walk_packages(ptxc.__path__, "ptxc."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as e:      # an optional dependency missing here
            failed.append(f"{info.name}: {e}")
    return failed


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_every_ptxc_error_is_exported():
    _import_every_module()
    errors = {c for c in _subclasses(PtxcError) if c.__module__.startswith("ptxc")}
    assert {"RunError", "IndexOutOfRangeError", "PrecisionError"} <= {c.__name__ for c in errors}
    for cls in sorted(errors, key=lambda c: c.__name__):
        assert cls.__module__ == "ptxc.errors", f"{cls.__name__} is defined in {cls.__module__}"
        assert getattr(ptxc, cls.__name__, None) is cls, f"ptxc.{cls.__name__} is missing"
        assert cls.__name__ in ptxc.__all__, f"{cls.__name__} is not in ptxc.__all__"
    assert "PtxcError" in ptxc.__all__ and ptxc.PtxcError is PtxcError


def test_run_time_errors_are_catchable_by_their_public_names():
    assert issubclass(ptxc.IndexOutOfRangeError, ptxc.RunError)
    assert issubclass(ptxc.IndexOutOfRangeError, IndexError)
    assert issubclass(ptxc.PrecisionError, ptxc.CompileError)
