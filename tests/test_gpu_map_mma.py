"""The mma schedule (ptxc/lower/gpu_map/mma.py): fp16 contractions (MatMul, batched MatMul,
Gemm-like transposed weights, convolutions) mapped onto tensor cores. Each mapped module runs in
the lockstep interpreter and must match the unmapped nest (rtol 1e-5 of the output's scale: the
tensor core sums in another order) and numpy on the f16 data; its PTX assembles with ptxas
without spills; on a GPU (``gpu`` marker) it gives the interpreter's answer.
"""

import numpy as np
import pytest

from support.contraction_ir import conv_model, inputs_for, loop_module, matmul_model
from ptxc.dialects.loop import run_main
from ptxc.lower.gpu_map import contraction, mma_config, mma_kernel
from ptxc.ptx import assemble, ptxas_path
from ptxc.codegen import lower_to_ptx
from ptxc.rewrite import PassManager
from ptxc.target import Target

SM90 = Target.preset("sm_90")    # an H100 SXM: 132 SMs, 227 KiB of shared memory per block

needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas is not installed here")


def launches(m):
    return [o for o in m.walk() if o.name == "gpu.launch"]


def mapped(model, options=""):
    """(mapped loop module, inputs, the unmapped module's results); ``options`` of
    map-to-gpu, e.g. ``{wgmma=on}``."""
    m = loop_module(model)
    x = inputs_for(model)
    want = run_main(m, x)
    PassManager("map-to-gpu" + options).run(m)
    return m, x, want


def check_close(got, want):
    for k in want:
        scale = max(1.0, float(np.abs(want[k]).max()))
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5 * scale, err_msg=k)


MATMULS = {
    "64x64x48": dict(M=64, K=64, N=48),
    "130x96x72_edges": dict(M=130, K=96, N=72),
    "k36_8_byte_copy": dict(M=40, K=36, N=24),            # K % 8 == 4: A by 8-byte copies
    "k34_4_byte_copy": dict(M=40, K=34, N=24),            # K % 4 == 2: A by 4-byte copies
    "odd_k_scalar_copy": dict(M=40, K=33, N=24),          # K odd: A copied by scalars
    "batched_2x3": dict(M=32, K=32, N=16, batch=(2, 3)),
    "trans_b_kmajor": dict(M=48, K=64, N=32, trans_b=True),
    "no_bias": dict(M=32, K=48, N=32, bias=False, relu=False),
    "split_k": dict(M=32, K=1024, N=32),                   # one tile: K split over 4 CTAs
}


def test_split_k_when_the_tiles_leave_sms_idle():
    m, x, want = mapped(matmul_model(**MATMULS["split_k"]))
    ls = launches(m)
    assert [o.attributes["schedule"] for o in ls] == ["mma", "pointwise"]
    assert ls[0].attributes["grid"] == (1, 1, 4)
    check_close(run_main(m, x), want)


def test_tile_choice_pads_least():
    """Of the tiles that give a block per SM, the largest within 10% of the least padded work
    wins: N = 64 (ResNet-50's 64-channel convs) takes 128x64, not a 128x128 tile whose right
    half multiplies zeros; a shape every tile divides, or nearly, keeps the largest."""
    def tile(**shape):
        m = loop_module(matmul_model(**shape))
        PassManager("map-to-gpu").run(m)
        (launch,) = [o for o in launches(m) if o.attributes["schedule"] == "mma"]
        return launch.attributes["tile"].split()[1]
    assert tile(M=128 * 140, K=64, N=64) == "128x64x32"
    assert tile(M=128 * 140, K=64, N=256) == "128x128x32"
    # 6% padding (ResNet-50's layer 4 at batch 32) keeps the large tile
    assert tile(M=1568, K=64, N=2048) == "128x128x32"


