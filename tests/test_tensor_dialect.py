"""The tensor dialect: each op's reference against numpy written independently, generalize()
equivalence on random inputs, verifier errors, and print -> parse -> print round trips."""

import numpy as np
import pytest

from ptxc.dialects.func import func_body, new_func, new_module, set_func_results
from ptxc.dialects.tensor import build_generic, generalize
from ptxc.dialects.tensor import generic as generic_mod
from ptxc.dialects.tensor.maps import broadcast_map, identity_map, unit_row
from ptxc.errors import CompileError, VerifyError
from ptxc.ir import Builder, DenseElements, interpret, parse_ir, print_ir, verify
from ptxc.ir.types import F16, F32, INDEX, TensorType, scalar_from_numpy, tensor

RNG = np.random.default_rng(0)


def _t(a):
    return tensor(a.shape, scalar_from_numpy(a.dtype))


def module_of(inputs: dict, build):
    """``main(inputs...)`` whose body ``build(b, args)`` builds; returns the module."""
    m = new_module()
    f = new_func(m, "main", [_t(a) for a in inputs.values()], list(inputs))
    b = Builder.at_end(func_body(f))
    outs = build(b, list(func_body(f).args))
    outs = outs if isinstance(outs, list) else [outs]
    set_func_results(f, outs, [f"y{i}" for i in range(len(outs))])
    verify(m)
    return m


def run(inputs: dict, build, roundtrip: bool = True):
    """Interpret; with ``roundtrip``, also check print -> parse -> print is the identity and the
    parsed module gives the same results."""
    m = module_of(inputs, build)
    got = interpret(m, inputs)
    if roundtrip:
        text = print_ir(m)
        m2 = parse_ir(text)
        verify(m2)
        assert print_ir(m2) == text
        again = interpret(m2, inputs)
        for k in got:
            np.testing.assert_array_equal(again[k], got[k])
    vals = list(got.values())
    return vals[0] if len(vals) == 1 else vals


def empty(b, shape, el=F32):
    return b.create("tensor.empty", [], result_types=[tensor(shape, el)]).result


def fill(b, shape, value, el=F32):
    return b.create("tensor.fill", [empty(b, shape, el)], {"value": value}).result


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- data ops ------------------------------------------------------------------------------------

def test_constant_fill_and_empty_garbage():
    c = np.arange(6, dtype=np.int32).reshape(2, 3)
    y = run({"x": f32(2)}, lambda b, a: [
        b.create("tensor.constant", [], {"value": DenseElements(c)}).result,
        fill(b, (2, 2), -1.5),
        empty(b, (3,)), empty(b, (2,), scalar_from_numpy(np.int32))])
    np.testing.assert_array_equal(y[0], c)
    np.testing.assert_array_equal(y[1], np.full((2, 2), -1.5, np.float32))
    assert np.isnan(y[2]).all()  # an empty's elements are marked: NaN, the lowest int
    assert (y[3] == np.iinfo(np.int32).min).all()


def test_extract_slice_positive_and_negative_strides():
    x = f32(5, 6)
    y = run({"x": x}, lambda b, a: [
        b.create("tensor.extract_slice", [a[0]], {"offsets": [1, 0], "sizes": [2, 3],
                                                  "strides": [2, 2]}).result,
        b.create("tensor.extract_slice", [a[0]], {"offsets": [4, 5], "sizes": [5, 2],
                                                  "strides": [-1, -3]}).result])
    np.testing.assert_array_equal(y[0], x[1:4:2, 0:6:2])
    np.testing.assert_array_equal(y[1], x[4::-1, 5::-3])


def test_insert_slice_strided_into_dest():
    src, dst = f32(2, 3), f32(5, 3)
    y = run({"s": src, "d": dst}, lambda b, a: b.create(
        "tensor.insert_slice", a, {"offsets": [0, 0], "sizes": [2, 3], "strides": [3, 1],
                                   "in_place": True}).result)
    want = dst.copy()
    want[0:4:3] = src
    np.testing.assert_array_equal(y, want)


