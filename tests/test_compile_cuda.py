"""The cuda target end to end on a machine without a GPU, and the runtime's contracts on one.

Without a GPU (CI): ``ptxc.compile(target="cuda")`` builds an Engine (PTX, kernels with launch
shapes, a memory plan, device bytes), saves and loads it, explores its stages, and running it
is a DeviceError saying there is no GPU, not a crash. ``numba.cuda.is_available`` is patched to
False where a test needs "no GPU", so they hold on a GPU machine too.

With a GPU (marker ``gpu``): numbers against numpy, the CUDA graph against direct launches,
``run_device`` (device arrays in and out), a saved plan, an out-of-memory engine followed by a
small one, and a PTX for a newer arch refused at the first run. The model suite on the GPU is
tests/gpu/.
"""

import numpy as np
import pytest

import ptxc
from ptxc.driver.cuda import CudaProgram, arch_compatible, arch_number
from ptxc.plan.inspect import inspect_plan
from ptxc.errors import BindingError, CompileError, DeviceError, OutOfMemoryError

RNG = np.random.default_rng(0)
W = RNG.standard_normal((16, 8)).astype(np.float32)
B = RNG.standard_normal(16).astype(np.float32)


def small_net():
    """fully connected (weights), relu, softmax (scratch buffers between its kernels)."""
    net = ptxc.Network("small")
    x = net.add_input("x", (4, 8))
    y = net.add_activation(net.add_fully_connected(x, W, B), "relu")
    net.mark_output(net.add_softmax(y), "y")
    return net


def reference(x):
    z = np.maximum(x.astype(np.float64) @ W.T.astype(np.float64) + B, 0)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture(scope="module")
def engine():
    return ptxc.compile(small_net(), target="cuda", arch="sm_90")


@pytest.fixture
def no_gpu(monkeypatch):
    from numba import cuda
    monkeypatch.setattr(cuda, "is_available", lambda: False)


# ---- compiling without a GPU ---------------------------------------------------------------------

def test_compile_builds_an_engine_without_a_gpu(engine):
    assert engine.target == "cuda" and engine.arch == "sm_90"
    assert list(engine.inputs) == ["x"] and list(engine.outputs) == ["y"]
    assert ".target sm_90" in engine.ptx and ".entry kernel_0" in engine.ptx
    assert "ptx" in engine.timings and "memory_plan" in engine.timings
    kernels = engine.kernels.kernels
    assert len(kernels) >= 2
    for k in kernels:
        assert len(k.grid) == 3 and len(k.block) == 3 and min(k.grid + k.block) >= 1
        assert np.prod(k.block) <= 1024 and k.schedule and k.shared_bytes >= 0
        assert f".entry {k.name}(" in engine.ptx
    assert not engine.program.ready  # nothing touched a GPU


def test_memory_report(engine):
    m = engine.memory_report()
    assert m["lower_bound_bytes"] <= m["arena_bytes"] <= m["no_reuse_bytes"]
    assert m["buffers"] == sum(s.kind == "alloc" for s in engine.kernels.slots) > 0
    # the weights (16x8 and 16 floats) packed at 256-byte offsets; x and y one buffer each
    assert m["weights_bytes"] == 768
    assert m["bindings_bytes"] == 256 + 256
    assert m["device_bytes"] == max(m["arena_bytes"], 256) + 768 + 512


def test_run_without_a_gpu_is_a_device_error(engine, no_gpu):
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    with pytest.raises(DeviceError, match="no CUDA GPU"):
        engine.run({"x": x})
    with pytest.raises(DeviceError, match="no CUDA GPU"):
        engine.run_device({"x": x})
    assert not engine.program.ready
    # bindings are checked before the device is asked for
    with pytest.raises(BindingError, match="shape"):
        engine.run({"x": x[:2]})


