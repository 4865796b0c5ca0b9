"""Loop nests for structured ops: one ``loop.parallel`` over the parallel dims, ``loop.for`` over
the reduction dims inside it carrying the accumulators, scalar bodies cloned innermost.

:class:`NestEmitter` emits what a :class:`~.nest_spec.NestSpec` describes (nest_spec.py: the
main body, where its arguments and the accumulators' start values come from, the epilogue,
where each final value is stored), and makes the choices that are not the description's: the
loops' order, the unroll-and-jam, the short innermost dims computed whole, which points of a
pad border compute nothing. Emission, per covered range::

    loop.parallel (parallel dims of extent > 1; extent-1 dims are the constant 0)
      acc_k = start value                              (read once)
      loads whose maps use parallel dims only          (hoisted)
      loop.for (each reduction dim, carrying acc...)
        loads of this level
        ... innermost: main body(ins, acc) -> yield acc'
      [epilogue body(result, ...)]
      loop.store final values                          (stored once)

Parallel dim order: the dim that indexes the last dimension of the stored result stays
innermost (contiguous stores, LLVM can vectorize); of the others, the one of largest extent goes
outermost (the runtime splits the outermost dim over threads), the rest keep their order.
Reduction dims keep their order (a convolution's ``(c, kh, kw)``: the innermost walks the
input's last dim). docs/lowering.md leaves the order open; this is the decision.

**Short innermost dims** (:func:`whole_run`). An all-parallel nest whose innermost dim is
stored along the contiguous last dim of every target as one naturally aligned run of 4, 8 or
16 bytes (4 int8, 4 f16, 4 f32, ...) is not a loop over that dim: each point computes all of
it, the dim a constant per copy of the body, so the run's adjacent stores merge into one
vector store and the nest has a run's fewer points; the next dim inward becomes the
innermost loop (neighbouring GPU threads then read and write neighbouring elements of it).
Longer innermost dims keep one point per element (their stores coalesce already; widening
them is a question for the GPU's clock, not yet asked).

**Unroll-and-jam** (:func:`jam_pays`). A nest with a reduction steps its innermost parallel dim
by ``u`` (:data:`UNROLL`: 8, else 4 where the extent is shorter; a remainder is a second nest)
and each point computes ``u`` outputs side by side, with ``u`` accumulators: the loads that do
not move with that dim (a matmul's ``A[i, k]``, a conv's input across its output channels) are
read once for the ``u`` chains, and on the CPU the ``u`` chains are what the SLP vectorizer
packs. On a GPU each point is a thread, and a *streaming* reduction shares nothing between
points: every load of its main body that a reduction dim indexes moves with every parallel dim
(a pool, a Reduce*, softmax's max and sum, a norm's moments, with whatever elementwise producers
are inlined into the body: ResNet's last residual add and ReLU, in int8 the dequantization of
its int32 conv sums and int8 shortcut; a load no reduction dim indexes, such as a per-channel
scale, is read once per point and does not count). There the jam only divides the threads by
``u``. So the pass option ``jam-min-points`` (0, the default, and the cpu target's: every such
nest is jammed) jams a streaming reduction only while that leaves it at least that many points;
the cuda pipeline sets it to the threads its target holds at once (``Target.resident_threads``:
the target's SM count x its threads per SM), so one too small to fill the GPU jammed gets one point per output instead. A nest
with a reduction operand some points share (a load indexed by a reduction dim and invariant to a
parallel dim of more than one point) is jammed whatever its size: every contraction (matmul,
conv, depthwise conv: gpu_map's tiled and mma schedules and contraction.py are written for the
jam). Each output is summed in the same order either way, so results are bit-identical.
ResNet-50's global average pool at batch 32, channels-last fp16, on cuda (``r`` the last
block's conv, ``s`` its shortcut)::

    jam-min-points=0: 8192 points                    jam-min-points=270336: 65536 points
    loop.parallel (n, c step 8) {                    loop.parallel (n, c) {
      c1 = c + 1 ... c7 = c + 7                        a = loop.for h, w (0.0) {
      a0..a7 = loop.for h, w (0.0 x 8) {                 a + relu(r[n, h, w, c]
        a0 + relu(r[n, h, w, c] + s[n, h, w, c])                  + s[n, h, w, c]) }
        ... a7 + relu(r[.., c7] + s[.., c7]) }         y[n, c] = a / 49
      y[n, c] = a0 / 49 ... y[n, c7] = a7 / 49       }
    }
    map-to-gpu (pointwise): 256 blocks of 32         256 blocks of 256 threads; a warp
    threads, 16 bytes per operand and pixel          reads 64 contiguous bytes per operand
    per thread (too few threads to hide latency)     and pixel

**Contractions.** The nest of a ``tensor.matmul`` or ``tensor.conv`` carries the
``contraction`` annotation, each nest as built (after the unroll-and-jam and the split into a
main nest and a remainder): named.py, :func:`~.named.annotation`.

**Pads along the innermost dim** (:class:`PadFill`; plan.py decides when). A ``tensor.pad``
whose last dim is padded, reading the result of an all-parallel generic that nothing else
reads, is written by that generic's nest (so is one whose last padded dim has at most 16 bytes
inside it, plan.short_pad_dim: the border along it is runs too short for a fill kernel of their
own): the nest's dim that walks the last dim ranges over
the padded extent ``[-low, size + high)``, and a point outside ``[0, size)`` stores the pad
value. Where that dim is a constant (a short dim computed whole) the choice is made here and
a pad cell computes nothing; where it is a loop variable the point is computed at the dim
clamped into ``[0, size)`` (every load and ``tensor.index`` of a real point: nothing reads
out of bounds) and ``arith.select`` picks the value. The pad's other dims are filled by
data.fill_border as before. ResNet-50's input, quantized to int8 and transposed to NHWC with
its 3 channels padded to 4 (batch 32)::

    before: 3 kernels
      loop.parallel (h, n, w, c in [0,3)):  store q(x[n, c, h, w]) -> P[n, h, w, c]   4.8M points
      loop.parallel (n, h, w):              store 0 -> P[n, h, w, 3]                   1.6M points
      loop.parallel (t, c step 4):          the spatial border, 4 stores per point
    after: 2 kernels
      loop.parallel (h, n, w):                                                      1.6M points
        a, b, c = q(x[n, 0, h, w]), q(x[n, 1, h, w]), q(x[n, 2, h, w])
        store a, b, c, 0 -> P[n, h, w, 0..3]          (one 4-byte store in PTX; 8 in fp16)
      loop.parallel (t, c step 4):          the spatial border, as before

Scalars computed in bodies are cloned as they are (arith/math ops are the same at both
stages); ``tensor.index`` becomes the affine expression of the nest's induction variables,
``tensor.extract`` a ``loop.load``. Affine index expressions are emitted at the shallowest level
where their dims are known and cached per level.
"""

