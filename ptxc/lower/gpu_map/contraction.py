"""A reduced-precision contraction in a loop nest: the view of a MatMul, Gemm or convolution
that a tensor-core schedule needs (ptxc/lower/gpu_map/mma.py, wgmma.py).

Nothing here recognizes a contraction in loop shapes: lower-tensor-to-loop annotates the nest
of every ``tensor.matmul`` and ``tensor.conv`` with what the op knew (ptxc/dialects/
loop_contraction.py): the kind of its products, the role of each parallel dim (batch, M, N),
its reduction loops (K). A nest without the annotation is no contraction here (the tiled or
pointwise schedule maps it). The precision pass (docs/lowering.md, "Precision") makes such
layers reduced-precision; their nests (tiled.py's module docstring) read::

    "loop.parallel"() ({                              Y[i, j] = relu(b[j] + sum_k A[i, k] B[k, j])
    ^bb0(%i: index, %j: index):
      %b0 = "loop.load"(%b, %j)                       prologue: the accumulator's start value
      %s = "loop.for"(%b0) ({
      ^bb0(%k: index, %acc: f32):
        %x = "loop.load"(%A, %i, %k) : ... -> f16
        %xf = "arith.cast"(%x) : (f16) -> f32         fp16: f16 loads cast to f32
        %y = "loop.load"(%B, %k, %j) : ... -> f16     (tf32: f32 loads through arith.round_tf32;
        %yf = "arith.cast"(%y) : (f16) -> f32          s8: i8 loads cast to i32, an int8 layer)
        %p = "arith.mul"(%xf, %yf)
        %a = "arith.add"(%acc, %p)                    accumulate in f32 (s8: in i32)
        "loop.yield"(%a)
      }) {lower = 0, upper = 64}
      ...epilogue: anything of %s, the ivs and loads; "loop.store"(.., %Y, %i, %j)
    }) {contraction = ["matmul", "f16", "MN", "K"], lower = [0, 0], upper = [128, 96]}

with lower-tensor-to-loop's unroll-and-jam (``u`` points of the innermost parallel dim per
iteration, ``u`` accumulators) and reduction nests of several ``loop.for``\\ s (a conv's
``c, kh, kw``). :func:`analyze` maps the annotation onto the nest, per *logical* point (the
unroll undone): the annotated batch dims (read by both operands), M dims and N dims; K is the
reduction loops, linearized outer to inner; each operand's buffer indices, affine in
(parallel dims, reduction ivs), are read from the loads of accumulator 0's product. The
prologue computing accumulator 0's start value and the epilogue ops that depend on
accumulator 0's result form the *point program*: the schedule re-emits it for every output
point that a thread holds, with the point's index values, ``start + sum`` in place of the
result.

Which operand is the mma's A is the schedule's choice: the one that does not read the
output's contiguous dim, so that a thread's pairs of accumulators (two adjacent columns of n)
are adjacent in memory. The annotation's M dims are the first factor's; where that factor
reads the output's contiguous dim (an NCHW conv: its input along the output width), the
schedule multiplies the transpose, the weights as A.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from ...dialects.loop_contraction import annotation, check, products, reduction_chain
from ...errors import CompileError
from ...ir.core import BlockArgument, Operation, Value
from .tiled import Nest, RedLoop, _affine, _root, analyze as analyze_nest

#: operand element -> what the mma multiplies: f16 storage (cast to f32), tf32 (f32 rounded),
#: s8 (i8 storage cast to i32, summed in i32: graph.qlinear_conv/matmul's int8 form)
KINDS = ("f16", "tf32", "s8")


@attrs.define
class Operand:
    """One multiplicand: ``buffer`` (as the nest reads it: a view or a root buffer), ``rows``
    (per buffer dim, {symbol: coefficient, 1: constant}: symbols ``("p", d)`` parallel dims and
    ``("r", j)`` reduction loop ``j``), its reduced-precision element type."""
    buffer: Value
    rows: list
    element: object

    def coef(self, sym) -> int:
        """The coefficient of ``sym`` in the buffer's linear element offset."""
        strides = self.buffer.type.strides
        return sum(s * r.get(sym, 0) for s, r in zip(strides, self.rows))

    def offset(self) -> int:
        t = self.buffer.type
        return t.offset + sum(s * r.get(1, 0) for s, r in zip(t.strides, self.rows))

    def reads(self, sym) -> bool:
        return any(r.get(sym, 0) for r in self.rows)


