"""Wiring of the ONNX backend test suite (onnx.backend.test.BackendTest) to ptxc.

Scope: every test of the kinds node, simple, pytorch-converted and pytorch-operator whose ops are
all in ptxc.SUPPORTED_OPS (default domain). Out-of-scope tests are skipped by BackendTest's include
filter. In-scope tests that cannot pass are listed in ``onnx_backend_xfail.txt`` with one reason
each; they run as expected failures, so one that starts passing fails the suite until its entry
is removed.
"""

from __future__ import annotations


import os
import re
import warnings

import onnx

import ptxc

KINDS = ("node", "simple", "pytorch-converted", "pytorch-operator")
XFAIL_FILE = os.path.join(os.path.dirname(__file__), "onnx_backend_xfail.txt")


def _op_types(model: onnx.ModelProto) -> set[tuple[str, str]]:
    return {(n.domain, n.op_type) for n in model.graph.node}


def in_scope(model: onnx.ModelProto) -> bool:
    ops = set(ptxc.SUPPORTED_OPS)
    return all(d in ("", "ai.onnx") and t in ops for d, t in _op_types(model))


def cases():
    """(kind, name, in_scope) for every test case of the covered kinds."""
    from onnx.backend.test.loader import load_model_tests
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kind in KINDS:
            for case in load_model_tests(kind=kind):
                model = case.model
                if model is None:
                    path = os.path.join(case.model_dir, "model.onnx")
                    model = onnx.load(path)
                out.append((kind, case.name, in_scope(model)))
    return out


def read_xfails(path: str = XFAIL_FILE) -> dict[str, str]:
    """Test name (without the device suffix) -> reason."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition("#")
            if not reason.strip():
                raise ValueError(f"{path}: entry {name.strip()!r} has no reason")
            out[name.strip()] = reason.strip()
    return out


def make_backend_test(backend, module_name: str, extra_xfail_file: str | None = None,
                      device: str = "cpu"):
    """A configured BackendTest whose generated test classes go into ``module_name``, the tests
    of one ``device`` ("cpu" or "cuda": the suffix BackendTest gives each test).
    ``extra_xfail_file`` lists what fails on this backend only (beside the common list)."""
    import onnx.backend.test
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bt = onnx.backend.test.BackendTest(backend, module_name)
    names = [name for _, name, ok in cases() if ok]
    bt.include("^(" + "|".join(re.escape(n) for n in names) + f")_{device}$")
    xfails = read_xfails()
    if extra_xfail_file:
        xfails.update(read_xfails(os.path.join(os.path.dirname(__file__), extra_xfail_file)))
    for name in xfails:
        bt.xfail("^" + re.escape(name) + f"_{device}$")
    return bt


def count_scope() -> dict[str, int]:
    all_cases = cases()
    return {"total": len(all_cases), "in_scope": sum(ok for *_, ok in all_cases),
            "xfail": len(read_xfails())}