from __future__ import annotations

import itertools

import numpy as np

from ...dialects.loop import for_loop, parallel_loop
from ...dialects.loop_contraction import ATTR
from ...dialects.tensor.maps import row_terms
from ...errors import CompileError
from ...ir.builder import Builder
from ...ir.core import Value
from ...ir.types import INDEX
from .named import annotation
from .nest_spec import Acc, Const, Load, NestSpec, Stage
from .scope import Scope, affine, cast, const, dims_key


def parallel_order(bounds, iters, ranges, store_map) -> list[int]:
    """The loop order of the parallel dims of extent > 1 (see the module docstring)."""
    dims = [d for d, t in enumerate(iters) if t == "parallel" and ranges[d][1] - ranges[d][0] > 1]
    if len(dims) < 2:
        return dims
    inner = None
    if store_map:
        t = row_terms(store_map[-1])
        if len(t) == 1 and t[0][0] in dims:
            inner = t[0][0]
    if inner is None:
        inner = dims[-1]
    rest = [d for d in dims if d != inner]
    ext = {d: ranges[d][1] - ranges[d][0] for d in rest}
    big = max(rest, key=lambda d: (ext[d], -rest.index(d)))
    return [big] + [d for d in rest if d != big] + [inner]


#: points computed per iteration of the innermost parallel dim of a reduction nest (the first
#: that fits its extent), each with its own accumulator
UNROLL = (8, 4)