@attrs.define
class Contraction:
    nest: Nest
    kind: str                 # "f16", "tf32" or "s8"
    a: Operand                # the mma's A (M x K)
    b: Operand                # the mma's B (K x N)
    batch: list               # parallel dims read by both
    m_dims: list              # parallel dims (outer to inner) of A only
    n_dims: list              # of B only
    red: list                 # reduction loops (RedLoop), outer to inner; symbols ("r", j)
    unrolled: int | None      # the parallel dim the nest steps by ``u``, or None
    u: int
    init: list                # prologue ops computing accumulator 0's start (in order)
    start: Value              # accumulator 0's start value
    epilogue: list            # ops of the point program after the reduction (in order)
    result: Value             # the reduction's result 0 (the epilogue reads it)

    def extent(self, d: int) -> int:
        """Logical points of parallel dim ``d`` (the unrolled dim counts all its points)."""
        n = self.nest
        return self.u * n.counts[d] if d == self.unrolled else n.counts[d]

    def lower(self, d: int) -> int:
        return self.nest.lower[d]

    @property
    def M(self) -> int:
        return math.prod(self.extent(d) for d in self.m_dims)

    @property
    def N(self) -> int:
        return math.prod(self.extent(d) for d in self.n_dims)

    @property
    def K(self) -> int:
        return math.prod(r.trips for r in self.red)

    @property
    def batches(self) -> int:
        return math.prod(self.extent(d) for d in self.batch)

    @property
    def flops(self) -> int:
        return 2 * self.batches * self.M * self.N * self.K


def _slice_back(values, region_ops: list, stop) -> list:
    """Ops of ``region_ops`` that ``values`` depend on (transitively), in program order; values
    defined elsewhere are left as they are (block args, top-level values). ``stop(op)`` true:
    not followed (returns None from the whole slice: a dependency that must not be there)."""
    inside = {id(o): o for o in region_ops}
    need: dict = {}
    todo = list(values)
    while todo:
        v = todo.pop()
        if isinstance(v, BlockArgument) or id(v.owner) not in inside or id(v.owner) in need:
            continue
        if stop(v.owner):
            return None
        need[id(v.owner)] = v.owner
        todo.extend(v.owner.operands)
    return [o for o in region_ops if id(o) in need]


def analyze(op: Operation) -> Contraction | None:
    """The contraction of nest ``op`` (module docstring), or None when it is not one: it has no
    ``contraction`` annotation, its kind is not a tensor-core kind (:data:`KINDS`), it has no
    M or no N dim, or its body is not a nest the schedules can map (tiled.analyze)."""
    ann = annotation(op) if op.name == "loop.parallel" else None
    if ann is None or ann.kind not in KINDS:
        return None
    m_dims, n_dims = ann.dims_of("M"), ann.dims_of("N")
    nest = analyze_nest(op)
    if not m_dims or not n_dims or nest is None or any(o.regions for o in nest.epilogue):
        return None
    chain = reduction_chain(op, ann.k)
    pairs = products(chain[1], ann.kind) if chain is not None else None
    if pairs is None:   # (the verifier refuses such a nest: a pass changed it, not the mark)
        raise CompileError(f"{op.where}: a wrong contraction annotation: {check(op)}")
    loops, inner = chain
    red = [nest.loops[id(lp.regions[0].blocks[0].args[0])] for lp in loops]
    ivs = {id(lp.regions[0].blocks[0].args[0]): j for j, lp in enumerate(loops)}
    # each operand's buffer indices, affine in the parallel dims and the reduction loops
    memo: dict = {}
    operands = []
    for ld in pairs[0]:
        rows = [_affine(i, op, nest.loops, memo) for i in ld.operands[1:]]
        if any(r is None for r in rows):
            return None
        rows = [{(("r", ivs[k[1]]) if isinstance(k, tuple) and k[0] == "r" else k): c
                 for k, c in r.items()} for r in rows]
        operands.append(Operand(ld.operands[0], rows, ld.operands[0].type.element))
    p, q = operands
    steps = [d for d, s in enumerate(nest.step) if s != 1]
    unrolled = steps[0] if steps else None
    u = nest.step[unrolled] if unrolled is not None else 1
    # the output's contiguous dim: the last store's innermost index symbol
    stores = [o for o in nest.epilogue if o.name == "loop.store"]
    if not stores:
        return None
    out_rows = [_affine(i, op, nest.loops, memo) for i in stores[0].operands[2:]]
    last = out_rows[-1] if out_rows and out_rows[-1] is not None else {}
    contiguous = {k[1] for k in last if isinstance(k, tuple) and k[0] == "p"}
    if contiguous & set(m_dims):
        p, q, m_dims, n_dims = q, p, n_dims, m_dims
    # the point program of accumulator 0
    result = nest.red.results[0]
    start = nest.red.operands[0]
    later: dict = {id(result): True}
    epi = []
    for o in nest.epilogue:
        if any(id(v) in later for v in o.operands):
            epi.append(o)
            for r in o.results:
                later[id(r)] = True
    if any(v in nest.red.results[1:] for o in epi for v in o.operands):
        return None
    need = _slice_back([v for o in epi for v in o.operands], nest.prologue + nest.epilogue,
                       lambda o: o is nest.red or o.name == "loop.store")
    init = _slice_back([start], nest.prologue, lambda o: False)
    if need is None or init is None:
        return None
    epi_ids = {id(o) for o in epi} | {id(o) for o in need}
    epilogue = [o for o in nest.prologue + nest.epilogue if id(o) in epi_ids]
    if not any(o.name == "loop.store" for o in epilogue):
        return None
    return Contraction(nest, ann.kind, p, q, ann.dims_of("B"), m_dims, n_dims, red, unrolled,
                       u, init, start, epilogue, result)


