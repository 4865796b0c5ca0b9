"""Programmatic dependent launch (gpu.launch's ``pdl``): on sm_90 and later every kernel waits
for the kernels before it in its first instruction (``griddepcontrol.wait``) and the runtime
launches it with programmatic stream serialization, so its launch overlaps the tail of the one
before. Checked here without a GPU: which launches map-to-gpu marks, that the PTX of each
marked kernel waits before its first memory access, the kernel table and launch config, and
that a plan claiming pdl for a kernel whose PTX does not wait is refused. The GPU runs every
engine this way (tests/gpu: the same outputs as before), and bench/RESULTS.md has its timing."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ptxc
from ptxc.plan.save import plan_to_bytes
from ptxc.rewrite import PassManager, get_pass
from support.loop_ir import module as loop_module, load, store
from ptxc.dialects.loop import parallel_loop
from ptxc.ir.types import F32, BufferType

from test_gpu_map import launches
from test_plan import edited, refused, small_cuda_engine, split


def _two_nests():
    def body(b, x, y, z):
        _, p, (i, j) = parallel_loop(b, (0, 0), (4, 64))
        store(p, load(p, x, i, j), y, i, j)
        _, p, (i, j) = parallel_loop(b, (0, 0), (4, 64))
        store(p, load(p, y, i, j), z, i, j)
    t = BufferType((4, 64), F32)
    return loop_module({"x": t, "y": t, "z": t}, ["z"], body)


@pytest.mark.parametrize("options, marked", [({"arch": "sm_90"}, True),
                                             ({"arch": "sm_100"}, True),
                                             ({"arch": "sm_80"}, False),
                                             ({"arch": "sm_90", "pdl": False}, False)])
def test_map_to_gpu_marks_every_launch_on_sm90_and_later(options, marked):
    m = _two_nests()
    PassManager([get_pass("map-to-gpu", **options)]).run(m)
    got = [lch.attributes.get("pdl", False) for lch in launches(m)]
    assert got == [marked, marked]
    assert ("pdl=false" in str(get_pass("map-to-gpu", pdl=False)))


@pytest.fixture(scope="module")
def engine():
    """A cuda engine for sm_90 (compiled here; no GPU needed): conv, relu, pool, softmax."""
    return small_cuda_engine("sm_90")


_MEMORY = re.compile(r"^\s*(griddepcontrol\.wait|(?:ld|st|atom|red|cp)\.(?!param)\S*)", re.M)


def _entries(ptx: str) -> dict:
    names = [(m.group(1), m.end()) for m in re.finditer(r"\.entry\s+(\w+)\s*\(", ptx)]
    return {n: ptx[start:(names[i + 1][1] if i + 1 < len(names) else len(ptx))]
            for i, (n, start) in enumerate(names)}


def test_every_kernel_waits_before_it_touches_memory(engine):
    """fp32 kernels (no mma): the wait is the first memory access."""
    kernels = engine.kernels.kernels
    assert len(kernels) >= 3 and all(k.pdl for k in kernels)
    assert not [k for k in kernels if k.schedule in ("mma", "wgmma")]
    entries = _entries(engine.ptx)
    for k in kernels:
        body = entries[k.name]
        accesses = _MEMORY.findall(body)
        assert accesses[0] == "griddepcontrol.wait", (k.name, accesses[:3])
        assert accesses.count("griddepcontrol.wait") == 1
        # the next kernel may launch once every block of this one has begun
        assert body.index("griddepcontrol.launch_dependents") > body.index("griddepcontrol.wait")


def test_the_launch_config_asks_for_programmatic_serialization(engine):
    pytest.importorskip("cuda.core")
    from ptxc.driver.cuda_device import launch_config
    k = engine.kernels.kernels[0]
    assert launch_config(k).programmatic_stream_serialization is True
    import attrs
    assert launch_config(attrs.evolve(k, pdl=False)).programmatic_stream_serialization is False


def test_the_plan_keeps_pdl_and_refuses_it_where_the_ptx_does_not_wait(engine):
    """A plan's kernels keep their pdl; a plan of sm_80 kernels (no wait) whose header alone
    says pdl, checksum recomputed, is refused (PlanError, cause "code")."""
    header, _ = split(plan_to_bytes(engine))
    assert all(k["pdl"] is True for k in header["kernel_table"]["kernels"])
    old = small_cuda_engine("sm_80")
    assert not any(k.pdl for k in old.kernels.kernels)
    assert "griddepcontrol" not in old.ptx

    def claim(h):
        h["kernel_table"]["kernels"][1]["pdl"] = True
    refused(edited(plan_to_bytes(old), claim), "code", "programmatic dependent launch")

    def not_bool(h):
        h["kernel_table"]["kernels"][0]["pdl"] = 1
    refused(edited(plan_to_bytes(engine), not_bool), "header", "kernel")


# ---- mma kernels: the weights' first K tiles before the wait -----------------------------------

def _mapped(precision, options=""):
    from test_gpu_map_mma_flat_m import _conv
    make, x = _conv(precision, N=2, H=10, W=10)
    m = make()
    PassManager(f"map-to-gpu{{mma-epilogue=staged arch=sm_90 {options}}}".replace(" }", "}")).run(m)
    return m, make, x


def _before_wait(launch):
    ops = list(launch.regions[0].blocks[0].ops)
    waits = [i for i, o in enumerate(ops) if o.name == "gpu.grid_wait"]
    return waits, [o for o in ops[:waits[0]] for o in o.walk()] if waits else []


@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_mma_kernels_copy_only_weights_before_the_wait(precision):
    """Before its gpu.grid_wait an mma kernel reads nothing but its constant operand (cp.async
    from a loop.global), and it computes the same as the unmapped nest (the interpreter runs
    the wait as a no-op)."""
    from ptxc.dialects.loop import run_main
    from ptxc.lower.gpu_map.tiled_nest import _root
    from test_gpu_map_mma_flat_m import _check
    m, make, x = _mapped(precision)
    mma_launches = [lch for lch in launches(m) if lch.attributes["schedule"] in ("mma", "wgmma")]
    assert mma_launches
    for lch in mma_launches:
        assert lch.attributes.get("pdl") is True
        waits, early = _before_wait(lch)
        assert len(waits) == 1
        copies = [o for o in early if o.name == "gpu.cp_async"]
        assert copies, "no weights copied before the wait"
        for o in early:
            assert o.name not in ("loop.store", "loop.load"), o.name
        for o in copies:
            root = _root(o.operands[0])
            assert root.owner.name == "loop.global", root
    _check(run_main(m, x), run_main(make(), x), precision)


@pytest.mark.parametrize("options", ["pdl-early-weights=false", "pdl=false"])
def test_without_early_weights_the_kernel_waits_first(options):
    m, _, _ = _mapped("fp16", options)
    for lch in launches(m):
        assert not _before_wait(lch)[0]
        assert lch.attributes.get("pdl", False) is (options != "pdl=false")


def test_a_schedules_second_kernel_is_pdl_too():
    """Split-K's partial sums are added by a second launch the mma schedule writes itself: it
    waits for the first like any other kernel."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((4096, 64)).astype(np.float32), "w")
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [vi("x", TensorProto.FLOAT, [16, 4096])],
                          [vi("y", TensorProto.FLOAT, [16, 64])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    engine = ptxc.compile(model, target="cuda", arch="sm_90", precision="fp16")
    kernels = engine.kernels.kernels
    assert any("split-K" in (k.tile or "") for k in kernels), [k.tile for k in kernels]
    assert all(k.pdl for k in kernels)
