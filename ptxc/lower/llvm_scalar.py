"""LLVM IR for scalar ops: ``arith.*`` and ``math.*`` with exactly the reference semantics of
:mod:`ptxc.dialects.arith` and :mod:`ptxc.dialects.math`, as llvmlite instructions.

No fast-math flags anywhere: float results must equal numpy's bit for bit where numpy itself is
exact (add, sub, mul, div, sqrt, comparisons, casts). The register types, ``index``'s width
(:func:`index_bits`) and constants are :mod:`ptxc.lower.llvm_types`; what can be proved about a
value, which picks the cheaper exact forms below (:data:`MAGIC`, :func:`_finite_bound`,
:func:`_clamped_to_i32`), is :mod:`ptxc.lower.llvm_bounds`. Choices that keep to the reference:

* ``arith.max``/``min`` on floats are compare-and-select: NaN propagates, as ``np.maximum``
  (``llvm.maxnum`` would drop the NaN), and ties between ``+0`` and ``-0`` break as numpy's loops
  do (``llvm.maximum`` would always give ``+0``). Against a constant that is neither zero nor
  NaN (a clamp's bounds) there is no tie, and against ``+0.0`` in a max (a relu) or ``-0.0``
  in a min the tie goes to the same zero both ways: there ``llvm.maximum``/``minimum`` is
  exact, NVPTX ``max.NaN.f32``, one instruction where compare-and-select takes two to four.
* integer ``arith.div`` truncates toward zero; division by zero gives the dividend and
  ``INT_MIN / -1`` wraps, as the reference (LLVM's ``sdiv`` would be undefined there).
* integer ``arith.pow`` is square-and-multiply with wrapping, unrolled over the exponent's bits;
  a negative exponent gives 0 (numpy raises).
* ``math.tanh``/``math.erf`` call libm's double ``tanh``/``erf`` (resolved by the JIT from the
  process, see :mod:`ptxc.driver.cpu`) and round the result to the operand's type; the reference
  computes erf in float64 too. f16 goes through f32 as numpy does.
* float-to-int ``arith.cast`` truncates toward zero. To types narrower than 64 bits it goes
  through ``llvm.fptosi.sat.i64`` and truncates, so out-of-range values wrap modulo 2**bits as
  numpy's and onnxruntime's casts do on x86 (300.0 -> ui8 44, -1.0 -> ui8 255; issue 11: the
  compiled cast used to saturate). To 64-bit types ``llvm.fpto[su]i.sat``: NaN and values
  beyond the range give a defined saturated value instead of poison. A value clamped by
  constants inside i32's range (quantization's saturation) takes ``llvm.fptosi.sat.i32``
  instead: the same integer, without NVPTX's 64-bit ``cvt.rzi.s64`` (:func:`_clamped_to_i32`).
* On the GPU (``math_library = "libdevice"``) every math function and float ``pow`` calls
  libdevice's ``__nv_<fn>f`` (f32) or ``__nv_<fn>`` (f64); f16 goes through the f32 function and
  rounds back, as numpy computes f16 math in f32. NVPTX has no libm, and LLVM lowers
  ``llvm.exp``/``llvm.log`` to approximate ``ex2``/``lg2`` instructions or leaves them as calls
  nothing resolves; libdevice's functions are the accurate ones (tanh/erf within 2 ulp in f32).
  ``sqrt`` stays ``llvm.sqrt`` (NVPTX: ``sqrt.rn``, correctly rounded).
* **No conversion instruction where an integer is small** (:data:`MAGIC`): on sm_90 every
  int<->float conversion and ``cvt.rni`` issue at 16 per clock per SM, an eighth of an add,
  and an int8 layer's requantization epilogue did several per output element. Three exact
  forms use the f32 number ``MAGIC = 1.5 * 2**23`` instead (both targets, one code path):
  ``math.roundeven`` of an f32 clamped into ``[-2**22, 2**22]`` is ``(x + MAGIC) - MAGIC``
  with x's sign (the add rounds to an integer, ties to even: ``MAGIC + x`` lies in
  ``[2**23, 2**24]``, where the ulp is 1; the sign keeps rint's -0.0); ``arith.cast`` to an
  int of at most 32 bits of an integer-valued f32 clamped into that range is
  ``bits(v + MAGIC) - bits(MAGIC)`` (NaN selects 0, as the saturating cast gives; where v
  provably is never NaN, a requantized accumulator, :func:`_finite_bound`, the select goes,
  and a cast to 8 or 16 bits takes ``MAGIC + 128`` so that an integer add stays between the
  f32 add and the byte store: an H200 stored wrong bytes straight from an ``add.rn.f32``,
  see :meth:`ScalarEmitter._rounded_to_int`); an int that needs at most 22 bits (a widened
  int8, a dequantization's ``x - zp``) to f32 is ``float(bits(MAGIC) + v) - MAGIC``. Example
  (the requantization of an int8 layer, i8 result, zero point 0)::

      %c = arith.min (arith.max %y, -4194304.0), 4194304.0;  %r = math.roundeven %c
      %m = arith.min (arith.max %r, -128.0), 127.0;          %q = arith.cast %m to i8
      before: cvt.rni.f32.f32, cvt.rzi.s32.f32   after: add, sub, copysign (f32), add.f32, sub.s32

* ``math.roundeven`` is ``llvm.roundeven`` on both targets (x86 ``roundss``, NVPTX
  ``cvt.rni``; exact, so libdevice has nothing to add); f16 goes through f32 (exact: every
  f16 is an f32 and so is its rounding). ``math.fma`` is ``llvm.fma.f32`` (x86 ``vfmadd``
  or libm's ``fmaf``, NVPTX ``fma.rn.f32``): one rounding, as the reference.
* the trigonometric family (``math.sin`` ... ``math.atanh``) calls libm's double functions on
  the CPU (rounded to the operand's type, within an ulp of numpy's f32 loops) and libdevice's
  on the GPU, as tanh does.
* ``arith.rem`` is ``frem`` for floats on the CPU (C's fmod, exact) and libdevice's ``fmod`` on
  the GPU (NVPTX expands ``frem`` as ``x - trunc(x / y) * y``, which is not exact); integer
  ``rem`` by 0 gives 0 and ``INT_MIN rem -1`` gives 0 (``srem`` would be undefined there).
* ``arith.shl``/``arith.shr`` (``shr`` arithmetic for signed types) give 0 (a signed right
  shift: the sign fill) for an amount outside [0, bitwidth), as ONNX's reference (LLVM's
  shifts would be poison).
* i1 lives in memory as one byte (numpy's bool); ``and``/``or``/``not`` on non-i1 values are
  logical (0 or 1), as the reference's ``logical_and``.
* bf16 is a storage type: its register type is i16 (its bits). Only ``arith.cast`` (to and from
  it, through f32: widening shifts the bits up; narrowing rounds to nearest even in integer
  ops, NaN kept quiet as ml_dtypes does), ``select``, constants, loads and stores touch it;
  the importer computes every bf16 op in f32 (fp32 accumulation, see
  :mod:`ptxc.frontend.convert.bf16`), so arithmetic on bf16 is a CompileError here.
* ``index`` is i64, or i32 inside :func:`index_bits` ``(32)``: loop_to_llvm emits a
  ``gpu.launch {index_bits = 32}`` so when every buffer it touches is small enough that no
  index value can leave i32 (:func:`ptxc.lower.loop_to_llvm.launch_index_bits`). There
  ``add``/``sub``/``mul`` on index carry ``nsw`` (LLVM may then widen, reassociate and hoist
  them) and casts compare LLVM widths (``index`` to ``i64`` sign-extends). NVPTX's 64-bit
  integer ops are two instructions each (or a slower pipe), so an mma kernel's tile and
  row arithmetic shrinks; addresses are still 64-bit (llvm_kernel's ``address``).
"""

