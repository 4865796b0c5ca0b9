"""A wgmma (sm_90a) fp16 GEMM, written directly as LLVM IR: can Hopper's warpgroup MMA reach
issue 9's GEMM bar (0.6x cuBLAS at 4096^3) where ptxc's mma.sync schedule stops at 0.50x?

A prototype outside the compiler, as the mma.sync one was before the mma schedule existed
(docs/design.md, "Facts checked on the GPU"). It measures the instruction route before the mma
schedule takes it. ``C[M, N] = A[M, K] @ B[N, K]^T`` in f16 with f32 accumulation. Both operands
are K-major, as ptxc stores a constant weight ``[N, K]``.

* CTA tile 128 x BN x 64 (BN = 128 or 256), two warpgroups (256 threads). Each warpgroup owns 64
  rows and issues ``wgmma.mma_async.sync.aligned.m64n{BN}k16.f32.f16.f16`` four times per K tile.
  It holds BN/2 f32 accumulators per thread.
* ``STAGES`` K tiles in dynamic shared memory, filled by 16-byte ``cp.async`` of all threads
  (no TMA yet). A stage is stored in the 128-byte swizzle that wgmma's descriptors name: row r's
  16-byte chunk c sits at ``r*128 + (c ^ (r % 8))*16``, and the tile is 1024-aligned.
* Descriptors (PTX ISA, "Matrix Descriptor Format"): the start address >> 4; LBO = 1, unused
  for a swizzled K-major operand; SBO = 1024 B >> 4, the stride between 8-row groups; swizzle
  mode 1 (128 B) in bits 62-63. A k16 step inside the 64-wide tile adds 32 bytes to the start.
* Per K tile: ``cp.async.wait_group(STAGES-2)``, barrier, ``wgmma.fence``, four wgmma,
  ``commit_group``, ``wait_group 0``. The wait is inline asm that takes and returns every
  accumulator, so that no use of them moves above it (Triton does the same; docs/design.md). Then
  the copies of tile ``kt + STAGES - 1`` are issued into the stage that tile ``kt - 1`` used
  (zero-filled past K).
* Epilogue: the accumulators as f16 pairs, each warp holding 16 rows in the m16n8 C-fragment
  pattern repeated over BN/8 column blocks.

    python3 bench/wgmma_gemm.py --ptxas                # no GPU: registers/spills per variant
    OUT=dir python3 bench/wgmma_gemm.py [--shape 4096x4096x4096]   # GPU: check, time vs cuBLAS

Prints a table and writes wgmma_gemm.json: variant, µs, TFLOP/s, ratio against torch.matmul,
and the max relative error against it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

BM, BK, THREADS = 128, 64, 256
ARCH = "sm_90a"
#: (BN, STAGES) variants: the shared memory per CTA is STAGES * (BM + BN) * BK * 2 bytes
VARIANTS = [(128, 4), (128, 6), (256, 3), (256, 4)]


def smem_bytes(bn: int, stages: int) -> int:
    return stages * (BM + bn) * BK * 2


def kernel_ir(bn: int, stages: int, M: int, K: int, N: int) -> str:
    """The LLVM IR text of the kernel ``wgmma_gemm`` for tile 128 x ``bn`` x 64 and ``stages``
    (shapes fixed: M % 128 == N % bn == K % 64 == 0)."""
    assert M % BM == 0 and N % bn == 0 and K % BK == 0 and K // BK >= stages - 1
    regs = bn // 2                       # f32 accumulators per thread (m64 x bn / 128 threads)
    a_bytes = BM * BK * 2
    stage_bytes = (BM + bn) * BK * 2
    kt_total = K // BK
    L: list[str] = []
    emit = L.append
    facc = "{" + ", ".join(["float"] * regs) + "}"

    def ssa(prefix, i):
        return f"%{prefix}{i}"

    # ---- copies of one K tile into one stage: every thread its share of 16-byte chunks
    def copies(tag: str, kt: str, stage: str, live: str) -> None:
        """Emit the cp.async of K tile ``kt`` (i32 SSA) into ``stage`` (i32 SSA); ``live``
        (i32 SSA: 16 or 0) is the source size (0: zero-fill, nothing read)."""
        emit(f"  %{tag}.sb = mul i32 {stage}, {stage_bytes}")
        emit(f"  %{tag}.kb = mul i32 {kt}, {BK}")
        for op, rows, row0, base, off in (("a", BM, "%m0", "%A", 0), ("b", bn, "%n0", "%B", a_bytes)):
            for i in range(rows * 8 // THREADS):
                t = f"{tag}.{op}{i}"
                emit(f"  %{t}.q = add i32 %tid, {i * THREADS}")
                emit(f"  %{t}.r = lshr i32 %{t}.q, 3")
                emit(f"  %{t}.c = and i32 %{t}.q, 7")
                emit(f"  %{t}.gr = add i32 {row0}, %{t}.r")
                emit(f"  %{t}.gr64 = zext i32 %{t}.gr to i64")
                emit(f"  %{t}.rowoff = mul i64 %{t}.gr64, {K}")
                emit(f"  %{t}.c8 = shl i32 %{t}.c, 3")
                emit(f"  %{t}.col = add i32 %{tag}.kb, %{t}.c8")
                emit(f"  %{t}.col64 = zext i32 %{t}.col to i64")
                emit(f"  %{t}.el = add i64 %{t}.rowoff, %{t}.col64")
                emit(f"  %{t}.src = getelementptr half, ptr addrspace(1) {base}, i64 %{t}.el")
                emit(f"  %{t}.r7 = and i32 %{t}.r, 7")
                emit(f"  %{t}.sw = xor i32 %{t}.c, %{t}.r7")
                emit(f"  %{t}.sw16 = shl i32 %{t}.sw, 4")
                emit(f"  %{t}.r128 = shl i32 %{t}.r, 7")
                emit(f"  %{t}.o1 = add i32 %{t}.r128, %{t}.sw16")
                emit(f"  %{t}.o2 = add i32 %{t}.o1, %{tag}.sb")
                emit(f"  %{t}.o3 = add i32 %{t}.o2, {off}")
                emit(f"  %{t}.dst = getelementptr i8, ptr addrspace(3) @smem, i32 %{t}.o3")
                emit(f"  call void @llvm.nvvm.cp.async.cg.shared.global.16.s(ptr addrspace(3) "
                     f"%{t}.dst, ptr addrspace(1) %{t}.src, i32 {live})")
        emit("  call void @llvm.nvvm.cp.async.commit.group()")

    def desc(tag: str, addr: str) -> str:
        """An i64 descriptor SSA for shared address ``addr`` (i32 SSA), 128-byte swizzle."""
        emit(f"  %{tag}.a = lshr i32 {addr}, 4")
        emit(f"  %{tag}.a14 = and i32 %{tag}.a, 16383")
        emit(f"  %{tag}.a64 = zext i32 %{tag}.a14 to i64")
        const = (1 << 16) | (64 << 32) | (1 << 62)
        emit(f"  %{tag} = or i64 %{tag}.a64, {const}")
        return f"%{tag}"

    outs = ",".join(["=f"] * regs)
    ties = ",".join(str(i) for i in range(regs))
    acc_list = ", ".join(f"$" + str(i) for i in range(regs))
    wgmma_asm = ("{\\0A.reg .pred p;\\0Asetp.ne.b32 p, $" + str(regs + 2) + ", 0;\\0A"
                 f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.f16.f16 {{{acc_list}}}, "
                 f"${regs}, ${regs + 1}, p, 1, 1, 0, 0;\\0A}}")
    wgmma_cons = f"{outs},l,l,r,{ties}"
    wait_cons = f"{outs},{ties}"

    emit('target triple = "nvptx64-nvidia-cuda"')
    emit("@smem = external addrspace(3) global [0 x i8], align 1024")
    for d in ("declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
              "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()",
              "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()",
              "declare void @llvm.nvvm.cp.async.cg.shared.global.16.s(ptr addrspace(3), "
              "ptr addrspace(1), i32)",
              "declare void @llvm.nvvm.cp.async.commit.group()",
              "declare void @llvm.nvvm.cp.async.wait.group(i32)",
              "declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)"):
        emit(d)
    emit("define ptx_kernel void @wgmma_gemm(ptr addrspace(1) noalias align 16 %A, "
         "ptr addrspace(1) noalias align 16 %B, ptr addrspace(1) noalias align 16 %C) {")
    emit("entry:")
    emit("  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()")
    emit("  %bx = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()")
    emit("  %by = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()")
    emit(f"  %m0 = mul i32 %by, {BM}")
    emit(f"  %n0 = mul i32 %bx, {bn}")
    emit("  %wg = lshr i32 %tid, 7")
    emit("  %sbase = ptrtoint ptr addrspace(3) @smem to i32")
    emit(f"  %wga = mul i32 %wg, {64 * 128}")
    for s in range(stages - 1):
        copies(f"p{s}", str(s), str(s), "16")
    emit("  br label %loop")

    emit("loop:")
    emit(f"  %kt = phi i32 [0, %entry], [%kt.next, %loop]")
    for i in range(regs):
        emit(f"  %acc{i} = phi float [0.0, %entry], [%w{i}, %loop]")
    emit(f"  call void @llvm.nvvm.cp.async.wait.group(i32 {stages - 2})")
    emit("  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)")
    emit(f"  %stage = urem i32 %kt, {stages}")
    emit(f"  %soff = mul i32 %stage, {stage_bytes}")
    emit("  %sa0 = add i32 %sbase, %soff")
    emit("  %sa = add i32 %sa0, %wga")
    emit(f"  %sb = add i32 %sa0, {a_bytes}")
    emit('  call void asm sideeffect "wgmma.fence.sync.aligned;", "~{memory}"()')
    cur = [ssa("acc", i) for i in range(regs)]
    for kk in range(BK // 16):
        emit(f"  %ka{kk} = add i32 %sa, {kk * 32}")
        emit(f"  %kb{kk} = add i32 %sb, {kk * 32}")
        da = desc(f"da{kk}", f"%ka{kk}")
        db = desc(f"db{kk}", f"%kb{kk}")
        args = ", ".join(f"float {v}" for v in cur)
        emit(f'  %mm{kk} = call {facc} asm sideeffect "{wgmma_asm}", "{wgmma_cons}"'
             f"(i64 {da}, i64 {db}, i32 1, {args})")
        cur = []
        for i in range(regs):
            emit(f"  %m{kk}.{i} = extractvalue {facc} %mm{kk}, {i}")
            cur.append(f"%m{kk}.{i}")
    emit('  call void asm sideeffect "wgmma.commit_group.sync.aligned;", "~{memory}"()')
    args = ", ".join(f"float {v}" for v in cur)
    emit(f'  %wt = call {facc} asm sideeffect "wgmma.wait_group.sync.aligned 0;", '
         f'"{wait_cons},~{{memory}}"({args})')
    for i in range(regs):
        emit(f"  %w{i} = extractvalue {facc} %wt, {i}")
    emit(f"  %ktn = add i32 %kt, {stages - 1}")
    emit(f"  %more = icmp ult i32 %ktn, {kt_total}")
    emit("  %live = select i1 %more, i32 16, i32 0")
    emit(f"  %ktc = select i1 %more, i32 %ktn, i32 0")
    emit(f"  %nstage = urem i32 %ktn, {stages}")
    copies("n", "%ktc", "%nstage", "%live")
    emit("  %kt.next = add i32 %kt, 1")
    emit(f"  %again = icmp ult i32 %kt.next, {kt_total}")
    emit("  br i1 %again, label %loop, label %done")

    emit("done:")
    emit("  %lane = and i32 %tid, 31")
    emit("  %warp = lshr i32 %tid, 5")
    emit("  %wrow = mul i32 %warp, 16")           # warps 0-3: WG 0's rows, 4-7: WG 1's
    emit("  %l4 = lshr i32 %lane, 2")
    emit("  %row0 = add i32 %m0, %wrow")
    emit("  %row = add i32 %row0, %l4")
    emit("  %row8 = add i32 %row, 8")
    emit("  %lc = and i32 %lane, 3")
    emit("  %lc2 = shl i32 %lc, 1")
    emit("  %col0 = add i32 %n0, %lc2")
    for half, r in ((0, "%row"), (1, "%row8")):
        emit(f"  %r64.{half} = zext i32 {r} to i64")
        emit(f"  %roff.{half} = mul i64 %r64.{half}, {N}")
    for j in range(bn // 8):
        emit(f"  %col.{j} = add i32 %col0, {8 * j}")
        emit(f"  %c64.{j} = zext i32 %col.{j} to i64")
        for half in (0, 1):
            i0 = 4 * j + 2 * half
            t = f"e{j}.{half}"
            emit(f"  %{t}.x = fptrunc float %w{i0} to half")
            emit(f"  %{t}.y = fptrunc float %w{i0 + 1} to half")
            emit(f"  %{t}.v0 = insertelement <2 x half> undef, half %{t}.x, i32 0")
            emit(f"  %{t}.v = insertelement <2 x half> %{t}.v0, half %{t}.y, i32 1")
            emit(f"  %{t}.el = add i64 %roff.{half}, %c64.{j}")
            emit(f"  %{t}.p = getelementptr half, ptr addrspace(1) %C, i64 %{t}.el")
            emit(f"  store <2 x half> %{t}.v, ptr addrspace(1) %{t}.p, align 4")
    emit("  ret void")
    emit("}")
    emit("!nvvm.annotations = !{!0, !1}")
    emit(f'!0 = !{{ptr @wgmma_gemm, !"maxntidx", i32 {THREADS}}}')
    emit('!1 = !{ptr @wgmma_gemm, !"minctasm", i32 1}')
    return "\n".join(L) + "\n"


def kernel_ptx(bn: int, stages: int, M: int, K: int, N: int) -> str:
    from ptxc.ptx import optimize_nvptx
    from ptxc.ptx.target import target_machine
    mod = optimize_nvptx(kernel_ir(bn, stages, M, K, N), ARCH, 3, ["wgmma_gemm"])
    return target_machine(ARCH).emit_assembly(mod)


def ptxas_rows(M, K, N) -> list[dict]:
    from ptxc.ptx import assemble
    rows = []
    for bn, stages in VARIANTS:
        rep = assemble(kernel_ptx(bn, stages, M, K, N), ARCH).kernels["wgmma_gemm"]
        rows.append({"bn": bn, "stages": stages, "smem": smem_bytes(bn, stages),
                     "registers": rep.registers, "spill_stores": rep.spill_stores,
                     "spill_loads": rep.spill_loads})
        print(rows[-1], flush=True)
    return rows



def run_gpu(M, K, N) -> list[dict]:
    import cuda.core as cc
    import torch
    from numba import cuda
    from numba.cuda.cudadrv.driver import binding, driver

    from gemm import time_queue   # bench/gemm.py: the same timing as the mma.sync GEMM's
    torch.manual_seed(0)
    a = torch.randn(M, K, dtype=torch.float16, device="cuda")
    b = torch.randn(N, K, dtype=torch.float16, device="cuda")
    ref = torch.matmul(a, b.t())
    t_ref = time_queue(lambda: torch.matmul(a, b.t()), torch.cuda.synchronize)
    flops = 2 * M * N * K
    rows = []
    device = cc.Device()
    device.set_current()          # torch's primary context; cuda.core needs it named current
    stream = device.create_stream()
    for bn, stages in VARIANTS:
        row = {"bn": bn, "stages": stages, "smem": smem_bytes(bn, stages)}
        try:
            # NaN first: an empty tensor can reuse the block of a freed torch.matmul result, and
            # then a kernel that wrote nothing would read as exact
            c = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
            mod = cuda.current_context().create_module_ptx(kernel_ptx(bn, stages, M, K, N))
            fn = mod.get_function("wgmma_gemm")
            attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            driver.cuKernelSetAttribute(attr, smem_bytes(bn, stages), fn.handle, fn.device.id)
            cfg = cc.LaunchConfig(grid=(N // bn, M // BM, 1), block=(THREADS, 1, 1),
                                  shmem_size=smem_bytes(bn, stages))
            args = (a.data_ptr(), b.data_ptr(), c.data_ptr())

            def launch():
                cc.launch(stream, cfg, fn.kernel, *args)
            torch.cuda.synchronize()
            launch()
            stream.sync()
            err = float((c.float() - ref.float()).abs().max() / ref.float().abs().max())
            sec = time_queue(launch, stream.sync)
            row.update({"us": sec * 1e6, "tflops": flops / sec / 1e12,
                        "cublas_us": t_ref * 1e6, "cublas_tflops": flops / t_ref / 1e12,
                        "ratio": t_ref / sec, "max_rel_err": err})
        except Exception as e:  # noqa: BLE001  (recorded; the next variant still runs)
            row["error"] = f"{type(e).__name__}: {e}"[:1500]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4096x4096x4096", help="MxKxN")
    ap.add_argument("--ptxas", action="store_true", help="no GPU: assemble every variant")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    M, K, N = map(int, args.shape.split("x"))
    rows = ptxas_rows(M, K, N) if args.ptxas else run_gpu(M, K, N)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "wgmma_gemm.json"), "w") as f:
        json.dump({"shape": [M, K, N], "arch": ARCH, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
