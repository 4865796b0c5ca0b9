"""``lower-precision{precision=fp16}``: TensorRT's reduced-precision rules as one graph pass.

Runs at the end of the graph stage (after BN folding and every fusion: weights are final) when
``compile(..., precision="fp16" | "tf32")`` asks for it. One mechanism, driven by a per-op
*policy* table (:data:`POLICIES`, precision -> op name -> policy), so a new precision (int8) is
a new table and a new low type, not new special cases:

``contract``    conv/gemm/matmul (fused or not): the two factors are read in the low type
                (weights converted at compile time: a weight outside the low type's range is a
                :class:`~ptxc.errors.PrecisionError` naming the op and its ONNX node; bias
                converted too), the accumulator and the whole epilogue (bias, residual,
                activation) stay f32, and the epilogue's last op casts to what the result is
                stored as. Every such layer becomes a ``graph.fused_*`` op (identity epilogue
                if it had none) whose epilogue takes an f32 accumulator
                (:mod:`ptxc.dialects.graph.fused`).
``elementwise`` elementwise ops compute in f32; their inputs may be stored low and their result
                is stored low when a low reader wants it: the pass brackets the op with
                ``graph.cast`` ops and ``fuse-elementwise`` then folds those casts into its
                body (load f16, compute f32, store f16: one rounding per kernel).
``move``        data movement exact in any type (reshape, transpose, concat, slice, max pool,
                ...) and average pooling (its lowering sums in f32 and rounds the average
                once): runs on the low type when all its data inputs are low.
``fp32``        everything else and every node in ``overrides``: f32 in and out, low inputs
                cast back to f32. :data:`KEEP_FP32` names the ops the rule keeps here whatever
                the precision (softmax, LayerNorm and the other normalizations, mean/sum/product
                reductions and running sums): no policy table may list them.
``tf32``        (precision tf32) contractions keep f32 data and round both factors to tf32
                (``ptxc.precision = "tf32"`` on the fused op -> ``arith.round_tf32`` after each
                operand load in the loop nest).

Where values live: a result is stored low only when its op produces in low precision, it is
not a model output (inputs and outputs keep their declared dtypes) and at least one reader
takes it low; the rest stay f32, so a cast is written only where a low value meets an f32
reader. After the rewrite ``fuse-elementwise, eliminate-concat, cse, dce`` run again so that
the casts fuse into the neighbouring kernels; what can stay a cast kernel is a conversion of a
model input (or of an fp32 op's result) that a contraction reads, TensorRT's reformat layer.

The class docstring of :class:`LowerPrecision` holds a whole before/after example (checked by
the test suite): an input cast (reformat), f16 weights, two matmuls with f32 accumulators, the
relu between them as one kernel that loads f16, computes f32 and stores f16, and an f32 output.
"""

from __future__ import annotations

import attrs
import numpy as np

from ...dialects.func import func_body, get_func
from ...dialects.graph.attention import composition
from ...dialects.graph.fused import FUSED_OF, PRECISION_ATTR, WIDE_ACCUMULATOR
from ...errors import CompileError, PrecisionError
from ...ir.attributes import DenseElements
from ...ir.builder import Builder
from ...ir.core import Block, Operation, OpResult, Region, Value
from ...ir.spec import lookup, make_op
from ...ir.types import F16, F32, ScalarType, TensorType
from ..pass_ import Pass, register_pass
from .fuse_epilogues import FUSED_ATTR, op_label

#: the precisions a compile may ask for (int8 goes through ptxc.compiler's quantize_int8 path)
PRECISIONS = ("fp32", "tf32", "fp16", "int8")
#: the low storage type of each reduced precision that changes types
LOW_TYPE: dict[str, ScalarType] = {"fp16": F16}

