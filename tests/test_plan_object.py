"""CPU plans carry the host's object code: loading runs no LLVM optimization or code generation,
gives the same bits, and a plan from a host with other CPU features is refused (PlanError,
cause "target")."""

import numpy as np
import pytest

import ptxc
import ptxc.codegen.host as host_mod
import ptxc.plan.load as plan_mod
from ptxc.errors import PlanError

from support.small_nets import conv_relu_pool


def _engine_and_plan(tmp_path):
    engine = ptxc.compile(conv_relu_pool(), target="cpu")
    path = tmp_path / "s.plan"
    engine.save(path)
    return engine, path


def test_plan_loads_object_code_without_llvm_codegen(tmp_path, monkeypatch):
    engine, path = _engine_and_plan(tmp_path)
    assert engine.program.object_code[:4] == b"\x7fELF"

    def no(*a, **k):
        raise AssertionError("LLVM optimization ran while loading a plan with object code")
    monkeypatch.setattr(host_mod, "optimize", no)
    loaded = ptxc.load(path)
    assert loaded.program.object_code == engine.program.object_code
    assert loaded.program.optimized_text is None
    x = np.random.default_rng(1).standard_normal((1, 3, 10, 10)).astype(np.float32)
    np.testing.assert_array_equal(loaded.run({"x": x})["y"], engine.run({"x": x})["y"])


def test_plan_from_a_host_with_other_cpu_features_is_refused(tmp_path, monkeypatch):
    _, path = _engine_and_plan(tmp_path)
    real = plan_mod.host_cpu_features()
    monkeypatch.setattr(plan_mod, "host_cpu_features", lambda: real.replace("+", "-", 1))
    with pytest.raises(PlanError) as e:
        ptxc.load(path)
    assert e.value.cause == "target" and "features differ" in str(e.value)
    assert str(path) in str(e.value)
