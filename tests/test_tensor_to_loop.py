"""tensor -> loop (lower-tensor-to-loop): each tensor op lowered from a small hand-built module;
the tensor-stage interpreter, the loop-stage interpreter and the JIT-compiled CPU program agree
(check-numerics runs across the pass too); the bufferization decisions are checked on the IR
(views, no copies for in-place concats, producers writing into outputs, slices and padded
buffers, fused epilogues and bias inits, in-place reuse, scattered splits); errors list every op
that cannot be lowered."""

import collections

import numpy as np
import pytest

import ptxc
import ptxc.lower.tensor_to_loop  # noqa: F401  (registers the pass)
from ptxc.dialects.func import func_body, get_func, new_func, new_module, set_func_results
from ptxc.dialects.tensor import build_generic
from ptxc.dialects.tensor.maps import identity_map
from ptxc.driver.cpu import CpuProgram
from ptxc.errors import CompileError
from ptxc.ir import Builder, DenseElements, interpret, parse_ir, print_ir, verify
from ptxc.ir.types import F32, I1, I32, INDEX, scalar_from_numpy, tensor
from ptxc.rewrite import PassManager

RNG = np.random.default_rng(0)
PIPELINE = "lower-graph-to-tensor,generalize-named-ops,fuse-tensor-elementwise,lower-tensor-to-loop"


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def module_of(inputs: dict, build, names=None):
    """``main(inputs...)`` whose body ``build(b, args)`` builds; results named y0, y1, ..."""
    m = new_module()
    f = new_func(m, "main", [tensor(a.shape, scalar_from_numpy(a.dtype)) for a in
                             inputs.values()], list(inputs))
    b = Builder.at_end(func_body(f))
    outs = build(b, list(func_body(f).args))
    outs = outs if isinstance(outs, list) else [outs]
    set_func_results(f, outs, names or [f"y{i}" for i in range(len(outs))])
    verify(m)
    return m


def empty(b, shape, el=F32):
    return b.create("tensor.empty", [], result_types=[tensor(shape, el)]).result


def fill(b, shape, value, el=F32):
    return b.create("tensor.fill", [empty(b, shape, el)], {"value": value}).result


def generic(b, ins, outs, bounds, maps, iters, body, loc=None):
    return build_generic(ins, outs, bounds, maps, iters, body, b=b, loc=loc)


def lower(m, check=True):
    """Lower (with check-numerics across the pass), verify, and check the text round trip."""
    PassManager("lower-tensor-to-loop", check_numerics=check).run(m)
    text = print_ir(m)
    again = parse_ir(text)
    verify(again)
    assert print_ir(again) == text
    return m


def ops(m):
    return collections.Counter(op.name for op in m.walk())


def top(m):
    return collections.Counter(op.name for op in func_body(get_func(m)).ops)


def three_ways(inputs, build, rtol=1e-5, atol=1e-6, names=None, check=True):
    """Interpret at the tensor stage, lower, interpret at the loop stage, JIT-compile and run:
    all equal (the JIT bit for bit with the loop interpreter unless it calls libm). Returns
    (loop module, outputs)."""
    m = module_of(inputs, build, names)
    want = interpret(m, inputs)
    lower(m, check)
    assert not [op.name for op in m.walk() if op.name.startswith("tensor.")]
    got = interpret(m, inputs)
    jit = CpuProgram.from_module(m)(inputs)
    assert list(got) == list(want) == list(jit)
    for k, w in want.items():
        assert got[k].dtype == w.dtype and got[k].shape == w.shape, k
        if w.dtype.kind == "f":
            np.testing.assert_allclose(got[k], w, rtol=rtol, atol=atol, err_msg=k)
            np.testing.assert_allclose(jit[k], got[k], rtol=1e-6, atol=1e-7, err_msg=k)
        else:
            np.testing.assert_array_equal(got[k], w, err_msg=k)
            np.testing.assert_array_equal(jit[k], got[k], err_msg=k)
    return m, got


def add_body(bb, args):
    return [bb.create("arith.add", args[:2]).result]


# ---- data ops and results ---------------------------------------------------------------------