__all__ = ["Contraction", "Operand", "analyze", "KINDS", "RedLoop", "_root"]


def ctas(c: Contraction, bm: int, bn: int) -> int:
    """The CTAs of ``c``'s grid of ``bm`` x ``bn`` output tiles (edges rounded up), over its
    batches: what the mma and wgmma schedules compare against the SM count."""
    return -(-c.M // bm) * -(-c.N // bn) * c.batches


def rows_in_memory_order(c: Contraction) -> Contraction:
    """``c`` with its M dims ordered as the output's memory has them (largest stride first),
    so that consecutive rows ``m`` are consecutive output rows: a point program's accesses are
    then linear in ``m`` (mma.m_linear_accesses) where the output and A are contiguous over the
    M dims. ``c`` itself where the first store is not affine or two M dims share a stride.
    Example: a conv nest over (p, n, q, k) of an NHWC output ``[n][p][q][k]``: M dims (p, n,
    q) -> (n, p, q)."""
    from .tiled import _affine
    stores = [o for o in c.epilogue if o.name == "loop.store"]
    if len(c.m_dims) < 2 or not stores:
        return c
    memo: dict = {}
    rows = [_affine(i, c.nest.op, c.nest.loops, memo) for i in stores[0].operands[2:]]
    if any(r is None for r in rows):
        return c
    out = Operand(stores[0].operands[1], rows, stores[0].operands[0].type)
    strides = {d: abs(out.coef(("p", d))) for d in c.m_dims}
    if len(set(strides.values())) < len(strides):
        return c
    return attrs.evolve(c, m_dims=sorted(c.m_dims, key=lambda d: -strides[d]))


# ---- accumulator range ---------------------------------------------------------------------

#: the most (reduction point, parallel point) pairs :func:`accumulator_bound` evaluates
MAX_BOUND_POINTS = 1 << 24


def accumulator_bound(c: Contraction) -> int | None:
    """An upper bound on ``|sum|`` of every accumulator of an s8 contraction (None for other
    kinds): ``max|A| x max over n of sum_k |B[k, n]|`` where B is constant (a ``loop.global``:
    a layer's weights), the same with A and B swapped, or ``K x max|A| x max|B|``, a
    ``max`` being the constant's or the int8 range's (128). The epilogue's point program then
    knows a sum needs fewer than 23 bits where it does, and llvm_scalar converts it to f32 with
    one f32 add instead of ``cvt.rn.f32.s32`` (a quarter-rate instruction on sm_90: mma_epilogue
    attaches the bound to the accumulator loads). Example: ResNet-50's layer-1 conv3 (K = 64,
    per-channel int8 weights, max 127): at most 64 x 127 x 128 = 1040384 < 2**22."""
    if c.kind != "s8":
        return None
    amax, bmax = _abs_max(c.a), _abs_max(c.b)
    best = c.K * amax * bmax
    for x, other, dims in ((c.b, amax, c.n_dims), (c.a, bmax, c.m_dims)):
        sums = _abs_sums(c, x, dims)
        if sums is not None:
            best = min(best, other * sums)
    return best


def _constant_data(x: Operand):
    """The flat constant data of ``x``'s root buffer (a ``loop.global``), or None."""
    root = _root(x.buffer)
    op = getattr(root, "op", None)
    if op is None or op.name != "loop.global":
        return None
    return np.asarray(op.attributes["value"].array).reshape(-1)


def _abs_max(x: Operand) -> int:
    data = _constant_data(x)
    if data is None or data.size == 0:
        return 1 << (x.element.bitwidth - 1)
    return int(np.max(np.abs(data.astype(np.int64))))


def _abs_sums(c: Contraction, x: Operand, dims: list) -> int | None:
    """max over the points of ``dims`` of ``sum_k |x|`` for a constant ``x`` read at the
    reduction points and ``dims`` only (its element offsets: :meth:`Operand.offset` and
    :meth:`Operand.coef`), or None."""
    data = _constant_data(x)
    syms = {s for r in x.rows for s in r if s != 1}
    if data is None or any(s[0] == "p" and s[1] not in dims for s in syms):
        return None
    n = math.prod(c.extent(d) for d in dims) if dims else 1
    if c.K * n > MAX_BOUND_POINTS:
        return None
    red = np.meshgrid(*[r.lower + r.step * np.arange(r.trips) for r in c.red], indexing="ij")
    par = np.meshgrid(*[c.lower(d) + np.arange(c.extent(d)) for d in dims], indexing="ij")
    at = np.full((c.K, n), x.offset(), dtype=np.int64)
    for j, v in enumerate(red):
        at += x.coef(("r", j)) * v.reshape(-1, 1)
    for d, v in zip(dims, par):
        at += x.coef(("p", d)) * v.reshape(1, -1)
    if at.min() < 0 or at.max() >= data.size:
        return None
    return int(np.abs(data.astype(np.int64)[at]).sum(axis=0).max())
