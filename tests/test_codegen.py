"""The build step (ptxc.codegen.build: loop module + Target -> Artifact) and the runtime made of an
Artifact only (Engine.from_artifact); the packages each name one job (codegen, plan, driver);
``as_module`` lives in the frontend, so calibration does not import the compiler."""

import ast
import importlib.util
import pathlib

import numpy as np
import pytest

import ptxc
import ptxc.codegen.host
import ptxc.lower.loop_to_llvm
from ptxc.codegen import Artifact, build
from ptxc.compiler import run_stages
from ptxc.driver.engine import Engine
from ptxc.errors import CompileError
from ptxc.frontend.load import as_module
from ptxc.target import Target

ROOT = pathlib.Path(ptxc.__file__).parent


def repeated_convs():
    """Three 3x3 conv + relu layers of one shape (distinct weights): kernels that share code."""
    rng = np.random.default_rng(0)
    net = ptxc.Network("repeated")
    y = net.add_input("x", (1, 4, 8, 8))
    for _ in range(3):
        w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
        b = rng.standard_normal(4).astype(np.float32)
        y = net.add_activation(net.add_conv(y, w, b, padding=1), "relu")
    net.mark_output(y, "y")
    return net


X = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)


def test_cpu_build_is_an_artifact_the_runtime_runs_without_codegen(monkeypatch):
    timings = {}
    a = build(run_stages(as_module(repeated_convs()), "loop"), Target.host(), timings=timings)
    assert isinstance(a, Artifact) and a.kind == "cpu" and a.target == Target.host()
    assert a.object_code[:4] == b"\x7fELF" and a.ptx is None and a.triple and a.data_layout
    assert set(timings) == {"llvm", "memory_plan", "jit"}
    a.memory_plan.validate()
    assert len(a.kernel_keys) == len(a.table.kernels) > len(set(a.kernel_keys))  # shared code
    assert set(a.globals) == {s.name for s in a.table.slots if s.kind == "global"}

    def no(*args, **kw):
        raise AssertionError("the runtime generated code")
    for mod, name in ((ptxc.codegen.host, "compile_object"), (ptxc.codegen.host, "optimize"),
                      (ptxc.lower.loop_to_llvm, "lower_loop_to_llvm")):
        monkeypatch.setattr(mod, name, no)
    engine = Engine.from_artifact(a, threads=1, timings=timings)
    assert engine.artifact is a and engine.memory_plan is a.memory_plan
    assert engine.program.threads == 1 and engine.program.object_code == a.object_code
    monkeypatch.undo()
    want = ptxc.interpret(as_module(repeated_convs()), {"x": X})["y"]
    np.testing.assert_allclose(engine.run({"x": X})["y"], want, rtol=1e-4, atol=1e-4)
    assert engine.run({"x": X})["y"].tobytes() == \
        ptxc.compile(repeated_convs(), target="cpu").run({"x": X})["y"].tobytes()


def test_cuda_build_for_another_gpu_needs_none():
    target = Target.resolve("sm_80")
    m = run_stages(as_module(repeated_convs()), "loop", target="cuda", arch="sm_80")
    timings = {}
    a = build(m, target, timings=timings)
    assert a.kind == "cuda" and a.target == target and a.arch == "sm_80"
    assert ".target sm_80" in a.ptx and a.object_code is None
    assert set(timings) == {"ptx", "memory_plan"}
    assert len(a.kernel_keys) == len(a.table.kernels) > len(set(a.kernel_keys))
    assert a.kernel_keys == ptxc.codegen.lower_to_ptx(m, arch="sm_80").keys
    engine = Engine.from_artifact(a, cuda_graph=False)   # touches no GPU
    assert engine.target == "cuda" and engine.ptx == a.ptx and not engine.cuda_graph
    assert engine.memory_report()["arena_bytes"] == a.memory_plan.arena_bytes


def test_a_wgmma_build_says_it_is_for_sm_90a():
    """A program with a wgmma kernel is PTX for sm_90a (wgmma is sm_90a's alone): the
    Artifact's target must say so, and so must the engine and the plan made of it, or they
    describe code for an sm_90 that the PTX is not."""
    from support.contraction_ir import matmul_model
    from test_gpu_map_wgmma import mapped
    from ptxc.plan.format import decode_plan
    from ptxc.plan.save import plan_to_bytes
    target = Target.preset("sm_90")
    m, _, _ = mapped(matmul_model(M=64, K=64, N=64, trans_b=True))   # map-to-gpu{wgmma=on}
    a = build(m, target)
    assert any(k.schedule == "wgmma" for k in a.table.kernels)
    assert ".target sm_90a" in a.ptx
    assert a.arch == a.target.arch == "sm_90a" and a.target.sms == target.sms
    engine = Engine.from_artifact(a)
    assert engine.arch == "sm_90a"
    header, _ = decode_plan(plan_to_bytes(engine))
    assert header["arch"] == header["built_for"]["arch"] == "sm_90a"


def test_build_takes_a_target():
    m = run_stages(as_module(repeated_convs()), "loop")
    with pytest.raises(CompileError, match="ptxc.target.Target"):
        build(m, "cpu")
    other = Target(kind="cpu", arch="not-this-cpu")
    with pytest.raises(CompileError, match="for this host"):
        build(m, other)


def test_the_runtime_has_no_code_generation_or_plan_files():
    assert not hasattr(Engine, "for_cpu") and not hasattr(Engine, "for_cuda")
    for gone in ("plan", "plan_checks", "plan_format", "plan_inspect", "plan_object",
                 "plan_trust", "cache", "memory_plan"):
        assert importlib.util.find_spec(f"ptxc.driver.{gone}") is None, gone
    for here in ("ptxc.plan.format", "ptxc.plan.checks", "ptxc.plan.trust", "ptxc.plan.inspect",
                 "ptxc.plan.save", "ptxc.plan.load", "ptxc.plan.cache", "ptxc.plan.object_code",
                 "ptxc.codegen.memory_plan", "ptxc.codegen.builder"):
        assert importlib.util.find_spec(here) is not None, here


def _imports(path: pathlib.Path) -> set[str]:
    """The modules a source file imports (relative ones resolved), at any depth."""
    pkg = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = pkg.rsplit(".", node.level - 1)[0] if node.level else ""
            out.add(f"{base}.{node.module}" if node.level and node.module else
                    base if node.level else node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_calibration_and_the_plan_format_do_not_import_the_runtime_or_compiler():
    for path in (ROOT / "calib").glob("*.py"):
        assert "ptxc.compiler" not in _imports(path), path
    for name in ("format", "checks", "trust", "save", "object_code"):
        assert not any(m.startswith("ptxc.driver") for m in _imports(ROOT / "plan" /
                                                                         f"{name}.py")), name
    for path in (ROOT / "codegen").glob("*.py"):
        assert not any(m.startswith(("ptxc.driver", "ptxc.plan", "ptxc.compiler"))
                       for m in _imports(path)), path


def test_as_module_copies_a_module_and_explore_leaves_it_alone():
    m = as_module(repeated_convs())
    assert as_module(m) is not m
    before = ptxc.print_ir(m)
    ptxc.explore(m, stage="loop")
    assert ptxc.print_ir(m) == before
