"""print -> parse -> print is the identity on random modules: random op names, attributes of
every kind (large constants included), several results, nested regions with block arguments."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ptxc.dialects.func import func_body, new_func, new_module, set_func_results
from ptxc.ir import Block, DenseElements, Operation, Region, parse_ir, print_ir
from ptxc.ir.types import FunctionType, ScalarType, TensorType, BufferType

ELEMENTS = ["f64", "f32", "f16", "i64", "i32", "i16", "i8", "ui8", "ui16", "i1"]
NAMES = st.one_of(st.none(), st.sampled_from(["x", "conv1/w", "a.b", "0weird", "x y", "dup"]))


@st.composite
def types(draw):
    el = ScalarType(draw(st.sampled_from(ELEMENTS)))
    shape = draw(st.lists(st.integers(0, 5), max_size=3))
    kind = draw(st.sampled_from(["tensor", "tensor", "buffer", "scalar"]))
    if kind == "scalar":
        return el
    return (TensorType if kind == "tensor" else BufferType)(tuple(shape), el)


@st.composite
def dense(draw):
    el = draw(st.sampled_from(ELEMENTS))
    shape = tuple(draw(st.lists(st.integers(1, 6), max_size=3)))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    dt = np.dtype(ScalarType(el).np_dtype)
    if dt.kind == "f":
        arr = rng.standard_normal(shape).astype(dt)
        if arr.size and draw(st.booleans()):
            arr.reshape(-1)[0] = draw(st.sampled_from([np.inf, -np.inf, 0.1, -0.0, 1e-8]))
    elif dt.kind == "b":
        arr = rng.integers(0, 2, shape).astype(dt)
    else:
        info = np.iinfo(dt)
        arr = rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
    return DenseElements(arr)


scalars = st.one_of(
    st.integers(-2**63, 2**63 - 1), st.booleans(),
    st.floats(allow_nan=False, width=64), st.just(float("nan")),
    st.text(max_size=12),
)
attr_values = st.one_of(
    scalars, st.lists(st.integers(-5, 5), max_size=4).map(tuple),
    st.lists(st.floats(allow_nan=False), max_size=3).map(tuple),
    st.lists(st.text(max_size=4), max_size=3).map(tuple), types(), dense(),
    st.builds(lambda a, b: FunctionType(a, b), st.lists(types(), max_size=2),
              st.lists(types(), max_size=2)),
)
attr_dicts = st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True),
                             attr_values, max_size=3)


@st.composite
def blocks(draw, visible, depth):
    block = Block([draw(types()) for _ in range(draw(st.integers(0, 2)))],
                  [draw(NAMES) for _ in range(2)])
    vis = list(visible) + list(block.args)
    for _ in range(draw(st.integers(0, 4))):
        operands = [draw(st.sampled_from(vis)) for _ in range(draw(st.integers(0, 3)))] \
            if vis else []
        n_res = draw(st.integers(0, 3))
        regions = []
        if depth < 2 and draw(st.integers(0, 4)) == 0:
            regions = [Region([draw(blocks(vis, depth + 1))])
                       for _ in range(draw(st.integers(1, 2)))]
        op = Operation(draw(st.sampled_from(["test.op", "graph.x", "loop.for", "a.b_c"])),
                       operands, [draw(types()) for _ in range(n_res)], draw(attr_dicts),
                       regions, loc=draw(st.one_of(st.none(), st.text(max_size=8))),
                       result_names=[draw(NAMES) for _ in range(n_res)])
        block.append(op)
        vis += op.results
    return block


@st.composite
def modules(draw):
    m = new_module()
    for i in range(draw(st.integers(1, 2))):
        f = new_func(m, f"f{i}", [], [])
        body = func_body(f)
        inner = draw(blocks([], 0))
        for a in inner.args:
            body.add_arg(a.type, a.name_hint)
        mapping = dict(zip(inner.args, body.args))
        for op in list(inner.ops):
            body.append(op.clone(mapping))
        last = [op for op in body.ops if op.results]
        set_func_results(f, last[-1].results if last else [])
    return m


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules())
def test_print_parse_print_is_identity(m):
    text = print_ir(m)
    again = print_ir(parse_ir(text))
    assert again == text
