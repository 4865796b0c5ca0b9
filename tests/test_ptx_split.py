"""ptxc.ptx.split and ptxc.ptx.jobs: one module per kernel, identical kernels compiled once,
the PTX joined, compiled in several processes or in one with the same result."""

import os
import re

import numpy as np
import pytest

import ptxc
from ptxc.dialects.loop import run_main
from ptxc.lower.loop_to_llvm import lower_loop_to_llvm
from ptxc.ptx import jobs, ptxas_path
from ptxc.codegen import lower_to_ptx
from ptxc.ptx.split import PLACEHOLDER, join_ptx, kernel_modules, key
from test_ptx import check_mapped_ptx, mapped

needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas not found")
RNG = np.random.default_rng(0)
W1, W2 = (RNG.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2 for _ in range(2))
B1, B2 = (RNG.standard_normal(8).astype(np.float32) for _ in range(2))


def twin_convs():
    """x 1x8x12x12 -> conv 3x3 pad 1 + relu -> conv 3x3 pad 1 + relu: two launches of the same
    code (same shapes; the weights are arguments)."""
    net = ptxc.Network("twins")
    x = net.add_input("x", (1, 8, 12, 12))
    y = net.add_activation(net.add_conv(x, W1, B1, padding=1), "relu")
    y = net.add_activation(net.add_conv(y, W2, B2, padding=1), "relu")
    net.mark_output(y, "y")
    return net


def conv_relu_reference(x, w, b):
    """numpy: 3x3 convolution, padding 1, stride 1, then relu."""
    n, c, h, wd = x.shape
    p = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd), np.float64)
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,kc->nkhw", p[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    return np.maximum(out + b[None, :, None, None], 0)


def _entries(ptx: str) -> dict:
    """kernel name -> its PTX text with its own name and branch-label numbers neutral."""
    body = ptx.split("\n// ptxc footprint")[0]
    out = {}
    for c in re.split(r"(?=^\.visible \.entry )", body, flags=re.M)[1:]:
        name = re.match(r"\.visible \.entry (\w+)\(", c).group(1)
        c = re.sub(r"^\s*// (\.globl.*|.* has been demoted)$", "", c, flags=re.M)
        out[name] = re.sub(r"\$L__BB\d+_", "$L__BB_", c.replace(name, "K")).strip()
    return out


