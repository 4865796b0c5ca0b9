"""loop (gpu.launch) -> LLVM IR for NVPTX -> libdevice -> O3 -> PTX -> ptxas.

Hand-written launches (thread/block ids on every axis, a shared-memory tree sum with barriers,
loop.if guards, every math op in f32/f64/f16, casts and integer ops) lower to PTX that ptxas
assembles; the same modules run in the interpreter give numpy's answer, so what is assembled is a
correct program. Mapped modules (the light models and random graphs through ``map-to-gpu``) are
in the second half. The kernel table carries each launch's grid, block, shared bytes and
schedule. Without a GPU nothing here runs PTX; tests marked ``gpu`` do, on the device machine.
"""

import os
import re

import numpy as np
import pytest

from ptxc.dialects import gpu
from ptxc.dialects.loop import for_loop, if_op, parallel_loop, run_main
from ptxc.errors import CompileError
from ptxc.ir.types import F16, F32, F64, I1, I8, I32, I64, INDEX
from ptxc.lower.loop_to_llvm import DYNAMIC_SHARED, KernelTable, lower_loop_to_llvm
from ptxc.ptx import PtxProgram, assemble, default_arch, parse_report, ptxas_path
from ptxc.codegen import lower_to_ptx
from test_loop_dialect import buf, c, load, module, op, store

needs_ptxas = pytest.mark.skipif(ptxas_path() is None,
                                 reason="ptxas (CUDA toolkit) is not installed on this machine")

ARCH = "sm_90"


def idx(b, v):
    return c(b, v, INDEX)


def lin_id(b, block):
    """block_id.x * block + thread_id.x"""
    return op(b, "arith.add", op(b, "arith.mul", gpu.block_id(b, 0), idx(b, block)),
              gpu.thread_id(b, 0))


# ---- hand-written launches ----------------------------------------------------------------