def test_constants_fills_inputs_and_values_returned_twice():
    c = np.arange(6, dtype=np.int32).reshape(2, 3)

    def build(b, a):
        k = b.create("tensor.constant", [], {"value": DenseElements(c)},
                     result_names=["table"]).result
        y = generic(b, [a[0], a[0]], [empty(b, (4,))], (4,), [identity_map(1)] * 3,
                    ["parallel"], add_body)
        return [k, fill(b, (2, 2), -1.5), a[0], y.result, y.result]

    m, got = three_ways({"x": f32(4)}, build)
    t = top(m)
    assert t["loop.global"] == 1 and t["loop.alloc"] == 0
    # the constant, the input and the second y are copies; y itself is written in place
    assert t["loop.copy"] == 3
    (g,) = [op for op in m.walk() if op.name == "loop.global"]
    assert g.attributes["name"] == "table"
    np.testing.assert_array_equal(got["y0"], c)
    assert get_func(m).attributes["loop.outputs"] == ("y0", "y1", "y2", "y3", "y4")


def test_output_named_as_an_input_gets_a_suffix():
    m = module_of({"x": f32(3)}, lambda b, a: [a[0]], names=["x"])
    lower(m, check=False)  # the output's name changes, so check-numerics would report it gone
    f = get_func(m)
    assert f.attributes["arg_names"] == ("x", "x_out")
    assert f.attributes["loop.outputs"] == ("x_out",)
    x = f32(3)
    np.testing.assert_array_equal(interpret(m, {"x": x})["x_out"], x)


def test_extract_slice_and_reshape_are_views():
    def build(b, a):
        s = b.create("tensor.extract_slice", [a[0]], {"offsets": [4, 1], "sizes": [3, 2],
                                                      "strides": [-2, 2]}).result
        r = b.create("tensor.reshape", [a[0]], result_types=[tensor((3, 2, 4))]).result
        e = generic(b, [s], [empty(b, (3, 2))], (3, 2), [identity_map(2)] * 2,
                    ["parallel"] * 2, lambda bb, x: [bb.create("math.exp", [x[0]]).result])
        return [e.result, generic(b, [r], [empty(b, (3, 2, 4))], (3, 2, 4),
                                  [identity_map(3)] * 2, ["parallel"] * 3,
                                  lambda bb, x: [bb.create("arith.neg", [x[0]]).result]).result]

    m, got = three_ways({"x": f32(6, 4)}, build)
    t = top(m)
    assert t["loop.view"] == 2 and t["loop.copy"] == 0 and t["loop.alloc"] == 0
    (v,) = [op for op in m.walk() if op.name == "loop.view"
            and op.results[0].type.shape == (3, 2)]
    assert v.attributes["strides"] == (-8, 2) and v.attributes["offset"] == 17


def test_reshape_of_a_strided_slice_copies_first():
    def build(b, a):
        s = b.create("tensor.extract_slice", [a[0]], {"offsets": [0, 0], "sizes": [4, 2],
                                                      "strides": [1, 3]}).result
        r = b.create("tensor.reshape", [s], result_types=[tensor((8,))]).result
        return generic(b, [r], [empty(b, (8,))], (8,), [identity_map(1)] * 2, ["parallel"],
                       lambda bb, x: [bb.create("arith.neg", [x[0]]).result]).result

    m, _ = three_ways({"x": f32(4, 4)}, build)
    assert top(m)["loop.copy"] == 1 and top(m)["loop.alloc"] == 1


