"""Reductions on the data that exposes a wrong identity or a lost tail: every combiner (sum,
product, max, min) on all-negative rows, all-positive rows, and rows whose extreme (or largest
term) sits at the very end, where a reduction schedule's tail handles it.

Random normal data hides these bugs: a max that starts at 0.0 instead of -inf is still right
when every row has a positive element, and a min that starts at 0.0 when every row has a
negative one. So each case here is built so that the identity and the last element matter, and
is checked against numpy (written independently: float64 sums and products, exact max/min)

* on the graph interpreter and the CPU target (``ptxc.compile(target="cpu")``), and
* on the loop IR after map-to-gpu restricted to each of its schedules in turn (that schedule,
  then pointwise for what it declines), run by the lockstep interpreter, as a GPU would run it.

Sums and products are compared within ``n * eps32`` times the sum of the magnitudes (the bound
of recursive float32 summation over ``n`` terms; any order of summation meets it), max and min
exactly.
"""

import numpy as np
import pytest
from support.loop_ir import const, load, module, op
from support.one_node import make_model

import ptxc
from ptxc.compiler import as_module, run_stages
from ptxc.dialects.loop import for_loop, parallel_loop, run_main
from ptxc.driver.cpu import CpuProgram
from ptxc.ir import parse_ir, print_ir, verify
from ptxc.ir.types import F32, I32, BufferType
from ptxc.lower import gpu_map
from ptxc.lower.loop_to_llvm import lower_loop_to_llvm

RNG = np.random.default_rng(1414)
EPS = float(np.finfo(np.float32).eps)
SCHEDULES = [name for name, _ in gpu_map.SCHEDULES]
KINDS = ["negative", "positive", "tail"]


def extreme_data(kind, shape, comb, axis=-1, dtype=np.float32):
    """``negative``: every element < 0; ``positive``: every element > 0; ``tail``: the row's
    winner at its last position (the max of negative rows, the min of positive rows, a large
    last term for sums and products)."""
    if dtype == np.int32:
        x = RNG.integers(2, 50, size=shape)
        if kind == "negative" or (kind == "tail" and comb == "max"):
            x = -x
        if comb == "mul":
            x = np.sign(x)   # products of +-1 are exact and never wrap
        if kind == "tail":
            x = np.moveaxis(x, axis, -1).copy()
            x[..., -1] = {"max": -1, "min": 1, "add": 1000, "mul": -1}[comb]
            x = np.moveaxis(x, -1, axis)
        return np.ascontiguousarray(x).astype(np.int32)
    r = np.abs(RNG.standard_normal(shape))
    if comb == "mul":
        r = 1.0 + 0.02 * r       # |x| ~ 1: a product of hundreds stays finite
    else:
        r = r + 0.25
    if kind == "negative" or (kind == "tail" and comb == "max"):
        x = -r
    else:
        x = r
    if kind == "tail":
        x = np.moveaxis(x, axis, -1).copy()
        if comb == "max":
            x[..., -1] = x.max(axis=-1) + 0.5       # still negative rows: winner at the end
            x[..., -1] = np.minimum(x[..., -1], -0.125)
        elif comb == "min":
            x[..., -1] = x.min(axis=-1) * 0.5       # positive rows: winner at the end
        elif comb == "add":
            x[..., -1] = 100.0
        else:
            x[..., -1] = 3.0
        x = np.moveaxis(x, -1, axis)
    return np.ascontiguousarray(x).astype(dtype)


def reference(comb, x, axis, keepdims):
    f = {"add": np.sum, "mul": np.prod, "max": np.max, "min": np.min}[comb]
    if comb in ("add", "mul") and x.dtype.kind == "f":
        return f(x.astype(np.float64), axis=axis, keepdims=keepdims)
    return f(x, axis=axis, keepdims=keepdims)


def assert_reduced(got, want, comb, x, axis, what):
    """Exact for max/min and integers; sums and products within the float32 bound."""
    got = np.asarray(got)
    assert got.shape == np.shape(want), what
    if comb in ("max", "min") or x.dtype.kind != "f":
        np.testing.assert_array_equal(got, np.asarray(want).astype(got.dtype), err_msg=what)
        return
    n = x.size if axis is None else np.prod([x.shape[a] for a in np.atleast_1d(axis)])
    if comb == "add":
        bound = reference("add", np.abs(x), axis, keepdims=got.ndim == x.ndim)
    else:
        bound = np.abs(want)
    tol = 2 * n * EPS * bound + 1e-30
    err = np.abs(got.astype(np.float64) - want)
    assert (err <= tol).all(), f"{what}: max error {err.max():.3g} over bound {tol.max():.3g}"