def test_reshape_and_pad_with_attribute_and_operand_value():
    x = f32(2, 3)
    y = run({"x": x}, lambda b, a: [
        b.create("tensor.reshape", [a[0]], result_types=[tensor((3, 1, 2))]).result,
        b.create("tensor.pad", [a[0]], {"low": [1, 0], "high": [0, 2], "value": 7.0}).result,
        b.create("tensor.pad", [a[0], b.create(
            "tensor.extract", [a[0]] + [b.create("arith.constant", [], {
                "value": i, "type": INDEX}).result for i in (1, 2)]).result],
            {"low": [0, 1], "high": [1, 0]}).result])
    np.testing.assert_array_equal(y[0], x.reshape(3, 1, 2))
    np.testing.assert_array_equal(y[1], np.pad(x, [(1, 0), (0, 2)], constant_values=7.0))
    np.testing.assert_array_equal(y[2], np.pad(x, [(0, 1), (1, 0)], constant_values=x[1, 2]))


# ---- generic ---------------------------------------------------------------------------------------

def _add_body(b, args):
    return [b.create("arith.add", args[:2]).result]


def test_generic_broadcast_add_and_transposed_out():
    x, v = f32(2, 3), f32(3)

    def build(b, a):
        plain = build_generic([a[0], a[1]], [empty(b, (2, 3))], (2, 3),
                              [identity_map(2), broadcast_map((3,), (2, 3)), identity_map(2)],
                              ["parallel"] * 2, _add_body, b=b).result
        # out map (d0, d1) -> (d1, d0): writes the transpose
        trans = build_generic([a[0], a[1]], [empty(b, (3, 2))], (2, 3),
                              [identity_map(2), broadcast_map((3,), (2, 3)),
                               (unit_row(2, 1), unit_row(2, 0))],
                              ["parallel"] * 2, _add_body, b=b).result
        return [plain, trans]

    y = run({"x": x, "v": v}, build)
    np.testing.assert_array_equal(y[0], x + v)
    np.testing.assert_array_equal(y[1], (x + v).T)


def test_generic_strided_diagonal_and_flipped_maps():
    x = f32(7, 7)
    # out[i] = x[2i + 1, 6 - i] + x[i, i]   (a strided, a flipped and a diagonal read)
    m1 = ((2, 1), (-1, 6))
    diag = ((1, 0), (1, 0))

    y = run({"x": x}, lambda b, a: build_generic(
        [a[0], a[0]], [empty(b, (3,))], (3,), [m1, diag, ((1, 0),)], ["parallel"],
        _add_body, b=b).result)
    i = np.arange(3)
    np.testing.assert_array_equal(y, x[2 * i + 1, 6 - i] + x[i, i])


