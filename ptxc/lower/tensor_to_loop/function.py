"""The tensor -> loop lowering of one function: a new loop-level function built op by op, in
program order, from the analysis of plan.py.

Signature: the function's arguments stay arguments (input bindings, ``buffer`` types of the same
shapes, names from ``arg_names``); its results become output arguments appended after them,
named by ``result_names`` and listed in the function attribute ``loop.outputs``; the function
returns nothing and has no ``result_names`` left. An output name equal to an input name (a model
that returns an input under its own name) or to an earlier output gets a ``_out`` suffix: a
binding name must say which argument it is; the function then keeps the model's names in
``loop.result_names`` (the Engine returns outputs by those, issue 11).

Each op, in order:

* ``tensor.constant`` -> a ``loop.global`` (its ``name`` is the value's name, made unique);
* ``tensor.empty`` -> nothing (a ``loop.alloc`` only if something reads its garbage);
* ``tensor.fill`` -> nothing where it is read as a scalar (an init or an ``ins`` of a generic,
  an insert/pad/return operand: those write the constant where they need it); a fill nest into
  a new buffer only when a view of it is taken;
* ``tensor.generic`` (and named ops, generalized) -> a loop nest (nest.py) writing its result
  where the plan placed it, or in place over its init when that init is dead afterwards
  (nothing else on that buffer is read later), or into a new ``loop.alloc``;
* ``tensor.extract_slice`` / ``tensor.reshape`` -> views of the source's place (a reshape whose
  source layout cannot be reshaped by strides copies first);
* ``tensor.insert_slice`` -> the destination's contents made present in the result's place (no
  op when it is already there or is an empty), then the source written into the slice (no op
  when its producer wrote it there);
* ``tensor.pad`` -> the border filled, the source made present in the interior;
* ``func.return`` -> each output made present in its output argument (a copy where the value
  lives elsewhere: an input, a weight, a view, a value returned twice).

Top-level scalar ops (``arith``/``math``, ``tensor.extract``) are not emitted where they stand:
each nest that reads one re-computes it inside (a load at the top level is not a kernel).
"""

from __future__ import annotations

from ...dialects.func import arg_names, func_body, result_names
from ...dialects.loop import RESULT_NAMES_ATTR
from ...dialects.loop import OUTPUTS_ATTR
from ...dialects.tensor.generic import body as generic_body
from ...dialects.tensor.generic import generic_parts
from ...dialects.tensor.maps import identity_map, substitute
from ...errors import CompileError
from ...ir.core import Block, Operation, Region, Value
from ...ir.spec import make_op
from ...ir.types import BufferType, FunctionType, ScalarType, TensorType
from . import data
from .named import CONTRACTION, generalize_all
from .nest import NestEmitter
from .nest_spec import Acc, Const, Load, NestSpec, PadFill, Stage, Target
from .plan import Plan, covers
from .scope import Scope, const
from .storage import ALLOC, ARG, GLOBAL, OUTPUT, Place, Root

_VIEWS = ("tensor.extract_slice", "tensor.reshape")

#: the tensor ops this lowering handles (body-only ops inside the generics that hold them;
#: named ops through their generic)
LOWERED_OPS = frozenset({
    "tensor.constant", "tensor.empty", "tensor.fill", "tensor.generic", "tensor.yield",
    "tensor.index", "tensor.extract", "tensor.extract_slice", "tensor.insert_slice",
    "tensor.reshape", "tensor.pad", "tensor.matmul", "tensor.conv", "tensor.pool",
    "tensor.reduce"})


def _buffer_type(t: TensorType) -> BufferType:
    return BufferType(t.shape, t.element)


def _unique(names: list[str], taken: set[str]) -> list[str]:
    out = []
    for n in names:
        m = n
        while m in taken:
            m += "_out"
        taken.add(m)
        out.append(m)
    return out