def test_switches_and_target_checks(engine):
    assert engine.cuda_graph is True
    engine.cuda_graph = False
    assert engine.program.cuda_graph is False
    engine.cuda_graph = True
    cpu = ptxc.compile(small_net(), target="cpu")
    assert cpu.ptx is None and cpu.arch is None and cpu.cuda_graph is False
    with pytest.raises(DeviceError, match="cuda engines"):
        cpu.cuda_graph = True
    with pytest.raises(DeviceError, match="run_device runs cuda engines"):
        cpu.run_device({})
    assert ptxc.compile(small_net(), target="cuda", cuda_graph=False).cuda_graph is False
    with pytest.raises(CompileError, match="arch='sm_90' is for target 'cuda'"):
        ptxc.compile(small_net(), target="cpu", arch="sm_90")
    with pytest.raises(CompileError, match="threads= is for target 'cpu'"):
        ptxc.compile(small_net(), target="cuda", threads=2)
    with pytest.raises(CompileError, match="not a CUDA arch"):
        ptxc.compile(small_net(), target="cuda", arch="gfx90a")


def test_auto_target_is_cuda_with_a_gpu_and_cpu_without(monkeypatch):
    import ptxc.target as target_mod
    from ptxc.compiler import resolve_target
    monkeypatch.setattr(target_mod, "device_arch", lambda: None)
    assert resolve_target("auto") == "cpu"
    assert ptxc.compile(small_net()).target == "cpu"
    monkeypatch.setattr(target_mod, "device_arch", lambda: "sm_90")
    assert resolve_target("auto") == "cuda"
    assert ptxc.compile(small_net()).target == "cuda"   # compiles; no GPU touched until run
    with pytest.raises(CompileError, match="unknown target 'tpu'"):
        resolve_target("tpu")


def test_compile_arch_follows_the_environment(monkeypatch):
    monkeypatch.setenv("PTXC_CUDA_ARCH", "sm_80")
    e = ptxc.compile(small_net(), target="cuda")
    assert e.arch == "sm_80" and ".target sm_80" in e.ptx


def test_cuda_program_checks_its_table_and_plan(engine):
    import attrs
    p = engine.program
    k0 = p.table.kernels[0]
    for bad in (attrs.evolve(k0, grid=None), attrs.evolve(k0, block=(2048, 1, 1)),
                attrs.evolve(k0, block=(0, 1, 1))):
        table = attrs.evolve(p.table, kernels=(bad,) + p.table.kernels[1:])
        prog = attrs.evolve(p.ptx_program, table=table)
        with pytest.raises(CompileError, match="kernel_0"):
            CudaProgram(prog, p.plan)
    from ptxc.codegen.memory_plan import plan_memory
    with pytest.raises(CompileError, match="memory plan"):
        CudaProgram(p.ptx_program, plan_memory([("other", 64, 0, 0)]))


def test_arch_compatibility():
    assert arch_number("sm_90a") == (90, "a") and arch_number("sm_80") == (80, "")
    with pytest.raises(CompileError):
        arch_number("compute_90")
    assert arch_compatible("sm_80", "sm_90")       # PTX is forward compatible
    assert not arch_compatible("sm_100", "sm_90")  # not backward
    assert arch_compatible("sm_90a", "sm_90") and not arch_compatible("sm_90a", "sm_100")
    assert not arch_compatible("sm_80", "sm_90", exact=True)
    assert arch_compatible("sm_90a", "sm_90", exact=True)   # the device's own arch
    assert not arch_compatible("sm_80a", "sm_90", exact=True)


# ---- plans ---------------------------------------------------------------------------------------

def test_save_load_round_trip(engine, tmp_path, no_gpu):
    path = tmp_path / "small.plan"
    engine.save(path)
    loaded = ptxc.load(path)
    assert loaded.target == "cuda" and loaded.arch == "sm_90"
    assert loaded.ptx == engine.ptx and loaded.kernels == engine.kernels
    assert loaded.memory_plan.to_json() == engine.memory_plan.to_json()
    assert loaded.memory_report() == engine.memory_report()
    assert loaded.program.exact_arch and loaded.cuda_graph
    with pytest.raises(DeviceError, match="no CUDA GPU"):
        loaded.run({"x": np.zeros((4, 8), np.float32)})
    text = inspect_plan(path)
    assert "target: cuda (sm_90)" in text and "blobs ptx: 1" in text
    k = engine.kernels.kernels[0]
    assert f"grid {'x'.join(map(str, k.grid))}  block {'x'.join(map(str, k.block))}" in text
    assert f"schedule {k.schedule}" in text


# ---- explore (the CLI: tests/test_cli.py) ------------------------------------------------------

