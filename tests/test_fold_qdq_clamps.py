"""fold-qdq and clamps: an int8 conv whose float epilogue clamps at bounds other than 0.

fold-qdq keeps a layer's float epilogue as it is, in units of the output scale, only when it
commutes with dividing by that scale (``_scale_free``: max/min against 0, a ReLU); any other
bound must be divided by the scale too (``min(v, 6)`` is ``min(v', 6 / ys)`` in output units).
MobileNet-style int8 models carry exactly that: Clip(0, 6) (ReLU6) between the conv and its
QuantizeLinear. Each model here is built with onnx.helper (DQ -> Conv -> clamp -> Q -> DQ) and
run against onnxruntime through the interpreter after graph-opt, the cpu engine and the cuda
target's loop IR (the gpu dialect interpreted: the schedule the PTX is made from); the layers
must fold (one ``graph.qlinear_conv``) and agree within one output quantization step, and the
clamps must bind (outputs at both bounds), or the check would prove nothing. The rule itself
is unit-tested on hand-built epilogue blocks.
"""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ptxc
from ptxc.compiler import as_module, run_stages
from ptxc.ir.builder import Builder
from ptxc.ir.core import Block
from ptxc.ir.interpreter import interpret
from ptxc.ir.printer import print_ir
from ptxc.ir.types import F32
from ptxc.rewrite.pass_manager import PassManager
from ptxc.rewrite.passes.fold_qdq import _scale_free

XS = np.float32(0.02)     # the input's scale: |x| up to 2.54