def jam_pays(spec: NestSpec, ranges, inner: int, u: int, min_points: int) -> bool:
    """Whether the reduction nest of ``spec`` over ``ranges`` is unrolled and jammed by ``u``
    along ``inner`` (see "Unroll-and-jam" in the module docstring): always where ``min_points``
    is 0 (the CPU) or where some load of the main body that a reduction dim indexes is
    invariant to a parallel dim (of more than one point: an operand that points share in every
    step, a contraction's); a *streaming* reduction, each such load of which moves with every
    parallel dim, only while it keeps ``min_points`` points jammed. Loads no reduction dim
    indexes (a per-channel scale or bias, read once per point) do not count."""
    if not min_points:
        return True
    extent = [hi - lo for lo, hi in ranges]
    par = [d for d, t in enumerate(spec.iters) if t == "parallel" and extent[d] > 1]
    red = {d for d, t in enumerate(spec.iters) if t == "reduction" and extent[d] > 1}
    if inner not in par:
        return True
    n_in = len(spec.main.args) - len(spec.acc_types)
    streamed = []
    for a in spec.main.args[:n_in]:
        if isinstance(a, Load):
            used = {d for row in a.map for d, _ in row_terms(row)}
            if used & red:
                streamed.append(used)
    if not streamed or any(d not in used for used in streamed for d in par):
        return True
    jammed = 1
    for d in par:
        jammed *= extent[d] // u if d == inner else extent[d]
    return jammed >= min_points


#: bytes of a run, largest first: what a fill point stores along a contiguous innermost dim
#: (data.py), and the sizes of a short innermost dim an all-parallel nest's point computes whole
RUN_BYTES = (16, 8, 4)


def whole_run(ranges, inner, targets) -> tuple | None:
    """The dims each point of the all-parallel nest computes whole, outermost first: the loop
    dims walking the last ``k`` dims of every target (``inner``, the store's innermost, the
    last of them), as many as still make one dense, naturally aligned run of 4, 8 or 16 bytes
    in every target's place (so the run's adjacent stores merge into one vector store); None
    where not even ``inner`` alone does. ``k`` > 1: a space-to-depth's (c, by, bx) channels,
    16 int8 bytes in one store."""
    best = None
    for k in range(1, min(len(t.map) for ts in targets for t in ts) + 1):
        dims = _run_dims(ranges, inner, targets, k)   # (a run too short at k may not be
        if dims is not None:                          # at k + 1: int8's (by, bx), 2 bytes)
            best = dims
    return best