_BASE_OF = {v: k for k, v in FUSED_OF.items()}
CONTRACTIONS = frozenset(FUSED_OF) | frozenset(FUSED_OF.values())
#: exact in any element type: they only move, select or compare-and-pick values
MOVES = frozenset({"graph.reshape", "graph.flatten", "graph.squeeze", "graph.unsqueeze",
                   "graph.transpose", "graph.concat", "graph.slice", "graph.split",
                   "graph.max_pool", "graph.global_max_pool", "graph.identity",
                   "graph.expand", "graph.tile"})
#: run on low storage like moves, their sums carried in f32 by the lowering (widened input, an
#: f32 sum, one rounding of the average): TensorRT's fp16 pooling
POOLS = frozenset({"graph.average_pool", "graph.global_average_pool"})

#: TensorRT's rule: softmax, the normalizations (their mean and variance statistics) and every
#: sum, mean or product (reductions, running sums) read and accumulate f32 whatever precision a
#: build asks for -- their accumulations round, and their results feed exponentials and
#: divisions. They take the ``fp32`` policy: an input stored low is cast back to f32 first. No
#: table of :data:`POLICIES` may list them (tests/test_precision_policy.py checks every table
#: against this set, and the pass on each op of it).
KEEP_FP32 = frozenset({"graph.softmax", "graph.log_softmax", "graph.layer_normalization",
                       "graph.instance_normalization", "graph.batch_normalization", "graph.lrn",
                       "graph.reduce_mean", "graph.reduce_sum", "graph.reduce_prod",
                       "graph.cum_sum", "graph.cum_prod"})

#: precision -> op name -> policy (ops not listed: "elementwise" where the op has that trait and
#: the precision lists "*elementwise", else "fp32")
POLICIES: dict[str, dict[str, str]] = {
    "fp32": {},
    "tf32": {name: "tf32" for name in CONTRACTIONS},
    "fp16": {**{name: "contract" for name in CONTRACTIONS},
             **{name: "move" for name in MOVES | POOLS},
             "*elementwise": "elementwise"},
}


def policy(precision: str, op: Operation) -> str:
    table = POLICIES[precision]
    if op.name in table:
        return table[op.name]
    spec = lookup(op.name)
    if "*elementwise" in table and spec is not None and spec.has_trait("elementwise") and \
            op.name != "graph.cast":
        return table["*elementwise"]
    return "fp32"


def node_names(op: Operation) -> list[str]:
    """The ONNX nodes an op stands for: its loc, then the ops fused into it."""
    return ([op.loc] if op.loc else []) + list(op.attributes.get(FUSED_ATTR, ()))


def check_precision(precision: str, overrides: dict | None = None) -> None:
    """``precision`` and each override's value are supported precisions."""
    for where, p in [("precision", precision)] + [
            (f"precision_overrides[{k!r}]", v) for k, v in (overrides or {}).items()]:
        if p not in PRECISIONS:
            raise CompileError(f"{where}: unknown precision {p!r}; supported: "
                               + ", ".join(PRECISIONS))
    for k, v in (overrides or {}).items():
        if v not in ("fp32", precision):
            raise CompileError(f"precision_overrides[{k!r}] = {v!r}: a layer can be kept in "
                               f"fp32 (or at the model's {precision!r}), not raised to {v!r}")


def _float32(v: Value) -> bool:
    return isinstance(v.type, TensorType) and v.type.element == F32


def _const(v: Value):
    p = v.op if isinstance(v, OpResult) else None
    return p if p is not None and p.name == "graph.constant" else None


def _lowered_constant(b: Builder, v: Value, low: ScalarType, user: Operation, what: str):
    """A new ``graph.constant`` holding ``v``'s values in ``low`` (range-checked)."""
    arr = _const(v).attributes["value"].array
    finite = arr[np.isfinite(arr)]
    big = float(np.abs(finite).max()) if finite.size else 0.0
    top = float(np.finfo(low.np_dtype).max)
    if big > top:
        names = node_names(user)
        node = names[0] if names else user.name
        raise PrecisionError(
            f"{user.name} {op_label(user)} (ONNX node {node!r}): {what} has values outside "
            f"{low}'s range (max |value| {big:.6g} > {top:.6g}); keep the layer in fp32 with "
            f"precision_overrides={{{node!r}: 'fp32'}}")
    t = v.type.with_element(low)
    return b.create("graph.constant", [], {"value": DenseElements(arr.astype(low.np_dtype), t)},
                    result_types=[t], loc=_const(v).loc).result


