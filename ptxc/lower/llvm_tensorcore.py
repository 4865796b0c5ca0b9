"""NVPTX emission of the gpu dialect's tensor-core ops (ptxc/dialects/gpu_tensorcore.py) as NVVM
intrinsics, for loop_to_llvm's GPU kernels:

=====================  ===================================================================
``gpu.mma``            ``llvm.nvvm.mma.m16n8k16.row.col.f32.f32`` (f16 pairs as <2 x half>),
                       ``...m16n8k8.row.col.tf32`` (f32 bits as i32),
                       ``...m16n8k32.row.col.s8`` (four i8 as one i32)
``gpu.ldmatrix``       ``llvm.nvvm.ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].b16.p3``
``gpu.cp_async``       ``llvm.nvvm.cp.async.{cg,ca}.shared.global.{16,8,4}.s`` (``.s``: the
                       source size operand is 0 where ``pred`` is false: zero-fill, no read)
``gpu.cp_async_*``     ``llvm.nvvm.cp.async.commit.group`` / ``.wait.group(N)``
=====================  ===================================================================

A fragment register of PTX holds 32 bits; the IR's fragments are scalars, so the emitter packs
them (f16 pairs, i8 quads) into registers before an intrinsic and unpacks after; LLVM folds the
packing into plain register moves. All were checked to assemble with ptxas for sm_90 and to
compute the right product on an H200 (DESIGN.md's December facts).
"""

from __future__ import annotations

from llvmlite import ir

from ..dialects.gpu_tensorcore import MMA_SHAPES
from ..errors import CompileError
from ..ir.core import Operation

I32 = ir.IntType(32)
HALF2 = ir.VectorType(ir.HalfType(), 2)
BYTE4 = ir.VectorType(ir.IntType(8), 4)
F32 = ir.FloatType()

OPS = frozenset({"gpu.mma", "gpu.ldmatrix", "gpu.cp_async", "gpu.cp_async_commit",
                 "gpu.cp_async_wait"})


def _pack(b: ir.IRBuilder, vals: list, el: str) -> list:
    """Scalars -> 32-bit registers: f16 pairs as <2 x half>, tf32 as i32 bits, i8 quads as i32."""
    if el == "f16":
        regs = []
        for i in range(0, len(vals), 2):
            v = ir.Constant(HALF2, ir.Undefined)
            v = b.insert_element(v, vals[i], ir.Constant(I32, 0))
            regs.append(b.insert_element(v, vals[i + 1], ir.Constant(I32, 1)))
        return regs
    if el == "f32":
        return [b.bitcast(v, I32) for v in vals]
    regs = []
    for i in range(0, len(vals), 4):
        v = ir.Constant(BYTE4, ir.Undefined)
        for j in range(4):
            v = b.insert_element(v, vals[i + j], ir.Constant(I32, j))
        regs.append(b.bitcast(v, I32))
    return regs


def _unpack(b: ir.IRBuilder, reg: ir.Value, el: str) -> list:
    """One 32-bit register -> its scalars of type ``el`` (f16: 2, f32: 1, i8: 4)."""
    if el == "f32":
        return [b.bitcast(reg, F32)]
    vec = HALF2 if el == "f16" else BYTE4
    v = b.bitcast(reg, vec)
    return [b.extract_element(v, ir.Constant(I32, j)) for j in range(vec.count)]


def _ptr(p: ir.Value) -> ir.PointerType:
    """The opaque pointer type of ``p``'s address space: the intrinsics are declared once per
    module with opaque pointer parameters, which llvmlite matches with any pointer of that
    space (a static ``[n x half]`` array's GEP and a dynamic ``[0 x i8]`` GEP alike; declared
    with the first call's typed pointer, the other call failed: 'half addrspace(3)* != i8
    addrspace(3)*')."""
    return ir.PointerType(addrspace=p.type.addrspace)


def emit(k, op: Operation) -> None:
    """Emit ``op`` (one of :data:`OPS`) into GPU kernel emitter ``k`` (loop_to_llvm's)."""
    b, name = k.b, op.name
    if name == "gpu.mma":
        _mma(k, op)
    elif name == "gpu.ldmatrix":
        _ldmatrix(k, op)
    elif name == "gpu.cp_async":
        _cp_async(k, op)
    elif name == "gpu.cp_async_commit":
        b.call(k.declare("llvm.nvvm.cp.async.commit.group", ir.VoidType(), []), [])
    elif name == "gpu.cp_async_wait":
        f = k.declare("llvm.nvvm.cp.async.wait.group", ir.VoidType(), [I32])
        b.call(f, [ir.Constant(I32, op.attributes["pending"])])
    else:
        raise AssertionError(name)


def _mma(k, op: Operation) -> None:
    from ..dialects.gpu_tensorcore import Mma
    shape = op.attributes["shape"]
    _, _, _, el, acc, _, _, _ = MMA_SHAPES[shape]
    g = Mma.groups(op, [k.vals[v] for v in op.operands])
    a, bb = _pack(k.b, g["a"], el.name), _pack(k.b, g["b"], el.name)
    c = g["c"]
    if shape == "m16n8k16":
        fname, acc_t = f"llvm.nvvm.mma.{shape}.row.col.f32.f32", F32
    elif shape == "m16n8k8":
        fname, acc_t = f"llvm.nvvm.mma.{shape}.row.col.tf32", F32
    else:
        fname, acc_t = f"llvm.nvvm.mma.{shape}.row.col.s8", I32
    ret = ir.LiteralStructType([acc_t] * 4)
    f = k.declare(fname, ret, [r.type for r in a + bb] + [acc_t] * 4)
    d = k.b.call(f, a + bb + c)
    for i, r in enumerate(op.results):
        k.vals[r] = k.b.extract_value(d, i)


def _ldmatrix(k, op: Operation) -> None:
    buf = op.operands[0]
    num, trans = op.attributes["num"], op.attr("trans")
    el = buf.type.element.name
    if el not in ("f16", "f32", "i8"):
        raise CompileError(f"{op.where}: ldmatrix of {el} elements is not emitted (f16, f32, i8)")
    ptr = k.address(buf, op.operands[1:])
    fname = f"llvm.nvvm.ldmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.b16.p3"
    ret = ir.LiteralStructType([I32] * num) if num > 1 else I32
    res = k.b.call(k.declare(fname, ret, [_ptr(ptr)]), [ptr])
    regs = [k.b.extract_value(res, i) for i in range(num)] if num > 1 else [res]
    vals = [v for reg in regs for v in _unpack(k.b, reg, el)]
    for r, v in zip(op.results, vals):
        k.vals[r] = v


def _cp_async(k, op: Operation) -> None:
    from ..dialects.gpu_tensorcore import CpAsync
    g = CpAsync.groups(op)
    n = op.attributes["bytes"]
    dst = k.address(g["dest"], g["dst_indices"])
    src = k.address(g["source"], g["src_indices"])
    size = k.b.select(k.vals[g["pred"]], ir.Constant(I32, n), ir.Constant(I32, 0))
    kind = "cg" if n == 16 else "ca"
    f = k.declare(f"llvm.nvvm.cp.async.{kind}.shared.global.{n}.s", ir.VoidType(),
                  [_ptr(dst), _ptr(src), I32])
    k.b.call(f, [dst, src, size])