def _run_dims(ranges, inner, targets, k: int) -> tuple | None:
    """:func:`whole_run`'s dims for the last ``k`` store dims, or None."""
    t0 = targets[0][0]
    dims = []
    for row in t0.map[-k:]:
        terms = row_terms(row)
        if len(terms) != 1 or terms[0][1] != 1:
            return None
        dims.append(terms[0][0])
    ext = [ranges[d][1] - ranges[d][0] for d in dims]
    e = int(np.prod(ext))
    if e <= 1 or len(set(dims)) != k or [d for d, n in zip(dims, ext) if n > 1][-1] != inner:
        return None
    for ts in targets:
        for t in ts:
            layout = t.place.layout
            if not t.map or len(t.map) < k:
                return None
            if [row_terms(r) for r in t.map[-k:]] != [[(d, 1)] for d in dims] or \
                    any(d in dict(row_terms(r)) for r in t.map[:-k] for d in dims):
                return None
            stride = 1          # dense: each run dim's stride is the product inside it
            for j in range(1, k + 1):
                if layout.strides[-j] != stride:
                    return None
                stride *= ext[-j]
            if e * max(1, layout.element.bitwidth // 8) not in RUN_BYTES:
                return None
            start = layout.offset + sum(
                (int(r[-1]) + ranges[d][0]) * st
                for r, d, st in zip(t.map[-k:], dims, layout.strides[-k:]))
            if start % e or any(st % e for st in layout.strides[:-k]):
                return None
    return tuple(dims)


class NestEmitter:
    """Emits NestSpecs into the function being built by ``lw`` (a Lowerer: it materializes
    places as buffers and rematerializes top-level scalars)."""

    def __init__(self, lw, jam_min_points: int = 0):
        self.lw = lw
        self.jam_min_points = jam_min_points   # see :func:`jam_pays`

    # ---- reads ------------------------------------------------------------------------------
    def source(self, scope: Scope, src, dims: dict) -> Value:
        if isinstance(src, Const):
            return const(scope, src.value, src.type)
        if isinstance(src, Load):
            key = ("load", src.place, tuple(src.map), dims_key(src.map, dims))
            v = scope.get(key)
            if v is None:
                buf = self.lw.buffer(src.place)
                idx = [affine(scope, row, dims) for row in src.map]
                v = scope.cache[key] = scope.b.create("loop.load", [buf, idx]).result
            return v
        raise CompileError(f"internal: cannot read {src!r}")

    def run_stage(self, scope: Scope, stage: Stage, args: list, dims: dict) -> list[Value]:
        """Clone ``stage.block`` at ``scope`` with its arguments bound to ``args``; returns the
        yielded values."""
        mapping = {a: v for a, v in zip(stage.block.args, args) if v is not None}
        for op in stage.block.ops:
            if op.name == "tensor.yield":
                return [mapping[v] for v in op.operands]
            if op.name == "tensor.index":
                mapping[op.results[0]] = affine(scope, stage.rows[op.attr("dim")], dims)
                continue
            for v in (op.operands[1:] if op.name == "tensor.extract" else op.operands):
                if v not in mapping:
                    if any(v is a for a in stage.block.args):
                        raise CompileError("internal: a body reads an argument it was not given")
                    mapping[v] = self.lw.scalar(v, scope)
            if op.name == "tensor.extract":
                t, *idx = op.operands
                mapping[op.results[0]] = self.lw.extract(scope, t, [mapping[i] for i in idx])
                continue
            scope.b.insert(op.clone(mapping))
        raise CompileError("internal: a body without tensor.yield")

    # ---- nests ---------------------------------------------------------------------------------
    def emit(self, spec: NestSpec) -> None:
        restricted = [t for ts in spec.targets for t in ts if t.restrict is not None]
        if restricted:
            if len(spec.targets) != 1:
                raise CompileError(f"{spec.op.where}: internal: a scattered nest with "
                                   f"{len(spec.targets)} results")
            for t in spec.targets[0]:
                self.emit_range(spec, t.restrict, [[t]])
        else:
            self.emit_range(spec, None, spec.targets)

    def emit_range(self, spec: NestSpec, restrict, targets) -> None:
        n = len(spec.bounds)
        ranges = [[0, b] for b in spec.bounds]
        if restrict is not None:
            d, lo, hi = restrict
            ranges[d] = [lo, hi]
        if spec.pad is not None:
            pd = spec.pad
            if restrict is not None:
                raise CompileError(f"{spec.op.where}: internal: a scattered nest with a pad")
            ranges[pd.dim] = [-pd.low, pd.size + pd.high]
        if any(ranges[d][1] <= ranges[d][0] for d in range(n) if spec.iters[d] == "parallel"):
            return  # no points
        order = parallel_order(spec.bounds, spec.iters, ranges, targets[0][0].map)
        has_red = any(t == "reduction" and ranges[d][1] - ranges[d][0] > 1
                      for d, t in enumerate(spec.iters))
        whole = whole_run(ranges, order[-1], targets) if order and not has_red else None
        if whole:
            self._nest(spec, ranges, targets, None, whole=whole)
            return
        if order and has_red:
            inner = order[-1]
            lo, hi = ranges[inner]
            u = next((u for u in UNROLL if hi - lo >= u), 1)
            if u > 1 and jam_pays(spec, ranges, inner, u, self.jam_min_points):
                split = lo + (hi - lo) // u * u
                main = [list(r) for r in ranges]
                main[inner] = [lo, split]
                self._nest(spec, main, targets, (inner, u))
                if split < hi:
                    tail = [list(r) for r in ranges]
                    tail[inner] = [split, hi]
                    self._nest(spec, tail, targets, None)
                return
        self._nest(spec, ranges, targets, None)

    def _nest(self, spec, ranges, targets, unroll, whole=None) -> None:
        """One nest over ``ranges``; ``unroll = (dim, u)``: that dim steps by ``u`` and each
        iteration computes ``u`` points, with ``u`` accumulators carried side by side (an
        unroll-and-jam: loads that do not depend on the dim are shared, and the ``u``
        independent chains are what the SLP vectorizer packs). ``whole``: dims that are no
        loops of the nest: each iteration computes every point of them, each dim a constant in
        each (an all-parallel nest's short innermost dims, :func:`whole_run`)."""
        n = len(spec.bounds)
        dims: dict = {}
        for d in range(n):
            if ranges[d][1] - ranges[d][0] == 1:
                dims[d] = ranges[d][0]
        if whole is None:
            order = parallel_order(spec.bounds, spec.iters, ranges, targets[0][0].map)
        else:
            # the next store dim inward becomes the nest's innermost (coalesced on a GPU)
            rest = [list(r) for r in ranges]
            for d in whole:
                rest[d] = [ranges[d][0], ranges[d][0] + 1]
            order = parallel_order(spec.bounds, spec.iters, rest,
                                   targets[0][0].map[:-len(whole)])
        red = [d for d in range(n) if spec.iters[d] == "reduction" and d not in dims]
        steps = [unroll[1] if unroll and d == unroll[0] else 1 for d in order]
        lw = self.lw
        loop, pb, ivs = parallel_loop(Builder.at_end(lw.body), [ranges[d][0] for d in order],
                                      [ranges[d][1] for d in order], steps, loc=spec.op.loc)
        factors = spec.main.args[:2]
        if spec.contraction is not None and all(isinstance(x, Load) for x in factors):
            mark = annotation(spec.contraction, [x.map for x in factors], order, red)
            if mark is not None:
                loop.attributes[ATTR] = mark
        lw.anchor = loop
        try:
            for d, iv in zip(order, ivs):
                dims[d] = iv
            scope = Scope(pb)
            variants = [dims]
            if unroll:
                d, u = unroll
                for j in range(1, u):
                    v = dict(dims)
                    v[d] = pb.create("arith.add", [dims[d], const(scope, j, INDEX)]).result
                    variants.append(v)
            if whole is not None:
                variants = [{**dims, **dict(zip(whole, point))} for point in
                            itertools.product(*(range(*ranges[d]) for d in whole))]
            # per point: the dims its value is computed at, and how its stored value is chosen
            computed, picks = [], []
            for v in variants:
                at, pick = self._pad_point(spec.pad, scope, v)
                picks.append(pick)
                if pick != "pad":
                    computed.append(at)
            results = iter(self._body(spec, scope, computed, red, ranges))
            for v, pick in zip(variants, picks):
                vals = None if pick == "pad" else next(results)
                if pick not in (None, "pad"):   # a dynamic point: the op's value or the pad's
                    pv = self._pad_value(scope, spec.pad)
                    vals = [scope.b.create("arith.select", [pick, x, pv]).result for x in vals]
                elif pick == "pad":
                    vals = [self._pad_value(scope, spec.pad)] * len(targets)
                self._store(scope, vals, v, targets)
        finally:
            lw.anchor = None

    def _pad_point(self, pad, scope, dims):
        """``(dims to compute at, pick)`` for one point: pick None (the op's value), ``"pad"``
        (a pad cell known here: nothing computed) or an ``i1`` (inside the op's range), the
        value then computed at the point clamped into the range, so that no load or index
        leaves it."""
        if pad is None:
            return dims, None
        d = dims[pad.dim]
        if isinstance(d, int):
            return (dims, None) if 0 <= d < pad.size else (None, "pad")
        b = scope.b
        conds, c = [], d
        if pad.low:
            conds.append(b.create("arith.cmp", [d, const(scope, 0, INDEX)],
                                  {"predicate": "ge"}).result)
            c = b.create("arith.max", [c, const(scope, 0, INDEX)]).result
        if pad.high:
            conds.append(b.create("arith.cmp", [d, const(scope, pad.size, INDEX)],
                                  {"predicate": "lt"}).result)
            c = b.create("arith.min", [c, const(scope, pad.size - 1, INDEX)]).result
        if not conds:
            return dims, None
        inside = conds[0] if len(conds) == 1 else b.create("arith.and", conds).result
        return {**dims, pad.dim: c}, inside

    def _pad_value(self, scope, pad) -> Value:
        key = ("pad value",)
        v = scope.get(key)
        if v is None:
            v = pad.value(scope) if callable(pad.value) else const(scope, pad.value, pad.type)
            v = scope.cache[key] = cast(scope, v, pad.type)
        return v

    def _store(self, scope, values, dims, targets) -> None:
        for v, ts in zip(values, targets):
            for t in ts:
                buf = self.lw.buffer(t.place)
                idx = [affine(scope, row, dims) for row in t.map]
                scope.b.create("loop.store", [v, buf, idx])

    def _level(self, m, red) -> int:
        lv = 0
        for row in m:
            for i, _ in row_terms(row):
                if i in red:
                    lv = max(lv, red.index(i) + 1)
        return lv

    def _body(self, spec, scope0, variants, red, ranges) -> list[list[Value]]:
        """The final values (after the epilogue) of each point ``variants`` lists, computed
        side by side."""
        main = spec.main
        n_acc = len(spec.acc_types)
        n_in = len(main.args) - n_acc
        # accumulator start values (read once), per computed point
        accs = []
        for dims in variants:
            for k, (init, t) in enumerate(zip(spec.inits, spec.acc_types)):
                used = bool(red) or bool(main.block.args[n_in + k].uses)
                if not used or init is None:
                    accs.append(None)
                    continue
                if isinstance(init, Stage):
                    (v,) = self.run_stage(scope0, init, [self.source(scope0, a, dims)
                                                         if a is not None else None
                                                         for a in init.args], dims)
                else:
                    v = self.source(scope0, init, dims)
                accs.append(cast(scope0, v, t))
        if red and any(a is None for a in accs):
            raise CompileError(f"{spec.op.where}: internal: a reduction without a start value")
        levels: dict[int, list[int]] = {}
        for i, a in enumerate(main.args[:n_in]):
            if isinstance(a, Load):
                levels.setdefault(self._level(a.map, red), []).append(i)
        values = [[None] * n_in for _ in variants]

        def level(k: int, scope: Scope, carried: list) -> list:
            for i in levels.get(k, ()):
                for vals, dims in zip(values, variants):
                    vals[i] = self.source(scope, main.args[i], dims)
            if k == len(red):
                out = []
                for j, (vals, dims) in enumerate(zip(values, variants)):
                    args = []
                    for i, a in enumerate(main.args):
                        if i >= n_in:
                            args.append(carried[j * n_acc + i - n_in])
                        elif isinstance(a, Const):
                            args.append(const(scope, a.value, a.type))
                        else:
                            args.append(vals[i])
                    ys = self.run_stage(scope, main, args, dims)
                    out += [cast(scope, y, t) for y, t in zip(ys, spec.acc_types)]
                return out
            d = red[k]
            loop, fb, iv, inner = for_loop(scope.b, ranges[d][0], ranges[d][1], inits=carried)
            if spec.op.attr("ordered"):
                loop.attributes["ordered"] = True
            for dims in variants:
                dims[d] = iv
            ys = level(k + 1, Scope(fb, scope), inner)
            fb.create("loop.yield", ys)
            return list(loop.results)

        if not variants:
            return []
        flat = level(0, scope0, accs)
        out = []
        for j, dims in enumerate(variants):
            results = [cast(scope0, v, t) for v, t in
                       zip(flat[j * n_acc:(j + 1) * n_acc], spec.out_types)]
            if spec.epilogue is not None:
                e = spec.epilogue
                args = [results[a.k] if isinstance(a, Acc) else
                        (self.source(scope0, a, dims) if a is not None else None)
                        for a in e.args]
                results = self.run_stage(scope0, e, args, dims)
            out.append(results)
        return out