class Lowerer:
    """Lowers one tensor-level function; :meth:`run` returns the new ``func.func``."""

    def __init__(self, func: Operation, jam_min_points: int = 0):
        self.old = func
        self.problems: list[str] = []
        self.anchor: Operation | None = None
        self.place: dict[Value, Place] = {}
        self.views: dict = {}
        self.global_names: dict[str, object] = {}
        self.nests = NestEmitter(self, jam_min_points)

    # ---- materializing memory ---------------------------------------------------------------
    def top_insert(self, op: Operation) -> Operation:
        """Insert at the top level: before the nest being built, else at the end."""
        if self.anchor is not None:
            self.body.insert_before(self.anchor, op)
        else:
            self.body.append(op)
        return op

    def top_insert_op(self, name, operands, attributes=None, loc=None, result_types=None,
                      result_names=None) -> Operation:
        return self.top_insert(make_op(name, operands, attributes, result_types, loc=loc,
                                       result_names=result_names))

    def _root_value(self, root: Root) -> Value:
        if root.value is None:
            if root.kind == ALLOC:
                op = self.top_insert_op("loop.alloc", [], result_types=[root.type],
                                        result_names=[root.name])
            elif root.kind == GLOBAL:
                name = root.name or "weight"
                base, i = name, 0
                while name in self.global_names and self.global_names[name] is not root.constant:
                    i += 1
                    name = f"{base}_{i}"
                self.global_names[name] = root.constant
                op = self.top_insert_op("loop.global", [], {"name": name, "value": root.constant},
                                        result_names=[root.name])
            else:
                raise CompileError(f"internal: {root} has no value")
            root.value = op.results[0]
        return root.value

    def buffer(self, place: Place) -> Value:
        """The loop buffer of ``place``: its root's value, or a ``loop.view`` of it."""
        v = self._root_value(place.root)
        if place.is_whole:
            return v
        key = (id(place.root), place.layout)
        view = self.views.get(key)
        if view is None:
            t = place.layout
            view = self.top_insert_op("loop.view", [v], {"offset": t.offset, "shape": t.shape,
                                                         "strides": t.strides}).results[0]
            self.views[key] = view
        return view

    def assign(self, v: Value, place: Place) -> None:
        self.place[v] = place
        place.root.values.append(v)

    def fill_value(self, v: Value):
        """The fill constant of ``v`` when a ``tensor.fill`` makes it, else None."""
        p = self.plan.producer(v)
        if p is not None and p.name == "tensor.fill":
            return p.attributes["value"]
        return None

    def place_of(self, v: Value) -> Place:
        """Where ``v`` is (an empty gets a fresh buffer: whoever reads it reads garbage)."""
        p = self.place.get(v)
        if p is None:
            prod = self.plan.producer(v)
            if prod is not None and prod.name == "tensor.empty":
                p = Place.fresh(ALLOC, v.type, v.name_hint)
                self.assign(v, p)
            else:
                raise CompileError(f"internal: {v.type} from "
                                   f"{prod.where if prod else 'an argument'} has no buffer")
        return p

    def read(self, v: Value, m) -> object:
        """How a nest reads ``v`` through ``m``: the fill constant, or a load."""
        fv = self.fill_value(v)
        if fv is not None:
            return Const(fv, v.type.element)
        return Load(self.place_of(v), tuple(m))

    def transfer(self, v: Value, dst: Place, loc=None) -> None:
        """Make the contents of ``v`` present in ``dst``: nothing when they are already there or
        ``v`` is an empty; a fill nest for a fill; else a copy."""
        fv = self.fill_value(v)
        if fv is not None:
            data.fill(self, dst, fv, loc)
            return
        if self._is_empty(v):
            return  # no contents to keep
        data.copy(self, self.place_of(v), dst, loc)

    # ---- scalars inside nests -----------------------------------------------------------------
    def scalar(self, v: Value, scope: Scope) -> Value:
        """A top-level scalar of the tensor function, recomputed at ``scope``."""
        key = ("scalar", id(v))
        got = scope.get(key)
        if got is not None:
            return got
        op = self.plan.producer(v)
        if op is None or not isinstance(v.type, ScalarType):
            raise CompileError(f"internal: {v.type} is not a top-level scalar")
        args = [self.scalar(a, scope) if isinstance(a.type, ScalarType) else a
                for a in op.operands]
        if op.name == "tensor.extract":
            out = self.extract(scope, op.operands[0], args[1:])
        else:
            mapping = dict(zip(op.operands, args))
            new = op.clone(mapping)
            scope.b.insert(new)
            out = new.results[v.index]
        scope.cache[key] = out
        return out

    def extract(self, scope: Scope, t: Value, idx: list[Value]) -> Value:
        fv = self.fill_value(t)
        if fv is not None:
            return const(scope, fv, t.type.element)
        return scope.b.create("loop.load", [self.buffer(self.place_of(t)), idx]).result

    # ---- driver -------------------------------------------------------------------------------
    def run(self) -> Operation:
        f = self.old
        wide = generalize_all(f)
        old_body = func_body(f)
        in_names = arg_names(f)
        ret = old_body.last_op
        if ret is None or ret.name != "func.return":
            raise CompileError(f"{f.where}: the function does not end with func.return")
        for a in old_body.args:
            if not isinstance(a.type, TensorType):
                raise CompileError(f"{f.where}: argument of type {a.type}: a tensor function "
                                   "takes tensors")
        out_names = _unique(result_names(f), set(in_names))
        out_types = [_buffer_type(v.type) for v in ret.operands]
        in_types = [_buffer_type(a.type) for a in old_body.args]
        self.body = Block(in_types + out_types, in_names + out_names)
        attrs = {k: v for k, v in f.attributes.items() if k not in ("result_names",)}
        attrs["arg_names"] = tuple(in_names + out_names)
        attrs["function_type"] = FunctionType(tuple(in_types + out_types), ())
        attrs[OUTPUTS_ATTR] = tuple(out_names)
        if list(out_names) != list(result_names(f)):
            attrs[RESULT_NAMES_ATTR] = tuple(result_names(f))
        outputs = []
        for a, n in zip(self.body.args[len(in_types):], out_names):
            root = Root(OUTPUT, a.type, n)
            root.value = a
            outputs.append(Place(root))
        self.plan = Plan(f, outputs, wide)
        for a, new, n in zip(old_body.args, self.body.args, in_names):
            root = Root(ARG, new.type, n)
            root.value = new
            self.assign(a, Place(root))
        for op in self.plan.ops:
            try:
                self.lower(op)
            except CompileError as e:
                self.problems.append(f"{op.where}: {e}")
        self.body.append(Operation("func.return", []))
        left = [op for op in self.body.ops for op in op.walk() if op.name.startswith("tensor.")]
        self.problems += [f"{op.where}: left behind" for op in left]
        if self.problems:
            raise CompileError(f"lower-tensor-to-loop: {len(self.problems)} op(s) not lowered:\n  "
                               + "\n  ".join(self.problems))
        return Operation("func.func", attributes=attrs, regions=[Region([self.body])],
                         loc=f.loc)

    def lower(self, op: Operation) -> None:
        name = op.name
        if name == "func.return":
            self.lower_return(op)
        elif name == "tensor.constant":
            r = op.results[0]
            root = Root(GLOBAL, _buffer_type(r.type), r.name_hint or op.loc,
                        op.attributes["value"])
            self.assign(r, Place(root))
        elif name == "tensor.empty":
            pass
        elif name == "tensor.fill":
            if any(u.name in _VIEWS for u, _ in self.plan.uses[op.results[0]]):
                p = Place.fresh(ALLOC, op.results[0].type, op.results[0].name_hint)
                data.fill(self, p, op.attributes["value"], op.loc)
                self.assign(op.results[0], p)
        elif name == "tensor.generic":
            if id(op) not in self.plan.fused and id(op) not in self.plan.inlined and \
                    id(op) not in self.plan.pad_into:   # (that one: at its pad)
                self.lower_generic(op)
        elif name == "tensor.extract_slice":
            self.lower_extract_slice(op)
        elif name == "tensor.reshape":
            self.lower_reshape(op)
        elif name == "tensor.insert_slice":
            self.lower_insert_slice(op)
        elif name == "tensor.pad":
            self.lower_pad(op)
        elif op.results and all(isinstance(r.type, ScalarType) for r in op.results) and \
                (name.split(".")[0] in ("arith", "math") or name == "tensor.extract"):
            pass  # recomputed inside the nests that read it
        else:
            raise CompileError(f"no loop lowering for {name}")

    # ---- ops ---------------------------------------------------------------------------------------
    def lower_return(self, op: Operation) -> None:
        for v, out in zip(op.operands, self.plan.outputs):
            if self.place.get(v) != out:
                self.transfer(v, out, op.loc)

    def lower_extract_slice(self, op: Operation) -> None:
        w = op.results[0]
        if op.operands[0] in self.plan.scatter:
            self.assign(w, self.plan.demand[w])  # written there by the scattered producer
            return
        src = self.place_of(op.operands[0])
        self.assign(w, src.sub(op.attr("offsets"), op.attr("sizes"), op.attr("strides")))

    def lower_reshape(self, op: Operation) -> None:
        x, w = op.operands[0], op.results[0]
        p = self.place_of(x).reshaped(w.type.shape)
        if p is None:  # a strided source: copy it to a dense buffer first
            tmp = Place.fresh(ALLOC, x.type, x.name_hint)
            data.copy(self, self.place_of(x), tmp, op.loc)
            p = tmp.reshaped(w.type.shape)
        self.assign(w, p)

    def lower_insert_slice(self, op: Operation) -> None:
        (s, d), r = op.operands, op.results[0]
        here = self.plan.demand[r]
        if self.place.get(d) != here:
            self.transfer(d, here, op.loc)
        self.assign(r, here)
        sub = here.sub(op.attr("offsets"), op.attr("sizes"), op.attr("strides"))
        if self.place.get(s) != sub:
            self.transfer(s, sub, op.loc)

    def pad_value(self, op: Operation):
        """A ``tensor.pad``'s value: a number, or ``(scope) -> Value`` for a scalar operand."""
        if len(op.operands) == 2:
            v = op.operands[1]
            return lambda scope: self.scalar(v, scope)  # noqa: E731
        value = op.attributes.get("value", 0)
        return float(value) if op.results[0].type.element.is_float else value

    def lower_pad(self, op: Operation) -> None:
        s, r = op.operands[0], op.results[0]
        here = self.plan.demand[r]
        self.assign(r, here)
        value = self.pad_value(op)
        g = self.plan.pad_from.get(id(op))
        if g is not None:   # g's nest writes the interior and one dim's border
            self.lower_generic(g, pad=op)
            data.fill_border(self, here, op.attr("low"), s.type.shape, value, op.loc,
                             skip=(self.plan.short_pad_dim(op),))
            return
        data.fill_border(self, here, op.attr("low"), s.type.shape, value, op.loc)
        interior = here.sub(op.attr("low"), s.type.shape, (1,) * s.type.rank)
        if self.place.get(s) != interior:
            self.transfer(s, interior, op.loc)

    # ---- structured ops -----------------------------------------------------------------------
    def _reusable(self, init: Value, g: Operation) -> Place | None:
        """The init's place, when ``g`` may write its result over it: a scratch buffer, the init
        read by ``g`` alone, nothing else on that buffer read after ``g`` and ``g`` reading
        nothing else from it."""
        p = self.place.get(init)
        if p is None or p.root.kind != ALLOC or not self.plan.single_use(init):
            return None
        here = self.plan.eff[id(g)]
        for u in p.root.values:
            if u is init or not self.place[u].overlaps(p):
                continue
            if self.plan.last_use(u) >= here:
                return None
        return p

    def _result_place(self, r: Value, init: Value, g: Operation, may_reuse: bool) -> Place:
        d = self.plan.demand.get(r)
        if d is not None:
            return d
        if may_reuse:
            p = self._reusable(init, g)
            if p is not None:
                return p
        return Place.fresh(ALLOC, r.type, r.name_hint)

    def lower_generic(self, g: Operation, pad: Operation | None = None) -> None:
        """The nest of ``g``; with ``pad`` (plan.pad_into) it also writes ``pad``'s border along
        one dim (plan.short_pad_dim; nest_spec.PadFill)."""
        plan = self.plan
        ins, outs = generic_parts(g)
        maps = g.attr("indexing_maps")
        bounds, iters = g.attr("bounds"), g.attr("iterator_types")
        n = len(bounds)
        block = generic_body(g)
        acc_types = [v.type.element for v in outs]
        wide = plan.wide.get(id(g))
        if wide is not None:
            block, t = wide
            acc_types = [t]
        rows = identity_map(n)
        args = [self.read(v, m) for v, m in zip(ins, maps)] + [Acc(k) for k in range(len(outs))]
        main = Stage(block, rows, args)
        inline = {b.out: b for b in plan.inline.get(id(g), ())}
        epi = plan.epilogue.get(id(g))
        inits, targets = [], []
        for k, (v, r) in enumerate(zip(outs, g.results)):
            m = maps[len(ins) + k]
            start = None
            if k in inline:
                b = inline[k].op
                b_ins, _ = generic_parts(b)
                sub_rows = inline[k].rows
                start = Stage(generic_body(b), sub_rows,
                              [self.read(x, substitute(bm, sub_rows))
                               for x, bm in zip(b_ins, b.attr("indexing_maps"))] + [None])
            init_free = start is not None or self.fill_value(v) is not None or \
                self._is_empty(v)
            if epi is None:
                place = self._result_place(r, v, g, may_reuse=not init_free)
                if not init_free and not covers(m, bounds, v.type.shape) and \
                        self.place.get(v) != place:
                    self.transfer(v, place, g.loc)  # elements the nest skips keep the init
                    start = Load(place, tuple(m))
                targets.append(self._targets(r, place, m))
                if r not in plan.scatter:
                    self.assign(r, place)
            inits.append(start if start is not None else self.read(v, m))
        epilogue = None
        out_types = [r.type.element for r in g.results]
        if epi is not None:
            e = epi.op
            e_ins, e_outs = generic_parts(e)
            e_maps = e.attr("indexing_maps")
            e_args = []
            for j, (x, em) in enumerate(zip(e_ins, e_maps)):
                e_args.append(Acc(0) if j == epi.slot else self.read(x, substitute(em, epi.rows)))
            fv = self.fill_value(e_outs[0])
            e_args.append(Const(fv, e_outs[0].type.element) if fv is not None else None)
            epilogue = Stage(generic_body(e), epi.rows, e_args)
            er = e.results[0]
            em = substitute(e_maps[-1], epi.rows)
            place = plan.demand.get(er) or Place.fresh(ALLOC, er.type, er.name_hint)
            targets = [self._targets(er, place, em)]
            if er not in plan.scatter:
                self.assign(er, place)
        fill = None
        if pad is not None:
            (r,) = g.results
            dim, p = plan.pad_dim(g, pad), plan.short_pad_dim(pad)
            low, high = pad.attr("low"), pad.attr("high")
            shape = list(r.type.shape)
            outer = plan.demand[pad.results[0]]
            # the pad's place restricted to the interior along every dim but p
            offsets, sizes = list(low), list(shape)
            offsets[p], sizes[p] = 0, outer.shape[p]
            place = outer.sub(offsets, sizes, (1,) * len(shape))
            m = [tuple(row) for row in maps[len(ins)]]
            m[p] = m[p][:-1] + (m[p][-1] + low[p],)
            targets = [[Target(place, tuple(m))]]
            fill = PadFill(dim, shape[p], low[p], high[p], self.pad_value(pad),
                           r.type.element)
        spec = NestSpec(g, tuple(bounds), tuple(iters), main, acc_types, out_types, inits,
                        targets, epilogue, fill, g.attributes.get(CONTRACTION))
        self.nests.emit(spec)

    def _is_empty(self, v: Value) -> bool:
        p = self.plan.producer(v)
        return p is not None and p.name == "tensor.empty"

    def _targets(self, r: Value, place: Place, m) -> list[Target]:
        pieces = self.plan.scatter.get(r)
        if pieces is None:
            return [Target(place, tuple(m))]
        out = []
        for pc in pieces:
            row = list(m[pc.axis])
            row[-1] -= pc.lo
            shifted = tuple(tuple(row) if k == pc.axis else tuple(x) for k, x in enumerate(m))
            dim = next(i for i, c in enumerate(m[pc.axis][:-1]) if c)
            out.append(Target(pc.place, shifted, (dim, pc.lo, pc.lo + pc.size)))
        return out


def lower_function(func: Operation, jam_min_points: int = 0) -> Operation:
    """The loop-level version of the tensor-level function ``func`` (see the module docstring);
    ``func`` itself is consumed (its named ops are generalized in place). ``jam_min_points``:
    lower-tensor-to-loop's option (nest.py, :func:`~.nest.jam_pays`)."""
    return Lowerer(func, jam_min_points).run()