@pytest.mark.parametrize("case", sorted(MATMULS))
def test_matmul_maps_to_mma_and_matches(case):
    model = matmul_model(**MATMULS[case])
    m, x, want = mapped(model)
    kinds = [o.attributes["schedule"] for o in launches(m)]
    assert "mma" in kinds, kinds
    got = run_main(m, x)
    check_close(got, want)
    # and numpy on the f16 data, accumulated in f64
    p = MATMULS[case]
    a = x["a"].astype(np.float64)
    b = x["b"].astype(np.float64)
    if p.get("trans_b"):
        b = np.swapaxes(b, -1, -2)
    ref = a @ b
    if p.get("bias", True):
        ref = ref + __import__("onnx").numpy_helper.to_array(model.graph.initializer[0])
    if p.get("relu", True):
        ref = np.maximum(ref, 0)
    np.testing.assert_allclose(got["y"], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_layouts_chosen_from_the_operands():
    m = loop_module(matmul_model(M=64, K=64, N=64))
    nest = next(o for o in m.walk() if o.name == "loop.parallel" and
                contraction.analyze(o) is not None)
    c = contraction.analyze(nest)
    assert c.kind == "f16" and (c.M, c.N, c.K) == (64, 64, 64) and c.u == 8
    assert mma_config.layout(c, c.a) == mma_config.Layout(kmajor=True, vector=True)     # a[m, k]
    assert mma_config.layout(c, c.b) == mma_config.Layout(kmajor=False, vector=True)    # b[k, n]
    m = loop_module(matmul_model(M=40, K=36, N=24))
    c = next(contraction.analyze(o) for o in m.walk() if o.name == "loop.parallel" and
             contraction.analyze(o) is not None)
    assert mma_config.layout(c, c.a) == mma_config.Layout(kmajor=True, vector=True, chunk=8)   # 72 bytes
    m = loop_module(matmul_model(M=40, K=34, N=24))
    c = next(contraction.analyze(o) for o in m.walk() if o.name == "loop.parallel" and
             contraction.analyze(o) is not None)
    assert mma_config.layout(c, c.a) == mma_config.Layout(kmajor=True, vector=True, chunk=4)   # 68 bytes
    m = loop_module(matmul_model(M=40, K=33, N=24))
    c = next(contraction.analyze(o) for o in m.walk() if o.name == "loop.parallel" and
             contraction.analyze(o) is not None)
    assert mma_config.layout(c, c.a) == mma_config.Layout(kmajor=True, vector=False)           # 66 bytes


def test_fp32_contractions_are_not_taken():
    """fp32 stays fp32: a plain f32 MatMul is no contraction for the mma schedule."""
    from ptxc.compiler import as_module, run_stages
    from onnx import TensorProto, helper
    g = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [32, 32]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 32])])
    m = as_module(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    run_stages(m, "loop")
    assert all(contraction.analyze(o) is None for o in m.walk() if o.name == "loop.parallel")


CONVS = {
    "3x3_pad1": dict(N=1, C=16, H=8, W=8, K=32, R=3, S=3, pad=1),
    "1x1": dict(N=2, C=32, H=6, W=6, K=16, R=1, S=1),
    "3x3_s2": dict(N=1, C=8, H=9, W=9, K=16, R=3, S=3, stride=2, pad=1),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CONVS))
def test_conv_maps_to_mma_and_matches(case):
    m, x, want = mapped(conv_model(**CONVS[case]))
    assert "mma" in [o.attributes["schedule"] for o in launches(m)]
    check_close(run_main(m, x), want)


@needs_ptxas
@pytest.mark.slow
@pytest.mark.parametrize("case", ["64x64x48", "130x96x72_edges", "odd_k_scalar_copy", "k36_8_byte_copy",
                                  "k34_4_byte_copy",
                                  "batched_2x3"])
