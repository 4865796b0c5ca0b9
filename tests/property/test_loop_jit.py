"""Random elementwise loop programs: the JIT-compiled result equals the loop interpreter.

A program reads 1-3 inputs (some broadcast along random dimensions, one possibly through a
reversed view), runs a random DAG of arith/math ops in a ``loop.parallel`` (its innermost
dimension possibly a nested ``loop.for``) and stores the last value through a permutation of
the induction variables. Two families:

* exact: ops numpy computes exactly (add, sub, mul, div, max, min, neg, abs, sqrt, floor, ceil,
  comparisons and select, float round-trip casts; integer wrap-around, division by zero) on
  f16/f32/f64/i32/i64 with zeros, infinities and NaN in the data; results must be equal, signs of
  zeros included;
* math: transcendental chains (exp, tanh, erf, sqrt, add, mul, div, max, min) on positive data,
  which stay well conditioned; results agree to a relative tolerance (libm and numpy differ by
  an ulp or two per call).

Also: random buffer layouts print and parse back.
"""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ptxc.dialects.func import func_body, new_func, new_module, set_func_results
from ptxc.dialects.loop import OUTPUTS_ATTR, for_loop, parallel_loop, run_main
from ptxc.driver.cpu import CpuProgram
from ptxc.ir import Builder, parse_ir, print_ir, verify
from ptxc.ir.parser import Parser
from ptxc.ir.types import F16, F32, F64, I32, I64, INDEX, BufferType, ScalarType

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_EXACT_FLOAT = ["add", "sub", "mul", "div", "max", "min", "neg", "abs", "sqrt", "floor", "ceil",
                "cmp", "roundtrip", "const"]
_EXACT_INT = ["add", "sub", "mul", "div", "max", "min", "neg", "cmp", "widen", "const"]
_MATH = ["add", "mul", "div", "max", "min", "sqrt", "exp", "tanh", "erf", "const"]
_UNARY = {"neg": "arith.neg", "abs": "math.abs", "sqrt": "math.sqrt", "floor": "math.floor",
          "ceil": "math.ceil", "exp": "math.exp", "tanh": "math.tanh", "erf": "math.erf"}


@st.composite
def recipes(draw):
    mode = draw(st.sampled_from(["exact", "exact", "math"]))
    el = draw(st.sampled_from([F32, F64] if mode == "math" else [F32, F64, F16, I32, I64]))
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 6)) for _ in range(rank))
    n_in = draw(st.integers(1, 3))
    bcast = [tuple(draw(st.booleans()) and draw(st.booleans()) for _ in range(rank))
             for _ in range(n_in)]
    pool = _MATH if mode == "math" else _EXACT_INT if el.is_int else _EXACT_FLOAT
    steps = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(pool))
        steps.append((kind, draw(st.integers(0, 10**6)), draw(st.integers(0, 10**6)),
                      draw(st.integers(0, 10**6))))
    return {"mode": mode, "el": el, "shape": shape, "bcast": bcast, "steps": steps,
            "reverse": draw(st.booleans()), "inner_for": draw(st.booleans()),
            "perm": draw(st.permutations(range(rank))), "seed": draw(st.integers(0, 2**31))}


def _const(el: ScalarType, r: int, mode: str):
    if el.is_int:
        return r % 21 - 10
    if mode == "math":
        return 0.25 + (r % 16) / 4
    return [0.0, -0.0, 1.0, -2.5, 0.1, 3.0, float("inf"), float("nan"), 1e-3, 7.75][r % 10]