from __future__ import annotations

from llvmlite import ir

from ..dialects.arith_magic import MAGIC, MAGIC_BITS
from ..errors import CompileError
from ..ir.core import Operation
from ..ir.types import I1, INDEX, ScalarType
from ..ptx.libdevice import MATH_STEMS as _LIBDEVICE
from ..ptx.libdevice import TRIG as _TRIG
from .llvm_bounds import (OFFSET_MAGIC, OFFSET_MAGIC_BITS, SMALL, _clamped_to_i32, _finite_bound,
                          _int_bits, _integral, _magic_exact_operand, _range,
                          _rounded_plus_constant, _small, _small_int, _tie_free_bound)
from .llvm_types import _FLOATS, _FSUFFIX, I16, I32, I64, constant, llvm_type, supported


class ScalarEmitter:
    """Emits scalar ops at an llvmlite builder. Subclasses hold ``b`` (the builder), ``m`` (the
    module) and ``vals`` (IR value -> LLVM value)."""

    b: ir.IRBuilder
    m: ir.Module
    vals: dict
    #: "libm" (CPU: LLVM intrinsics and the C library) or "libdevice" (NVPTX: ``__nv_*``)
    math_library = "libm"

    # ---- declarations -------------------------------------------------------------------------
    def declare(self, name: str, ret: ir.Type, args: list) -> ir.Function:
        f = self.m.globals.get(name)
        if f is None:
            f = ir.Function(self.m, ir.FunctionType(ret, args), name)
            if not name.startswith("llvm."):
                f.attributes.add("nounwind")
        return f

    def intrinsic(self, base: str, t: ScalarType, args: list) -> ir.Value:
        ty = llvm_type(t)
        f = self.declare(f"llvm.{base}.{_FSUFFIX[t.name]}", ty, [ty] * len(args))
        return self.b.call(f, args)

    # ---- helpers ------------------------------------------------------------------------------
    def _f64_to_f32_odd(self, v: ir.Value) -> ir.Value:
        """f64 -> f32 rounded to odd (truncate, then set the last bit if anything was lost):
        a later rounding to bf16 then equals one direct rounding."""
        b = self.b
        t = b.fptrunc(v, ir.FloatType())
        back = b.fpext(t, ir.DoubleType())
        # fptrunc rounds to nearest; step toward zero when it rounded away from it
        away = b.fcmp_ordered(">", b.call(self.declare("llvm.fabs.f64", ir.DoubleType(),
                                                       [ir.DoubleType()]), [back]),
                              b.call(self.declare("llvm.fabs.f64", ir.DoubleType(),
                                                  [ir.DoubleType()]), [v]))
        bits = b.bitcast(t, I32)
        bits = b.select(away, b.sub(bits, ir.Constant(I32, 1)), bits)
        inexact = b.fcmp_ordered("!=", back, v)
        odd = b.or_(bits, ir.Constant(I32, 1))
        return b.bitcast(b.select(inexact, odd, bits), ir.FloatType())

    def truthy(self, v: ir.Value, t: ScalarType) -> ir.Value:
        if t == I1:
            return v
        if t.name == "bf16":
            return self.truthy(self.bf16_to_f32(v), ScalarType("f32"))
        if t.is_float:
            return self.b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
        return self.b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))

    def from_bool(self, v: ir.Value, t: ScalarType) -> ir.Value:
        if t == I1:
            return v
        if t.name == "bf16":
            return self.f32_to_bf16(self.from_bool(v, ScalarType("f32")))
        if t.is_float:
            return self.b.uitofp(v, llvm_type(t))
        return self.b.zext(v, llvm_type(t))

    def bf16_to_f32(self, v: ir.Value) -> ir.Value:
        """bf16 bits -> f32: the bits are the top half of the f32 (exact)."""
        b = self.b
        return b.bitcast(b.shl(b.zext(v, I32), ir.Constant(I32, 16)), ir.FloatType())

    def f32_to_bf16(self, v: ir.Value) -> ir.Value:
        """f32 -> bf16 bits, rounded to nearest even; a NaN stays a (quiet) NaN of its sign."""
        b = self.b
        bits = b.bitcast(v, I32)
        lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
        rounded = b.lshr(b.add(bits, b.add(ir.Constant(I32, 0x7FFF), lsb)),
                         ir.Constant(I32, 16))
        nan = b.or_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 0x40))
        is_nan = b.fcmp_unordered("uno", v, v)
        return b.trunc(b.select(is_nan, nan, rounded), I16)

    def cast(self, v: ir.Value, src: ScalarType, dst: ScalarType) -> ir.Value:
        b = self.b
        if src == dst:
            return v
        if src.name == "bf16":
            return self.cast(self.bf16_to_f32(v), ScalarType("f32"), dst)
        if dst.name == "bf16":
            if src.name == "f64":  # one rounding, as ml_dtypes: f64 -> bf16 through f32 would
                v = self._f64_to_f32_odd(v)  # round twice
            else:
                v = self.cast(v, src, ScalarType("f32"))
            return self.f32_to_bf16(v)
        st, dt = llvm_type(src), llvm_type(dst)
        if dst == I1:
            return self.truthy(v, src)
        if src == I1:
            return self.from_bool(v, dst)
        if src.is_float and dst.is_float:
            if src.bitwidth == dst.bitwidth:
                return v
            return b.fpext(v, dt) if dst.bitwidth > src.bitwidth else b.fptrunc(v, dt)
        if src.is_float:
            if dt.width < 64:  # wrap as numpy and onnxruntime do: via i64, then truncate
                f = self.declare(f"llvm.fptosi.sat.i64.{_FSUFFIX[src.name]}", I64, [st])
                return b.trunc(b.call(f, [v]), dt)
            kind = "fptosi" if dst.is_signed else "fptoui"
            f = self.declare(f"llvm.{kind}.sat.i{dt.width}.{_FSUFFIX[src.name]}", dt, [st])
            return b.call(f, [v])
        if dst.is_float:
            return b.sitofp(v, dt) if src.is_signed else b.uitofp(v, dt)
        # integers: the LLVM widths decide (index may be i32, :func:`index_bits`)
        if st.width == dt.width:
            return v
        if dt.width < st.width:
            return b.trunc(v, dt)
        return b.sext(v, dt) if src.is_signed else b.zext(v, dt)

    def _libm(self, name: str, v: ir.Value, t: ScalarType) -> ir.Value:
        """A double libm function applied to an f16/f32/f64 value, rounded back through f32 as
        numpy does for f16."""
        d = ir.DoubleType()
        f = self.declare(name, d, [d])
        x = v if t.name == "f64" else self.b.fpext(v, d)
        y = self.b.call(f, [x])
        if t.name == "f64":
            return y
        y = self.b.fptrunc(y, ir.FloatType())
        return y if t.name == "f32" else self.b.fptrunc(y, llvm_type(t))

    def libdevice(self, name: str, args: list, t: ScalarType) -> ir.Value:
        """libdevice's ``__nv_<name>f``/``__nv_<name>`` on f32/f64 values; f16 through f32."""
        if t.name == "f64":
            ty, fname = ir.DoubleType(), f"__nv_{name}"
        else:
            ty, fname = ir.FloatType(), f"__nv_{name}f"
        f = self.declare(fname, ty, [ty] * len(args))
        if t.name == "f16":
            args = [self.b.fpext(a, ty) for a in args]
        y = self.b.call(f, args)
        return self.b.fptrunc(y, llvm_type(t)) if t.name == "f16" else y

    # ---- ops ----------------------------------------------------------------------------------
    def emit_scalar(self, op: Operation) -> None:
        args = [self.vals[v] for v in op.operands]
        dialect, name = op.name.split(".", 1)
        if dialect == "math":
            out = self._math(op, name, args)
        else:
            out = self._arith(op, name, args)
        self.vals[op.results[0]] = out

    def _math(self, op, name, args):
        t = op.results[0].type
        if not (isinstance(t, ScalarType) and t.name in _FLOATS):
            raise CompileError(f"{op.where}: no LLVM lowering for {t}")
        if name == "fma":
            return self.intrinsic("fma", t, args)
        (x,) = args
        if name == "roundeven":
            if t.name == "f32" and _small(op.operands[0]):   # (x + MAGIC) - MAGIC
                m = constant(MAGIC, t)     # with x's sign: -0.3 rounds to -0.0, as np.rint
                return self.intrinsic("copysign", t, [self.b.fsub(self.b.fadd(x, m), m), x])
            if t.name == "f16":
                f32 = ScalarType("f32")
                y = self.intrinsic("roundeven", f32, [self.b.fpext(x, llvm_type(f32))])
                return self.b.fptrunc(y, llvm_type(t))
            return self.intrinsic("roundeven", t, [x])
        if self.math_library == "libdevice" and name in _LIBDEVICE:
            return self.libdevice(_LIBDEVICE[name], [x], t)
        if name in ("exp", "log", "sqrt", "floor", "ceil"):
            return self.intrinsic(name, t, [x])
        if name == "abs":
            return self.intrinsic("fabs", t, [x])
        if name in ("tanh", "erf") + _TRIG:
            return self._libm(name, x, t)
        raise CompileError(f"{op.where}: no LLVM lowering for math.{name}")

    def _arith(self, op, name, args):
        b = self.b
        if name == "constant":
            return constant(op.attributes["value"], op.results[0].type)
        if name == "cast":
            src, dst = op.operands[0].type, op.results[0].type
            x = op.operands[0]
            if src.name == "f32" and not dst.is_float and dst != I1 and dst.bitwidth <= 32 \
                    and _small(x) and _integral(x):
                rounded = _rounded_plus_constant(x)
                if rounded is not None:
                    return self._rounded_to_int(rounded[0], rounded[1], dst)
                return self._rounded_to_int(x, 0, dst)
            if dst.name == "f32" and not src.is_float and src != I1 and \
                    src.bitwidth <= 32 and (_int_bits(x) <= 22 or _small_int(x)):
                return self._small_int_to_f32(args[0], src)
            if _clamped_to_i32(op.operands[0]) and src.name in ("f32", "f64") and \
                    not dst.is_float and dst != I1 and dst.bitwidth <= 32:
                return self._clamped_to_int(args[0], src, dst)
            return self.cast(args[0], src, dst)
        if name == "select":
            return b.select(*args)
        if name == "round_tf32":
            return self.round_tf32(args[0])
        t = op.operands[0].type
        if not supported(t):
            raise CompileError(f"{op.where}: no LLVM lowering for {t}")
        if name == "cmp":
            return self._cmp(op.attributes["predicate"], args, t)
        if name in ("and", "or", "xor"):
            x, y = (self.truthy(a, t) for a in args)
            fn = {"and": b.and_, "or": b.or_, "xor": b.xor}[name]
            return self.from_bool(fn(x, y), t)
        if name == "not":
            return self.from_bool(b.not_(self.truthy(args[0], t)), t)
        if t == I1:
            raise CompileError(f"{op.where}: arith.{name} on i1 has no LLVM lowering")
        if name == "neg":
            return b.fneg(args[0]) if t.is_float else b.sub(ir.Constant(args[0].type, 0), args[0])
        x, y = args
        if t.is_float:
            simple = {"add": b.fadd, "sub": b.fsub, "mul": b.fmul, "div": b.fdiv}
            if name == "mul" and t.name == "f32":
                fused = self._scaled_small_int(op, args)
                if fused is not None:
                    return fused
            if name in simple:
                return simple[name](x, y)
            if name in ("max", "min"):
                if t.name in ("f32", "f64") and _tie_free_bound(name, op.operands[1]):
                    # a NaN x gives NaN and a tie gives numpy's zero: llvm.maximum/minimum
                    # (max.NaN.f32, one instruction on sm_80+) is numpy's maximum exactly
                    return self.intrinsic("maximum" if name == "max" else "minimum", t, [x, y])
                return self._float_max_min(name, x, y, t)
            if name == "rem":
                if self.math_library == "libdevice":
                    return self.libdevice("fmod", [x, y], t)
                return b.frem(x, y)
            if name == "pow":
                if self.math_library == "libdevice":
                    return self.libdevice("pow", [x, y], t)
                return self.intrinsic("pow", t, [x, y])
        else:
            simple = {"add": b.add, "sub": b.sub, "mul": b.mul}
            if name in simple:   # a 32-bit index never wraps (module docstring): nsw
                narrow_index = t == INDEX and x.type.width < 64
                return simple[name](x, y, flags=["nsw"] if narrow_index else ())
            if name == "div":
                return self._int_div(x, y, t)
            if name in ("max", "min"):
                cmp = b.icmp_signed if t.is_signed else b.icmp_unsigned
                return b.select(cmp(">" if name == "max" else "<", x, y), x, y)
            if name == "pow":
                return self._int_pow(x, y, t)
            if name == "rem":
                return self._int_rem(x, y, t)
            if name in ("shl", "shr"):
                return self._shift(name, x, y, t)
            if name in ("bit_and", "bit_or", "bit_xor"):
                return {"bit_and": b.and_, "bit_or": b.or_, "bit_xor": b.xor}[name](x, y)
        raise CompileError(f"{op.where}: no LLVM lowering for arith.{name}")

    def _rounded_to_int(self, v, z: int, dst: ScalarType) -> ir.Value:
        """``int(roundeven(v) + z)`` for an f32 IR value ``v`` in [-SMALL, SMALL] (or NaN; x its
        LLVM value) and an integer ``z``, as an int of at most 32 bits:
        ``bits(x + MAGIC) + (z - MAGIC_BITS)``,
        NaN giving 0 as the saturating cast does; then truncated. Exact: ``x + MAGIC`` is
        MAGIC plus x rounded to an integer, ties to even, and its bits are MAGIC_BITS plus that
        integer. An integer-valued x with z = 0 is the plain cast; with
        :func:`_rounded_plus_constant` the rounding, the zero point and the conversion are one
        f32 add and one integer add.

        Where ``v`` is never NaN (:func:`_finite_bound`: an int8 layer's requantization of an
        accumulator by constant scales) the NaN select goes: on the GPU its ``setp.nan`` and
        ``selp`` were 2 of the epilogue's ~18 instructions per output element. One more thing
        then changes. Truncated to 8 or 16 bits, ``z - MAGIC_BITS`` of a zero ``z`` is 0 (the
        low bits of MAGIC_BITS are), LLVM drops the integer add, and the ``add.rn.f32``'s
        register would be stored as it is by ``st.global.b8``: measured on an H200, such a
        store writes wrong bytes (as if it converted the float, saturating), and without the
        select nothing else stands between the two. So there the float add takes
        :data:`OFFSET_MAGIC` = MAGIC + 128 (an even integer, so the add still rounds ties to
        even) and the integer add subtracts its bits, ``MAGIC_BITS + 128``: truncated, the add
        is ``+ 0x80`` (NVPTX: ``xor.b16 .., 128``, or one ``xor.b32 .., 0x80808080`` after the
        ``prmt`` instructions that pack four bytes), never folded. Its domain is x in [-SMALL - 128,
        SMALL - 128] (the sum must stay in [2**23, 2**24], where the ulp is 1); a ``v`` that
        may reach past SMALL - 128 keeps the MAGIC form and its select. A ``z`` whose low bits
        are not all zero (uint8's 128) keeps a nonzero integer add with MAGIC itself.
        """
        b = self.b
        x = self.vals[v]
        # the cache lives as long as the emitter (one kernel): weights are scanned once
        nan_free = _finite_bound(v, cache=self.__dict__.setdefault("_bounds", {})) is not None
        magic, magic_bits = MAGIC, MAGIC_BITS
        if nan_free and dst.bitwidth < 32 and (z - MAGIC_BITS) % 2 ** dst.bitwidth == 0:
            if _range(v)[1] <= SMALL - 128:
                magic, magic_bits = OFFSET_MAGIC, OFFSET_MAGIC_BITS
            else:
                nan_free = False
        bits = b.bitcast(b.fadd(x, constant(magic, ScalarType("f32"))), I32)
        r = b.add(bits, ir.Constant(I32, z - magic_bits))
        if not nan_free:
            r = b.select(b.fcmp_unordered("uno", x, x), ir.Constant(I32, 0), r)
        return r if dst.bitwidth == 32 else b.trunc(r, llvm_type(dst))

    def _small_int_to_f32(self, v: ir.Value, src: ScalarType) -> ir.Value:
        """An int whose value needs at most 22 bits (:func:`_int_bits`) to f32:
        ``float_bits(MAGIC_BITS + v) - MAGIC`` (exact: MAGIC_BITS + v are the bits of
        MAGIC + v while |v| < 2**22)."""
        b = self.b
        if src.bitwidth < 32:
            wide = b.sext(v, I32) if src.is_signed else b.zext(v, I32)
        else:
            wide = v
        f = b.bitcast(b.add(wide, ir.Constant(I32, MAGIC_BITS)), ir.FloatType())
        out = b.fsub(f, constant(MAGIC, ScalarType("f32")))
        self.__dict__.setdefault("_magic_sums", {})[id(out)] = (out, f)
        return out

    def _scaled_small_int(self, op, args) -> ir.Value | None:
        """``arith.mul`` of a small int's f32 (:meth:`_small_int_to_f32`: ``F - MAGIC`` with
        ``F = float_bits(MAGIC_BITS + i)``) by a multiplier ``m`` that is
        :func:`~ptxc.dialects.arith_magic.magic_exact` as ``fma(F, m, -MAGIC * m)``, one
        instruction for the subtraction and the multiply. Exact:
        the fma rounds ``F m - MAGIC m = i m`` once, as the multiply of the exact ``float(i)``
        does; ``m > 0`` keeps the sign of a zero product (+0). An int8 layer's requantization
        (``float(acc + bias) * m[c]``) and its residual (``float(r) * ratio``) take it::

            before: add.s32 %a, %acc, %bias_magic;  add.rn.f32 %f, %a, 0fCB400000;
                    mul.rn.f32 %y, %f, %m
            after:  add.s32 %a, %acc, %bias_magic;  fma.rn.f32 %y, %a, %m, %neg_magic_m
        """
        sums = self.__dict__.get("_magic_sums", {})
        cache = self.__dict__.setdefault("_magic_exact", {})
        for i in (0, 1):
            x, m = args[i], args[1 - i]
            hit = sums.get(id(x))
            if hit is None or hit[0] is not x:
                continue
            if not _magic_exact_operand(op.operands[1 - i], cache):
                continue
            f = hit[1]
            c = self.b.fmul(m, constant(-MAGIC, ScalarType("f32")))
            return self.intrinsic("fma", ScalarType("f32"), [f, m, c])
        return None

    def _clamped_to_int(self, v: ir.Value, src: ScalarType, dst: ScalarType) -> ir.Value:
        """A float already clamped into i32's range (see :func:`_clamped_to_i32`) to an int of
        at most 32 bits: ``llvm.fptosi.sat.i32`` and a truncation (NVPTX: one
        ``cvt.rzi.s32.f32`` instead of the 64-bit ``cvt.rzi.s64.f32`` the general cast
        needs). The same value: on NaN and on values inside i32's range the saturating
        conversions to i32 and to i64 agree (NaN gives 0), and truncation does the rest."""
        f = self.declare(f"llvm.fptosi.sat.i32.{_FSUFFIX[src.name]}", I32, [llvm_type(src)])
        r = self.b.call(f, [v])
        return r if dst.bitwidth == 32 else self.b.trunc(r, llvm_type(dst))

    def round_tf32(self, x: ir.Value) -> ir.Value:
        """``arith.round_tf32`` as bit arithmetic (the same on the CPU and NVPTX, so both equal
        the reference bit for bit): finite ``x`` -> ``(bits + 0x1000) & 0xFFFFE000``, round to
        nearest with ties away from zero as ``cvt.rna.tf32.f32``; NaN and inf unchanged."""
        b = self.b
        i32 = ir.IntType(32)
        bits = b.bitcast(x, i32)
        rounded = b.and_(b.add(bits, ir.Constant(i32, 0x1000)), ir.Constant(i32, 0xFFFFE000))
        exponent = b.and_(bits, ir.Constant(i32, 0x7F800000))
        finite = b.icmp_unsigned("!=", exponent, ir.Constant(i32, 0x7F800000))
        return b.select(finite, b.bitcast(rounded, x.type), x)

    def _cmp(self, pred: str, args, t: ScalarType):
        ops = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[pred]
        if t.is_float:  # numpy: NaN compares unequal to everything, and != is true
            if pred == "ne":
                return self.b.fcmp_unordered(ops, *args)
            return self.b.fcmp_ordered(ops, *args)
        if t.is_signed:
            return self.b.icmp_signed(ops, *args)
        return self.b.icmp_unsigned(ops, *args)

    def _float_max_min(self, name: str, x, y, t: ScalarType):
        """numpy's maximum/minimum: a NaN operand gives NaN; on a tie (+0 vs -0) numpy's f32/f64
        loops return the second operand and its f16 loop the first, so the sign of a zero
        result is numpy's too."""
        b = self.b
        strict = t.name != "f16"
        pred = (">" if name == "max" else "<") + ("" if strict else "=")
        r = b.select(b.fcmp_ordered(pred, x, y), x, y)
        return b.select(b.fcmp_unordered("uno", x, x), x, r)

    def _int_div(self, x, y, t: ScalarType):
        b = self.b
        ty = x.type
        zero = b.icmp_unsigned("==", y, ir.Constant(ty, 0))
        one = ir.Constant(ty, 1)
        if not t.is_signed:
            return b.udiv(x, b.select(zero, one, y))
        minus_one = b.icmp_signed("==", y, ir.Constant(ty, -1))
        q = b.sdiv(x, b.select(b.or_(zero, minus_one), one, y))
        if isinstance(minus_one, ir.Constant) and not minus_one.constant:
            return q  # a constant divisor other than -1 (the builder folded the guards)
        return b.select(minus_one, b.sub(ir.Constant(ty, 0), x), q)

    def _shift(self, name, x, y, t: ScalarType):
        """The reference's shift: an amount outside [0, bits) (unsigned compare) gives 0, or the
        sign fill for a signed right shift, where LLVM's would be poison."""
        b = self.b
        bits = x.type.width   # (t's, but index may be i32)
        bad = b.icmp_unsigned(">=", y, ir.Constant(y.type, bits))
        safe = b.select(bad, ir.Constant(y.type, 0), y)
        if name == "shl":
            return b.select(bad, ir.Constant(x.type, 0), b.shl(x, safe))
        if not t.is_signed:
            return b.select(bad, ir.Constant(x.type, 0), b.lshr(x, safe))
        return b.select(bad, b.ashr(x, ir.Constant(x.type, bits - 1)), b.ashr(x, safe))

    def _int_rem(self, x, y, t: ScalarType):
        """C's ``%`` with the reference's answers where ``srem``/``urem`` are undefined: a zero
        divisor gives 0, and so does ``INT_MIN % -1``."""
        b = self.b
        ty = x.type
        zero = ir.Constant(ty, 0)
        bad = b.icmp_unsigned("==", y, zero)
        if t.is_signed:
            bad = b.or_(bad, b.icmp_signed("==", y, ir.Constant(ty, -1)))
        safe = b.select(bad, ir.Constant(ty, 1), y)
        r = b.srem(x, safe) if t.is_signed else b.urem(x, safe)
        return b.select(bad, zero, r)

    def _int_pow(self, x, y, t: ScalarType):
        b = self.b
        ty = x.type
        result, base = ir.Constant(ty, 1), x
        bits = ty.width   # (t's, but index may be i32)
        for k in range(bits):
            mask = ir.Constant(ty, (1 << k) - (1 << bits if k == bits - 1 else 0))
            bit = b.icmp_unsigned("!=", b.and_(y, mask), ir.Constant(ty, 0))
            result = b.select(bit, b.mul(result, base), result)
            if k + 1 < bits:
                base = b.mul(base, base)
        if t.is_signed:
            negative = b.icmp_signed("<", y, ir.Constant(ty, 0))
            result = b.select(negative, ir.Constant(ty, 0), result)
        return result