def each_schedule(loop_module, inputs, monkeypatch):
    """(schedule, launches' schedules, outputs) with map-to-gpu limited to each schedule (and
    pointwise for what it declines), run by the lockstep interpreter."""
    text = print_ir(loop_module)
    for name in SCHEDULES:
        m = parse_ir(text)
        with monkeypatch.context() as mp:
            mp.setattr(gpu_map, "SCHEDULES",
                       [(n, s) for n, s in gpu_map.SCHEDULES if n in (name, "pointwise")])
            gpu_map.map_to_gpu(m)
        verify(m)
        used = [o.attributes["schedule"] for o in m.walk() if o.name == "gpu.launch"]
        yield name, used, run_main(m, inputs)


# ---- ONNX reductions ---------------------------------------------------------------------------

_ONNX = {"add": "ReduceSum", "max": "ReduceMax", "min": "ReduceMin"}


@pytest.mark.parametrize("comb", ["add", "max", "min"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape,axis,keepdims", [((5, 301), 1, 1), ((3, 101), None, 0)],
                         ids=["rows", "full"])
def test_onnx_reduction_everywhere(comb, kind, shape, axis, keepdims, monkeypatch):
    x = extreme_data(kind, shape, comb, axis=-1 if axis is None else axis)
    want = reference(comb, x, axis, bool(keepdims))
    if axis is None:
        model = make_model(_ONNX[comb], [("x", x)], keepdims=keepdims)
    else:
        model = make_model(_ONNX[comb], [("x", x), "axes"],
                           consts={"axes": np.array([axis])}, keepdims=keepdims)
    check = lambda got, what: assert_reduced(got, want, comb, x, axis, what)  # noqa: E731
    check(ptxc.interpret(ptxc.import_onnx(model), {"x": x})["y0"], "graph interpreter")
    check(ptxc.compile(model, target="cpu").run({"x": x})["y0"], "cpu target")
    loop = run_stages(as_module(model), "loop")
    check(run_main(loop, {"x": x})["y0"], "loop interpreter")
    for name, used, out in each_schedule(loop, {"x": x}, monkeypatch):
        if name == "reduction":
            assert "reduction" in used, used   # the schedule under test took the nest
        check(out["y0"], f"map-to-gpu, {name} schedule ({used})")


@pytest.mark.parametrize("kind", ["negative", "tail"])
def test_int_reduce_max_of_negative_rows(kind, monkeypatch):
    x = extreme_data(kind, (6, 333), "max", dtype=np.int32)
    assert (x <= 0).all()
    want = x.max(axis=1)
    model = make_model("ReduceMax", [("x", x), "axes"], consts={"axes": np.array([1])},
                       keepdims=0)
    np.testing.assert_array_equal(ptxc.compile(model, target="cpu").run({"x": x})["y0"], want)
    loop = run_stages(as_module(model), "loop")
    for name, used, out in each_schedule(loop, {"x": x}, monkeypatch):
        np.testing.assert_array_equal(out["y0"], want, err_msg=f"{name} ({used})")


@pytest.mark.parametrize("op_type,attrs", [("GlobalMaxPool", {}),
                                           ("MaxPool", {"kernel_shape": [3, 3],
                                                        "pads": [1, 1, 1, 1]}),
                                           ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2],
                                                        "pads": [0, 0, 1, 1]})])
def test_max_pools_of_negative_maps(op_type, attrs, monkeypatch):
    """Windows that overlap the padding and hold only negative values: the pad value must never
    win (it is -inf, not a conv's 0)."""
    x = -(np.abs(RNG.standard_normal((1, 3, 9, 9))) + 0.25).astype(np.float32)
    model = make_model(op_type, [("x", x)], **attrs)
    want = _max_pool_reference(x, op_type, attrs)
    np.testing.assert_array_equal(ptxc.interpret(ptxc.import_onnx(model), {"x": x})["y0"], want)
    np.testing.assert_array_equal(ptxc.compile(model, target="cpu").run({"x": x})["y0"], want)
    loop = run_stages(as_module(model), "loop")
    for name, used, out in each_schedule(loop, {"x": x}, monkeypatch):
        np.testing.assert_array_equal(out["y0"], want, err_msg=f"{name} ({used})")


