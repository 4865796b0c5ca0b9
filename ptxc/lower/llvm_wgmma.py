"""NVPTX emission of the gpu dialect's warpgroup ops (ptxc/dialects/gpu_wgmma.py), for
loop_to_llvm's GPU kernels. The PTX needs target ``sm_90a`` (:func:`ptxc.codegen.lower_to_ptx`
raises the arch of a program holding a wgmma kernel from sm_90 to sm_90a).

=====================  ===================================================================
``gpu.wgmma``          inline PTX ``wgmma.mma_async.sync.aligned.m64nNk16.f32.f16.f16`` or
                       ``.m64nNk32.s32.s8.s8`` (LLVM 22 has no intrinsic for it): ``N / 2``
                       f32 / i32 outputs tied to the accumulator inputs, the two i64
                       descriptors, scale-d as a predicate (the s8 form has no imm-scale
                       or transpose operands)
``gpu.wgmma_fence``    inline ``wgmma.fence.sync.aligned`` (a memory clobber)
``gpu.wgmma_commit``   inline ``wgmma.commit_group.sync.aligned``
``gpu.wgmma_wait``     inline ``wgmma.wait_group.sync.aligned N`` whose outputs are its inputs
                       (tied): every read of an accumulator is a read of the wait's result,
                       so none moves above the wait
=====================  ===================================================================

A descriptor (PTX ISA, "Matrix Descriptor Format") of a K-major tile in the 128-byte swizzle:
bits 0-13 the shared address >> 4, bits 16-29 the leading byte offset >> 4 (1: unused for a
swizzled K-major operand), bits 32-45 the stride byte offset >> 4 (1024 B: from one 8-row group
to the next), bits 49-51 the base offset (0: the tile starts on the swizzle's 1024-byte period),
bits 62-63 the swizzle mode (1: 128 bytes). The address of the tile's first element, a k step
of 16 inside the 64-wide row included (+32 bytes), is all that varies. These are the bits and
the asm of bench/wgmma_gemm.py, which computed 4096^3 exactly on an H200
(bench/history/2026-12-02.md).
"""

from __future__ import annotations

from llvmlite import ir

from ..ir.core import Operation

I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()

OPS = frozenset({"gpu.wgmma", "gpu.wgmma_fence", "gpu.wgmma_commit", "gpu.wgmma_wait"})

#: the descriptor's constant bits: LBO 1, SBO 1024 >> 4, swizzle mode 1 (128 bytes)
DESCRIPTOR_BITS = (1 << 16) | ((1024 >> 4) << 32) | (1 << 62)


def _asm(b: ir.IRBuilder, ret, args: list, text: str, constraints: str):
    fty = ir.FunctionType(ret, [a.type for a in args])
    return b.call(ir.InlineAsm(fty, text, constraints, side_effect=True), args)


def emit(k, op: Operation) -> None:
    """Emit ``op`` (one of :data:`OPS`) into GPU kernel emitter ``k`` (llvm_kernel's)."""
    b, name = k.b, op.name
    if name == "gpu.wgmma":
        _wgmma(k, op)
    elif name == "gpu.wgmma_fence":
        _asm(b, ir.VoidType(), [], "wgmma.fence.sync.aligned;", "~{memory}")
    elif name == "gpu.wgmma_commit":
        _asm(b, ir.VoidType(), [], "wgmma.commit_group.sync.aligned;", "~{memory}")
    elif name == "gpu.wgmma_wait":
        vals = [k.vals[v] for v in op.operands]
        n = len(vals)
        ty, reg = _ACC[vals[0].type == I32] if vals else (F32, "=f")
        ret = ir.LiteralStructType([ty] * n)
        cons = ",".join([reg] * n + [str(i) for i in range(n)]) + ",~{memory}"
        res = _asm(b, ret, vals, f"wgmma.wait_group.sync.aligned {op.attributes['pending']};",
                   cons)
        for i, r in enumerate(op.results):
            k.vals[r] = b.extract_value(res, i)
    else:
        raise AssertionError(name)


def descriptor(k, buf, indices) -> ir.Value:
    """The i64 descriptor of the tile of shared buffer ``buf`` starting at ``indices``."""
    b = k.b
    ptr = k.address(buf, indices)
    addr = b.ptrtoint(ptr, I32)
    field = b.and_(b.lshr(addr, ir.Constant(I32, 4)), ir.Constant(I32, 0x3FFF))
    return b.or_(b.zext(field, I64), ir.Constant(I64, DESCRIPTOR_BITS))


#: integer accumulators? -> (LLVM type, asm constraint)
_ACC = {False: (F32, "=f"), True: (I32, "=r")}


def _wgmma(k, op: Operation) -> None:
    from ..dialects.gpu_wgmma import KINDS, Wgmma, shape_nk
    n, kinst = shape_nk(op.attributes["shape"])
    types = KINDS[kinst][2]
    integer = types.startswith("s32")
    ty, reg = _ACC[integer]
    g = Wgmma.groups(op)
    da = descriptor(k, g["a"], g["a_indices"])
    db = descriptor(k, g["b"], g["b_indices"])
    acc = [k.vals[v] for v in g["c"]]
    regs = n // 2
    outs = ", ".join(f"${i}" for i in range(regs))
    tail = "p" if integer else "p, 1, 1, 0, 0"
    text = ("{\n.reg .pred p;\n"
            f"setp.ne.b32 p, ${regs + 2}, 0;\n"
            f"wgmma.mma_async.sync.aligned.m64n{n}k{kinst}.{types} {{{outs}}}, "
            f"${regs}, ${regs + 1}, {tail};\n}}")
    cons = ",".join([reg] * regs + ["l", "l", "r"] + [str(i) for i in range(regs)])
    ret = ir.LiteralStructType([ty] * regs)
    res = _asm(k.b, ret, [da, db, ir.Constant(I32, 1)] + acc, text, cons)
    for i, r in enumerate(op.results):
        k.vals[r] = k.b.extract_value(res, i)
