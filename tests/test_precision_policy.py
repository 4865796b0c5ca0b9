"""The precision policy, structurally and from its own tables (ptxc/rewrite/passes/precision.py).

The rule (docs and :data:`KEEP_FP32`): softmax, the normalizations and their statistics, and
every sum, mean or product read and accumulate f32 under any reduced precision; everything a
policy table lets run on the low type (data movement, pooling whose lowering sums in f32)
never accumulates in it. The tests are driven by the tables themselves:

* every table of :data:`POLICIES` gives each op of :data:`KEEP_FP32` the ``fp32`` policy, and
  the documented ops are in that set (a table that lists one of them, as the pooling ops or the
  moves, fails here);
* for each op of :data:`KEEP_FP32`: a graph where it reads the result of a contraction that is
  stored f16 for another reader; after ``lower-precision{fp16}`` the op reads f32, writes f32,
  and once lowered no loop carries an f16 value;
* for each op a table lets run low (``move``): the same graph; the op runs on f16 (the table is
  honoured) and once lowered no f16 value is carried through a rounding update
  (``inexact_low_accumulators``: average pooling sums in f32). A table entry without a graph
  here fails: a new entry comes with its check;
* elementwise transcendental ops (exp, log, ...) compute in f32 inside their fused kernel even
  where their inputs and outputs are stored f16.

bf16 has no policy table (``LOW_TYPE`` holds fp16 alone); the table-driven checks cover every
table there is, so one added for bf16 is checked against the rule the day it exists.
"""

import types

import numpy as np
import pytest

import ptxc
from ptxc.dialects.func import func_body, get_func
from ptxc.ir.spec import lookup
from ptxc.ir.types import TensorType
from ptxc.rewrite import PassManager
from ptxc.rewrite.passes.precision import (KEEP_FP32, LOW_TYPE, POLICIES, LowerPrecision,
                                           inexact_low_accumulators, node_names,
                                           policy)

LOWER = ("lower-graph-to-tensor,generalize-named-ops,fuse-tensor-elementwise,"
         "lower-tensor-to-loop")
SHAPE = (2, 4, 6, 6)
RNG = np.random.default_rng(0)

#: the ops the documentation names (docs and the module docstring of precision.py)
DOCUMENTED = {"graph.softmax", "graph.log_softmax", "graph.layer_normalization",
              "graph.instance_normalization", "graph.batch_normalization",
              "graph.reduce_mean", "graph.reduce_sum"}


def _c(net, a):
    return net.add_constant(np.asarray(a))


def _v(n):
    return RNG.uniform(0.5, 1.5, n).astype(np.float32)