def _max_pool_reference(x, op_type, attrs):
    if op_type == "GlobalMaxPool":
        return x.max(axis=(2, 3), keepdims=True)
    kh, kw = attrs["kernel_shape"]
    sh, sw = attrs.get("strides", [1, 1])
    t, l, b, r = attrs["pads"]
    xp = np.pad(x, [(0, 0), (0, 0), (t, b), (l, r)], constant_values=-np.inf)
    oh, ow = (xp.shape[2] - kh) // sh + 1, (xp.shape[3] - kw) // sw + 1
    out = np.empty(x.shape[:2] + (oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = xp[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw].max(axis=(2, 3))
    return out


# ---- every combiner on handwritten loop nests ----------------------------------------------------

IDENTITY = {"add": 0, "mul": 1, "max": -np.inf, "min": np.inf}
IDENTITY_I32 = {"add": 0, "mul": 1, "max": -2**31, "min": 2**31 - 1}


def rows_nest(comb, n_rows, n_red, el, start):
    """``y[i] = start_i comb x[i, 0] comb ... comb x[i, n_red - 1]``; ``start`` ``identity``
    (the combiner's identity as a constant) or ``load`` (read from ``y0[i]``)."""
    def body(b, x, y0, y):
        _, p, (i,) = parallel_loop(b, (0,), (n_rows,))
        if start == "load":
            s = load(p, y0, i)
        else:
            ident = (IDENTITY_I32 if el == I32 else IDENTITY)[comb]
            s = const(p, ident if el == I32 else float(ident), el)
        loop, fb, k, (a,) = for_loop(p, 0, n_red, inits=[s])
        fb.create("loop.yield", [op(fb, f"arith.{comb}", a, load(fb, x, i, k))])
        p.create("loop.store", [loop.results[0], y, [i]])
    return module({"x": BufferType((n_rows, n_red), el), "y0": BufferType((n_rows,), el),
                   "y": BufferType((n_rows,), el)}, ["y"], body)


def _nest_case(comb, kind, el, start, n_rows=4, n_red=301):
    dtype = np.int32 if el == I32 else np.float32
    x = extreme_data(kind, (n_rows, n_red), comb, axis=1, dtype=dtype)
    y0 = extreme_data(kind, (n_rows, 1), comb, axis=1, dtype=dtype)[:, 0]
    m = rows_nest(comb, n_rows, n_red, el, start)
    full = np.concatenate([y0[:, None], x], axis=1) if start == "load" else x
    return m, {"x": x, "y0": y0}, full


@pytest.mark.parametrize("comb", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("start", ["identity", "load"])
def test_every_combiner_on_every_schedule_and_the_cpu(comb, kind, start, monkeypatch):
    m, inputs, full = _nest_case(comb, kind, F32, start)
    want = reference(comb, full, 1, False)
    check = lambda got, what: assert_reduced(got, want, comb, full, 1, what)  # noqa: E731
    check(run_main(m, inputs)["y"], "loop interpreter")
    check(CpuProgram(lower_loop_to_llvm(parse_ir(print_ir(m))))(inputs)["y"], "cpu JIT")
    for name, used, out in each_schedule(m, inputs, monkeypatch):
        if name == "reduction":
            assert used == ["reduction"], used
        check(out["y"], f"map-to-gpu, {name} schedule ({used})")


@pytest.mark.parametrize("comb", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("kind", ["negative", "tail"])
def test_every_int_combiner_on_every_schedule(comb, kind, monkeypatch):
    m, inputs, full = _nest_case(comb, kind, I32, "identity", n_red=97)
    want = reference(comb, full, 1, False).astype(np.int32)
    np.testing.assert_array_equal(run_main(m, inputs)["y"], want)
    np.testing.assert_array_equal(
        CpuProgram(lower_loop_to_llvm(parse_ir(print_ir(m))))(inputs)["y"], want)
    for name, used, out in each_schedule(m, inputs, monkeypatch):
        np.testing.assert_array_equal(out["y"], want, err_msg=f"{name} ({used})")


@pytest.mark.parametrize("n_red", [32, 33, 255, 257, 1023, 1025])
@pytest.mark.parametrize("comb", ["max", "min"])
def test_the_winner_in_the_last_iteration_of_any_length(comb, n_red, monkeypatch):
    """The last element wins, whatever the split into full rounds and a tail."""
    m, inputs, full = _nest_case(comb, "tail", F32, "identity", n_rows=2, n_red=n_red)
    want = reference(comb, full, 1, False)
    for name, used, out in each_schedule(m, inputs, monkeypatch):
        np.testing.assert_array_equal(out["y"], want, err_msg=f"{name} ({used})")