def test_mma_kernels_assemble_without_spills(case):
    m, _, _ = mapped(matmul_model(**MATMULS[case]))
    p = lower_to_ptx(m, arch="sm_90")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in p.ptx
    assert "ldmatrix.sync.aligned" in p.ptx
    # each mma kernel asks for the blocks per SM mma_config.min_blocks gives it (3 for warp tiles of
    # at most 64 accumulators a thread, else 1: ptxas's choice), and ptxas fits them unspilled
    blocks = [o.attributes.get("min_blocks", 1) for o in launches(m)
              if o.attributes["schedule"] == "mma"]
    assert blocks
    for b in set(blocks):
        assert p.ptx.count(f".minnctapersm {b}") == blocks.count(b), b
    rep = assemble(p.ptx, "sm_90")
    for k in rep.kernels.values():
        assert k.spill_stores == 0 and k.spill_loads == 0, k


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(MATMULS) + [f"conv_{k}" for k in sorted(CONVS)])
def test_mma_on_gpu_gives_the_interpreters_answer(case):
    from test_ptx import run_on_gpu
    model = conv_model(**CONVS[case[5:]]) if case.startswith("conv_") else \
        matmul_model(**MATMULS[case])
    m, x, _ = mapped(model)
    want = run_main(m, x)
    got = run_on_gpu(lower_to_ptx(m), x)
    check_close(got, want)


def forced(model, cfg):
    """The model's loop module with its contraction built with tile config ``cfg``, the rest
    mapped as usual; with the unmapped module's outputs."""
    m = loop_module(model)
    x = inputs_for(model)
    want = run_main(m, x)
    assert mma_kernel.build_all(m, cfg, SM90) >= 1
    PassManager("map-to-gpu").run(m)
    return m, x, want


BIG = mma_config.Config(128, 128, 2, 2, 32, stages=4)   # 64 KiB of shared memory: dynamic


def test_over_48k_of_shared_memory_goes_dynamic():
    from ptxc.lower.loop_to_llvm import DYNAMIC_SHARED, lower_loop_to_llvm
    m, x, want = forced(matmul_model(M=128, K=256, N=128), BIG)
    check_close(run_main(m, x), want)
    prog = lower_loop_to_llvm(m, target="nvptx")
    assert f'@"{DYNAMIC_SHARED}" = external addrspace(3) global [0 x i8], align 16' in prog.text
    (k,) = [k for k in prog.table.kernels if k.schedule == "mma"]
    assert k.dynamic_shared == k.shared_bytes == 65536
    from ptxc.lower.loop_to_llvm import KernelTable
    assert KernelTable.from_json(prog.table.to_json()) == prog.table


@needs_ptxas
@pytest.mark.slow
def test_dynamic_shared_kernel_assembles():
    m, _, _ = forced(matmul_model(M=128, K=256, N=128), BIG)
    rep = assemble(lower_to_ptx(m, arch="sm_90").ptx, "sm_90")
    (k,) = [k for k in rep.kernels.values()]
    assert k.shared_bytes == 0 and k.spill_stores == 0   # nothing static


@pytest.mark.gpu
def test_dynamic_shared_kernel_on_gpu():
    from test_ptx import run_on_gpu
    m, x, _ = forced(matmul_model(M=256, K=256, N=128), BIG)
    check_close(run_on_gpu(lower_to_ptx(m), x), run_main(m, x))


DEEP = mma_config.Config(64, 64, 2, 2, 64, stages=3)    # K tiles of 64: 128-byte rows, 8 chunks


def test_deep_k_tiles_match():
    m, x, want = forced(matmul_model(M=96, K=320, N=64), DEEP)
    check_close(run_main(m, x), want)


@pytest.mark.gpu
def test_deep_k_tiles_on_gpu():
    from test_ptx import run_on_gpu
    m, x, _ = forced(matmul_model(M=96, K=320, N=64), DEEP)
    check_close(run_on_gpu(lower_to_ptx(m), x), run_main(m, x))