def test_generic_reduction_contraction_accumulation_sequential_and_chunked(monkeypatch):
    x = f32(4, 5, 6)
    rows = (unit_row(3, 0), unit_row(3, None), unit_row(3, None))
    iters = ["parallel", "reduction", "reduction"]

    def reduction(b, a, body):
        return build_generic([a[0]], [fill(b, (4, 1, 1), 0.0)], (4, 5, 6),
                             [identity_map(3), rows], iters, body, b=b).result

    def sum_of_squares(bb, args):  # acc + x * x: a contraction (einsum)
        sq = bb.create("arith.mul", [args[0], args[0]]).result
        return [bb.create("arith.add", [args[1], sq]).result]

    def sum_of_exp(bb, args):  # acc + exp(x): an accumulation, evaluated in blocks
        e = bb.create("math.exp", [args[0]]).result
        return [bb.create("arith.add", [e, args[1]]).result]

    def decay(bb, args):  # acc * 0.5 + x: neither, runs point by point in order
        h = bb.create("arith.constant", [], {"value": 0.5, "type": F32}).result
        t = bb.create("arith.mul", [args[1], h]).result
        return [bb.create("arith.add", [t, args[0]]).result]

    got = run({"x": x}, lambda b, a: [reduction(b, a, f) for f in
                                      (sum_of_squares, sum_of_exp, decay)])
    np.testing.assert_allclose(got[0], (x * x).sum(axis=(1, 2), keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(got[1], np.exp(x).sum(axis=(1, 2), keepdims=True), rtol=1e-5)
    want = np.zeros(4, np.float32)
    for j in range(5):
        for k in range(6):
            want = want * np.float32(0.5) + x[:, j, k]
    np.testing.assert_allclose(got[2].reshape(4), want, rtol=1e-5)
    # blocks smaller than a whole reduction dim give the same sums
    monkeypatch.setattr(generic_mod, "CHUNK_ELEMENTS", 12)
    again = run({"x": x}, lambda b, a: reduction(b, a, sum_of_exp), roundtrip=False)
    np.testing.assert_allclose(again, got[1], rtol=1e-5)


def test_generic_evaluation_paths_are_recognized():
    def ops_of(body):
        m = module_of({"x": f32(3, 4)}, lambda b, a: build_generic(
            [a[0], a[0]], [fill(b, (3, 1), 0.0)], (3, 4),
            [identity_map(2), identity_map(2), (unit_row(2, 0), unit_row(2, None))],
            ["parallel", "reduction"], body, b=b).result)
        return next(op for op in m.walk() if op.name == "tensor.generic")

    def prod(bb, a):
        return [bb.create("arith.add", [a[2], bb.create("arith.mul", a[:2]).result]).result]

    def plus(bb, a):
        return [bb.create("arith.max", [a[2], a[0]]).result]

    def uses_out_twice(bb, a):
        s = bb.create("arith.add", [a[2], a[2]]).result
        return [bb.create("arith.add", [s, a[0]]).result]

    assert generic_mod.product_form(ops_of(prod)) == (0, 1)
    assert generic_mod.accumulation(ops_of(plus)) is np.maximum
    assert generic_mod.product_form(ops_of(plus)) is None
    assert generic_mod.accumulation(ops_of(uses_out_twice)) is None


def test_generic_index_and_extract_gather_with_two_outs():
    data = f32(5, 3)
    idx = np.array([4, 0, 2, 2], np.int64)

    def build(b, a):
        def body(bb, args):
            i = bb.create("arith.cast", [args[0]], {"to": INDEX}).result
            j = bb.create("tensor.index", [], {"dim": 1}).result
            v = bb.create("tensor.extract", [a[0], i, j]).result
            jf = bb.create("arith.cast", [j], {"to": F32}).result
            return [v, jf]
        op = build_generic([a[1]], [empty(b, (4, 3)), empty(b, (4, 3))], (4, 3),
                           [((1, 0, 0),), identity_map(2), identity_map(2)],
                           ["parallel"] * 2, body, b=b)
        return list(op.results)

    y = run({"data": data, "idx": idx}, build)
    np.testing.assert_array_equal(y[0], data[idx])
    np.testing.assert_array_equal(y[1], np.broadcast_to(np.arange(3, dtype=np.float32), (4, 3)))


def test_generic_extract_out_of_range_is_an_error_naming_the_op():
    data, idx = f32(3), np.array([0, 3], np.int64)

    def build(b, a):
        def body(bb, args):
            i = bb.create("arith.cast", [args[0]], {"to": INDEX}).result
            return [bb.create("tensor.extract", [a[0], i]).result]
        return build_generic([a[1]], [empty(b, (2,))], (2,), [((1, 0),), ((1, 0),)],
                             ["parallel"], body, b=b, loc="gather1").result

    with pytest.raises(CompileError, match="tensor.extract.*out of range"):
        run({"d": data, "i": idx}, build, roundtrip=False)


def test_generic_verifier_rejects_bad_maps_and_bodies():
    def case(maps, iters, out_shape=(2, 3), bounds=(2, 3), yield_f16=False):
        def build(b, a):
            def body(bb, args):
                v = args[0]
                if yield_f16:
                    v = bb.create("arith.cast", [v], {"to": F16}).result
                return [v]
            return build_generic([a[0]], [empty(b, out_shape)], bounds, maps, iters, body,
                                 b=b).result
        module_of({"x": f32(2, 3)}, build)

    ok = [identity_map(2), identity_map(2)]
    case(ok, ["parallel"] * 2)
    with pytest.raises(VerifyError, match="reaches"):
        case([((1, 0, 1), (0, 1, 0)), identity_map(2)], ["parallel"] * 2)
    with pytest.raises(VerifyError, match="reads reduction dims"):
        case(ok, ["parallel", "reduction"])
    with pytest.raises(VerifyError, match="does not read parallel dims"):
        case([identity_map(2), ((1, 0, 0), (0, 0, 0))], ["parallel"] * 2, out_shape=(2, 1))
    with pytest.raises(VerifyError, match="tensor.yield"):
        case(ok, ["parallel"] * 2, yield_f16=True)
    with pytest.raises(VerifyError, match="iterator_types"):
        case(ok, ["parallel", "sideways"])


# ---- named ops and generalize -----------------------------------------------------------------------

def _named(name, operands, attrs=None):
    def build(b, a):
        return b.create(name, [a[i] for i in range(len(a))], attrs).result
    return build


def _check_named_and_generic(name, inputs, attrs, want, rtol=1e-5, atol=1e-5):
    """The named op's reference equals ``want``; its generalization equals the named op."""
    got = run(inputs, _named(name, list(inputs), attrs))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)

    def gen(b, a):
        op = b.create(name, list(a), attrs)
        g = generalize(op)
        b.insert(g)
        op.result.replace_all_uses_with(g.result)
        op.erase()
        assert g.name == "tensor.generic"
        return g.result

    got_g = run(inputs, gen)
    np.testing.assert_allclose(got_g, got, rtol=rtol, atol=atol)


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)),
                                   ((2, 1, 3, 4), (5, 4, 2)), ((1, 3, 4), (2, 4, 5))])