def test_explore_cuda_stages():
    loop = ptxc.explore(small_net(), stage="loop", target="cuda")
    assert '"gpu.launch"' in loop and "gpu.thread_id" in loop
    assert '"loop.parallel"' not in ptxc.explore(small_net(), stage="loop", target="cuda")
    assert '"gpu.launch"' not in ptxc.explore(small_net(), stage="loop")  # cpu
    llvm = ptxc.explore(small_net(), stage="llvm", target="cuda")
    assert "ptx_kernel" in llvm and "ptx_kernel" not in ptxc.explore(small_net(), stage="llvm")
    ptx = ptxc.explore(small_net(), stage="ptx", arch="sm_80")
    assert ".target sm_80" in ptx and ".entry kernel_0" in ptx
    with pytest.raises(CompileError, match="stage 'ptx' is the cuda target's"):
        ptxc.explore(small_net(), stage="ptx", target="cpu")
    with pytest.raises(CompileError, match="arch='sm_90' chooses the PTX"):
        ptxc.explore(small_net(), stage="loop", target="cuda", arch="sm_90")
    with pytest.raises(CompileError, match="unknown target"):
        ptxc.explore(small_net(), stage="loop", target="tpu")


# ---- on the GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_run_graph_and_direct_match_numpy(engine):
    e = ptxc.compile(small_net(), target="cuda")  # for this GPU's arch
    for _ in range(2):
        x = RNG.standard_normal((4, 8)).astype(np.float32)
        want = reference(x)
        e.cuda_graph = True
        got = e.run({"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        e.cuda_graph = False
        assert e.run({"x": x})["y"].tobytes() == got.tobytes()
    assert e.program.ready and len(e.program._contexts.contexts[0]._state.graphs) > 0


@pytest.mark.gpu
def test_gpu_run_device():
    from numba import cuda
    e = ptxc.compile(small_net(), target="cuda")
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    out = e.run_device({"x": cuda.to_device(x)})
    assert isinstance(out["y"], cuda.devicearray.DeviceNDArray) and out["y"].shape == (4, 16)
    np.testing.assert_allclose(out["y"].copy_to_host(), reference(x), rtol=1e-5, atol=1e-6)
    again = e.run_device({"x": cuda.to_device(x)})["y"]
    assert again.device_ctypes_pointer.value != out["y"].device_ctypes_pointer.value  # fresh
    with pytest.raises(BindingError, match="float32\\[2, 8\\]"):
        e.run_device({"x": cuda.to_device(x[:2])})
    with pytest.raises(BindingError, match="not a device array"):
        e.run_device({"x": x})
    with pytest.raises(BindingError, match="missing inputs"):
        e.run_device({})


@pytest.mark.gpu
def test_gpu_saved_plan_runs_and_sync_each(tmp_path):
    e = ptxc.compile(small_net(), target="cuda")
    e.save(tmp_path / "m.plan")
    loaded = ptxc.load(tmp_path / "m.plan")
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    assert loaded.run({"x": x})["y"].tobytes() == e.run({"x": x})["y"].tobytes()
    p = e.program
    one_by_one = CudaProgram(p.ptx_program, p.plan, sync_each=True)
    assert one_by_one({"x": x})["y"].tobytes() == e.run({"x": x})["y"].tobytes()


@pytest.mark.gpu
def test_gpu_out_of_memory_then_a_small_engine():
    import attrs
    from numba import cuda
    e = ptxc.compile(small_net(), target="cuda")
    free, total = cuda.current_context().get_memory_info()
    p = e.program
    huge = CudaProgram(p.ptx_program, attrs.evolve(p.plan, arena_bytes=2 * total))
    with pytest.raises(OutOfMemoryError, match="requested [0-9,]+ bytes, [0-9,]+ bytes free"):
        huge({"x": np.zeros((4, 8), np.float32)})
    assert not huge.ready
    after, _ = cuda.current_context().get_memory_info()
    assert after >= free - (64 << 20)  # nothing of it stays allocated
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(e.run({"x": x})["y"], reference(x), rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_gpu_newer_arch_is_refused_at_the_first_run():
    from ptxc.target import device_arch
    have = arch_number(device_arch())[0]
    e = ptxc.compile(small_net(), target="cuda", arch=f"sm_{have + 10}")
    with pytest.raises(DeviceError, match=f"PTX is for sm_{have + 10}"):
        e.run({"x": np.zeros((4, 8), np.float32)})