def clamp_model(kind: str, lo: float, hi: float, to=np.int8, seed=0):
    """x 1x3x8x8 -> Q -> DQ -> Conv 3x3 (8 channels, per-channel int8 weights, int32 bias)
    -> the clamp ``kind`` to [lo, hi] -> Q(ys) -> DQ -> y, ``ys`` spanning the bounds."""
    rng = np.random.default_rng(seed)
    wq = rng.integers(-127, 128, (8, 3, 3, 3)).astype(np.int8)
    ws = (rng.uniform(0.5, 1.5, 8) / 127).astype(np.float32)
    bq = rng.integers(-300, 300, 8).astype(np.int32)
    if to == np.uint8:
        ys, yz = np.float32(max(hi, 0) / 255), to(0)
    else:
        ys, yz = np.float32(max(abs(lo), abs(hi)) * 1.05 / 127), to(0)
    inits = {"xs": XS, "xz": np.int8(0), "wq": wq, "ws": ws, "wz": np.zeros(8, np.int8),
             "bq": bq, "bs": (XS * ws).astype(np.float32), "ys": ys, "yz": yz,
             "lo": np.float32(lo), "hi": np.float32(hi)}
    n = helper.make_node
    nodes = [n("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="qx"),
             n("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dqx"),
             n("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], name="dqw", axis=0),
             n("DequantizeLinear", ["bq", "bs"], ["bd"], name="dqb", axis=0),
             n("Conv", ["xd", "wd", "bd"], ["c"], name="conv", pads=[1, 1, 1, 1])]
    if kind == "clip":
        nodes.append(n("Clip", ["c", "lo", "hi"], ["e"], name="clip"))
    elif kind == "max_min":
        nodes += [n("Max", ["c", "lo"], ["m"], name="max"), n("Min", ["m", "hi"], ["e"],
                                                             name="min")]
    elif kind == "min_max":
        nodes += [n("Min", ["c", "hi"], ["m"], name="min"), n("Max", ["m", "lo"], ["e"],
                                                             name="max")]
    elif kind in ("mul_clip", "add_clip"):   # a constant factor or shift, then the clamp
        inits["k"] = np.float32(0.375 if kind == "mul_clip" else -0.625)
        nodes += [n("Mul" if kind == "mul_clip" else "Add", ["c", "k"], ["m"], name="affine"),
                  n("Clip", ["m", "lo", "hi"], ["e"], name="clip")]
    else:
        raise ValueError(kind)
    nodes += [n("QuantizeLinear", ["e", "ys", "yz"], ["eq"], name="qy"),
              n("DequantizeLinear", ["eq", "ys", "yz"], ["y"], name="dqy")]
    g = helper.make_graph(
        nodes, f"qdq_{kind}", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m, float(ys)


#: (kind, lo, hi, output type): ReLU6 in int8 and uint8 (MobileNet's), bounds of both signs
#: and both nonzero, Min/Max against nonzero constants in either order, and a constant factor
#: or shift before the clamp (in output units a factor stays, a shift is divided)
CASES = {
    "relu6": ("clip", 0.0, 6.0, np.int8),
    "relu6-uint8": ("clip", 0.0, 6.0, np.uint8),
    "clip-negative-to-positive": ("clip", -0.5, 1.5, np.int8),
    "clip-both-positive": ("clip", 0.25, 2.0, np.int8),
    "max-then-min": ("max_min", 0.3, 2.5, np.int8),
    "min-then-max": ("min_max", -1.0, 0.75, np.int8),
    "mul-then-clip": ("mul_clip", 0.0, 1.5, np.int8),
    "add-then-clip": ("add_clip", -0.5, 2.0, np.int8),
}


def _inputs(k=3):
    rng = np.random.default_rng(11)
    return [rng.uniform(-2.5, 2.5, (1, 3, 8, 8)).astype(np.float32) for _ in range(k)]


def _ort(model, x):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def _check(got, want, ys, what):
    err = float(np.max(np.abs(got - want)))
    assert err <= ys * 1.0001, f"{what}: off by {err} (one output step is {ys})"


@pytest.fixture(params=list(CASES), scope="module")
def case(request):
    kind, lo, hi, to = CASES[request.param]
    model, ys = clamp_model(kind, lo, hi, to)
    xs = _inputs()
    want = [_ort(model, x) for x in xs]
    # the clamps bind: onnxruntime's outputs reach both bounds (within one step)
    every = np.concatenate([w.ravel() for w in want])
    assert every.min() <= lo + ys and every.max() >= hi - ys, (every.min(), every.max())
    return request.param, model, ys, lo, hi, xs, want


def test_clamped_qdq_conv_folds_and_matches_onnxruntime_interpreted(case):
    name, model, ys, lo, hi, xs, want = case
    m = ptxc.import_onnx(model)
    PassManager("graph-opt", check_numerics=True).run(m)
    text = print_ir(m, elide_constants=True)
    assert text.count('"graph.qlinear_conv"') == 1 and '"graph.conv"' not in text, text
    conv = next(op for op in m.walk() if op.name == "graph.qlinear_conv")
    body = [op.name for op in conv.regions[0].blocks[0].ops]
    assert "arith.min" in body or "arith.max" in body, f"the clamp is not in the epilogue: {body}"
    if name.startswith(("mul", "add")):
        assert "arith." + name[:3] in body, body
    for x, w in zip(xs, want):
        _check(interpret(m, {"x": x})["y"], w, ys, f"{name}, interpreter")


def test_clamped_qdq_conv_on_the_cpu_engine(case):
    name, model, ys, lo, hi, xs, want = case
    engine = ptxc.compile(model, target="cpu")
    for x, w in zip(xs, want):
        _check(engine.run({"x": x})["y"], w, ys, f"{name}, cpu")


@pytest.mark.parametrize("name", ["relu6", "clip-negative-to-positive"])
def test_clamped_qdq_conv_on_the_cuda_schedule(name):
    """The cuda target's loop IR (gpu dialect, interpreted in lockstep) for two of the cases:
    the epilogue the PTX is made from. Compiling to PTX is checked for one."""
    kind, lo, hi, to = CASES[name]
    model, ys = clamp_model(kind, lo, hi, to)
    m = as_module(model)
    run_stages(m, "loop", target="cuda")
    assert any(op.name == "gpu.launch" for op in m.walk())
    x = _inputs(1)[0]
    _check(interpret(m, {"x": x})["y"], _ort(model, x), ys, f"{name}, cuda loop IR")
    if name == "relu6":
        engine = ptxc.compile(model, target="cuda", arch="sm_80")
        assert ".entry" in engine.ptx


# ---- the rule: which epilogues commute with the output scale -----------------------------------

def _block(*steps):
    """An f32 epilogue block: ``steps`` are (op, constant) applied to the accumulator in turn
    (constant None: the op reads the accumulator twice)."""
    block = Block([F32])
    b = Builder.at_end(block)
    v = block.args[0]
    for name, c in steps:
        other = v if c is None else b.create("arith.constant", [], {"value": c,
                                                                     "type": F32}).result
        v = b.create(name, [v, other]).result
    b.create("graph.yield", [v], result_types=[])
    return block


@pytest.mark.parametrize("steps, free", [
    ((), True),                                                   # identity
    ((("arith.max", 0.0),), True),                                # relu
    ((("arith.min", 0.0),), True),                                # min with 0
    ((("arith.max", 0.0), ("arith.min", 0.0)), True),
    ((("arith.max", 0.0), ("arith.min", 6.0)), False),            # relu6
    ((("arith.min", 6.0),), False),
    ((("arith.max", 0.5),), False),                               # a positive floor
    ((("arith.max", -0.5),), False),                              # a negative floor
    ((("arith.max", 1e-30),), False),                             # tiny, still not 0
    ((("arith.max", 0.0), ("arith.add", 1.0)), False),            # a shift
    ((("arith.mul", 2.0),), False),
    ((("arith.max", None),), False),                              # no constant: not a clamp
])
def test_only_clamps_at_zero_commute_with_the_output_scale(steps, free):
    assert _scale_free(_block(*steps)) is free