def test_insert_slice_producer_writes_into_the_slice_and_other_sources_are_copied():
    def build(b, a):
        x, d = a
        g = generic(b, [x], [empty(b, (2, 3))], (2, 3), [identity_map(2)] * 2,
                    ["parallel"] * 2, lambda bb, v: [bb.create("arith.neg", [v[0]]).result])
        acc = b.create("tensor.insert_slice", [g.result, empty(b, (4, 6))], {
            "offsets": [0, 0], "sizes": [2, 3], "strides": [1, 1]}).result
        acc = b.create("tensor.insert_slice", [fill(b, (2, 3), 7.0), acc], {
            "offsets": [0, 3], "sizes": [2, 3], "strides": [1, 1]}).result  # a fill source
        acc = b.create("tensor.insert_slice", [x, acc], {
            "offsets": [2, 0], "sizes": [2, 3], "strides": [1, 2]}).result   # input source
        acc = b.create("tensor.insert_slice", [x, acc], {
            "offsets": [2, 1], "sizes": [2, 3], "strides": [1, 2]}).result
        other = b.create("tensor.insert_slice", [x, d], {                   # input dest
            "offsets": [1, 1], "sizes": [2, 3], "strides": [1, 1]}).result
        return [acc, other]

    m, got = three_ways({"x": f32(2, 3), "d": f32(4, 6)}, build)
    t = top(m)
    # x copied three times, d into the second result; g wrote its slice itself, the fill is a
    # fill nest of its slice
    assert t["loop.copy"] == 4 and t["loop.alloc"] == 0 and t["loop.parallel"] == 2


def test_insert_slice_into_a_filled_dest_does_not_place_the_source():
    """A producer written into a slice would be overwritten by the dest's fill afterwards: the
    chain must start from an empty for that; here it does not, so the source is copied."""
    def build(b, a):
        g = generic(b, [a[0]], [empty(b, (3,))], (3,), [identity_map(1)] * 2, ["parallel"],
                    lambda bb, v: [bb.create("arith.neg", [v[0]]).result])
        return b.create("tensor.insert_slice", [g.result, fill(b, (5,), 2.0)], {
            "offsets": [1], "sizes": [3], "strides": [1]}).result

    m, got = three_ways({"x": f32(3)}, build)
    assert top(m)["loop.copy"] == 1
    assert got["y0"][0] == 2.0 and got["y0"][4] == 2.0


@pytest.mark.parametrize("mode", ["attribute", "operand", "input"])
def test_pad(mode):
    def build(b, a):
        x, v = a
        src = x if mode == "input" else generic(
            b, [x], [empty(b, (2, 3))], (2, 3), [identity_map(2)] * 2, ["parallel"] * 2,
            lambda bb, s: [bb.create("math.abs", [s[0]]).result]).result
        if mode == "operand":
            zero = b.create("arith.constant", [], {"value": 0, "type": INDEX}).result
            s = b.create("tensor.extract", [v, zero]).result
            return b.create("tensor.pad", [src, s], {"low": [1, 0], "high": [2, 3]}).result
        return b.create("tensor.pad", [src], {"low": [1, 0], "high": [2, 3],
                                              "value": -3.5}).result

    m, got = three_ways({"x": f32(2, 3), "v": f32(1)}, build)
    t = top(m)
    assert t["loop.copy"] == (1 if mode == "input" else 0)   # a producer writes the interior
    assert t["loop.parallel"] == 1 + (mode != "input")       # the border (+ the producer)


@pytest.mark.parametrize("shape,low,high", [
    ((1, 3, 4, 5), (0, 1, 2, 0), (0, 2, 1, 0)),    # NHWC-like: H and W padded, C kept innermost
    ((2, 3, 4), (1, 0, 2), (2, 1, 0)),             # every dim padded, one side empty per dim
    ((3, 1, 2), (0, 0, 1), (0, 0, 3)),             # one padded dim: two slabs, still one nest
    ((2, 2), (3, 0), (0, 0)),                      # one slab: a plain fill
])
def test_pad_border_is_one_nest_decoding_every_slab(shape, low, high):
    """All of a pad's border slabs are stored by one nest (one kernel on a GPU); each border cell
    exactly once (the interior comes from the producer), on every path three_ways checks."""
    def build(b, a):
        (x,) = a
        src = generic(b, [x], [empty(b, shape)], shape, [identity_map(len(shape))] * 2,
                      ["parallel"] * len(shape),
                      lambda bb, s: [bb.create("math.abs", [s[0]]).result]).result
        return b.create("tensor.pad", [src], {"low": list(low), "high": list(high),
                                              "value": -3.5}).result

    m, got = three_ways({"x": f32(*shape)}, build)
    # the producer and the border; a pad of one dim with at most 16 bytes inside it is all the
    # producer's (the innermost dim: tests/test_input_prep.py; (2, 2) padded along dim 0)
    padded = [d for d in range(len(shape)) if low[d] or high[d]]
    producers_only = len(padded) == 1 and 4 * int(np.prod(shape[padded[0] + 1:])) <= 16
    assert top(m)["loop.parallel"] == (1 if producers_only else 2)
    from ptxc.lower.tensor_to_loop.data import border_slabs
    padded = tuple(n + lo + hi for n, lo, hi in zip(shape, low, high))
    cells = sum(int(np.prod(np.subtract(hi, lo))) for lo, hi in border_slabs(padded, low, shape))
    assert cells == int(np.prod(padded)) - int(np.prod(shape))   # disjoint, and all of it