def build(rc):
    el, shape, rank = rc["el"], rc["shape"], len(rc["shape"])
    in_shapes = [tuple(1 if b else d for b, d in zip(bc, shape)) for bc in rc["bcast"]]
    out_shape = tuple(shape[p] for p in rc["perm"])
    m = new_module()
    types = [BufferType(s, el) for s in in_shapes] + [BufferType(out_shape, el)]
    names = [f"x{k}" for k in range(len(in_shapes))] + ["y"]
    f = new_func(m, "main", types, names)
    b = Builder.at_end(func_body(f))
    args = func_body(f).args
    ins = list(args[:-1])
    if rc["reverse"] and in_shapes[0][0] > 1:  # read x0 through a view reversed along dim 0
        t = types[0]
        ins[0] = b.create("loop.view", [ins[0]], {
            "offset": (t.shape[0] - 1) * t.strides[0], "shape": t.shape,
            "strides": (-t.strides[0],) + t.strides[1:]}).result
    outer = shape[:-1] if rc["inner_for"] and rank > 1 else shape
    _, p, ivs = parallel_loop(b, (0,) * len(outer), outer)
    if len(outer) < rank:
        _, p, k, _ = for_loop(p, 0, shape[-1])
        ivs = ivs + [k]
    zero = p.create("arith.constant", [], {"value": 0, "type": INDEX}).result
    vals = []  # (value, is_leaf)
    for x, s in zip(ins, in_shapes):
        idx = [zero if d == 1 and n > 1 else iv for d, n, iv in zip(s, shape, ivs)]
        vals.append((p.create("loop.load", [x, idx]).result, True))

    def pick(r, want=None, leaf=False):
        cands = [v for v, lf in vals if (want is None or v.type == want) and (lf or not leaf)]
        return cands[r % len(cands)] if cands else None

    def emit(name, *operands, **attrs):
        return p.create(name, list(operands), attrs or None).result

    for kind, r1, r2, r3 in rc["steps"]:
        if kind == "const":
            v, leaf = emit("arith.constant", value=_const(el, r1, rc["mode"]), type=el), True
        elif kind in _UNARY:
            v, leaf = emit(_UNARY[kind], pick(r1, el)), False
        elif kind == "cmp":
            pred = ["eq", "ne", "lt", "le", "gt", "ge"][r3 % 6]
            c = emit("arith.cmp", pick(r1, el), pick(r2, el), predicate=pred)
            v, leaf = emit("arith.select", c, pick(r2 + 1, el), pick(r1 + 1, el)), False
        elif kind == "roundtrip":  # through the other float types and back: exact both ways
            other = [t for t in (F16, F32, F64) if t != el][r3 % 2]
            v, leaf = emit("arith.cast", emit("arith.cast", pick(r1, el), to=other), to=el), False
        elif kind == "widen":  # i32 <-> i64 wrap/extend, and back
            other = I64 if el == I32 else I32
            v, leaf = emit("arith.cast", emit("arith.cast", pick(r1, el), to=other), to=el), False
        elif kind == "div" and el.is_int:  # operands bounded: no INT_MIN (see test_loop_to_llvm)
            v, leaf = emit("arith.div", pick(r1, el, leaf=True), pick(r2, el, leaf=True)), False
        else:
            v, leaf = emit(f"arith.{kind}", pick(r1, el), pick(r2, el)), False
        vals.append((v, leaf))
    out = vals[-1][0]
    inv = [ivs[q] for q in rc["perm"]]
    p.create("loop.store", [out, args[-1], inv])
    set_func_results(f, [])
    f.attributes[OUTPUTS_ATTR] = ("y",)
    verify(m)
    return m, in_shapes


def data(rc, in_shapes):
    rng = np.random.default_rng(rc["seed"])
    dt = rc["el"].np_dtype
    out = {}
    for k, s in enumerate(in_shapes):
        if rc["el"].is_int:
            x = rng.integers(-50, 51, s).astype(dt)
        elif rc["mode"] == "math":
            x = rng.uniform(0.1, 4.0, s).astype(dt)
        else:
            x = (rng.standard_normal(s) * 4).astype(dt)
            flat = x.reshape(-1)
            for j in rng.integers(0, flat.size, 2):
                flat[j] = rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan])
        out[f"x{k}"] = x
    return out


@SETTINGS
@given(recipes())
def test_jit_equals_interpreter(rc):
    m, in_shapes = build(rc)
    inputs = data(rc, in_shapes)
    want = run_main(m, inputs)["y"]
    got = CpuProgram.from_module(m, threads=2, min_parallel_work=0)(inputs)["y"]
    assert got.dtype == want.dtype and got.shape == want.shape
    if rc["mode"] == "exact":
        np.testing.assert_array_equal(got, want)
        if rc["el"].is_float:
            ok = np.isnan(want) | (np.signbit(got) == np.signbit(want))
            assert ok.all(), "signs of zeros differ"
    else:
        rtol = 1e-3 if rc["el"] == F32 else 1e-11
        np.testing.assert_allclose(got, want, rtol=rtol, atol=0)


@st.composite
def layouts(draw):
    rank = draw(st.integers(0, 3))
    shape = tuple(draw(st.integers(0, 5)) for _ in range(rank))
    strides = tuple(draw(st.integers(-20, 20)) for _ in range(rank))
    el = ScalarType(draw(st.sampled_from(["f32", "f16", "i1", "i64", "ui8"])))
    need = -sum(min(0, (d - 1) * s) for d, s in zip(shape, strides))
    offset = need + draw(st.integers(0, 7))
    return BufferType(shape, el, strides, offset)


@settings(max_examples=100, deadline=None)
@given(layouts())
def test_buffer_layouts_round_trip(t):
    text = str(t)
    assert Parser(text).type() == t
    assert ("strides" in text) == (t.strides != BufferType(t.shape, t.element).strides)
    assert ("offset" in text) == (t.offset != 0)
    m = new_module()
    f = new_func(m, "main", [t], ["x"])
    set_func_results(f, [])
    assert print_ir(parse_ir(print_ir(m))) == print_ir(m)