def test_matmul_broadcast_batches(sa, sb):
    a, bm = f32(*sa), f32(*sb)
    if sa == (2, 1, 3, 4):
        bm = f32(5, 4, 2)
    want_shape = np.broadcast_shapes(a.shape[:-2], bm.shape[:-2]) + (a.shape[-2], bm.shape[-1])
    c = f32(*want_shape)
    _check_named_and_generic("tensor.matmul", {"a": a, "b": bm, "c": c}, None, c + a @ bm)


@pytest.mark.parametrize("ta,tb", [(True, False), (False, True), (True, True)])
def test_matmul_transposed_operands(ta, tb):
    a, bm = f32(2, 3, 4), f32(4, 5)
    a_in = a.swapaxes(-1, -2).copy() if ta else a
    b_in = bm.T.copy() if tb else bm
    c = f32(2, 3, 5)
    _check_named_and_generic("tensor.matmul", {"a": a_in, "b": b_in, "c": c},
                             {"transpose_a": ta, "transpose_b": tb}, c + a @ bm)


def test_matmul_f16_ins_f32_accumulator():
    a, bm = f32(3, 8).astype(np.float16), f32(8, 2).astype(np.float16)
    c = np.zeros((3, 2), np.float32)
    want = a.astype(np.float32) @ bm.astype(np.float32)
    _check_named_and_generic("tensor.matmul", {"a": a, "b": bm, "c": c}, None, want, rtol=1e-3)


def _conv_loops(x, w, strides, dilations, group):
    """A direct, loop-based convolution (no padding) for checking."""
    N, C, H, W_ = x.shape
    M, Cg, KH, KW = w.shape
    OH = (H - ((KH - 1) * dilations[0] + 1)) // strides[0] + 1
    OW = (W_ - ((KW - 1) * dilations[1] + 1)) // strides[1] + 1
    Mg = M // group
    y = np.zeros((N, M, OH, OW), np.float64)
    for m in range(M):
        g = m // Mg
        for c in range(Cg):
            for i in range(KH):
                for j in range(KW):
                    hs, ws = i * dilations[0], j * dilations[1]
                    patch = x[:, g * Cg + c, hs:hs + (OH - 1) * strides[0] + 1:strides[0],
                              ws:ws + (OW - 1) * strides[1] + 1:strides[1]]
                    y[:, m] += patch * w[m, c, i, j]
    return y


@pytest.mark.parametrize("strides,dilations,group", [((1, 1), (1, 1), 1), ((2, 1), (1, 2), 1),
                                                     ((1, 2), (1, 1), 2), ((1, 1), (2, 2), 4)])