@pytest.mark.parametrize("shape,run", [((2, 3, 4, 8), 4),    # 8 f32 channels: 16-byte runs
                                       ((2, 3, 4, 6), 2),    # 6: 8-byte runs
                                       ((2, 3, 4, 5), 1)])   # 5: one element per point
def test_pad_border_stores_runs_along_contiguous_channels(shape, run):
    """An NHWC-like border (H and W padded, C kept innermost and contiguous) steps over C by
    a 16-byte run and stores the run's elements one after another (a GPU thread writes one
    vector); each cell still once, on every path three_ways checks."""
    def build(b, a):
        (x,) = a
        src = generic(b, [x], [empty(b, shape)], shape, [identity_map(4)] * 2,
                      ["parallel"] * 4, lambda bb, s: [bb.create("math.abs", [s[0]]).result]).result
        return b.create("tensor.pad", [src], {"low": [0, 1, 1, 0], "high": [0, 1, 2, 0],
                                              "value": -3.5}).result

    m, got = three_ways({"x": f32(*shape)}, build)
    nests = [o for o in m.walk() if o.name == "loop.parallel"
             and o.parent_op is not None and o.parent_op.name == "func.func"]
    border = nests[-1]
    assert tuple(border.attributes.get("step", (1, 1, 1)))[-1] == run
    assert sum(o.name == "loop.store" for o in border.walk()) == run


# ---- generics -----------------------------------------------------------------------------------

def test_generic_broadcast_and_transposed_out_with_ints_and_bools():
    def build(b, a):
        x, bias = a
        s = generic(b, [x, bias], [empty(b, (3, 2), I32)], (2, 3),
                    [identity_map(2), ((0, 1, 0),), ((0, 1, 0), (1, 0, 0))], ["parallel"] * 2,
                    add_body).result
        gt = generic(b, [s], [empty(b, (3, 2), I1)], (3, 2), [identity_map(2)] * 2,
                     ["parallel"] * 2, lambda bb, v: [bb.create(
                         "arith.cmp", [v[0], bb.create("arith.constant", [], {
                             "value": 2, "type": I32}).result], {"predicate": "gt"}).result])
        return [s, gt.result]

    three_ways({"x": RNG.integers(-5, 5, (2, 3)).astype(np.int32),
                "bias": RNG.integers(-5, 5, 3).astype(np.int32)}, build)


def test_reduction_carries_its_accumulator_from_a_loaded_init():
    def build(b, a):
        x, init = a
        return generic(b, [x], [init], (3, 5), [identity_map(2), ((1, 0, 0), (0, 0, 0))],
                       ["parallel", "reduction"], lambda bb, v: [bb.create(
                           "arith.max", [v[1], v[0]]).result]).result

    m, _ = three_ways({"x": f32(3, 5), "init": f32(3, 1)}, build)
    (loop,) = [op for op in m.walk() if op.name == "loop.for"]
    assert len(loop.operands) == 1   # the accumulator is carried, not stored per step
    assert ops(m)["loop.store"] == 1 and ops(m)["loop.load"] == 2


def test_generic_index_extract_and_two_outs():
    data = f32(5, 3)

    def build(b, a):
        def body(bb, args):
            i = bb.create("arith.cast", [args[0]], {"to": INDEX}).result
            j = bb.create("tensor.index", [], {"dim": 1}).result
            v = bb.create("tensor.extract", [a[0], i, j]).result
            return [v, bb.create("arith.cast", [j], {"to": F32}).result]
        g = generic(b, [a[1]], [empty(b, (4, 3)), empty(b, (4, 3))], (4, 3),
                    [((1, 0, 0),), identity_map(2), identity_map(2)], ["parallel"] * 2, body)
        return list(g.results)

    _, got = three_ways({"data": data, "idx": np.array([3, 0, 2, 2], np.int64)}, build)
    np.testing.assert_array_equal(got["y0"], data[[3, 0, 2, 2]])