#: graph op -> (ONNX op type, extra inputs (net -> list), attributes): one layer reading a
#: 2x4x6x6 f32 tensor
LAYERS = {
    "graph.softmax": ("Softmax", lambda n: [], {"axis": -1}),
    "graph.log_softmax": ("LogSoftmax", lambda n: [], {"axis": 1}),
    "graph.layer_normalization": ("LayerNormalization",
                                  lambda n: [_c(n, _v(6)), _c(n, _v(6))], {"axis": -1}),
    "graph.instance_normalization": ("InstanceNormalization",
                                     lambda n: [_c(n, _v(4)), _c(n, _v(4))], {}),
    "graph.batch_normalization": ("BatchNormalization",
                                  lambda n: [_c(n, _v(4)), _c(n, _v(4)), _c(n, _v(4)),
                                             _c(n, _v(4))], {}),
    "graph.lrn": ("LRN", lambda n: [], {"size": 3}),
    "graph.reduce_mean": ("ReduceMean", lambda n: [_c(n, np.array([3], np.int64))], {}),
    "graph.reduce_sum": ("ReduceSum", lambda n: [_c(n, np.array([2, 3], np.int64))], {}),
    "graph.reduce_prod": ("ReduceProd", lambda n: [_c(n, np.array([3], np.int64))], {}),
    "graph.cum_sum": ("CumSum", lambda n: [_c(n, np.array(3, np.int64))], {}),
    "graph.cum_prod": ("CumProd", lambda n: [_c(n, np.array(2, np.int64))], {}),
    # what the fp16 table lets run on the low type
    "graph.reshape": ("Reshape", lambda n: [_c(n, np.array([2, 4, 36], np.int64))], {}),
    "graph.flatten": ("Flatten", lambda n: [], {"axis": 2}),
    "graph.unsqueeze": ("Unsqueeze", lambda n: [_c(n, np.array([1], np.int64))], {}),
    "graph.squeeze": ("Squeeze", lambda n: [_c(n, np.array([1], np.int64))], {}),
    "graph.transpose": ("Transpose", lambda n: [], {"perm": [0, 1, 3, 2]}),
    "graph.concat": ("Concat", None, {"axis": 1}),
    "graph.slice": ("Slice", lambda n: [_c(n, np.array([1], np.int64)),
                                        _c(n, np.array([5], np.int64)),
                                        _c(n, np.array([3], np.int64))], {}),
    "graph.split": ("Split", lambda n: [_c(n, np.array([2, 4], np.int64))], {"axis": 3}),
    "graph.max_pool": ("MaxPool", lambda n: [], {"kernel_shape": [2, 2]}),
    "graph.global_max_pool": ("GlobalMaxPool", lambda n: [], {}),
    # (ONNX's Identity imports as its input; a reduction of no axes with
    # noop_with_empty_axes = 1 is the one node that imports as a graph.identity)
    "graph.identity": ("ReduceMax", lambda n: [_c(n, np.zeros(0, np.int64))],
                       {"noop_with_empty_axes": 1}),
    "graph.expand": ("Expand", lambda n: [_c(n, np.array([3, 2, 4, 6, 6], np.int64))], {}),
    "graph.tile": ("Tile", lambda n: [_c(n, np.array([1, 1, 1, 2], np.int64))], {}),
    "graph.average_pool": ("AveragePool", lambda n: [], {"kernel_shape": [3, 3],
                                                         "pads": [1, 1, 1, 1]}),
    "graph.global_average_pool": ("GlobalAveragePool", lambda n: [], {}),
}

#: elementwise ops whose computation rounds badly in f16 (exponentials, logarithms, roots)
TRANSCENDENTAL = {"graph.exp": "Exp", "graph.log": "Log", "graph.sqrt": "Sqrt",
                  "graph.reciprocal": "Reciprocal", "graph.sigmoid": "Sigmoid",
                  "graph.tanh": "Tanh", "graph.softplus": "Softplus", "graph.erf": "Erf"}


def _stub(name):
    return types.SimpleNamespace(name=name)


def network(name: str, onnx_op: str | None = None):
    """x -> matmul (a contraction: stored f16 for its low readers) -> relu -> "z", and the same
    matmul result -> the layer under test -> relu -> "y" (a low reader of the layer's result:
    a layer that may run low does)."""
    op_type, extra, attrs = LAYERS[name] if onnx_op is None else (onnx_op, lambda n: [], {})
    net = ptxc.Network(name.split(".")[1])
    x = net.add_input("x", SHAPE)
    h = net.add_matmul(x, net.add_constant(RNG.uniform(0.1, 0.5, (6, 6)).astype(np.float32)),
                       name="mm")
    net.mark_output(net.add_activation(h, "relu", name="other_reader"), "z")
    inputs = [h, h] if extra is None else [h] + extra(net)
    if name == "graph.squeeze":   # a unit dim to squeeze, made by a move that runs low too
        inputs[0] = net.add_layer("Unsqueeze", [h, _c(net, np.array([1], np.int64))],
                                  name="unsq")[0]
    n_out = 2 if name == "graph.split" else 1
    y = net.add_layer(op_type, inputs, n_out, name="layer", **attrs)[0]
    net.mark_output(net.add_activation(y, "relu", name="reader"), "y")
    return net


def lowered_precision(net):
    m = net.to_module()
    PassManager([LowerPrecision(precision="fp16")]).run(m)
    return m


def the_op(m, name):
    """The layer under test after the pass: the op itself, or the fused kernel that took it
    (an identity fuses into its elementwise reader)."""
    body = func_body(get_func(m))
    ops = [op for op in body.ops if op.name == name] or \
        [op for op in body.ops if op.name != "graph.cast" and "layer" in node_names(op)]
    assert len(ops) == 1, f"{name}: {[op.name for op in ops]} in the module after the pass"
    return ops[0]


