"""Other GPUs: map-to-gpu reads the Target (ptxc/target.py), so one compiler writes kernels
for an A100 (sm_80), an A10 (sm_86), an L4 (sm_89) and an H100/H200 (sm_90) without a GPU.

* per arch, a small conv + matmul network in fp16 and int8 (:func:`small_net`): its PTX
  assembles with ``ptxas -arch=sm_XX``, no tensor-core kernel spills, the tensor-core kernels
  are mma.sync below sm_90 (wgmma is sm_90's alone), and every kernel's shared memory fits the
  target's per block (sm_86 and sm_89: 99 KiB, where sm_90 takes more for this network);
* the SM count reaches the schedules: an H100 PCIe (114 SMs) splits K into fewer parts than an
  H100 SXM (132) for the same GEMM;
* below sm_90 the mma K loop stays rolled (ptxas for sm_8x would unroll it into spills);
* a target without mma.sync here (sm_75, a T4) maps contractions with the other schedules, and
  PDL marks launches only where the target has it;
* ``slow``: the nine light models (tests/support/light_models.py) in fp16 and int8, each on
  two of the four archs (:func:`_light_cases`).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ptxc
from support.contraction_ir import inputs_for, loop_module, matmul_model
from ptxc.dialects.loop import run_main
from ptxc.lower.gpu_map import MapToGpu
from ptxc.ptx import assemble, ptxas_path
from ptxc.target import Target

needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas is not installed here")

ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90")
TENSOR_CORE = ("mma", "wgmma")


def small_net() -> "onnx.ModelProto":  # noqa: F821
    """Two layers side by side: a 3x3 convolution x [4, 32, 16, 16] -> 64 channels + ReLU, and
    a fully connected layer a [2048, 256] -> 1152 + ReLU. The latter is a GEMM of M = 2048,
    N = 1152, K = 256 whose sm_90 mma tile in fp16 (128 x 128, 64-deep K tiles, 3 stages,
    staged epilogue: 105 KiB, 144 CTAs) is over the 99 KiB an sm_86 or sm_89 block may have."""
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) /
                                        np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)
    inits = [w("wc", 64, 32, 3, 3), w("bc", 64), w("wf", 1152, 256), w("bf", 1152)]
    n = helper.make_node
    nodes = [n("Conv", ["x", "wc", "bc"], ["c"], pads=[1, 1, 1, 1]), n("Relu", ["c"], ["y"]),
             n("Gemm", ["a", "wf", "bf"], ["g"], transB=1), n("Relu", ["g"], ["z"])]
    f32 = TensorProto.FLOAT
    g = helper.make_graph(
        nodes, "small_net", [helper.make_tensor_value_info("x", f32, [4, 32, 16, 16]),
                             helper.make_tensor_value_info("a", f32, [2048, 256])],
        [helper.make_tensor_value_info("y", f32, [4, 64, 16, 16]),
         helper.make_tensor_value_info("z", f32, [2048, 1152])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@functools.lru_cache(maxsize=None)
def _calibration(name: str):
    """A calibration table for model ``name`` (min/max over one random batch: the kernels do not
    depend on the ranges)."""
    from ptxc.calib import calibrate
    model = _model(name)
    rng = np.random.default_rng(1)
    data = {vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim])
            .astype(np.float32) for vi in _runtime_inputs(model)}
    return calibrate(model, [data], "minmax", progress=False)


def _runtime_inputs(model):
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


@functools.lru_cache(maxsize=None)
def _model(name: str):
    if name == "small_net":
        return small_net()
    from support import light_models as lm
    return lm.with_random_weights(lm.load(name))


def compile_for(name: str, precision: str, arch: str):
    """The PTX program of model ``name`` compiled for ``arch`` (no GPU needed). The small net
    is channels-last, as the light models are (``layout="auto"`` takes nhwc from four
    convolutions on)."""
    kw = {"calibration": _calibration(name)} if precision == "int8" else {}
    if name == "small_net":
        kw["layout"] = "nhwc"
    return ptxc.compile(_model(name), target="cuda", arch=arch, precision=precision,
                        cache=False, **kw).program


def check_program(prog, arch: str) -> dict:
    """ptxas assembles ``prog`` for its arch; no tensor-core kernel spills or needs a stack;
    wgmma only on sm_90 (built as sm_90a); every kernel's shared memory fits a block of the
    target. Returns {schedule: kernels}."""
    target = Target.resolve(arch)
    assert prog.arch == (arch + "a" if any(k.schedule == "wgmma" for k in prog.table.kernels)
                         else arch)
    rep = assemble(prog.ptx, prog.arch)
    counts: dict = {}
    for k in prog.table.kernels:
        counts[k.schedule] = counts.get(k.schedule, 0) + 1
        r = rep.kernels[k.name]
        if k.schedule in TENSOR_CORE:
            assert (r.spill_stores, r.spill_loads, r.stack_bytes) == (0, 0, 0), (arch, k.name, r)
        assert k.shared_bytes <= target.shared_per_block, (arch, k.name, k.shared_bytes)
    if not target.has("wgmma"):
        assert "wgmma" not in counts, arch
    return counts


# ---- one small network per arch ---------------------------------------------------------------

@needs_ptxas
@pytest.mark.parametrize("precision", ["fp16", "int8"])
@pytest.mark.parametrize("arch", ARCHS)
def test_small_net_assembles_for_each_arch(arch, precision):
    prog = compile_for("small_net", precision, arch)
    counts = check_program(prog, arch)
    assert counts.get("mma", 0) + counts.get("wgmma", 0) >= 2, counts   # the conv, the Gemm
    most = max(k.shared_bytes for k in prog.table.kernels if k.schedule in TENSOR_CORE)
    assert ('.pragma "nounroll"' in prog.ptx) == (arch != "sm_90")   # mma.py's rolled K loop
    if precision == "fp16" and arch == "sm_90":   # more than a 99 KiB block there (check_program:
        assert most > Target.preset("sm_89").shared_per_block   # tiles that fit elsewhere)


@needs_ptxas
def test_the_k_loop_stays_rolled_below_sm_90():
    """ptxas for sm_80 .. sm_89 unrolls an mma main loop whose trip count it knows and the
    kernel outgrows its registers (this GEMM, SqueezeNet's last conv's shape: 255 registers and
    spills on sm_86 unrolled); the schedule keeps the K loop rolled there (mma.py,
    ROLLED_K_LOOP_BELOW_SM: PTX's nounroll pragma). sm_90's PTX has no pragma (its ptxas keeps
    the loop rolled by itself)."""
    from ptxc.codegen import lower_to_ptx
    for arch in ("sm_86", "sm_90"):
        m = _mapped(matmul_model(M=169, K=512, N=1000, trans_b=True),
                    target=Target.preset(arch), wgmma="off")
        prog = lower_to_ptx(m, arch=arch)
        assert ('.pragma "nounroll"' in prog.ptx) == (arch != "sm_90")
        rep = assemble(prog.ptx, arch)
        (k,) = [k for k in prog.table.kernels if k.schedule == "mma"]
        r = rep.kernels[k.name]
        assert (r.spill_stores, r.spill_loads) == (0, 0), (arch, r)


# ---- the target's numbers reach the schedules --------------------------------------------------

def _launches(m):
    return [o for o in m.walk() if o.name == "gpu.launch"]


def _mapped(model, **options):
    m = loop_module(model)
    MapToGpu(**options).run(m)
    return m


def test_the_sm_count_sizes_split_k():
    """M = 64, N = 256, K = 4096 (fp16): the smallest tile (32 x 64) gives 8 CTAs, so K is split
    over ceil(SMs / 8) CTAs each (at most 16): 16 on an H100 SXM (132 SMs), 15 on an H100 PCIe
    (114), 9 on an A10 (72; and no PDL on sm_86)."""
    model = matmul_model(M=64, K=4096, N=256)

    def grid(name):
        (mma,) = [o for o in _launches(_mapped(model, target=Target.preset(name)))
                  if o.attributes["schedule"] == "mma"]
        return mma.attributes["grid"], bool(mma.attributes.get("pdl"))
    assert Target.preset("h100-sxm").sms == 132 and Target.preset("h100-pcie").sms == 114
    assert grid("h100-sxm") == ((4, 2, 16), True)
    assert grid("h100-pcie") == ((4, 2, 15), True)
    assert grid("a10") == ((4, 2, 9), False)


def test_the_arch_option_names_the_target():
    """Pipeline text keeps ``arch``: map-to-gpu{arch=sm_89} maps as a pass given the sm_89
    preset (an L4) as its target; and the target is no text option."""
    model = matmul_model(M=64, K=4096, N=256)
    from ptxc.ir.printer import print_ir
    by_arch = print_ir(_mapped(model, arch="sm_89"))
    by_target = print_ir(_mapped(model, target=Target.preset("sm_89")))
    assert by_arch == by_target
    assert str(MapToGpu(target=Target.preset("l4"))) == "map-to-gpu"
    with pytest.raises(ValueError, match="Target"):
        MapToGpu(target="sm_89")


def test_no_mma_sync_below_sm_80():
    """A T4 (sm_75) has no mma.sync of the kinds here: the fp16 GEMM goes to the tiled schedule
    and still computes the nest's result; its launches are not pdl."""
    model = matmul_model(M=64, K=64, N=48)
    m = loop_module(model)
    x = inputs_for(model)
    want = run_main(m, x)
    MapToGpu(target=Target.preset("t4")).run(m)
    ls = _launches(m)
    assert ls and not any(o.attributes["schedule"] in TENSOR_CORE for o in ls)
    assert not any(o.attributes.get("pdl") for o in ls)
    got = run_main(m, x)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-3, atol=1e-3)


# ---- the light models --------------------------------------------------------------------------

def _light_cases() -> list:
    """(model, precision, arch) for the slow test: each light model in fp16 on one arch and in
    int8 on another, the arch rotating over the models so that every arch sees both precisions
    and several models. (Every model x precision x arch, 72 compiles, took 22 of the slow tier's
    37 minutes on CI's two cores.)"""
    from support import light_models as lm
    return [(name, precision, ARCHS[(i + shift) % len(ARCHS)])
            for i, name in enumerate(lm.NAMES) for precision, shift in (("fp16", 0), ("int8", 2))]


@needs_ptxas
@pytest.mark.slow
@pytest.mark.parametrize("name,precision,arch", _light_cases())
def test_light_models_assemble_for_each_arch(name, precision, arch):
    """Each light model, compiled in fp16 and int8 for two archs (:func:`_light_cases`): ptxas
    assembles it for that arch, no tensor-core kernel spills, shared memory within the target's
    (:func:`check_program`)."""
    counts = check_program(compile_for(name, precision, arch), arch)
    assert counts.get("mma", 0) + counts.get("wgmma", 0) > 0, counts