def _cast(b: Builder, v: Value, to: ScalarType, loc=None) -> Value:
    return b.create("graph.cast", [v], {"to": to}, loc=loc).result


class _Rewrite:
    """One run of the pass over ``main`` (see the module docstring)."""

    def __init__(self, func: Operation, precision: str, overrides: dict):
        self.body = func_body(func)
        self.precision = precision
        self.low = LOW_TYPE.get(precision)
        self.ops = [op for op in self.body.ops]
        self.overrides = {k for k, v in overrides.items() if v == "fp32"}
        known = {n for op in self.ops for n in node_names(op)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise CompileError("precision_overrides names no node of the model: "
                               + ", ".join(map(repr, unknown)))
        self.orig = {}  # value -> its type before the pass
        #: contraction -> the element its base computes in, before any operand changes
        self.base_el = {op: self._base_element(op) for op in self.ops
                        if op.name in CONTRACTIONS}

    def pol(self, op: Operation) -> str:
        if any(n in self.overrides for n in node_names(op)):
            return "fp32"
        return policy(self.precision, op)

    # ---- where values live ---------------------------------------------------------------------
    def _reads_low(self, user: Operation, v: Value, low: set) -> bool:
        p = self.pol(user)
        if p == "contract":
            return self.base_el.get(user) == F32
        if p == "elementwise":
            # an elementwise reader of an fp32 op's result computes in f32 anyway, and the
            # cast would fuse into the reader, not the producer: keep such a value f32
            producer = v.op if isinstance(v, OpResult) else None
            return producer is None or self.pol(producer) != "fp32" or \
                producer.name in CONTRACTIONS
        if p == "move":
            return any(r in low for r in user.results)
        return False

    def decide(self) -> set:
        """The f32 values that will be stored in the low type."""
        low = set()
        for op in self.ops:
            p = self.pol(op)
            if op.name == "graph.constant":  # each reader converts its own copy
                continue
            if p == "move":
                data = [v for v in op.operands if _float32(v) and _const(v) is None]
                if data and all(v in low for v in data):
                    low.update(r for r in op.results if _float32(r))
            else:
                # any op may store its f32 result low for low readers, an fp32 op too (the
                # cast right after it fuses into its last kernel; a contraction kept in fp32
                # by an override puts it in its epilogue)
                low.update(r for r in op.results if _float32(r))
        changed = True
        while changed:
            changed = False
            for op in reversed(self.ops):
                if self.pol(op) == "move" and any(r in low for r in op.results):
                    data = [v for v in op.operands if _float32(v) and _const(v) is None]
                    if not all(v in low for v in data):
                        low.difference_update(op.results)
                        changed = True
                for r in op.results:
                    if r in low and not any(self._reads_low(u, r, low) for u in r.users
                                            if u.name != "func.return") or \
                            r in low and any(u.name == "func.return" for u in r.users):
                        low.discard(r)
                        changed = True
        return low

    @staticmethod
    def _base_element(op: Operation):
        base = _BASE_OF.get(op.name, op.name)
        spec = lookup(op.name)
        view = spec.view(op) if op.name in _BASE_OF else op
        (t,) = lookup(base).infer_types(view)
        return t.element

    # ---- rewriting -----------------------------------------------------------------------------
    def run(self) -> bool:
        if self.precision == "fp32":
            return False
        if self.low is None:  # tf32: only the contractions change
            changed = False
            for op in self.ops:
                if self.pol(op) == "tf32" and self.base_el.get(op) == F32:
                    self.contract(op, None, set(), tf32=True)
                    changed = True
            return changed
        low = self.decide()
        for op in self.ops:
            for v in op.operands:
                self.orig.setdefault(v, v.type)
            for r in op.results:
                self.orig.setdefault(r, r.type)
        for op in self.ops:
            p = self.pol(op)
            if p == "contract" and self.base_el.get(op) == F32:
                self.contract(op, self.low, low)
            elif self.base_el.get(op) == F32 and any(r in low for r in op.results):
                self.restore_inputs(op)
                self.contract(op, None, low)
            elif p == "move" and any(r in low for r in op.results):
                self.move(op)
            else:
                self.restore_inputs(op)
                self.store_low(op, low)
        return True

    def restore_inputs(self, op: Operation) -> None:
        """Cast the operands that became low back to the type ``op`` reads."""
        for i, v in enumerate(op.operands):
            want = self.orig.get(v, v.type)
            if v.type != want:
                op.set_operand(i, _cast(Builder.before_op(op), v, want.element, op.loc))

    def store_low(self, op: Operation, low: set) -> None:
        for r in op.results:
            if r in low:
                c = Builder.after_op(op).create("graph.cast", [r], {"to": self.low},
                                                loc=op.loc)
                self.orig[c.result] = self.orig.get(r, r.type)  # readers expect f32
                r.replace_uses_if(c.result, lambda u: u.op is not c)

    def move(self, op: Operation) -> None:
        b = Builder.before_op(op)
        for i, v in enumerate(op.operands):
            if _float32(v) and _const(v) is not None:
                op.set_operand(i, _lowered_constant(b, v, self.low, op, f"operand #{i}"))
        for r, t in zip(op.results, lookup(op.name).infer_types(op)):
            self.orig.setdefault(r, r.type)
            r.type = t

    def contract(self, op: Operation, low_t, low: set, tf32: bool = False) -> None:
        """Rebuild a conv/gemm/matmul as a fused op with an f32 accumulator (see the module
        docstring); ``low_t`` None keeps the operands' types (tf32)."""
        b = Builder.before_op(op)
        if op.name in _BASE_OF:
            spec = lookup(op.name)
            base_ops, extras = spec.split(op)
            base_name, old = _BASE_OF[op.name], spec.epilogue(op)
        else:
            base_ops, extras, base_name, old = list(op.operands), [], op.name, None
        groups = lookup(base_name).groups(_Operands(base_name, base_ops, op.attributes))
        defs = lookup(base_name).operand_defs
        names = [d.name for d in defs]
        if low_t is not None:
            for d in names:
                v = groups[d]
                if v is None or v.type.element == low_t:
                    continue
                if _const(v) is not None:
                    groups[d] = _lowered_constant(b, v, low_t, op, f"weight {d}")
                else:
                    groups[d] = _cast(b, v, low_t, op.loc)
        result = op.results[0]
        out_el = self.low if result in low else self.orig.get(result, result.type).element
        block = Block([F32] + [v.type.element for v in extras], ["acc"])
        bb = Builder.at_end(block)
        if old is None:
            y = block.args[0]
        else:
            args = [block.args[0]]
            for new_arg, old_arg in zip(block.args[1:], old.args[1:]):
                args.append(new_arg if new_arg.type == old_arg.type else
                            bb.create("arith.cast", [new_arg], {"to": old_arg.type}).result)
            if old.args[0].type != F32:
                args[0] = bb.create("arith.cast", [args[0]], {"to": old.args[0].type}).result
            from ...dialects.graph.scalar_forms import inline_block
            (y,) = inline_block(old, bb, args)
        if y.type != out_el:
            y = bb.create("arith.cast", [y], {"to": out_el}).result
        bb.create("graph.yield", [y], result_types=[])
        attributes = {k: v for k, v in op.attributes.items() if k != "operand_segments"}
        if tf32:
            attributes[PRECISION_ATTR] = "tf32"
        operands = [groups[d] for d in names] + [list(extras)]
        new = make_op(FUSED_OF[base_name], operands, attributes,
                      result_types=[result.type.with_element(out_el)],
                      regions=[Region([block])], loc=op.loc)
        b.insert(new)
        self.orig[new.results[0]] = self.orig.get(result, result.type)
        result.replace_all_uses_with(new.results[0])
        op.erase()


def hoist_casts_above_pads(func: Operation) -> int:
    """Rewrite each float-to-float ``graph.cast`` of a constant-mode ``graph.pad`` that nothing
    else reads as the pad of the cast: ``cast(pad(x, v)) -> pad(cast(x), cast(v))``, the pad
    value converted at compile time (the same rounding the cast applies to it). Returns how
    many casts moved.

    Why: a convolution whose input channels are padded (to-channels-last's
    ``channel-multiple``) reads ``cast(pad(transpose(x)))`` in fp16, the pad inserted before
    this pass casts the conv's input. With the cast above the pad, the transpose and the cast
    are one elementwise kernel writing f16 straight into the padded buffer (and
    lower-tensor-to-loop folds the channel pad into it): the fp16 stem's input reformat is one
    kernel, as int8's quantize is, instead of an f32 transpose, an f32 channel fill and an f16
    cast over the padded tensor (ResNet-50 b32: 4.8M + 1.6M + 6.4M threads).

        before: %p = "graph.pad"(%t) {pads = [0, 0, 0, 0, 0, 0, 0, 1]} : (2x8x8x3xf32) -> 2x8x8x4xf32
                %c = "graph.cast"(%p) {to = f16} : (2x8x8x4xf32) -> 2x8x8x4xf16
        after:  %c = "graph.cast"(%t) {to = f16} : (2x8x8x3xf32) -> 2x8x8x3xf16
                %p = "graph.pad"(%c) {pads = [0, 0, 0, 0, 0, 0, 0, 1]} : (2x8x8x3xf16) -> 2x8x8x4xf16

    The two are equal element for element: the interior is ``cast(x)`` either way and the
    border is ``cast(v)``."""
    moved = 0
    for cast in [op for op in func_body(func).ops if op.name == "graph.cast"]:
        pad = cast.operands[0].op if isinstance(cast.operands[0], OpResult) else None
        if pad is None or pad.name != "graph.pad" or pad.attr("mode") != "constant" or \
                len(pad.results[0].users) != 1:
            continue
        to = cast.attr("to")
        x = pad.operands[0]
        value = _const(pad.operands[1]) if len(pad.operands) == 2 else None
        if not (to.is_float and x.type.element.is_float) or (len(pad.operands) == 2
                                                              and value is None):
            continue
        b = Builder.before_op(pad)
        operands = [_cast(b, x, to, cast.loc)]
        if value is not None:
            arr = value.attributes["value"].array
            t = pad.operands[1].type.with_element(to)
            operands.append(b.create("graph.constant", [], {
                "value": DenseElements(arr.astype(to.np_dtype), t)}, result_types=[t],
                loc=pad.operands[1].op.loc).result)
        new = b.create("graph.pad", operands, dict(pad.attributes), loc=pad.loc)
        cast.results[0].replace_all_uses_with(new.results[0])
        cast.erase()
        pad.erase()
        moved += 1
    return moved


def expand_attention(op: Operation) -> None:
    """Replace ``graph.attention`` ``op`` by its composition of graph ops
    (:func:`~ptxc.dialects.graph.attention.composition`), each carrying the op's loc and fused
    node names, so that each step gets its own rule: the two matmuls take f16 (or tf32) factors
    with f32 accumulators and the softmax stays f32, which the fused op, computed in f32 as a
    whole, would forgo. Example::

        %y = "graph.attention"(%q, %kt, %v) {scale = 0.125} loc("pv")
      becomes
        %s = "graph.matmul"(%q, %kt) loc("pv")   %m = "graph.mul"(%s, %c) loc("pv")
        %p = "graph.softmax"(%m) {axis = 3} loc("pv")   %y = "graph.matmul"(%p, %v) loc("pv")
    """
    before = {id(o) for o in op.block.ops}
    y = composition(op, Builder.before_op(op))
    nodes = tuple(op.attributes.get(FUSED_ATTR, ()))
    for new in op.block.ops:
        if id(new) not in before:
            new.loc = op.loc
            if nodes:
                new.attributes[FUSED_ATTR] = nodes
    op.results[0].replace_all_uses_with(y)
    op.erase()


class _Operands:
    def __init__(self, name, operands, attributes):
        self.name, self.operands, self.attributes = name, operands, attributes


@register_pass
@attrs.frozen
class LowerPrecision(Pass):
    """Apply ``precision`` (fp16, the default; tf32; fp32 changes nothing) with TensorRT's rules; see the
    module docstring (rules, policies, a before/after example). ``overrides``: ONNX node names
    kept in fp32 (``precision_overrides``), comma-separated in pipeline text.

    Before:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x3xf32>):
            %w1 = "graph.constant"() {value = dense<[0.5, -1.0, 2.0, 0.25, -0.75, 1.5]> : tensor<3x2xf32>} : () -> tensor<3x2xf32> loc("w1")
            %h = "graph.matmul"(%x, %w1) : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32> loc("mm1")
            %r = "graph.relu"(%h) : (tensor<2x2xf32>) -> tensor<2x2xf32> loc("relu1")
            %w2 = "graph.constant"() {value = dense<[1.0, -2.0, 0.5, 3.0]> : tensor<2x2xf32>} : () -> tensor<2x2xf32> loc("w2")
            %y = "graph.matmul"(%r, %w2) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32> loc("mm2")
            "func.return"(%y) : (tensor<2x2xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<2x3xf32>) -> (tensor<2x2xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    After:
        "builtin.module"() ({
          "func.func"() ({
          ^bb0(%x: tensor<2x3xf32>):
            %0 = "graph.cast"(%x) {to = f16} : (tensor<2x3xf32>) -> tensor<2x3xf16> loc("mm1")
            %1 = "graph.constant"() {value = dense<[0.5, -1.0, 2.0, 0.25, -0.75, 1.5]> : tensor<3x2xf16>} : () -> tensor<3x2xf16> loc("w1")
            %2 = "graph.fused_matmul"(%0, %1) ({
            ^bb0(%acc: f32):
              %3 = "arith.cast"(%acc) {to = f16} : (f32) -> f16
              "graph.yield"(%3) : (f16) -> ()
            }) : (tensor<2x3xf16>, tensor<3x2xf16>) -> tensor<2x2xf16> loc("mm1")
            %4 = "graph.elementwise"(%2) ({
            ^bb0(%5: f16):
              %6 = "arith.cast"(%5) {to = f32} : (f16) -> f32
              %7 = "arith.constant"() {type = f32, value = 0.0} : () -> f32
              %8 = "arith.max"(%6, %7) : (f32, f32) -> f32
              %9 = "arith.cast"(%8) {to = f16} : (f32) -> f16
              "graph.yield"(%9) : (f16) -> ()
            }) {ptxc.fused = ["relu1"]} : (tensor<2x2xf16>) -> tensor<2x2xf16> loc("relu1")
            %10 = "graph.constant"() {value = dense<[1.0, -2.0, 0.5, 3.0]> : tensor<2x2xf16>} : () -> tensor<2x2xf16> loc("w2")
            %11 = "graph.fused_matmul"(%4, %10) ({
            ^bb0(%acc_1: f32):
              "graph.yield"(%acc_1) : (f32) -> ()
            }) : (tensor<2x2xf16>, tensor<2x2xf16>) -> tensor<2x2xf32> loc("mm2")
            "func.return"(%11) : (tensor<2x2xf32>) -> ()
          }) {arg_names = ["x"], function_type = (tensor<2x3xf32>) -> (tensor<2x2xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
        }) : () -> ()
    """

    name = "lower-precision"
    precision: str = "fp16"
    overrides: tuple[str, ...] = ()

    def run(self, module: Operation) -> bool:
        check_precision(self.precision, {n: "fp32" for n in self.overrides})
        if self.precision not in POLICIES:
            raise CompileError(f"lower-precision has no policy table for {self.precision!r} "
                               f"(it has {', '.join(POLICIES)}); int8 is compiled by "
                               "ptxc.compile's quantize_int8 path")
        # a fused attention is computed in f32 as a whole; its steps have rules of their own
        # here (f16/tf32 factors with f32 accumulators, an f32 softmax): take it apart first
        attentions = [op for op in module.walk() if op.name == "graph.attention"] \
            if self.precision != "fp32" else []
        for op in attentions:
            expand_attention(op)
        changed = _Rewrite(get_func(module), self.precision,
                           {n: "fp32" for n in self.overrides}).run() or bool(attentions)
        if changed and self.precision in LOW_TYPE:
            hoist_casts_above_pads(get_func(module))
            from ..pass_manager import PassManager
            PassManager("fuse-elementwise,eliminate-concat,cse,dce", verify_each=False
                        ).run(module)
            for op in module.walk():  # the casts carry their op's loc: list each name once
                if FUSED_ATTR in op.attributes:
                    op.attributes[FUSED_ATTR] = tuple(dict.fromkeys(op.attributes[FUSED_ATTR]))
        return changed


def precision_pipeline(precision: str, overrides: dict | None = None) -> str:
    """The pipeline text of the precision pass for ``compile``'s options ("" for fp32)."""
    check_precision(precision, overrides)
    names = sorted(k for k, v in (overrides or {}).items() if v == "fp32")
    if precision == "fp32":
        return ""
    opts = f"precision={precision}"
    if names:
        opts += " overrides=[" + ",".join(names) + "]"
    return "lower-precision{" + opts + "}"


__all__ = ["LowerPrecision", "POLICIES", "KEEP_FP32", "hoist_casts_above_pads", "PRECISIONS",
           "LOW_TYPE", "policy", "check_precision", "precision_pipeline", "WIDE_ACCUMULATOR"]


#: combiners whose result is one of their operands: exact in any float type (max pooling moves
#: f16 values, so its window max may run in f16 without rounding anything)
EXACT_COMBINERS = frozenset({"arith.max", "arith.min"})


def inexact_low_accumulators(module: Operation) -> list:
    """The contract's check on a loop module: every ``loop.for`` result carried in f16 whose
    update rounds (a sum, a product: anything but a max or min of the carried value, or an
    inner loop whose own updates are exact). TensorRT's rule, and ours: no reduction that rounds
    accumulates in fp16. An empty list means the module keeps it.

        loop.for (%acc: f16) { %m = arith.max(%acc, %x) ; yield %m }   -> exact: not listed
        loop.for (%acc: f16) { %s = arith.add(%acc, %x) ; yield %s }   -> listed
    """
    def exact(loop: Operation, i: int) -> bool:
        body = loop.regions[0].blocks[0]
        v = body.last_op.operands[i]
        if not isinstance(v, OpResult):
            return v is body.args[1 + i]  # carried through unchanged
        if v.op.name in EXACT_COMBINERS:
            return True
        if v.op.name == "loop.for":
            return exact(v.op, v.index)
        return False

    bad = []
    for op in module.walk():
        if op.name == "loop.for":
            bad += [r for i, r in enumerate(op.results)
                    if r.type.name == "f16" and not exact(op, i)]
    return bad
