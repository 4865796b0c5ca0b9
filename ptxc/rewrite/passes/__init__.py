"""The passes: one module per pass. Importing this package imports every module in it, which
registers their passes (and canonicalization patterns), so a new pass is a new file here."""

import importlib
import pkgutil

for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")
