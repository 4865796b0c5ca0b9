"""The kernel emitters of :mod:`ptxc.lower.loop_to_llvm`: :class:`_Kernel` writes one top-level
loop nest (``loop.parallel``/``loop.for``/``loop.copy``) as an LLVM function over its root
buffers' pointers, for the CPU (the outer range split across threads by the runtime) and
:class:`_GpuKernel` one ``gpu.launch`` for NVPTX (block and thread ids from the special
registers, ``gpu.shared`` buffers as static or dynamic ``__shared__`` arrays, barriers and the
tensor-core ops of :mod:`ptxc.lower.llvm_tensorcore` and :mod:`ptxc.lower.llvm_wgmma`). The
module-level driver (slots, the kernel table, the module, twins, metadata) stays in
loop_to_llvm.

Example: ``loop.parallel (%i) = (0) to (4) { %v = loop.load %x[%i]; loop.store %v, %y[%i] }``
becomes ``define void @kernel_0(ptr noalias %b0, ptr noalias %b1, i64 %begin, i64 %end)``
looping ``%i`` over ``[begin, end)`` (a thread's share of the range) with one load and one
store; on NVPTX the same nest mapped to a ``gpu.launch`` takes only the pointers
(``ptr addrspace(1)``) and reads ``%ctaid``/``%tid``.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..ir.core import BlockArgument, Operation, OpResult, Value
from ..ir.types import BufferType
from . import llvm_loop_hints as loop_hints
from . import llvm_tensorcore, llvm_wgmma
from .llvm_fold import FoldingBuilder, const_int
from .llvm_scalar import ScalarEmitter
from .llvm_types import I64, align_of, index_type, memory_type

_ERROR = object()  # the error flag's key among a kernel's roots (it has no IR value)


def _root(v: Value) -> Value:
    while not isinstance(v, BlockArgument) and v.op.name == "loop.view":
        v = v.op.operands[0]
    return v


class _Kernel(ScalarEmitter):
    """Emits one kernel function (CPU: pointer arguments and the ``begin``/``end`` range)."""

    gpu = False
    addrspace = 0

    def __init__(self, module: ir.Module, name: str, roots: list, top_scalars: list,
                 check_ids: dict | None = None, hints: dict | None = None):
        self.m = module
        #: the innermost loops' schedule hints (``vector_width``, ``unroll``; cpu kernels)
        self.hints = hints or {}
        self.n_loops = 0   # loops emitted so far (which tells an innermost loop)
        self.check_ids = check_ids or {}
        ptr = ir.PointerType(addrspace=self.addrspace)
        extra = [] if self.gpu else [I64, I64]
        fty = ir.FunctionType(ir.VoidType(), [ptr] * len(roots) + extra)
        self.fn = ir.Function(module, fty, name)
        self.fn.attributes.add("nounwind")
        if self.hints.get("vector_width") == 1:   # a scalar kernel (llvm_loop_hints)
            self.fn.attributes.add("noimplicitfloat")
        for i, a in enumerate(self.fn.args[:len(roots)]):
            a.name = f"b{i}"
            a.add_attribute("noalias")
        if not self.gpu:
            self.begin, self.end = self.fn.args[-2], self.fn.args[-1]
            self.begin.name, self.end.name = "begin", "end"
        self.ptrs = dict(zip(roots, self.fn.args))
        self.b = FoldingBuilder(self.fn.append_basic_block("entry"))
        self.vals: dict = {}
        self.divisors: dict = {}   # pow2_divisor's memo
        self.prologue()
        for op in top_scalars:
            self.emit_scalar(op)

    def prologue(self) -> None:
        """What the kernel does first, before its top-level scalars (nothing here)."""

    def emit_scalar(self, op: Operation) -> None:
        if op.name == "arith.check_index":
            self.check_index(op)
        else:
            super().emit_scalar(op)

    def check_index(self, op: Operation) -> None:
        """See "Run-time checks" in the module docstring."""
        b = self.b
        raw = self.vals[op.operands[0]]
        i = b.sext(raw, I64) if raw.type.width < 64 else raw
        n = ir.Constant(I64, op.attributes["size"])
        neg = b.icmp_signed("<", i, ir.Constant(I64, 0))
        w = b.select(neg, b.add(i, n), i)
        ok = b.icmp_unsigned("<", w, n)
        with b.if_then(b.not_(ok), likely=False):
            b.store(ir.Constant(ir.IntType(32), self.check_ids[id(op)]), self.ptrs[_ERROR],
                    align=4)
        w = b.select(ok, w, ir.Constant(I64, 0))
        self.vals[op.results[0]] = b.trunc(w, raw.type) if raw.type.width < 64 else w

    # ---- structure ----------------------------------------------------------------------------
    def loop(self, start, stop, step: int, body, carried=(), rolled: bool = False,
             ordered: bool = False):
        """``for (iv = start; iv < stop; iv += step)`` with carried values; ``body(iv, carried)``
        returns the next carried values. Returns the carried values after the loop. The latch
        carries a loop ID (:mod:`ptxc.lower.llvm_loop_hints`) where there is something to say:
        ``rolled`` (``loop.for {rolled}``): ``llvm.loop.unroll.disable`` (no unrolling in LLVM;
        NVPTX prints ``.pragma "nounroll"`` in the loop header, so ptxas keeps it rolled too);
        the kernel's ``hints`` (the cpu schedule's vector width and unroll count) on an
        innermost loop, one whose body emitted no loop; an ``ordered`` loop (``loop.for
        {ordered}``: its carried values combine in iteration order) takes no vector width
        over 1, which would let LoopVectorize reorder a float sum (llvm_loop_hints)."""
        b = self.b
        pre = b.block
        header = self.fn.append_basic_block("loop")
        inner = self.fn.append_basic_block("body")
        done = self.fn.append_basic_block("done")
        ty = start.type if isinstance(start, ir.Value) else index_type()
        start = start if isinstance(start, ir.Value) else ir.Constant(ty, start)
        stop = stop if isinstance(stop, ir.Value) else ir.Constant(ty, stop)
        b.branch(header)
        b.position_at_end(header)
        iv = b.phi(ty, "iv")
        iv.add_incoming(start, pre)
        phis = []
        for v in carried:
            p = b.phi(v.type)
            p.add_incoming(v, pre)
            phis.append(p)
        b.cbranch(b.icmp_signed("<", iv, stop), inner, done)
        b.position_at_end(inner)
        self.n_loops += 1
        loops = self.n_loops
        nxt = body(iv, phis)
        innermost = self.n_loops == loops
        nxt_iv = b.add(iv, ir.Constant(ty, step), flags=["nsw"])
        latch = b.block
        br = b.branch(header)
        hints = self.hints if innermost else {}
        if ordered and hints.get("vector_width", 0) > 1:
            hints = {k: v for k, v in hints.items() if k != "vector_width"}
        props = loop_hints.hint_nodes(self.m, rolled=rolled, **hints)
        if props:
            br.set_metadata("llvm.loop", loop_hints.loop_id(self.m, props))
        iv.add_incoming(nxt_iv, latch)
        for p, v in zip(phis, nxt):
            p.add_incoming(v, latch)
        b.position_at_end(done)
        return phis

    def nest(self, dims, body, outer_split=False):
        """Loops over ``dims`` (lower, upper, step) in order, ``body(ivs)`` innermost. With
        ``outer_split`` the first dimension runs over iteration numbers ``[begin, end)`` (with no
        dimensions, the body runs once per iteration number: once over a range of one)."""
        def level(k, ivs):
            if k == len(dims):
                body(ivs)
                return

            def step(iv, _):
                level(k + 1, ivs + [iv])
                return []
            lo, hi, st = dims[k]
            if k == 0 and outer_split:
                self.loop(self.begin, self.end, 1, lambda t, c: step(self.affine(t, lo, st), c))
            else:
                self.loop(lo, hi, st, step)

        if not dims and outer_split:
            def once(t, _):
                body([])
                return []
            self.loop(self.begin, self.end, 1, once)
        else:
            level(0, [])

    def affine(self, t: ir.Value, lo: int, step: int) -> ir.Value:
        """The induction value ``lo + t * step`` of iteration number ``t``."""
        if step != 1:
            t = self.b.mul(t, ir.Constant(t.type, step), flags=["nsw"])
        return self.b.add(t, ir.Constant(t.type, lo), flags=["nsw"]) if lo else t

    def block(self, block, args) -> list:
        for a, v in zip(block.args, args):
            self.vals[a] = v
        for op in block.ops:
            if op.name == "loop.yield":
                return [self.vals[v] for v in op.operands]
            self.emit(op)
        return []

    def emit(self, op: Operation) -> None:
        name = op.name
        if name == "loop.view":
            return
        if name == "loop.load":
            buf = op.operands[0]
            el = buf.type.element
            v = self.b.load(self.address(buf, op.operands[1:]), typ=memory_type(el),
                            align=self.access_align(buf, op.operands[1:]))
            if el.name == "i1":
                v = self.b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
            self.vals[op.results[0]] = v
        elif name == "loop.store":
            self.store(self.vals[op.operands[0]], op.operands[1], op.operands[2:])
        elif name == "loop.for":
            self.for_(op, split=False)
        elif name == "loop.parallel":
            self.parallel(op, split=False)
        elif name == "loop.copy":
            self.copy(op, split=False)
        else:
            self.emit_scalar(op)

    def for_(self, op: Operation, split: bool) -> None:
        lo, hi, st = op.attributes["lower"], op.attributes["upper"], op.attr("step")
        block = op.regions[0].blocks[0]
        inits = [self.vals[v] for v in op.operands]
        if split:
            def body(t, carried):
                return self.block(block, [self.affine(t, lo, st), *carried])
            outs = self.loop(self.begin, self.end, 1, body, inits, ordered=op.attr("ordered"))
        elif op.attr("unroll"):
            outs = self.unrolled(block, range(lo, hi, st), inits)
        else:
            outs = self.loop(lo, hi, st, lambda iv, c: self.block(block, [iv, *c]), inits,
                             rolled=bool(op.attr("rolled")), ordered=op.attr("ordered"))
        for r, v in zip(op.results, outs):
            self.vals[r] = v

    def unrolled(self, block, ivs, inits) -> list:
        """A ``loop.for {unroll}`` straight-line, one copy of the body per iteration. Where the
        body stores nothing, its ops are emitted in three waves: the loads of EVERY iteration
        (with their index arithmetic), then what is computed from the loads alone, then the
        chain through the carried values. NVPTX schedules in source order, so this is what puts
        all the loads in flight together. Before/after, ``acc += f(x[i])`` over 3 iterations::

            x0 = load; a = acc + f(x0); x1 = load; a = a + f(x1); x2 = load; a = a + f(x2)
            x0 = load; x1 = load; x2 = load; f0 = f(x0); f1 = f(x1); f2 = f(x2)
            a = acc + f0; a = a + f1; a = a + f2
        """
        ops = [o for o in block.ops if o.name != "loop.yield"]
        mine = {id(o) for o in ops}
        carried = {id(a) for a in block.args[1:]}
        free = set()   # ops whose value depends on the induction variable and outer values only
        if not any(x.name == "loop.store" or x.regions for o in ops for x in o.walk()):
            for o in ops:
                if not any(id(v) in carried or (isinstance(v, OpResult) and id(v.owner) in mine
                                                and v.owner not in free) for v in o.operands):
                    free.add(o)
        addressing = set()   # the loads and the free ops their indices come from
        needed = set()       # ids of the ops whose values those read
        for o in reversed(ops):
            if o in free and (o.name == "loop.load" or id(o) in needed):
                addressing.add(o)
                needed.update(id(v.owner) for v in o.operands if isinstance(v, OpResult))
        waves = [[o for o in ops if o in addressing], [o for o in ops if o in free and
                                                       o not in addressing]]
        values = [{} for _ in ivs]
        for wave in waves:
            for iv, vals in zip(ivs, values):
                self.vals[block.args[0]] = ir.Constant(index_type(), iv)
                self.vals.update(vals)
                for o in wave:
                    self.emit(o)
                vals.update({r: self.vals[r] for o in wave for r in o.results})
        outs = list(inits)
        for iv, vals in zip(ivs, values):
            self.vals[block.args[0]] = ir.Constant(index_type(), iv)
            self.vals.update(vals)
            for a, v in zip(block.args[1:], outs):
                self.vals[a] = v
            for o in ops:
                if o not in free:
                    self.emit(o)
            outs = [self.vals[v] for v in block.last_op.operands]
        return outs

    def parallel(self, op: Operation, split: bool) -> None:
        lo, hi = op.attributes["lower"], op.attributes["upper"]
        dims = list(zip(lo, hi, op.attr("step") or (1,) * len(lo)))
        block = op.regions[0].blocks[0]
        self.nest(dims, lambda ivs: self.block(block, ivs), outer_split=split)

    def copy(self, op: Operation, split: bool) -> None:
        src, dst = op.operands
        el = src.type.element

        def body(ivs):
            v = self.b.load(self.address(src, ivs), typ=memory_type(el), align=align_of(el))
            self.b.store(v, self.address(dst, ivs), align=align_of(el))
        self.nest([(0, d, 1) for d in src.type.shape], body, outer_split=split)

    # ---- memory -------------------------------------------------------------------------------
    def address(self, buf: Value, indices) -> ir.Value:
        """The pointer to ``buf[indices]``: the element offset ``sum(index * stride) + offset``
        in i64, then one GEP. A 32-bit index (llvm_types.index_bits) is widened first
        (:meth:`wide_index`), so accesses that share a coordinate share its 64-bit term
        and neighbouring accesses differ by a constant, which NVPTX folds into the
        instruction (``ld.global.v4.u32 [%rd7+64]``); summing in 32 bits and widening the
        sum took a tenth more SASS in ResNet-50's mma kernels (static SASS counts,
        bench/history/2026-12-04.md)."""
        t: BufferType = buf.type
        b = self.b
        lin = None
        for i, s in zip(indices, t.strides):
            if s == 0:
                continue
            i = self.wide_index(i if isinstance(i, ir.Value) else self.vals[i])
            term = i if s == 1 else b.mul(i, ir.Constant(I64, s), flags=["nsw"])
            lin = term if lin is None else b.add(lin, term, flags=["nsw"])
        if t.offset:
            off = ir.Constant(I64, t.offset)
            lin = off if lin is None else b.add(lin, off, flags=["nsw"])
        if lin is None:
            lin = ir.Constant(I64, 0)
        base = self.ptrs[_root(buf)]
        if isinstance(base, ir.GlobalVariable):  # a gpu.shared array: index into it
            return b.gep(base, [ir.Constant(I64, 0), lin], inbounds=True)
        return b.gep(base, [lin], inbounds=True, source_etype=memory_type(t.element))

    def access_align(self, buf: Value, indices) -> int:
        """The alignment (bytes) a load or store of ``buf[indices]`` declares: on the CPU the
        element's size; on the GPU what :func:`pow2_divisor` proves of the element offset, up
        to :data:`PARAM_ALIGN` (every global buffer starts 16-byte aligned, every shared one
        at least that). LLVM's own inference (known bits of the offset) does not see through
        the sign extensions of 32-bit offsets: a small int8 conv's wgmma epilogue stored 16
        ``v2.b8`` and 33 single bytes in 32 bits without this, 32 and 1 with it (16 and 33
        in 64 bits either way; tests/test_index32.py). ResNet-50's 64-bit kernels are the
        same instructions with it or without."""
        el = buf.type.element
        size = align_of(el)
        if not self.gpu:
            return size
        t: BufferType = buf.type
        d = pow2_divisor_of_offset(t, list(indices), self.divisors)
        return max(size, min(PARAM_ALIGN, size * d))

    def wide_index(self, v: ir.Value) -> ir.Value:
        """``v`` (an index value) as i64: sign-extended, the constant addends of its ``nsw``
        add/sub tree (:func:`_affine_terms`) added after the extension (the ``nsw`` says no
        sum wraps, so ``sext(x + 64)`` is ``sext(x) + 64``), where NVPTX folds them into the
        access's immediate offset and LLVM sees neighbouring accesses as neighbours::

            %a = add nsw i32 %c, 1 ; %o = add nsw i32 %m, %a ; %w = sext i32 %o to i64
            %o = add nsw i32 %m, %c ; %s = sext i32 %o to i64 ; %w = add nsw i64 %s, 1
        """
        if v.type.width == 64:
            return v
        terms, c = _affine_terms(v)
        if not c:
            return self.b.sext(v, I64)
        rest = None
        for sign, t in terms:
            if rest is None:
                rest = t if sign > 0 else self.b.sub(ir.Constant(t.type, 0), t, flags=["nsw"])
            else:
                rest = (self.b.add if sign > 0 else self.b.sub)(rest, t, flags=["nsw"])
        if rest is None:
            return ir.Constant(I64, c)
        return self.b.add(self.b.sext(rest, I64), ir.Constant(I64, c), flags=["nsw"])

    def store(self, v: ir.Value, buf: Value, indices) -> None:
        el = buf.type.element
        if el.name == "i1":
            v = self.b.zext(v, memory_type(el))
        self.b.store(v, self.address(buf, indices), align=self.access_align(buf, indices))

    def finish(self) -> None:
        self.b.ret_void()


#: the largest power of two :func:`pow2_divisor` reports (any larger is as good for alignment)
POW2_CAP = 1 << 16


def _pow2(n: int) -> int:
    """The largest power of two dividing ``n`` (:data:`POW2_CAP` for 0)."""
    n = abs(int(n))
    return POW2_CAP if n == 0 else min(POW2_CAP, n & -n)


def pow2_divisor(v: Value, cache: dict, depth: int = 12) -> int:
    """The largest power of two known to divide index value ``v`` of the loop IR, from its
    definition: constants, loop induction variables (``lower + k * step``), ``add``/``sub``/
    ``min``/``max``/``select`` (the smaller of the operands'), ``mul`` (the product); 1 for
    anything else (a thread id, a division, a loaded value)."""
    key = id(v)
    if key in cache:
        return cache[key]
    d = 1
    if isinstance(v, BlockArgument):
        parent, k = v.block.parent_op, v.index
        if parent is not None and parent.name == "loop.for" and k == 0:
            d = min(_pow2(parent.attributes["lower"]), _pow2(parent.attr("step") or 1))
        elif parent is not None and parent.name == "loop.parallel":
            lo = parent.attributes["lower"]
            d = min(_pow2(lo[k]), _pow2((parent.attr("step") or (1,) * len(lo))[k]))
    elif isinstance(v, OpResult) and depth:
        op = v.op
        ops = [pow2_divisor(x, cache, depth - 1) for x in op.operands] \
            if op.name in ("arith.add", "arith.sub", "arith.mul", "arith.min", "arith.max",
                           "arith.select") else []
        if op.name == "arith.constant":
            value = op.attributes["value"]
            d = _pow2(value) if isinstance(value, (int, np.integer)) else 1
        elif op.name in ("arith.add", "arith.sub", "arith.min", "arith.max"):
            d = min(ops)
        elif op.name == "arith.select":
            d = min(ops[1:])
        elif op.name == "arith.mul":
            d = min(POW2_CAP, ops[0] * ops[1])
    cache[key] = d
    return d


def pow2_divisor_of_offset(t: BufferType, indices: list, cache: dict) -> int:
    """The largest power of two known to divide the element offset of ``t[indices]``
    (``sum(index * stride) + offset``; :func:`pow2_divisor`)."""
    d = _pow2(t.offset)
    for i, s in zip(indices, t.strides):
        if s:
            d = min(d, pow2_divisor(i, cache) * _pow2(s))
    return d


def _affine_terms(v: ir.Value, sign: int = 1, depth: int = 8) -> tuple[list, int]:
    """``v`` as ``sum(sign * term) + constant`` through its ``nsw`` add/sub instructions
    (``depth`` levels deep): ``([(sign, term), ...], constant)``."""
    c = const_int(v)
    if c is not None:
        return [], sign * c
    if depth and isinstance(v, ir.Instruction) and v.opname in ("add", "sub") and \
            "nsw" in v.flags:
        x, y = v.operands
        tx, cx = _affine_terms(x, sign, depth - 1)
        ty, cy = _affine_terms(y, sign if v.opname == "add" else -sign, depth - 1)
        return tx + ty, cx + cy
    return [(sign, v)], 0


_SREG = {"gpu.block_id": "ctaid", "gpu.thread_id": "tid"}
#: the alignment a cuda kernel's pointer parameters declare (``align 16``: LLVM may then merge
#: neighbouring scalar accesses into 8- and 16-byte vector ones). The runtime guarantees 256:
#: arena slots and weights are placed at 256-byte offsets of 256-byte aligned allocations,
#: binding buffers are allocations, and run_device binds a caller's pointer only when it is
#: 256-byte aligned (ptxc.driver.cuda_interop.BIND_ALIGN; else it copies).
PARAM_ALIGN = 16
#: bytes of static ``__shared__`` memory a kernel may declare; more goes to dynamic shared memory.
#: A CUDA constant, not a target's: every arch from sm_20 to sm_90 caps static shared memory at
#: 48 KB (CUDA C Programming Guide, "Shared Memory": more needs a dynamic allocation and the
#: per-kernel opt-in), and the emitter has no target on purpose: where a kernel's shared
#: memory lives (static ``.shared`` arrays or the dynamic extern) is then the same for every
#: arch, so the LLVM IR of a loop module does not depend on the GPU. It equals
#: ``Target.shared_per_block_static``, which the schedules read (tiled, reduction).
STATIC_SHARED_LIMIT = 48 * 1024
#: the extern array every kernel's dynamic shared memory starts at (``extern __shared__``)
DYNAMIC_SHARED = "ptxc_dynamic_shared"
_BARRIER = "llvm.nvvm.barrier.cta.sync.aligned.all"  # bar.sync 0 (LLVM 22; was barrier0)
_WARP_BARRIER = "llvm.nvvm.bar.warp.sync"              # bar.warp.sync mask (__syncwarp)


class _GpuKernel(_Kernel):
    """Emits one ``gpu.launch`` as a ``ptx_kernel``: its body once, per thread; global buffers in
    address space 1, ``gpu.shared`` arrays in address space 3; math through libdevice."""

    gpu = True
    addrspace = 1
    math_library = "libdevice"

    def __init__(self, module: ir.Module, name: str, roots: list, top_scalars: list,
                 dynamic: bool = False, check_ids: dict | None = None,
                 id_ranges: dict | None = None, pdl: bool = False, waits: bool = False):
        self.pdl = pdl
        self.waits = waits     # the body has its own gpu.grid_wait
        super().__init__(module, name, roots, top_scalars, check_ids)
        self.fn.calling_convention = "ptx_kernel"
        for a in self.fn.args:  # every buffer a cuda kernel gets starts 256-byte aligned
            a.attributes.align = PARAM_ALIGN
        self.shared_bytes = 0
        self.n_shared = 0
        self.dynamic = dynamic
        #: {"gpu.block_id": grid, "gpu.thread_id": block}: the ids' ranges, given to LLVM as
        #: ``!range`` metadata (empty: none)
        self.id_ranges = id_ranges or {}

    def prologue(self) -> None:
        """A ``pdl`` launch (programmatic dependent launch, gpu.launch's docstring) first waits
        for the grids before it (``griddepcontrol.wait``: they completed and their memory is
        visible), before any load or store, the error flag's included; then lets the next
        kernel launch (``griddepcontrol.launch_dependents``): its blocks are placed once every
        block of this one has begun, and wait in their own prologue. So one kernel at most
        runs ahead, and the wait keeps every dependence a plain stream order keeps::

            ld.param.b64 %rd1, [kernel_3_param_0];
            griddepcontrol.wait;
            griddepcontrol.launch_dependents;
            ... the kernel ...
        """
        if self.pdl and not self.waits:
            self.grid_wait()

    def grid_wait(self) -> None:
        """``griddepcontrol.wait`` then ``launch_dependents`` (:meth:`prologue`)."""
        for name in ("llvm.nvvm.griddepcontrol.wait",
                     "llvm.nvvm.griddepcontrol.launch.dependents"):
            self.b.call(self.declare(name, ir.VoidType(), []), [])

    def emit(self, op: Operation) -> None:
        name = op.name
        if name in _SREG:
            dim = op.attributes["dim"]
            reg = f"llvm.nvvm.read.ptx.sreg.{_SREG[name]}.{'xyz'[dim]}"
            v = self.b.call(self.declare(reg, ir.IntType(32), []), [])
            extent = self.id_ranges.get(name, (0, 0, 0))[dim]
            if extent:   # [0, extent): LLVM then narrows the index math to 32 bits where
                i32 = ir.IntType(32)    # it fits (a pointwise kernel's div/mod by constants)
                v.set_metadata("range", self.m.add_metadata([ir.Constant(i32, 0),
                                                              ir.Constant(i32, extent)]))
            ty = index_type()
            self.vals[op.results[0]] = v if ty.width == 32 else self.b.zext(v, ty)
        elif name == "gpu.grid_wait":
            if self.pdl:     # else a plain launch: the stream order already waited
                self.grid_wait()
        elif name == "gpu.barrier":
            i32 = ir.IntType(32)
            self.b.call(self.declare(_BARRIER, ir.VoidType(), [i32]), [ir.Constant(i32, 0)])
        elif name == "gpu.warp_barrier":
            i32 = ir.IntType(32)
            self.b.call(self.declare(_WARP_BARRIER, ir.VoidType(), [i32]),
                        [ir.Constant(i32, -1)])
        elif name == "gpu.shared":
            self.shared(op)
        elif name == "loop.if":
            self.if_(op)
        elif name in llvm_tensorcore.OPS:
            llvm_tensorcore.emit(self, op)
        elif name in llvm_wgmma.OPS:
            llvm_wgmma.emit(self, op)
        else:
            super().emit(op)

    def shared(self, op: Operation) -> None:
        t: BufferType = op.results[0].type
        n = max(1, t.span)
        ty = ir.ArrayType(memory_type(t.element), n)
        align = max(16, op.attr("align"))
        if self.dynamic:   # at the next ``align``-byte offset of the dynamic shared memory
            base = self.m.globals.get(DYNAMIC_SHARED)
            if base is None:
                base = ir.GlobalVariable(self.m, ir.ArrayType(ir.IntType(8), 0), DYNAMIC_SHARED,
                                         addrspace=3)
                base.linkage = "external"
                base.align = 16
            # the extern array's alignment is the largest any buffer asks for, so an offset
            # that is a multiple of ``align`` is an address that is
            base.align = max(base.align, align)
            self.shared_bytes = -(-self.shared_bytes // align) * align
            at = ir.Constant(I64, self.shared_bytes)
            byte = self.b.gep(base, [ir.Constant(I64, 0), at], inbounds=True)
            # typed as the element, as a static array's GEP is: plain loads and stores need it
            self.ptrs[op.results[0]] = self.b.bitcast(byte, ty.element.as_pointer(3))
            self.shared_bytes += -(-n * np.dtype(t.element.np_dtype).itemsize // 16) * 16
            return
        g = ir.GlobalVariable(self.m, ty, f"{self.fn.name}.shared{self.n_shared}", addrspace=3)
        self.n_shared += 1
        g.linkage = "internal"
        g.align = align
        g.initializer = ir.Constant(ty, ir.Undefined)  # contents undefined at start (spec)
        self.ptrs[op.results[0]] = g
        self.shared_bytes += -(-n * np.dtype(t.element.np_dtype).itemsize // 16) * 16

    def if_(self, op: Operation) -> None:
        then = self.fn.append_basic_block("then")
        after = self.fn.append_basic_block("endif")
        self.b.cbranch(self.vals[op.operands[0]], then, after)
        self.b.position_at_end(then)
        self.block(op.regions[0].blocks[0], [])
        self.b.branch(after)
        self.b.position_at_end(after)