def test_inspect_names_the_tile_and_precision(tmp_path):
    """The kernel table and ``ptxc inspect`` of a saved cuda plan name the mma tile."""
    from ptxc.codegen import build
    from ptxc.driver.engine import Engine
    from ptxc.plan.inspect import inspect_plan
    from ptxc.target import Target
    m, _, _ = mapped(matmul_model(**MATMULS["split_k"]))
    assert launches(m)[0].attributes["tile"] == \
        "f16 32x64x64 warps 1x2 stages 3 split-K 4 epilogue staged"  # map-to-gpu's default
    engine = Engine.from_artifact(build(m, Target.resolve()))
    engine.save(tmp_path / "mm.plan")
    text = inspect_plan(tmp_path / "mm.plan")
    assert "schedule mma [f16 32x64x64 warps 1x2 stages 3 split-K 4 epilogue staged]" in text
    # the split-K partials are f32, the operands f16: the mma kernel's line names both
    (line,) = [ln for ln in text.splitlines() if "schedule mma" in ln]
    assert "precision f16+f32" in line


def test_explore_outlines_the_mma_pipeline():
    """``explore --stage loop --target cuda`` starts with an outline per kernel: the mma kernel's
    prologue copies, its K loop (trip count, wait, barrier, ldmatrix, mma, next copies) and its
    epilogue stores, counted from the IR below it."""
    import re
    import ptxc
    model = matmul_model(M=64, K=128, N=64)
    text = ptxc.explore(model, stage="loop", target="cuda", precision="fp16")
    head = text[:text.index("// -----// IR at the end")]
    (k,) = [i for i, ln in enumerate(head.splitlines()) if ": mma [f16 " in ln]
    lines = head.splitlines()[k:k + 4]
    assert lines[1].startswith("//   prologue:") and "cp.async.16" in lines[1]
    loop = re.match(r"//   loop x(\d+): +(.*)", lines[2])
    assert loop, lines
    tile_k = int(re.search(r"x(\d+) warps", lines[0]).group(1))
    assert int(loop.group(1)) == 128 // tile_k
    for part in ("wait_group", "barrier", "ldmatrix.x4", "mma.m16n8k16", "cp.async.16"):
        assert part in loop.group(2), (part, lines[2])
    assert lines[3].startswith("//   epilogue:") and "store" in lines[3]
    n_mma = len(re.findall(r'"gpu.mma"', text))
    assert f"mma.m16n8k16 x{n_mma}" in loop.group(2) or n_mma == 1


def two_matmuls():
    """relu(cast(a) @ cast(b) + bias) and cast(a2) @ cast(b), in one module (f16 inputs)."""
    from onnx import TensorProto, helper
    model = matmul_model(M=128, K=128, N=128)
    g = model.graph
    g.input.append(helper.make_tensor_value_info("a2", TensorProto.FLOAT16, [128, 128]))
    g.node.append(helper.make_node("Cast", ["a2"], ["a2f"], to=TensorProto.FLOAT, name="c2"))
    g.node.append(helper.make_node("MatMul", ["a2f", "bf"], ["z"], name="mm2"))
    g.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [128, 128]))
    return model


def test_static_and_dynamic_shared_kernels_in_one_module():
    """One module, two mma kernels, one with static and one with dynamic shared memory: the
    intrinsics are declared once with opaque pointers (a ResNet-50 compile failed on typed
    ones: 'i8 addrspace(3)* != half addrspace(3)*')."""
    model = two_matmuls()
    m = loop_module(model)
    x = inputs_for(model)
    want = run_main(m, x)
    nests = [o for o in m.walk() if o.name == "loop.parallel" and
             contraction.analyze(o) is not None]
    assert len(nests) == 2
    for op, cfg in zip(nests, (mma_config.Config(64, 64, 2, 2, 32, stages=2), BIG)):
        mma_kernel.build(contraction.analyze(op), cfg, SM90)
        op.erase()
    PassManager("map-to-gpu").run(m)
    check_close(run_main(m, x), want)
    p = lower_to_ptx(m, arch="sm_90")
    assert sorted(k.dynamic_shared for k in p.table.kernels if k.schedule == "mma") == [0, 65536]