@needs_ptxas
@pytest.mark.slow
def test_identical_launches_share_one_module_and_compute_right():
    m = mapped(twin_convs())
    x = RNG.standard_normal((1, 8, 12, 12)).astype(np.float32)
    want = conv_relu_reference(conv_relu_reference(x, W1, B1), W2, B2)
    # the mapped program (both launches) computes the convolutions, in the interpreter
    np.testing.assert_allclose(run_main(m, {"x": x})["y"], want, rtol=1e-4, atol=1e-4)
    llvm = lower_loop_to_llvm(m, target="nvptx")
    texts = kernel_modules(llvm.module, llvm.table.kernels, llvm.twins)
    keys = [key(t) for t in texts]
    assert len(set(keys)) < len(keys), "no two launches share a module"
    shared = [[k.name for k, kk in zip(llvm.table.kernels, keys) if kk == u]
              for u in dict.fromkeys(keys)]
    twins = [names for names in shared if len(names) > 1]
    timings: dict = {}
    p, rep = check_mapped_ptx(m)  # one entry per launch, in order, the table's shapes; ptxas
    p2 = lower_to_ptx(m, arch=p.arch, timings=timings)
    assert p2.ptx == p.ptx and timings["modules"] == len(set(keys))
    entries = _entries(p.ptx)
    for names in twins:  # each launch has its own entry, with the same code
        assert len({entries[n] for n in names}) == 1, names
        assert len({(rep.kernels[n].registers, rep.kernels[n].shared_bytes) for n in names}) == 1
    assert PLACEHOLDER not in p.ptx and p.ptx.count(".version") == 1
    # the same program on the CPU target computes it too
    e = ptxc.compile(twin_convs(), target="cpu", cache=False)
    np.testing.assert_allclose(e.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


def test_kernel_modules_are_standalone_and_name_free():
    """Each kernel's module parses alone, holds only its own kernel, under the placeholder."""
    import llvmlite.binding as llvm
    m = mapped(twin_convs())
    prog = lower_loop_to_llvm(m, target="nvptx")
    for k, text in zip(prog.table.kernels, kernel_modules(prog.module, prog.table.kernels, prog.twins)):
        assert f'"{k.name}' not in text and "kernel_" not in text
        mod = llvm.parse_assembly(text)
        mod.verify()
        defined = [f.name for f in mod.functions if not f.is_declaration]
        assert defined == [PLACEHOLDER]
        assert f'!"maxntidx", i32 {k.block[0]}' in text and "nvvm-reflect-ftz" in text


def test_join_ptx_keeps_one_header_and_one_extern():
    head = "//\n.version 8.0\n.target sm_90\n.address_size 64\n"
    ext = ".extern .shared .align 16 .b8 ptxc_dynamic_shared[];\n"
    a = head + ext + f"\n.visible .entry {PLACEHOLDER}(\n.param .u64 {PLACEHOLDER}_param_0)\n{{}}\n"
    b = head + f"\n.visible .entry {PLACEHOLDER}()\n{{}}\n"
    out = join_ptx([("kernel_0", a), ("kernel_1", b), ("kernel_2", a)])
    assert out.count(".version") == 1 and out.count(".extern") == 1
    assert out.index(".extern") < out.index(".entry")
    assert re.findall(r"\.entry (\w+)", out) == ["kernel_0", "kernel_1", "kernel_2"]
    assert "kernel_2_param_0" in out and PLACEHOLDER not in out
    with pytest.raises(ValueError, match="kernel_9"):
        join_ptx([("kernel_9", "no header")])


def test_compile_jobs_setting(monkeypatch):
    monkeypatch.setenv("PTXC_COMPILE_JOBS", "3")
    assert jobs.default_jobs() == 3
    for bad in ("0", "many"):
        monkeypatch.setenv("PTXC_COMPILE_JOBS", bad)
        with pytest.raises(ptxc.CompileError, match="PTXC_COMPILE_JOBS"):
            jobs.default_jobs()
    monkeypatch.delenv("PTXC_COMPILE_JOBS")
    assert jobs.default_jobs() >= 1


@needs_ptxas
@pytest.mark.slow
def test_parallel_compile_gives_the_same_ptx(monkeypatch):
    """The process pool (forced on a small program) gives the PTX of the in-process compile."""
    m = mapped(twin_convs())
    serial = lower_to_ptx(m, arch="sm_90", jobs=1).ptx
    monkeypatch.setattr(jobs, "MIN_PARALLEL_BYTES", 0)
    calls = []
    real = jobs.run_pool
    monkeypatch.setattr(jobs, "run_pool", lambda *a: calls.append(a) or real(*a))
    parallel = lower_to_ptx(m, arch="sm_90", jobs=2).ptx
    assert calls and parallel == serial


# ---- emission: twins emitted once (ptxc.lower.kernel_key) -------------------------------------

def test_twin_kernels_print_as_if_each_was_emitted(monkeypatch):
    """The module text with twins copied equals the text of emitting every kernel."""
    from ptxc.lower import loop_to_llvm
    m = mapped(twin_convs())
    deduped = lower_loop_to_llvm(m, target="nvptx")
    assert deduped.twins and all(int(t[7:]) > int(f[7:]) for t, f in deduped.twins.items())
    monkeypatch.setattr(loop_to_llvm, "launch_key", lambda *a: object())
    each = lower_loop_to_llvm(m, target="nvptx")
    assert not each.twins and each.text == deduped.text and each.table == deduped.table


def test_launch_key_tells_apart_what_the_code_depends_on():
    from ptxc.lower.kernel_key import _freeze
    assert _freeze(0.0) != _freeze(-0.0) and _freeze(1) != _freeze(True)
    assert _freeze(1.5) == _freeze(1.5) and _freeze((1, 2)) == _freeze((1, 2))
    assert _freeze(np.float32(1)) != _freeze(1.0)
    assert _freeze(object()) != _freeze(object())  # unknown values never match
    # launches over other shapes (a strided conv beside a plain one) are no twins
    net = ptxc.Network("consts")
    x = net.add_input("x", (1, 8, 12, 12))
    a = net.add_activation(net.add_conv(x, W1, B1, padding=1), "relu")
    b = net.add_activation(net.add_conv(x, W1, B1 + 1, padding=1, stride=2), "relu")
    net.mark_output(a, "a")
    net.mark_output(b, "b")
    p = lower_loop_to_llvm(mapped(net), target="nvptx")
    convs = [k.name for k in p.table.kernels if k.schedule not in (None, "pointwise")]
    assert not any(t in convs and f in convs for t, f in p.twins.items())


def test_fewer_collections_restores_the_thresholds():
    import gc

    from ptxc.gc_pause import COMPILE_THRESHOLDS, fewer_collections
    before = gc.get_threshold()
    with fewer_collections():
        assert gc.get_threshold() == COMPILE_THRESHOLDS
        with fewer_collections():
            assert gc.get_threshold() == COMPILE_THRESHOLDS
        assert gc.get_threshold() == COMPILE_THRESHOLDS
    assert gc.get_threshold() == before


@pytest.mark.slow
def test_parallel_compile_from_a_script_without_a_main_guard(tmp_path):
    """A user's script that compiles at its top level (no ``if __name__ == "__main__"``): the
    pool's processes must not re-run it (multiprocessing's forkserver and spawn import the main
    script into every child unless told otherwise; the child's compile then died with 'a code
    generation process died')."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = tmp_path / "user_script.py"
    script.write_text(
        "import sys\n"
        f"sys.path[:0] = [{root!r}, {os.path.join(root, 'tests')!r}]\n"
        "import ptxc\n"
        "from ptxc.ptx import jobs\n"
        "from test_ptx_split import mapped, twin_convs\n"
        "from ptxc.codegen import lower_to_ptx\n"
        "jobs.MIN_PARALLEL_BYTES = 0\n"
        "calls = []\n"
        "real = jobs.run_pool\n"
        "jobs.run_pool = lambda *a: calls.append(1) or real(*a)\n"
        "prog = lower_to_ptx(mapped(twin_convs()), arch='sm_90', jobs=2)\n"
        "assert calls and '.entry' in prog.ptx\n"
        "print('compiled', len(calls))\n")
    env = {**os.environ, "PTXC_CACHE": "0"}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0 and "compiled 1" in r.stdout, r.stderr[-3000:]