def test_conv_groups_strides_dilations(strides, dilations, group):
    x = f32(2, 4, 7, 8)
    w = f32(4, 4 // group, 3, 2)
    want = _conv_loops(x, w, strides, dilations, group)
    y = f32(*want.shape)
    _check_named_and_generic("tensor.conv", {"x": x, "w": w, "y": y},
                             {"strides": strides, "dilations": dilations, "group": group},
                             y + want, rtol=1e-4, atol=1e-4)


def test_conv_1d():
    x, w = f32(1, 3, 9), f32(2, 3, 4)
    want = _conv_loops(x[..., None], w[..., None], (2, 1), (1, 1), 1)[..., 0]
    _check_named_and_generic("tensor.conv", {"x": x, "w": w, "y": np.zeros(want.shape, np.float32)},
                             {"strides": [2], "dilations": [1], "group": 1}, want, rtol=1e-4)


@pytest.mark.parametrize("kind", ["max", "sum"])
def test_pool(kind):
    x = f32(2, 3, 7, 6)
    k, s, d = (3, 2), (2, 1), (1, 2)
    oh = (7 - 3) // 2 + 1
    ow = (6 - ((2 - 1) * 2 + 1)) // 1 + 1
    y0 = f32(2, 3, oh, ow)
    acc = np.full((2, 3, oh, ow), -np.inf if kind == "max" else 0.0)
    for i in range(3):
        for j in range(2):
            win = x[:, :, i:i + (oh - 1) * 2 + 1:2, j * 2:j * 2 + ow]
            acc = np.maximum(acc, win) if kind == "max" else acc + win
    want = np.maximum(y0, acc) if kind == "max" else y0 + acc
    _check_named_and_generic("tensor.pool", {"x": x, "y": y0},
                             {"kind": kind, "kernel_shape": k, "strides": s, "dilations": d},
                             want)


@pytest.mark.parametrize("kind,fn", [("sum", np.sum), ("prod", np.prod), ("max", np.max),
                                     ("min", np.min)])
def test_reduce_kinds(kind, fn):
    x = f32(3, 4, 5)
    y0 = f32(3, 1, 1)
    r = fn(x, axis=(1, 2), keepdims=True)
    comb = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[kind]
    _check_named_and_generic("tensor.reduce", {"x": x, "y": y0}, {"kind": kind, "axes": [1, 2]},
                             comb(y0, r), rtol=1e-4)


def test_reduce_nan_propagates_and_ints():
    x = f32(2, 5)
    x[1, 3] = np.nan
    y = run({"x": x, "y": np.full((2, 1), -np.inf, np.float32)},
            _named("tensor.reduce", None, {"kind": "max", "axes": [1]}))
    assert np.isnan(y[1, 0]) and y[0, 0] == x[0].max()
    xi = RNG.integers(-5, 5, (3, 4)).astype(np.int32)
    yi = run({"x": xi, "y": np.zeros((1, 4), np.int32)},
             _named("tensor.reduce", None, {"kind": "sum", "axes": [0]}))
    np.testing.assert_array_equal(yi, xi.sum(axis=0, keepdims=True))


def test_named_op_verifier_errors():
    with pytest.raises(VerifyError, match="inner dims differ"):
        module_of({"a": f32(2, 3), "b": f32(4, 5), "c": f32(2, 5)},
                  _named("tensor.matmul", None))
    with pytest.raises(VerifyError, match="expected shape"):
        module_of({"x": f32(1, 2, 5, 5), "w": f32(3, 2, 3, 3), "y": f32(1, 3, 4, 4)},
                  _named("tensor.conv", None, {"strides": [1, 1], "dilations": [1, 1]}))
    with pytest.raises(VerifyError, match="kind"):
        module_of({"x": f32(2, 3), "y": f32(1, 3)},
                  _named("tensor.reduce", None, {"kind": "mean", "axes": [0]}))
    with pytest.raises(CompileError, match="not a named op"):
        m = module_of({"x": f32(2)}, lambda b, a: fill(b, (2,), 0.0))
        generalize(next(op for op in m.walk() if op.name == "tensor.fill"))


def test_types_of_index_tensors_round_trip():
    tbl = DenseElements(np.array([2, 0, 1], np.int64), TensorType((3,), INDEX))
    y = run({"x": f32(3)}, lambda b, a: b.create("tensor.constant", [], {"value": tbl}).result)
    np.testing.assert_array_equal(y, [2, 0, 1])


@pytest.mark.parametrize("kind,fn", [("max", np.any), ("min", np.all)])
def test_reduce_booleans_generalize_to_or_and(kind, fn):
    x = RNG.integers(0, 2, (3, 4)).astype(bool)
    y0 = np.array([[kind == "min"]] * 3)
    want = fn(x, axis=1, keepdims=True)
    _check_named_and_generic("tensor.reduce", {"x": x, "y": y0}, {"kind": kind, "axes": [1]},
                             want)
    m = module_of({"x": x, "y": y0}, _named("tensor.reduce", None, {"kind": kind, "axes": [1]}))
    g = generalize(next(op for op in m.walk() if op.name == "tensor.reduce"))
    assert {"max": "arith.or", "min": "arith.and"}[kind] in [o.name for o in g.walk()]