def block_sum(n=1000, block=256, span=None):
    """y[b] = sum of x over block b's 256 elements: a shared-memory tree with barriers, the
    load guarded by loop.if (i < n), the result written by thread 0 only. ``span``: elements of
    the shared array (default ``block``); over 12,288 it is placed in dynamic shared memory."""
    blocks = -(-n // block)

    def body(b, x, y):
        _, k = gpu.launch_op(b, (blocks, 1, 1), (block, 1, 1), "handmade")
        sh = gpu.shared(k, (span or block,), F32)
        t = gpu.thread_id(k, 0)
        i = lin_id(k, block)
        store(k, c(k, 0.0), sh, t)
        _, g = if_op(k, op(k, "arith.cmp", i, idx(k, n), predicate="lt"))
        store(g, load(g, x, i), sh, t)
        gpu.barrier(k)
        s = block // 2
        while s:
            _, g = if_op(k, op(k, "arith.cmp", t, idx(k, s), predicate="lt"))
            store(g, op(g, "arith.add", load(g, sh, t),
                        load(g, sh, op(g, "arith.add", t, idx(g, s)))), sh, t)
            gpu.barrier(k)
            s //= 2
        _, g = if_op(k, op(k, "arith.cmp", t, idx(k, 0), predicate="eq"))
        store(g, load(g, sh, idx(g, 0)), y, gpu.block_id(g, 0))
    m = module({"x": buf((n,)), "y": buf((blocks,))}, ["y"], body)
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    return m, {"x": x}


def all_ids(grid=(2, 3, 2), block=(4, 2, 2)):
    """out[bx, by, bz, tx, ty, tz] = a code of every id: each axis of ctaid and tid is read."""
    shape = tuple(grid) + tuple(block)

    def body(b, out):
        _, k = gpu.launch_op(b, grid, block, "handmade")
        ids = [gpu.block_id(k, d) for d in range(3)] + [gpu.thread_id(k, d) for d in range(3)]
        code = idx(k, 0)
        for v in ids:
            code = op(k, "arith.add", op(k, "arith.mul", code, idx(k, 10)), v)
        store(k, op(k, "arith.cast", code, to=I32), out, *ids)
    m = module({"out": buf(shape, I32)}, ["out"], body)
    return m, {}


def pointwise(fn, el, n=300, block=128, binary=False):
    """y[i] = fn(x[i]) (or fn(x[i], z[i])) for i < n, one thread per element."""
    def body(b, x, z, y):
        _, k = gpu.launch_op(b, (-(-n // block), 1, 1), (block, 1, 1), "pointwise")
        i = lin_id(k, block)
        _, g = if_op(k, op(k, "arith.cmp", i, idx(k, n), predicate="lt"))
        args = [load(g, x, i)] + ([load(g, z, i)] if binary else [])
        store(g, fn(g, *args), y, i)
    return module({"x": buf((n,), el), "z": buf((n,), el), "y": buf((n,), el)}, ["y"], body)


MATH = ["exp", "log", "tanh", "erf", "sqrt", "abs", "floor", "ceil"]


def all_math(el, n=300, block=128):
    """One kernel per math op and one for pow, on ``el``."""
    def body(b, x, z, *ys):
        for name, y in zip(MATH + ["pow"], ys):
            _, k = gpu.launch_op(b, (-(-n // block), 1, 1), (block, 1, 1), name)
            i = lin_id(k, block)
            _, g = if_op(k, op(k, "arith.cmp", i, idx(k, n), predicate="lt"))
            xv = load(g, x, i)
            v = (op(g, "arith.pow", xv, load(g, z, i)) if name == "pow"
                 else op(g, f"math.{name}", xv))
            store(g, v, y, i)
    args = {"x": buf((n,), el), "z": buf((n,), el)}
    args.update({f"y_{name}": buf((n,), el) for name in MATH + ["pow"]})
    m = module(args, [a for a in args if a.startswith("y_")], body)
    rng = np.random.default_rng(1)
    x = (rng.random(n) * 4 + 0.01).astype(el.np_dtype)
    z = (rng.standard_normal(n) * 2).astype(el.np_dtype)
    return m, {"x": x, "z": z}


def mixed_types(n=257, block=64):
    """f16 loads and stores, f16->f32 math, int division, float->int casts, i1 in memory, i8,
    a loop.for with a carried value, a top-level constant read inside the launch."""
    def body(b, h, q, f, ib, y16, yi, yb, y8):
        three = c(b, 3, I64)  # top level: re-emitted in the kernel
        _, k = gpu.launch_op(b, (-(-n // block), 1, 1), (block, 1, 1), "pointwise")
        i = lin_id(k, block)
        _, g = if_op(k, op(k, "arith.cmp", i, idx(k, n), predicate="lt"))
        hv = load(g, h, i)
        e = op(g, "math.exp", op(g, "arith.cast", hv, to=F32))
        loop, fb, kk, (acc,) = for_loop(g, 0, 4, inits=[hv])
        fb.create("loop.yield", [op(fb, "arith.add", acc, load(fb, h, i))])
        store(g, op(g, "arith.add", op(g, "arith.cast", e, to=F16), loop.results[0]), y16, i)
        qv = load(g, q, i)
        store(g, op(g, "arith.add", op(g, "arith.div", qv, three),
                    op(g, "arith.cast", load(g, f, i), to=I64)), yi, i)
        bv = op(g, "arith.and", load(g, ib, i), op(g, "arith.cmp", qv, c(g, 0, I64),
                                                   predicate="gt"))
        store(g, bv, yb, i)
        store(g, op(g, "arith.cast", qv, to=I8), y8, i)
    m = module({"h": buf((n,), F16), "q": buf((n,), I64), "f": buf((n,), F32),
                "ib": buf((n,), I1), "y16": buf((n,), F16), "yi": buf((n,), I64),
                "yb": buf((n,), I1), "y8": buf((n,), I8)}, ["y16", "yi", "yb", "y8"], body)
    rng = np.random.default_rng(2)
    return m, {"h": rng.standard_normal(n).astype(np.float16),
               "q": rng.integers(-1000, 1000, n), "f": (rng.standard_normal(n) * 100
                                                        ).astype(np.float32),
               "ib": rng.random(n) < 0.5}


def two_launches_and_weights():
    """A scratch buffer written by one launch and read by the next, and a weight."""
    from ptxc.ir import DenseElements
    n = 64

    def body(b, x, y):
        w = b.create("loop.global", [], {"name": "w", "value": DenseElements(
            np.arange(n, dtype=np.float32))}, result_types=[buf((n,))]).result
        t = b.create("loop.alloc", [], None, result_types=[buf((n,))]).result
        _, k = gpu.launch_op(b, (1, 1, 1), (n, 1, 1), "pointwise")
        i = gpu.thread_id(k, 0)
        store(k, op(k, "arith.mul", load(k, x, i), load(k, w, i)), t, i)
        _, k = gpu.launch_op(b, (2, 1, 1), (n // 2, 1, 1), "pointwise")
        j = lin_id(k, n // 2)
        store(k, op(k, "arith.add", load(k, t, j), c(k, 1.0)), y, j)
    m = module({"x": buf((n,)), "y": buf((n,))}, ["y"], body)
    return m, {"x": np.random.default_rng(3).standard_normal(n).astype(np.float32)}


# ---- the hand-written launches: interpreter, LLVM, PTX, ptxas ----------------------------------

def test_block_sum_interprets_and_lowers():
    m, inputs = block_sum()
    got = run_main(m, inputs)["y"]
    x = np.concatenate([inputs["x"], np.zeros(24, np.float32)]).reshape(4, 256)
    np.testing.assert_allclose(got, x.sum(1), rtol=1e-5, atol=1e-5)
    prog = lower_loop_to_llvm(m, target="nvptx")
    text = prog.text
    assert 'define ptx_kernel void @"kernel_0"(ptr addrspace(1) noalias align 16 %"b0", ' \
           'ptr addrspace(1) noalias align 16 %"b1")' in text  # the runtime aligns to 256
    assert "internal addrspace(3) global [256 x float] undef, align 16" in text
    assert "llvm.nvvm.barrier.cta.sync.aligned.all" in text
    assert "llvm.nvvm.read.ptx.sreg.ctaid.x" in text and "llvm.nvvm.read.ptx.sreg.tid.x" in text
    assert '!"maxntidx", i32 256' in text and '!"nvvm-reflect-ftz", i32 0' in text
    (k,) = prog.table.kernels
    assert (k.name, k.grid, k.block, k.shared_bytes, k.schedule) == \
        ("kernel_0", (4, 1, 1), (256, 1, 1), 1024, "handmade")
    assert k.trip_count == 1 and not k.parallel and k.buffers == (0, 1)
    assert KernelTable.from_json(prog.table.to_json()) == prog.table


@needs_ptxas
def test_block_sum_assembles():
    m, _ = block_sum()
    p = lower_to_ptx(m, arch=ARCH)
    assert isinstance(p, PtxProgram) and p.arch == ARCH and p.kernel_names == ["kernel_0"]
    assert ".visible .entry kernel_0(" in p.ptx and ".maxntid 256, 1, 1" in p.ptx
    assert "bar.sync" in p.ptx and ".shared .align 16" in p.ptx
    assert "ld.global.nc" in p.ptx  # x is read-only and noalias: the read-only data cache
    rep = assemble(p.ptx, ARCH)
    r = rep.kernels["kernel_0"]
    assert r.shared_bytes == 1024 and r.barriers == 1 and r.spill_stores == 0
    assert 0 < r.registers <= 64


def block_sum_dynamic():
    """block_sum with a 64 KiB shared array: plain f32 loads and stores into dynamic shared."""
    return block_sum(span=16384)


@needs_ptxas
def test_plain_loads_and_stores_in_dynamic_shared_memory():
    """Dynamic shared memory is one extern byte array; a buffer placed in it is addressed as
    its element type, as a static array is (a plain f32 store into the i8 base failed: 'cannot
    store float to i8 addrspace(3)*', on ResNet-50's tf32 tiles)."""
    m, inputs = block_sum_dynamic()
    x = np.concatenate([inputs["x"], np.zeros(24, np.float32)]).reshape(4, 256)
    np.testing.assert_allclose(run_main(m, inputs)["y"], x.sum(1), rtol=1e-5, atol=1e-5)
    p = lower_to_ptx(m, arch=ARCH)
    (k,) = p.table.kernels
    assert k.dynamic_shared == k.shared_bytes == 65536
    assert f".extern .shared .align 16 .b8 {DYNAMIC_SHARED}[];" in p.ptx
    assert "st.shared.b32" in p.ptx and "ld.shared.b32" in p.ptx
    r = assemble(p.ptx, ARCH).kernels["kernel_0"]
    assert r.shared_bytes == 0 and r.barriers == 1 and r.spill_stores == 0


@needs_ptxas
def test_every_id_axis():
    m, _ = all_ids()
    got = run_main(m, {})["out"]
    g = np.indices(got.shape)
    want = sum(g[d] * 10 ** (5 - d) for d in range(6))
    np.testing.assert_array_equal(got, want)
    p = lower_to_ptx(m, arch=ARCH)
    for reg in ("ctaid.x", "ctaid.y", "ctaid.z", "tid.x", "tid.y", "tid.z"):
        assert f"%{reg}" in p.ptx, reg
    assert ".maxntid 4, 2, 2" in p.ptx
    (k,) = p.table.kernels
    assert k.grid == (2, 3, 2) and k.block == (4, 2, 2) and k.shared_bytes == 0
    assemble(p.ptx, ARCH)


def _calls(ptx: str) -> set[str]:
    return set(re.findall(r"^\s*call(?:\.uni)?\s+(?:\([^)]*\),\s*)?(\w+)", ptx, re.M))


@needs_ptxas
@pytest.mark.parametrize("el", [F32, F64, F16], ids=str)
def test_every_math_op_assembles(el):
    m, inputs = all_math(el)
    want = run_main(m, inputs)  # the module is a correct program
    assert set(want) == {f"y_{n}" for n in MATH + ["pow"]}
    prog = lower_loop_to_llvm(m, target="nvptx")
    suffix = "" if el == F64 else "f"
    for name in MATH:
        if name == "sqrt":  # llvm.sqrt is sqrt.rn; libdevice's is approximate by default
            assert "@\"llvm.sqrt." in prog.text and "__nv_sqrt" not in prog.text
            continue
        stem = "fabs" if name == "abs" else name
        assert f'@"__nv_{stem}{suffix}"' in prog.text, name
    assert f'@"__nv_pow{suffix}"' in prog.text
    p = lower_to_ptx(m, arch=ARCH)
    assert len(p.table.kernels) == 9 and [k.schedule for k in p.table.kernels] == MATH + ["pow"]
    # libdevice is inlined, reflect folded, nothing of it left behind
    assert "__nvvm_reflect" not in p.ptx and "__nv_" not in p.ptx
    # what is not inlined (pow's big internal helpers) is defined in the module, not external
    for callee in _calls(p.ptx):
        assert re.search(rf"\.func .*\b{callee}\(", p.ptx) and ".extern" not in p.ptx, callee
    assert p.ptx.count(".entry") == 9
    if el == F32:  # f32 math stays f32 (no f64 detour), sqrt correctly rounded
        assert ".f64" not in p.ptx and "sqrt.rn.f32" in p.ptx and "sqrt.approx" not in p.ptx
    rep = assemble(p.ptx, ARCH)
    assert sorted(rep.kernels) == sorted(p.kernel_names)
    assert all(r.spill_stores == 0 and r.stack_bytes == 0 for r in rep.kernels.values())


@needs_ptxas
def test_types_casts_and_top_level_scalars():
    m, inputs = mixed_types()
    want = run_main(m, inputs)
    np.testing.assert_array_equal(want["yi"], np.trunc(inputs["q"] / 3).astype(np.int64)
                                  + np.trunc(inputs["f"]).astype(np.int64))
    np.testing.assert_array_equal(want["yb"], inputs["ib"] & (inputs["q"] > 0))
    p = lower_to_ptx(m, arch=ARCH)
    assert "ld.global.nc.b16" in p.ptx or "ld.global.nc.u16" in p.ptx or \
        "ld.global.nc.f16" in p.ptx  # f16 loads are 16-bit
    assert "cvt.rn.f16.f32" in p.ptx and "st.global.b8" in p.ptx or "st.global.u8" in p.ptx
    assemble(p.ptx, ARCH)


@needs_ptxas
def test_kernel_table_of_two_launches():
    m, inputs = two_launches_and_weights()
    want = run_main(m, inputs)["y"]
    np.testing.assert_allclose(want, inputs["x"] * np.arange(64) + 1, rtol=1e-6)
    p = lower_to_ptx(m, arch=ARCH)
    t = p.table
    assert [k.name for k in t.kernels] == ["kernel_0", "kernel_1"]
    assert [(k.grid, k.block) for k in t.kernels] == [((1, 1, 1), (64, 1, 1)),
                                                      ((2, 1, 1), (32, 1, 1))]
    assert [s.kind for s in t.slots] == ["arg", "arg", "global", "alloc"]
    assert [k.buffers for k in t.kernels] == [(0, 2, 3), (3, 1)]
    assert [(s.first, s.last) for s in t.slots] == [(0, 0), (1, 1), (0, 0), (0, 1)]
    assert set(p.globals) == {"w"} and p.globals["w"][5] == 5
    assert KernelTable.from_json(t.to_json()) == t
    assert "define ptx_kernel" in p.llvm_text and ".entry kernel_1(" in p.ptx
    assemble(p.ptx, ARCH)


# ---- errors ------------------------------------------------------------------------------------

def test_an_unmapped_nest_is_a_compile_error():
    def body(b, x, y):
        _, p, (i,) = parallel_loop(b, (0,), (8,), loc="relu_1")
        store(p, load(p, x, i), y, i)
    m = module({"x": buf((8,)), "y": buf((8,))}, ["y"], body)
    with pytest.raises(CompileError, match=r"loop.parallel.*relu_1.*map-to-gpu"):
        lower_loop_to_llvm(m, target="nvptx")
    with pytest.raises(CompileError, match="map-to-gpu"):
        lower_to_ptx(m, arch=ARCH)
    with pytest.raises(CompileError, match="unknown target"):
        lower_loop_to_llvm(m, target="amdgpu")
    # and the CPU path refuses a launch
    m2, _ = block_sum()
    with pytest.raises(CompileError, match="gpu.launch"):
        lower_loop_to_llvm(m2)


def test_missing_libdevice_says_where_it_looked(monkeypatch, tmp_path):
    from ptxc.ptx import libdevice
    monkeypatch.setenv("PTXC_LIBDEVICE", str(tmp_path / "nope.bc"))
    with pytest.raises(CompileError, match=r"PTXC_LIBDEVICE.*nope.bc"):
        libdevice.find_libdevice()
    monkeypatch.delenv("PTXC_LIBDEVICE")
    monkeypatch.setattr(libdevice, "_candidates", lambda: iter([("$CUDA_HOME=None", None),
                                                                ("numba-cuda", None)]))
    with pytest.raises(CompileError, match=r"libdevice.*not found.*CUDA_HOME.*numba-cuda"):
        lower_to_ptx(all_math(F32)[0], arch=ARCH)
    # a module that calls no math does not need it
    assert ".entry kernel_0" in lower_to_ptx(block_sum()[0], arch=ARCH).ptx


def test_arch_and_defaults(monkeypatch):
    monkeypatch.setenv("PTXC_CUDA_ARCH", "sm_80")
    assert default_arch() == "sm_80"
    monkeypatch.setenv("PTXC_CUDA_ARCH", "volta")
    with pytest.raises(CompileError, match="volta"):
        default_arch()
    monkeypatch.delenv("PTXC_CUDA_ARCH")
    assert re.fullmatch(r"sm_\d+", default_arch())
    p = lower_to_ptx(block_sum()[0], arch="sm_80")
    assert ".target sm_80" in p.ptx and ".version 8.0" in p.ptx
    with pytest.raises(CompileError, match="opt_level"):
        lower_to_ptx(block_sum()[0], arch=ARCH, opt_level=5)


@needs_ptxas
def test_opt_levels_all_assemble():
    m, _ = all_math(F32)
    for level in (0, 1, 2):
        p = lower_to_ptx(m, arch=ARCH, opt_level=level)
        assert "__nvvm_reflect" not in p.ptx
        assemble(p.ptx, ARCH)


@needs_ptxas
def test_ptxas_rejects_bad_ptx_with_its_message():
    p = lower_to_ptx(block_sum()[0], arch=ARCH)
    bad = p.ptx.replace("bar.sync", "bar.snyc")
    with pytest.raises(CompileError, match=r"ptxas.*rejected"):
        assemble(bad, ARCH)


def test_ptxas_report_parsing():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'kernel_0' for 'sm_90'
ptxas info    : Function properties for kernel_0
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 368 bytes cmem[0]
ptxas info    : Compiling entry function 'kernel_1' for 'sm_90'
ptxas info    : Function properties for kernel_1
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]
"""
    rep = parse_report(log, "sm_90")
    k0, k1 = rep.kernels["kernel_0"], rep.kernels["kernel_1"]
    assert (k0.registers, k0.shared_bytes, k0.stack_bytes, k0.spill_stores, k0.spill_loads,
            k0.barriers) == (40, 2048, 8, 4, 12, 1)
    assert (k1.registers, k1.shared_bytes, k1.spill_loads) == (8, 0, 0)
    assert rep.spills == 16


# ---- mapped modules: graph -> tensor -> loop -> map-to-gpu -> PTX -> ptxas --------------------

def mapped(model, **import_kw):
    """A model (path, ModelProto or Network) through every stage of the cuda target up to the
    mapped loop IR."""
    import ptxc
    from ptxc.compiler import as_module, run_stages
    return run_stages(as_module(model, **import_kw), "loop", target="cuda")


def check_mapped_ptx(m, arch=ARCH):
    """The PTX of a mapped module: one entry per gpu.launch, in order, with the launch's shape in
    the table; ptxas assembles it. Returns (program, ptxas report)."""
    from ptxc.dialects.func import func_body, get_func
    launches = [op for op in func_body(get_func(m, "main")).ops if op.name == "gpu.launch"]
    assert launches, "map-to-gpu made no launch"
    p = lower_to_ptx(m, arch=arch)
    t = p.table
    assert [k.name for k in t.kernels] == [f"kernel_{i}" for i in range(len(launches))]
    for k, op in zip(t.kernels, launches):
        assert k.grid == tuple(op.attributes["grid"]) and k.block == tuple(op.attributes["block"])
        assert k.schedule == op.attributes["schedule"] and k.loc == op.loc
        assert k.shared_bytes == gpu.shared_bytes(op) or k.shared_bytes >= gpu.shared_bytes(op)
        assert k.trip_count == 1 and not k.parallel
        assert f".entry {k.name}(" in p.ptx
        bx, by, bz = k.block
        assert f".maxntid {bx}, {by}, {bz}" in p.ptx
    assert "__nvvm_reflect" not in p.ptx
    # the one extern a module may declare is the dynamic shared array of kernels over 48 KiB,
    # aligned for the most any buffer asks: 1024 bytes for wgmma's swizzled tiles
    externs = [ln.strip() for ln in p.ptx.splitlines() if ln.lstrip().startswith(".extern")]
    align = 1024 if any(k.schedule == "wgmma" for k in t.kernels) else 16
    assert externs == ([f".extern .shared .align {align} .b8 {DYNAMIC_SHARED}[];"]
                       if any(k.dynamic_shared for k in t.kernels) else []), externs
    rep = assemble(p.ptx, p.arch)      # sm_90a where a kernel is wgmma's
    assert sorted(rep.kernels) == sorted(p.kernel_names)
    for k in t.kernels:
        # ptxas counts static shared memory; a dynamic kernel's is sized at launch instead
        assert k.dynamic_shared in (0, k.shared_bytes), k.name
        static = k.shared_bytes - k.dynamic_shared
        # (the table counts ptxas's padding of static shared memory to a 1024-aligned extern)
        assert rep.kernels[k.name].shared_bytes == static, k.name
    return p, rep


def _resources_line(name, p, rep) -> str:
    regs = [r.registers for r in rep.kernels.values()]
    spilled = [n for n, r in rep.kernels.items() if r.spill_stores or r.spill_loads]
    sched = {}
    for k in p.table.kernels:
        sched[k.schedule] = sched.get(k.schedule, 0) + 1
    return (f"{name}: {len(regs)} kernels {sched}, registers max {max(regs)} median "
            f"{int(np.median(regs))}, spilling kernels {len(spilled)} ({rep.spills} bytes), "
            f"PTX {len(p.ptx) // 1024} KiB, cubin {rep.cubin_bytes // 1024} KiB")


@needs_ptxas
@pytest.mark.slow
@pytest.mark.parametrize("name", __import__("support.light_models").light_models.NAMES)
def test_light_model_ptx_assembles(name):
    from support import light_models as lm
    m = mapped(lm.path(name))
    p, rep = check_mapped_ptx(m)
    print("\n" + _resources_line(name, p, rep))


@needs_ptxas
def test_random_graphs_ptx_assembles():
    from hypothesis import HealthCheck, given, settings
    from property.strategies import graphs

    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
    @given(graphs(max_layers=4))
    def run(case):
        check_mapped_ptx(mapped(case.network))
    run()


# ---- on a GPU: the PTX computes what the interpreter computes ---------------------------------

def run_on_gpu(p: PtxProgram, inputs: dict) -> dict:
    """Run a PtxProgram's kernels in order on the current GPU (numba-cuda loads the PTX,
    cuda.core launches): inputs and weights copied in, scratch and outputs NaN-filled (so an
    unwritten element shows), outputs copied back. Arguments must have the default layout."""
    import cuda.core as cc
    from numba import cuda

    from ptxc.dialects.loop_memory import allocate
    t = p.table
    host = []
    for s in t.slots:
        if s.kind == "arg":
            assert s.type.is_default_layout, s
            host.append(np.ascontiguousarray(inputs[s.name]).reshape(-1) if s.name in inputs
                        else allocate(s.type).reshape(-1))
        elif s.kind == "global":
            host.append(np.ascontiguousarray(p.globals[s.name]).reshape(-1))
        else:
            host.append(np.full(max(s.span, 1), np.nan if np.dtype(s.dtype).kind == "f" else 0,
                                s.dtype))
    dev = [cuda.to_device(h if h.size else np.zeros(1, h.dtype)) for h in host]
    mod = cuda.current_context().create_module_ptx(p.ptx)
    stream = cc.Device().create_stream()
    from ptxc.driver.cuda import launch_config, load_kernel
    for k in t.kernels:
        cc.launch(stream, launch_config(k), load_kernel(mod, k),
                  *[dev[i].device_ctypes_pointer.value for i in k.buffers])
    stream.sync()
    out = {}
    for s, d in zip(t.slots, dev):
        if s.kind == "arg" and s.name in t.outputs:
            out[s.name] = d.copy_to_host()[:s.span].reshape(s.shape)
    return out


def ulps(a, b):
    from test_loop_to_llvm import ulps as u
    return u(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["block_sum", "block_sum_dynamic", "all_ids", "mixed_types",
                                  "two_launches_and_weights"])
def test_handmade_launches_on_gpu(case):
    m, inputs = globals()[case]()
    want = run_main(m, inputs)
    got = run_on_gpu(lower_to_ptx(m), inputs)
    for k in want:
        if case.startswith("block_sum"):  # a tree sum: another order of additions than numpy's
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.mark.gpu
@pytest.mark.parametrize("el", [F32, F64, F16], ids=str)
def test_math_on_gpu_within_ulps_of_numpy(el):
    """libdevice against numpy (the interpreter): exact for sqrt/abs/floor/ceil, a few ulps for
    the transcendental functions (libdevice's documented bounds: 2 ulp exp/log/tanh/erf f32,
    pow 2 ulp f32; f64 1-2 ulp; f16 rounds an f32 result)."""
    m, inputs = all_math(el, n=2000)
    want = run_main(m, inputs)
    got = run_on_gpu(lower_to_ptx(m), inputs)
    for name in MATH + ["pow"]:
        k = f"y_{name}"
        d = ulps(got[k], want[k]).max()
        exact = name in ("sqrt", "abs", "floor", "ceil")
        assert d <= (0 if exact else 1 if el == F16 else 4), (name, d)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(__import__("test_loop_dialect").PROGRAMS))
def test_loop_programs_mapped_run_on_gpu(name):
    """Every hand-written loop program of tests/test_loop_dialect.py, mapped by map-to-gpu, runs
    on the GPU to the interpreter's answer (exp within 4 ulps, all else exact)."""
    from test_loop_dialect import PROGRAMS

    from ptxc.rewrite import PassManager
    m, inputs, _ = PROGRAMS[name]()
    want = run_main(m, inputs)
    PassManager("map-to-gpu").run(m)
    got = run_on_gpu(lower_to_ptx(m), inputs)
    for k in want:
        if name == "softmax":
            assert ulps(got[k], want[k]).max() <= 4, k
        else:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("name", ["squeezenet", "inception_v1"])
def test_light_model_ptx_on_gpu_gives_the_expected_output(name):
    from support import light_models as lm
    model = lm.load(name)
    p = lower_to_ptx(mapped(lm.path(name)))
    (out,) = run_on_gpu(p, lm.dummy_inputs(model)).values()
    np.testing.assert_allclose(out, lm.expected_output(name), rtol=1e-3, atol=1e-7)


# ---- libdevice parsed once per process ------------------------------------------------------
def test_emission_declares_only_the_listed_libdevice_functions():
    """The part of libdevice kept parsed (libdevice_functions) holds every __nv_ function the
    emission declares, for every math op, pow and the f32/f64 forms (f16 goes through f32)."""
    from ptxc.ptx.libdevice import TRIG as _TRIG, libdevice_functions
    declared = set()
    for el in (F32, F64):
        m, _ = all_math(el)
        declared |= set(re.findall(r'@"(__nv_\w+)"', lower_loop_to_llvm(m, target="nvptx").text))
    assert declared and declared <= libdevice_functions()
    assert {f"__nv_{t}{s}" for t in _TRIG for s in ("", "f")} <= libdevice_functions()


def _kernel_texts(m):
    from ptxc.ptx.split import kernel_modules
    p = lower_loop_to_llvm(m, target="nvptx")
    return kernel_modules(p.module, p.table.kernels, p.twins)


def test_trimmed_libdevice_links_to_the_same_ptx(monkeypatch):
    """Linking the kept part of libdevice and linking the whole library give the same PTX."""
    from ptxc.ptx import libdevice
    m, _ = all_math(F32)
    full0 = libdevice.stats["full_parses"]
    trimmed = lower_to_ptx(m, arch=ARCH).ptx
    assert libdevice.stats["full_parses"] <= full0 + 1   # at most the one parse of the process
    monkeypatch.setattr(libdevice, "libdevice_functions", lambda: frozenset())
    before = libdevice.stats["full_parses"]
    whole = lower_to_ptx(m, arch=ARCH).ptx                # a name outside the set: whole library
    # (each kernel's module links it: one whole parse per kernel module that calls it)
    assert libdevice.stats["full_parses"] == before + len(set(
        __import__("ptxc.ptx.split", fromlist=["x"]).key(t) for t in _kernel_texts(m)))
    assert trimmed == whole and "__nv_" not in trimmed


def test_libdevice_is_parsed_once_under_threads(monkeypatch):
    import threading

    from ptxc.ptx import libdevice
    path = libdevice.find_libdevice()
    monkeypatch.setattr(libdevice, "_TRIMMED", {})
    monkeypatch.setitem(libdevice.stats, "full_parses", 0)
    got, barrier = [], threading.Barrier(4)

    def work():
        barrier.wait()
        got.append(libdevice.trimmed_bitcode(path))
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert libdevice.stats["full_parses"] == 1 and len(set(got)) == 1 and len(got) == 4
    m, _ = all_math(F64)
    lower_to_ptx(m, arch=ARCH)
    lower_to_ptx(m, arch=ARCH)
    assert libdevice.stats["full_parses"] == 1          # links parse the kept bitcode only
    # the kept part is far smaller than the library, and defines every listed function
    import llvmlite.binding as llvm
    from ptxc.ptx.libdevice import libdevice_functions
    assert len(got[0]) < os.path.getsize(path) / 4
    defined = {f.name for f in llvm.parse_bitcode(got[0]).functions if not f.is_declaration}
    assert libdevice_functions() <= defined
