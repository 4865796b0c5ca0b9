"""A plan records its target (``built_for``: the ptxc.target.Target its code was generated for)
and refuses, with a typed PlanError naming both, to load on a GPU of another arch; a GPU of the
plan's arch with another SM count runs it, and ``ptxc inspect`` says so. The device query is
patched (``device_arch``/``device_target`` of ptxc.plan.load and ptxc.plan.inspect), so this
holds without a GPU and on any GPU."""

import logging

import attrs
import pytest

import ptxc
from ptxc.errors import PlanError
from ptxc.plan import inspect as inspect_mod
from ptxc.plan import load as planmod
from ptxc.plan.format import FORMAT_VERSION
from ptxc.plan.inspect import inspect_plan
from ptxc.driver.load import engine_from_plan
from ptxc.plan.save import plan_to_bytes
from ptxc.target import Target
from support.small_nets import conv_relu_pool
from test_plan import edited, refused, small_cuda_engine, split

H200 = attrs.evolve(Target.preset("h200"), name="NVIDIA H200")
H100_PCIE = attrs.evolve(Target.preset("h100-pcie"), name="NVIDIA H100 PCIe")


def on_device(monkeypatch, target):
    """This process sees the GPU ``target`` (None: no GPU), for loading and inspecting."""
    monkeypatch.setattr(planmod, "device_arch", lambda: None if target is None else target.arch)
    monkeypatch.setattr(planmod, "device_target", lambda: target)
    monkeypatch.setattr(inspect_mod, "device_target", lambda: target)


def built_for(data: bytes, preset: str) -> bytes:
    """The plan ``data`` as if built for the GPU ``preset`` (of its arch): the record says
    which chip, whatever GPU this machine has (on a machine without one, the record is the
    arch's preset already)."""
    return edited(data, lambda h: h.update(built_for=Target.preset(preset).to_dict()))


@pytest.fixture(scope="module")
def sm80():
    engine = small_cuda_engine("sm_80")
    return engine, plan_to_bytes(engine)


@pytest.fixture(scope="module")
def a100_plan(sm80):
    return built_for(sm80[1], "a100")


@pytest.fixture(scope="module")
def sm90_plan():
    engine = small_cuda_engine("sm_90")
    return engine, built_for(plan_to_bytes(engine), "h100-sxm")


def test_the_header_records_the_target(sm80):
    engine, data = sm80
    header, _ = split(data)
    assert header["format_version"] == FORMAT_VERSION == 2
    assert header["built_for"] == engine.artifact.target.to_dict()
    assert engine.artifact.target == Target.resolve("sm_80")  # the a100 preset, without a GPU
    assert Target.from_dict(header["built_for"]).arch == header["arch"] == "sm_80"
    cpu = ptxc.compile(conv_relu_pool(), target="cpu")
    header, _ = split(plan_to_bytes(cpu))
    assert header["built_for"] == Target.host().to_dict() and header["built_for"]["kind"] == "cpu"


def test_the_loaded_engine_keeps_the_target(sm80, sm90_plan, monkeypatch):
    on_device(monkeypatch, None)
    engine, data = sm80
    loaded = engine_from_plan(data)
    assert loaded.artifact.target == engine.artifact.target
    assert plan_to_bytes(loaded) == data
    loaded = engine_from_plan(sm90_plan[1])
    assert loaded.artifact.target == Target.preset("h100-sxm")
    assert split(plan_to_bytes(loaded))[0] == split(sm90_plan[1])[0]


def test_a_plan_for_another_arch_is_refused_naming_both(a100_plan, monkeypatch):
    on_device(monkeypatch, H200)
    e = refused(a100_plan, "target", "sm_80", "a100", "108 SMs", "NVIDIA H200", "sm_90",
                "132 SMs")
    assert isinstance(e, PlanError)
    on_device(monkeypatch, Target.preset("a100"))
    assert engine_from_plan(a100_plan).arch == "sm_80"  # its own GPU
    on_device(monkeypatch, None)
    assert engine_from_plan(a100_plan).arch == "sm_80"  # no GPU: loads, its run says so


def test_another_sm_count_runs_and_inspect_notes_it(sm90_plan, tmp_path, monkeypatch, caplog):
    engine, data = sm90_plan
    path = tmp_path / "m.plan"
    path.write_bytes(data)
    on_device(monkeypatch, H100_PCIE)
    with caplog.at_level(logging.INFO, logger="ptxc.plan"):
        loaded = ptxc.load(path)
    assert loaded.arch == "sm_90" and loaded.artifact.target.sms == 132
    assert any("114 SMs" in r.getMessage() and "132" in r.getMessage() for r in caplog.records)
    text = inspect_plan(path)
    assert "built for: h100-sxm (sm_90, 132 SMs)" in text
    (note,) = [ln for ln in text.splitlines() if "note:" in ln]
    assert "NVIDIA H100 PCIe (sm_90, 114 SMs)" in note and "runs here" in note
    on_device(monkeypatch, attrs.evolve(Target.preset("h100-sxm"), name="NVIDIA H100"))
    assert "note:" not in inspect_plan(path)             # the chip it was built for
    on_device(monkeypatch, Target.preset("l4"))
    (note,) = [ln for ln in inspect_plan(path).splitlines() if "note:" in ln]
    assert "does not load here" in note and "sm_89" in note


def test_a_missing_or_mismatched_target_record_is_refused(sm90_plan, monkeypatch):
    _, data = sm90_plan
    on_device(monkeypatch, None)
    refused(edited(data, lambda h: h.pop("built_for")), "header", "built_for")
    refused(edited(data, lambda h: h.update(built_for={"kind": "tpu"})), "header", "built_for")
    refused(edited(data, lambda h: h["built_for"].update(arch="sm_80")), "header", "sm_80")
    refused(edited(data, lambda h: h["built_for"].update(kind="cpu")), "header", "built_for")
    refused(edited(data, lambda h: h["built_for"].update(features=["warp-drive"])), "header")
    cpu = plan_to_bytes(ptxc.compile(conv_relu_pool(), target="cpu"))
    refused(edited(cpu, lambda h: h.update(built_for=H200.to_dict())), "header", "built_for")
    refused(edited(cpu, lambda h: h.update(built_for=[1, 2])), "header", "built_for")