def test_out_map_that_skips_elements_keeps_the_init():
    """Out map 2*d0 reaches every other element: the rest keep the init, so the init is copied
    into the result first."""
    def build(b, a):
        x, init = a
        return generic(b, [x], [init], (3,), [identity_map(1), ((2, 0),)], ["parallel"],
                       lambda bb, v: [bb.create("arith.neg", [v[0]]).result]).result

    x, init = f32(3), f32(6)
    m, got = three_ways({"x": x, "init": init}, build)
    np.testing.assert_array_equal(got["y0"][1::2], init[1::2])
    assert top(m)["loop.copy"] == 1


def test_dead_init_is_updated_in_place():
    def build(b, a):
        x, = a
        r1 = generic(b, [x], [fill(b, (4, 4), 2.0)], (4, 4), [identity_map(2)] * 2,
                     ["parallel"] * 2, lambda bb, v: [bb.create(
                         "arith.mul", [v[1], bb.create("math.exp", [v[0]]).result]).result])
        r2 = generic(b, [x], [r1.result], (4, 4), [((0, 1, 0), (1, 0, 0)), identity_map(2)],
                     ["parallel"] * 2, lambda bb, v: [bb.create("arith.add", v).result])
        return generic(b, [r2.result], [fill(b, (4,), 0.0)], (4, 4),
                       [identity_map(2), ((1, 0, 0),)], ["parallel", "reduction"],
                       lambda bb, v: [bb.create("arith.add", [v[1], v[0]]).result]).result

    m, _ = three_ways({"x": f32(4, 4)}, build)
    assert top(m)["loop.alloc"] == 1   # r2 reuses r1's buffer


def test_rank0_zero_size_and_top_level_scalars_read_in_bodies():
    def build(b, a):
        x, v, z = a
        zero = b.create("arith.constant", [], {"value": 0, "type": INDEX}).result
        s = b.create("tensor.extract", [v, zero]).result
        t = b.create("arith.mul", [s, s]).result          # a top-level scalar
        total = generic(b, [x], [fill(b, (), 0.0)], (5,), [identity_map(1), ()], ["reduction"],
                        lambda bb, w: [bb.create("arith.add", [w[1], w[0]]).result]).result
        scaled = generic(b, [total], [empty(b, ())], (), [(), ()], [],
                         lambda bb, w: [bb.create("arith.mul", [w[0], t]).result]).result
        nothing = generic(b, [z], [empty(b, (0, 3))], (0, 3), [identity_map(2)] * 2,
                          ["parallel"] * 2, lambda bb, w: [w[0]]).result
        return [scaled, nothing]

    _, got = three_ways({"x": f32(5), "v": f32(2), "z": f32(0, 3)}, build)
    assert got["y0"].shape == () and got["y1"].shape == (0, 3)


def test_every_tensor_op_has_a_loop_lowering():
    from ptxc.ir.spec import registered_ops
    from ptxc.lower.tensor_to_loop.function import LOWERED_OPS
    assert set(registered_ops("tensor")) <= LOWERED_OPS


# ---- named ops ------------------------------------------------------------------------------------

def named(name, attrs=None, out_shape=None, fill_value=None, out_el=None):
    def build(b, a):
        if fill_value is not None:
            init = fill(b, out_shape, fill_value, out_el or a[0].type.element)
            return b.create(name, list(a) + [init], attrs).result
        return b.create(name, list(a), attrs).result
    return build


@pytest.mark.parametrize("sa,sb,tb", [((3, 4), (4, 5), False), ((2, 1, 3, 4), (5, 2, 4), True)])
def test_matmul(sa, sb, tb):
    a, bm = f32(*sa), f32(*sb)
    b2 = bm.swapaxes(-1, -2) if tb else bm
    c = f32(*(np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], b2.shape[-1])))
    m, _ = three_ways({"a": a, "b": bm, "c": c}, named("tensor.matmul", {"transpose_b": tb}))
    assert top(m)["loop.parallel"] <= 2 and top(m)["loop.alloc"] == 0  # (+ an unroll tail)


