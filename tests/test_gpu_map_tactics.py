"""map-to-gpu per kernel: ``tactics`` (kernel key -> Tactic) and ``candidates`` (a kernel's
candidate tactics, ptxc/lower/gpu_map/tactics.py); ptxc/tune/spills.py's ptxas report.

For a GEMM, an NHWC fp16 convolution, a reduction, a depthwise convolution and a pointwise
kernel: the candidates are deterministic, the default first, ``fast`` a prefix of ``full``,
each mapping its kernel to a module printed differently from every other; every candidate maps,
and the mapped kernels (a deterministic sample of them) compute in the lockstep interpreter what
the unmapped nest computes (exact for the pointwise kernel, within fp16/f32 reassociation
tolerances otherwise). A tactic applied to a whole module changes that kernel's launches alone
and marks them; a schedule that declines the kernel is a TuningError naming both.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from support.contraction_ir import loop_module, matmul_model
from ptxc.compiler import as_module, run_stages
from ptxc.dialects.func import func_body, functions
from ptxc.dialects.loop import run_main
from ptxc.errors import TuningError
from ptxc.ir.printer import print_ir
from ptxc.lower.gpu_map import MapToGpu, tactics as gpu_tactics
from ptxc.ptx import ptxas_path
from ptxc.target import Target
from ptxc.tune import spills
from ptxc.tactic.kernels import isolate, kernel_key, kernels_of
from ptxc.tactic.tactic import DEFAULT, Tactic

SM90 = Target.preset("sm_90")
PASS = MapToGpu(target=SM90)
#: candidates interpreted per kernel (the default, then a deterministic sample of the others)
SAMPLED = 5

needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas is not installed here")


# ---- the kernels ------------------------------------------------------------------------------

def _onnx(nodes, ins, outs, inits=()):
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "g", [vi(n, TensorProto.FLOAT, s) for n, s in ins],
                          [vi(n, TensorProto.FLOAT, s) for n, s in outs], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _cuda_loop(model, **kw):
    """``model`` at the loop stage of a cuda compile, nothing mapped."""
    m = as_module(model)
    run_stages(m, "loop", target="cuda", arch="sm_90",
               stage_passes={"loop": "lower-tensor-to-loop"}, **kw)
    return m


def _conv_nhwc():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((32, 16, 3, 3)) / 12).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
    return _cuda_loop(_onnx([helper.make_node("Conv", ["x", "w", "b"], ["t"], pads=[1] * 4),
                             helper.make_node("Relu", ["t"], ["y"])],
                            [("x", [1, 16, 6, 6])], [("y", [1, 32, 6, 6])], [w, b]),
                      layout="nhwc", precision="fp16")


def _depthwise():
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((8, 1, 3, 3)).astype(np.float32), "w")
    return _cuda_loop(_onnx([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4, group=8)],
                            [("x", [1, 8, 10, 10])], [("y", [1, 8, 10, 10])], [w]))


def _reduction():
    return _cuda_loop(_onnx([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
                            [("x", [4, 512])], [("y", [4])],
                            [numpy_helper.from_array(np.array([1], np.int64), "axes")]))


def _pointwise():
    return _cuda_loop(_onnx([helper.make_node("Mul", ["x", "x"], ["t"]),
                             helper.make_node("Relu", ["t"], ["y"])],
                            [("x", [3, 700])], [("y", [3, 700])]))


#: kind -> (loop module maker, the default schedule of the kernel under test, tolerance: None
#: exact, else the rtol of the output's scale)
KERNELS = {
    "gemm": (lambda: loop_module(matmul_model(M=64, K=128, N=64, trans_b=True)), "mma", 1e-5),
    "conv_nhwc_fp16": (_conv_nhwc, "mma", 2e-3),
    "reduction": (_reduction, "reduction", 1e-5),
    "depthwise": (_depthwise, "pointwise", 1e-5),
    "pointwise": (_pointwise, "pointwise", None),
}


def _default_schedule(op) -> str:
    module, _ = isolate(op)
    PASS.run(module)
    return [o for o in module.walk() if o.name == "gpu.launch"][0].attributes["schedule"]


@functools.lru_cache(maxsize=None)
def kernel(kind):
    """(loop module, the kernel under test: the last of the kind's default schedule)."""
    make, schedule, _ = KERNELS[kind]
    m = make()
    ops = [k.op for k in kernels_of(m)]
    return m, [o for o in ops if _default_schedule(o) == schedule][-1]   # (after pads)


@functools.lru_cache(maxsize=None)
def cands(kind, level):
    return PASS.candidates(kernel(kind)[1], level)


#: (the mma kernels' full lists map 48 kernels of ~2000 ops each: 5-8 s a kernel here)
LEVEL_CASES = [(k, level) for level in ("fast", "full") for k in sorted(KERNELS)]


def mapped(op, t: Tactic):
    """The isolated kernel ``op`` mapped as ``t`` says (through MapToGpu's ``tactics``)."""
    module, _ = isolate(op)
    key = kernel_key(op)
    MapToGpu(target=SM90, tactics={key: t}).run(module)
    return module


def _inputs(module, seed=0):
    rng = np.random.default_rng(seed)
    (f,) = functions(module)
    outs = set(f.attributes["loop.outputs"])
    names = f.attributes["arg_names"]
    x = {}
    for n, a in zip(names, func_body(f).args):
        if n in outs:
            continue
        dt = a.type.element.np_dtype
        x[n] = (rng.integers(-8, 8, a.type.shape) if dt.kind in "iu" else
                rng.standard_normal(a.type.shape)).astype(dt)
    return x


def _close(got, want, rtol):
    for k in want:
        if rtol is None:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
        else:
            w = want[k].astype(np.float64)
            scale = max(1.0, float(np.nanmax(np.abs(w))))
            np.testing.assert_allclose(got[k].astype(np.float64), w, rtol=rtol,
                                       atol=rtol * scale, err_msg=k)


# ---- candidates ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,level", LEVEL_CASES)
def test_candidates_deterministic_default_first_each_distinct(kind, level):
    _, op = kernel(kind)
    got = cands(kind, level)
    assert got[0] == DEFAULT and 1 < len(got) <= gpu_tactics.LEVELS[level]
    assert PASS.candidates(op, level) == got                    # deterministic
    assert len(set(got)) == len(got)
    modules = [mapped(op, t) for t in got]       # every candidate maps: no error, launches
    assert all(any(o.name == "gpu.launch" for o in mod.walk()) for mod in modules)
    texts = [print_ir(mod) for mod in modules]
    assert len(set(texts)) == len(texts), "two candidates map the kernel alike"
    # each is a value: its text parses back to it with the pass's types
    assert all(Tactic.parse(str(t), MapToGpu) == t for t in got)
    if level == "full":   # fast: the first of full's (full's order is fast's)
        fast = cands(kind, "fast")
        assert fast == got[:len(fast)] and len(fast) == min(len(got), gpu_tactics.MAX_FAST)


def test_candidates_per_kernel_kind():
    """The families of gpu_map/tactics.py: the GEMM's tiles, stages and epilogues and its
    wgmma form (sm_90, K-major operands); the reduction's block sizes and the pointwise
    alternative; a depthwise conv's tiled alternative; the pointwise kernel's block sizes."""
    def opts(kind, name, level="full"):
        return {t.options.get(name) for t in cands(kind, level)} - {None}
    gemm = cands("gemm", "fast")
    assert {t.schedule for t in gemm} == {"auto", "mma"}
    assert Tactic("mma", {"wgmma": "on"}) in gemm and opts("gemm", "mma_tiles", "fast")
    assert opts("gemm", "mma_stages", "fast") == {2, 4}
    assert opts("gemm", "mma_epilogue", "fast") == {"fragment"}
    assert opts("conv_nhwc_fp16", "mma_tiles", "fast")
    assert opts("conv_nhwc_fp16", "mma_stages", "fast") == {2, 4}
    red = cands("reduction", "full")
    assert {t.schedule for t in red} == {"auto", "reduction", "pointwise"}
    assert len(opts("reduction", "reduction_block_size")) >= 3
    assert Tactic("tiled", {"tiled_min_reduction": 0}) in cands("depthwise", "full")
    assert opts("pointwise", "block_size") >= {64, 128, 512}


def test_full_candidates_of_the_gemm():
    def opts(name):
        return {t.options.get(name) for t in cands("gemm", "full")} - {None}
    assert len(opts("mma_tiles")) >= 3 and opts("mma_min_blocks") and opts("mma_deep_k")
    assert opts("wgmma_tiles") and opts("wgmma_epilogue") == {"fragment"}
    assert len(cands("gemm", "full")) == gpu_tactics.MAX_FULL


def _sample(full):
    rest = full[1:]
    step = max(1, len(rest) // (SAMPLED - 1))
    return [full[0]] + rest[::step][:SAMPLED - 1]


@pytest.mark.parametrize("kind,level", LEVEL_CASES)
def test_sampled_candidates_compute_what_the_nest_computes(kind, level):
    _, op = kernel(kind)
    rtol = KERNELS[kind][2]
    nest, _ = isolate(op)
    x = _inputs(nest)
    want = run_main(nest, x)
    default = None
    for t in _sample(cands(kind, level)):
        module = mapped(op, t)
        launches = [o for o in module.walk() if o.name == "gpu.launch"]
        assert launches and all(("tactic" in o.attributes) == (t != DEFAULT) for o in launches)
        got = run_main(module, x)
        _close(got, want, rtol)
        if default is None:
            default = got
        else:   # the candidates agree with the default (its reassociation, same tolerance)
            _close(got, default, rtol)


def test_candidates_refuse_what_is_no_kernel():
    _, op = kernel("pointwise")
    with pytest.raises(TuningError, match="level 'slow'"):
        PASS.candidates(op, "slow")
    inner = next(o for o in op.walk() if o.name == "loop.load")
    with pytest.raises(TuningError, match="no top-level kernel"):
        PASS.candidates(inner)


# ---- tactics in the pass ------------------------------------------------------------------------

def test_a_schedule_that_declines_the_kernel_is_a_tuning_error():
    _, op = kernel("pointwise")
    for t in (Tactic("mma"), Tactic("tiled"), Tactic("reduction", {"reduction_block_size": 64})):
        with pytest.raises(TuningError, match=rf"tactic {t.schedule}.*declines the kernel.*"
                                              rf"{op.loc}"):
            mapped(op, t)
    with pytest.raises(TuningError, match="no schedule 'nosuch'"):
        mapped(op, Tactic("nosuch"))
    with pytest.raises(TuningError, match="block-size must be"):
        mapped(op, Tactic("pointwise", {"block_size": 5000}))


def test_tactics_change_exactly_their_kernel():
    """On the whole conv module: the mma kernel's launch under a non-default tactic carries
    ``tactic`` and ``tuning_key``, and every other launch prints as without tactics; the
    DEFAULT tactic and a key of no kernel change nothing."""
    m, op = kernel("conv_nhwc_fp16")
    key = kernel_key(op)
    t = cands("conv_nhwc_fp16", "fast")[2]

    def run(tactics):
        mod = m.clone()
        MapToGpu(target=SM90, tactics=tactics).run(mod)
        return [o for o in mod.walk() if o.name == "gpu.launch"]
    plain = run({})
    tuned = run({key: t})
    assert len(plain) == len(tuned) > 1   # one launch per kernel here, in program order
    marked = [i for i, o in enumerate(tuned) if "tactic" in o.attributes]
    assert len(marked) == 1 and tuned[marked[0]].attributes["schedule"] == "mma"
    assert tuned[marked[0]].attributes["tactic"] == str(t)
    assert tuned[marked[0]].attributes["tuning_key"] == key
    assert print_ir(tuned[marked[0]]) != print_ir(plain[marked[0]])
    assert [print_ir(o) for i, o in enumerate(tuned) if i not in marked] == \
        [print_ir(o) for i, o in enumerate(plain) if i not in marked]
    assert [print_ir(o) for o in run({key: DEFAULT, "0" * 16: t})] == \
        [print_ir(o) for o in plain]


def test_split_k_tactic_marks_both_launches():
    m = loop_module(matmul_model(M=32, K=1024, N=32))
    (k,) = [k for k in kernels_of(m) if _default_schedule(k.op) == "mma"]
    t = Tactic("mma", {"mma_stages": 2})
    MapToGpu(target=SM90, tactics={k.key: t}).run(m)
    ls = [o for o in m.walk() if o.name == "gpu.launch" and "tactic" in o.attributes]
    assert [o.attributes["schedule"] for o in ls] == ["mma", "pointwise"]   # split-K's sum
    assert "stages 2" in ls[0].attributes["tile"]
    assert {o.attributes["tuning_key"] for o in ls} == {k.key}


def test_tactics_are_an_object_option_not_pipeline_text():
    p = MapToGpu(target=SM90, tactics={"ab" * 8: "mma{mma-stages=4}"})
    assert p.tactics["ab" * 8] == Tactic.parse("mma{mma-stages=4}")
    assert str(p) == str(MapToGpu(target=SM90)) == str(MapToGpu())
    assert p != MapToGpu(target=SM90) and hash(p) != hash(MapToGpu(target=SM90))
    assert p == MapToGpu(target=SM90, tactics={"ab" * 8: Tactic("mma", {"mma_stages": "4"})})
    with pytest.raises(TuningError, match="not a Tactic"):
        MapToGpu(tactics={"ab" * 8: 3})


def test_reduction_block_size_option():
    _, op = kernel("reduction")
    for block in (32, 128, 1024):
        (launch,) = [o for o in mapped(op, Tactic("reduction", {"reduction_block_size": block}))
                     .walk() if o.name == "gpu.launch"]
        assert launch.attributes["block"] == (block, 1, 1)
    for bad in (48, 16, 2048):
        with pytest.raises(ValueError, match="reduction-block-size"):
            MapToGpu(reduction_block_size=bad)


# ---- ptxas ------------------------------------------------------------------------------------

_PTX = """.version 7.8
.target sm_90
.address_size 64
.visible .entry tiny(.param .u64 p)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<3>;
  .shared .align 4 .b8 buf[1024];
  ld.param.u64 %rd1, [p];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u32 %r1, %tid.x;
  shl.b32 %r2, %r1, 2;
  mov.u32 %r3, buf;
  add.u32 %r3, %r3, %r2;
  st.shared.u32 [%r3], %r1;
  bar.sync 0;
  ld.shared.u32 %r1, [%r3+4];
  st.global.u32 [%rd2], %r1;
  ret;
}
"""


def _spilling_ptx(n=48):
    """A kernel that keeps ``n`` loaded values live at once under ``.maxnreg 24`` (the least
    ptxas gives an sm_90 kernel)."""
    loads = "\n".join(f"  ld.global.volatile.f32 %f{i}, [%rd2+{4 * i}];" for i in range(n))
    adds = "\n".join(f"  add.f32 %f{n}, %f{n}, %f{i};" for i in reversed(range(n)))
    return (f".version 7.8\n.target sm_90\n.address_size 64\n"
            f".visible .entry spiller(.param .u64 p) .maxnreg 24\n{{\n"
            f"  .reg .f32 %f<{n + 1}>;\n  .reg .b64 %rd<3>;\n"
            f"  ld.param.u64 %rd1, [p];\n  cvta.to.global.u64 %rd2, %rd1;\n{loads}\n"
            f"  mov.f32 %f{n}, 0f00000000;\n{adds}\n"
            f"  st.global.f32 [%rd2], %f{n};\n  ret;\n}}\n")


@needs_ptxas
def test_ptxas_report_on_a_tiny_kernel():
    rep = spills.ptxas_report(_PTX, "sm_90")
    assert set(rep) == {"tiny"}
    assert rep["tiny"]["shared"] == 1024 and rep["tiny"]["spill_bytes"] == 0
    assert 0 < rep["tiny"]["registers"] <= 16
    assert spills.spills(_PTX, "sm_90") is False
    big = spills.ptxas_report(_spilling_ptx(), "sm_90")["spiller"]
    assert big["registers"] <= 24 and big["spill_bytes"] > 0
    assert spills.spills(_spilling_ptx(), "sm_90") is True


def test_ptxas_absent_is_not_known(monkeypatch):
    monkeypatch.setattr(spills, "ptxas_path", lambda: None)
    assert spills.ptxas_report(_PTX, "sm_90") is None and spills.spills(_PTX, "sm_90") is None