def _floats(values):
    return [v.type.element.name for v in values
            if isinstance(v.type, TensorType) and v.type.element.is_float]


def carried_f16(m):
    return [r for op in m.walk() if op.name == "loop.for" for r in op.results
            if r.type.name == "f16"]


# ---- the tables against the rule ----------------------------------------------------------------

def test_the_documented_ops_are_kept_in_fp32():
    assert DOCUMENTED <= KEEP_FP32
    for name in KEEP_FP32:
        assert lookup(name) is not None, f"{name} is no registered op"


@pytest.mark.parametrize("precision", list(POLICIES))
def test_no_policy_table_lets_a_kept_op_run_low(precision):
    table = POLICIES[precision]
    listed = sorted(KEEP_FP32 & set(table))
    assert not listed, f"the {precision} table lists {listed}, which the rule keeps in fp32"
    for name in sorted(KEEP_FP32):
        assert policy(precision, _stub(name)) == "fp32", (precision, name)


def test_every_op_a_table_lets_run_low_has_a_check_here():
    """An op a table moves onto the low type is checked below (a new entry needs its graph
    in LAYERS); contractions have their own contract tests (tests/test_precision.py)."""
    from ptxc.rewrite.passes.precision import CONTRACTIONS
    low = {name for table in POLICIES.values() for name, p in table.items()
           if not name.startswith("*") and name not in CONTRACTIONS}
    assert low, "no table moves anything: the checks below would check nothing"
    assert low <= set(LAYERS), f"no structural check for {sorted(low - set(LAYERS))}"


# ---- the pass, op by op -------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(KEEP_FP32))
def test_a_kept_op_reads_and_accumulates_f32(name):
    m = lowered_precision(network(name))
    mm = [op for op in func_body(get_func(m)).ops if op.name.startswith("graph.fused_matmul")]
    assert any(_floats(op.results) == ["f16"] for op in mm), \
        "the contraction's result should be stored f16 (its other reader takes it low)"
    op = the_op(m, name)
    assert set(_floats(op.operands)) == {"f32"}, f"{name} reads {_floats(op.operands)}"
    assert set(_floats(op.results)) == {"f32"}, f"{name} writes {_floats(op.results)}"
    PassManager(LOWER).run(m)
    assert not carried_f16(m), f"{name}: a loop carries f16 once lowered"


def _runs_low():
    return sorted({name for table in POLICIES.values() for name, p in table.items()
                   if p == "move"})


@pytest.mark.parametrize("name", _runs_low())
def test_an_op_the_table_runs_low_reads_f16_and_never_sums_in_it(name):
    assert name not in KEEP_FP32
    m = lowered_precision(network(name))
    op = the_op(m, name)
    assert "f16" in _floats(op.operands), f"{name} should run on f16 (the table says move)"
    PassManager(LOWER).run(m)
    bad = inexact_low_accumulators(m)
    assert not bad, f"{name}: f16 carried through a rounding update: {bad}"


@pytest.mark.parametrize("name", sorted(TRANSCENDENTAL))
def test_transcendental_elementwise_ops_compute_in_f32(name):
    assert policy("fp16", _stub(name)) in ("elementwise", "fp32")
    m = lowered_precision(network(name, TRANSCENDENTAL[name]))
    bodies = [op for op in m.walk() if op.name == "graph.elementwise"]
    assert bodies, "the layer and its reader should fuse into one elementwise kernel"
    low_io = False
    for op in bodies:
        low_io |= "f16" in _floats(op.operands)
        for inner in op.regions[0].blocks[0].ops:
            if inner.name in ("arith.cast", "graph.yield", "arith.constant"):
                continue
            assert all(r.type.name != "f16" for r in inner.results), \
                f"{name}: {inner.name} computes in {[r.type.name for r in inner.results]}"
    assert low_io, f"{name}: the kernel should read the contraction's f16 result"


def test_the_low_types_have_tables():
    assert set(LOW_TYPE) <= set(POLICIES)