@pytest.mark.parametrize("strides,dilations,group", [((1, 1), (1, 1), 1), ((2, 1), (1, 2), 2)])
def test_conv(strides, dilations, group):
    x, w = f32(2, 4, 7, 6), f32(6, 4 // group, 3, 2)
    oh = (7 - (2 * dilations[0] + 1)) // strides[0] + 1
    ow = (6 - (1 * dilations[1] + 1)) // strides[1] + 1
    three_ways({"x": x, "w": w}, named("tensor.conv", {"strides": strides, "dilations": dilations,
                                                       "group": group},
                                       (2, 6, oh, ow), 0.0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind,value", [("max", -np.inf), ("sum", 0.0)])
def test_pool(kind, value):
    three_ways({"x": f32(1, 3, 6, 5)},
               named("tensor.pool", {"kind": kind, "kernel_shape": [2, 3], "strides": [2, 1],
                                     "dilations": [1, 1]}, (1, 3, 3, 3), value))


@pytest.mark.parametrize("kind,axes,value", [("sum", [1], 0.0), ("max", [0, 2], -np.inf),
                                             ("min", [0, 1, 2], np.inf), ("prod", [2], 1.0)])
def test_reduce(kind, axes, value):
    shape = tuple(1 if i in axes else d for i, d in enumerate((3, 4, 5)))
    three_ways({"x": f32(3, 4, 5)}, named("tensor.reduce", {"kind": kind, "axes": axes},
                                          shape, value))


def test_f16_sums_accumulate_in_f32_and_round_once():
    """A long f16 dot product: accumulating in f16 step by step would be far off; the named
    op's meaning is an f32 sum rounded once, and the loop nest keeps it."""
    a = (np.abs(f32(1, 2048)) + 0.5).astype(np.float16)
    bm = np.ones((2048, 1), np.float16)
    m, got = three_ways({"a": a, "b": bm}, named("tensor.matmul", None, (1, 1), 0.0),
                        rtol=1e-3, check=False)
    exact = a.astype(np.float64).sum()
    assert abs(float(got["y0"][0, 0]) - exact) <= exact * 2 ** -10
    (acc,) = [op for op in m.walk() if op.name == "loop.for"]
    assert acc.operands[0].type == F32


# ---- fusion and placement ---------------------------------------------------------------------

def conv_net(build):
    net = ptxc.Network("t")
    x = net.add_input("x", (1, 3, 6, 6))
    net.mark_output(build(net, x), "y")
    return net.to_module(), {"x": f32(1, 3, 6, 6)}


def through(module, inputs, pipeline="graph-opt," + PIPELINE):
    want = interpret(module, inputs)
    PassManager(pipeline, check_numerics=True).run(module)
    got = CpuProgram.from_module(module)(inputs)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5)
    return module


def test_conv_bias_and_activation_are_one_kernel():
    m, inputs = conv_net(lambda n, x: n.add_activation(
        n.add_conv(x, f32(4, 3, 1, 1), f32(4)), "relu"))
    through(m, inputs)
    t = top(m)
    assert t["loop.alloc"] == 0 and t["loop.copy"] == 0
    # one nest (split in two by the unroll: columns 0-3, then 4-5)
    nests = [op for op in func_body(get_func(m)).ops if op.name == "loop.parallel"]
    assert len(nests) == 2 and len({op.loc for op in nests}) == 1
    assert [op.attributes["upper"][-1] - op.attributes["lower"][-1] for op in nests] == [4, 2]


def test_concat_of_convs_lowers_with_no_copy_and_no_extra_buffer():
    net = ptxc.Network("t")
    x1, x2 = net.add_input("x1", (1, 3, 5, 6)), net.add_input("x2", (1, 2, 5, 6))
    a = net.add_conv(x1, f32(4, 3, 1, 1), f32(4))
    b = net.add_activation(net.add_conv(x2, f32(2, 2, 1, 1)), "sigmoid")
    net.mark_output(net.add_concat([a, b, net.add_conv(x2, f32(3, 2, 1, 1), f32(3))], axis=1),
                    "y")
    m = net.to_module()
    PassManager("graph-opt").run(m)
    concats = [op for op in m.walk() if op.name == "graph.concat"]
    assert len(concats) == 1 and concats[0].attr("in_place")
    through(m, {"x1": f32(1, 3, 5, 6), "x2": f32(1, 2, 5, 6)}, PIPELINE)
    t = top(m)
    assert t["loop.copy"] == 0 and t["loop.alloc"] == 0 and t["loop.parallel"] >= 2


def test_nested_concats_and_padded_convs_write_into_one_buffer():
    """DenseNet's pattern: each layer reads the concat so far and writes its own channels; the
    activation before a 3x3 conv writes straight into the interior of its padded input."""
    def build(n, x):
        t = n.add_conv(x, f32(2, 3, 3, 3), padding=1)
        for _ in range(2):
            y = n.add_conv(n.add_activation(t, "relu"), f32(2, t.shape[1], 3, 3), padding=1)
            t = n.add_concat([t, y], axis=1)
        return n.add_conv(t, f32(3, t.shape[1], 1, 1))
    m, inputs = conv_net(build)
    through(m, inputs)
    t = top(m)
    assert t["loop.copy"] == 1   # the input into its padded buffer; nothing else moves
    allocs = [op.results[0].type.shape for op in func_body(get_func(m)).ops
              if op.name == "loop.alloc"]
    assert sorted(allocs) == [(1, 2, 8, 8), (1, 3, 8, 8), (1, 4, 8, 8), (1, 6, 6, 6)]


def test_split_of_merged_siblings_scatters_into_its_consumers():
    """Inception: sibling 1x1 convs merged into one, split; one part goes to an in-place concat,
    the other to a padded 3x3 conv: the merged conv's nest is emitted per part, writing each
    where it is read (no copy)."""
    def build(n, x):
        a = n.add_activation(n.add_conv(x, f32(4, 3, 1, 1), f32(4)), "relu")
        b = n.add_activation(n.add_conv(x, f32(2, 3, 1, 1), f32(2)), "relu")
        b = n.add_conv(b, f32(3, 2, 3, 3), padding=1)
        return n.add_concat([a, b], axis=1)
    m, inputs = conv_net(build)
    PassManager("graph-opt").run(m)
    assert [op.name for op in m.walk() if op.name == "graph.split"]
    through(m, inputs, PIPELINE)
    assert top(m)["loop.copy"] == 0


# ---- errors ---------------------------------------------------------------------------------------

def test_ops_that_cannot_be_lowered_are_all_listed_with_their_loc():
    text = """
"builtin.module"() ({
  "func.func"() ({
  ^bb0(%x: tensor<2xf32>):
    %a = "graph.relu"(%x) : (tensor<2xf32>) -> tensor<2xf32> loc("relu_a")
    %b = "graph.sigmoid"(%a) : (tensor<2xf32>) -> tensor<2xf32> loc("sig_b")
    "func.return"(%b) : (tensor<2xf32>) -> ()
  }) {arg_names = ["x"], function_type = (tensor<2xf32>) -> (tensor<2xf32>), result_names = ["y"], sym_name = "main"} : () -> ()
}) : () -> ()
"""
    m = parse_ir(text)
    with pytest.raises(CompileError) as e:
        PassManager("lower-tensor-to-loop").run(m)
    msg = str(e.value)
    assert "relu_a" in msg and "sig_b" in msg and "graph.relu" in msg and "graph.sigmoid" in msg


def test_loop_stage_runs_through_ptxc_interpret_and_its_bindings_are_checked():
    m = module_of({"x": f32(3)}, lambda b, a: [generic(
        b, [a[0]], [empty(b, (3,))], (3,), [identity_map(1)] * 2, ["parallel"],
        lambda bb, v: [bb.create("arith.neg", [v[0]]).result]).result])
    lower(m)
    x = f32(3)
    np.testing.assert_array_equal(ptxc.interpret(m, {"x": x})["y0"], -x)
    with pytest.raises(ptxc.BindingError):
        ptxc.interpret(m, {"x": x, "y0": x})
