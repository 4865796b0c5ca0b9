"""bfloat16 (issue 11): a numpy bf16 dtype from ml_dtypes in the reference semantics; the importer
computes bf16 ops in f32 (ptxc/frontend/convert/bf16.py); the compiled code stores bf16 and
converts it with integer ops (widening exact, narrowing to nearest even, as ml_dtypes)."""

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ptxc
from ptxc.ptx import assemble, ptxas_path

BF16 = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(16)


def _model(nodes, inputs, outputs, inits=(), opset=21):
    g = helper.make_graph(nodes, "bf", [helper.make_tensor_value_info(n, t, s)
                                        for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, 0, None) for n, _ in outputs],
                          list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    m = onnx.shape_inference.infer_shapes(m)
    assert [o.type.tensor_type.elem_type for o in m.graph.output] == [t for _, t in outputs]
    return m


def _halfway_values():
    """f32 values at and around the bf16 rounding boundaries, specials and random ones."""
    base = RNG.standard_normal(200).astype(np.float32) * 100
    bits = base.view(np.uint32) & np.uint32(0xFFFF0000)
    ties = (bits | np.uint32(0x8000)).view(np.float32)              # exact ties
    odd_ties = ((bits | np.uint32(0x18000))).view(np.float32)      # ties above an odd lsb
    near = (bits | np.uint32(0x7FFF)).view(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 3.4e38, -3.4e38, 1e-40,
                        np.finfo(np.float32).max, np.finfo(np.float32).tiny], np.float32)
    return np.concatenate([base, ties, odd_ties, near, special])


def test_cast_rounds_as_ml_dtypes_on_interpreter_and_cpu():
    x = _halfway_values()
    xd = np.concatenate([x.astype(np.float64), np.array([1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-40),
                                                         1e300, 2**-140], np.float64)])
    nodes = [helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BFLOAT16),
             helper.make_node("Cast", ["b"], ["back"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["xd"], ["bd"], to=TensorProto.BFLOAT16),
             helper.make_node("Cast", ["b"], ["i"], to=TensorProto.INT32)]
    m = _model(nodes, [("x", TensorProto.FLOAT, x.shape), ("xd", TensorProto.DOUBLE, xd.shape)],
               [("b", TensorProto.BFLOAT16), ("back", TensorProto.FLOAT),
                ("bd", TensorProto.BFLOAT16), ("i", TensorProto.INT32)])
    feeds = {"x": x, "xd": xd}
    want_b = x.astype(BF16)
    with np.errstate(over="ignore"):
        want_bd = xd.astype(BF16)
    for got in (ptxc.interpret(ptxc.import_onnx(m), feeds),
                ptxc.compile(m, target="cpu").run(feeds)):
        assert got["b"].dtype == BF16 and got["bd"].dtype == BF16
        bits = lambda a: a.view(np.uint16)  # noqa: E731
        nan = np.isnan(x)
        np.testing.assert_array_equal(bits(got["b"])[~nan], bits(want_b)[~nan])
        assert np.isnan(got["b"][nan].astype(np.float32)).all()
        np.testing.assert_array_equal(bits(got["bd"])[~np.isnan(xd)],
                                      bits(want_bd)[~np.isnan(xd)])
        np.testing.assert_array_equal(got["back"], want_b.astype(np.float32))
        fin = np.isfinite(x) & (np.abs(x) < 2**31 - 256)
        np.testing.assert_array_equal(got["i"][fin], want_b.astype(np.float32)[fin].astype(
            np.int32))


def _block():
    """MatMul + bias + Softmax + ReduceSum in bf16 with a bf16 weight."""
    w = (RNG.standard_normal((16, 8)) * 0.3).astype(BF16)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "bias"], ["hb"]),
             helper.make_node("Softmax", ["hb"], ["p"], axis=-1),
             helper.make_node("ReduceSum", ["hb"], ["s"], keepdims=0)]
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.linspace(-1, 1, 8).astype(BF16), "bias")]
    m = _model(nodes, [("x", TensorProto.BFLOAT16, (4, 16))],
               [("p", TensorProto.BFLOAT16), ("s", TensorProto.BFLOAT16)], inits)
    return m, w


def _reference(x, w):
    """fp32 compute from the bf16 values, each op's result rounded to bf16 (ptxc's contract)."""
    f = lambda a: a.astype(np.float32)  # noqa: E731
    r = lambda a: a.astype(BF16)  # noqa: E731
    h = r(f(x) @ f(w))
    hb = r(f(h) + np.linspace(-1, 1, 8).astype(BF16).astype(np.float32))
    e = np.exp(f(hb) - f(hb).max(-1, keepdims=True))
    return {"p": r(e / e.sum(-1, keepdims=True)), "s": r(f(hb).sum())}


def test_bf16_block_computes_in_f32_on_interpreter_and_cpu():
    m, w = _block()
    x = RNG.standard_normal((4, 16)).astype(BF16)
    want = _reference(x, w)
    for got in (ptxc.interpret(ptxc.import_onnx(m), {"x": x}),
                ptxc.compile(m, target="cpu").run({"x": x})):
        for k, v in want.items():
            assert got[k].dtype == BF16
            # one bf16 ulp (2^-8 relative): the sum order may differ from numpy's
            np.testing.assert_allclose(got[k].astype(np.float32), v.astype(np.float32),
                                       rtol=2**-7, atol=1e-6)


def test_bf16_graph_has_f32_compute():
    """Every op but the casts and constants sees f32: fp32 accumulation in MatMul/ReduceSum."""
    m, _ = _block()
    text = ptxc.print_ir(ptxc.import_onnx(m))
    for line in text.splitlines():
        if "graph.matmul" in line or "graph.reduce_sum" in line or "graph.softmax" in line:
            assert "bf16" not in line.split("->")[-1] and "bf16" not in line.split(":")[-1], line


def test_bf16_inputs_and_constant_inputs_interpret():
    """The issue's edge case: interpret and constant_inputs with bf16 no longer raise a bare
    TypeError ("bf16 has no numpy dtype")."""
    nodes = [helper.make_node("Mul", ["x", "c"], ["y"])]
    m = _model(nodes, [("x", TensorProto.BFLOAT16, (3,)), ("c", TensorProto.BFLOAT16, (3,))],
               [("y", TensorProto.BFLOAT16)])
    x = np.array([1.5, -2.0, 3.0], BF16)
    c = np.array([2.0, 0.5, 1.0], BF16)
    got = ptxc.interpret(ptxc.import_onnx(m, constant_inputs={"c": c}), {"x": x})
    np.testing.assert_array_equal(got["y"].astype(np.float32), [3.0, -1.0, 3.0])


def test_bf16_arithmetic_reaching_llvm_is_a_compile_error():
    """The compiled code has no bf16 arithmetic: a loop-level bf16 add is a typed error."""
    from ptxc.errors import CompileError
    from ptxc.lower.llvm_types import supported, storable
    from ptxc.ir.types import BF16 as T
    assert storable(T) and not supported(T)
    assert issubclass(CompileError, ptxc.PtxcError)


def test_bf16_plan_round_trip(tmp_path):
    m, w = _block()
    x = RNG.standard_normal((4, 16)).astype(BF16)
    eng = ptxc.compile(m, target="cpu")
    want = eng.run({"x": x})
    eng.save(tmp_path / "bf.plan")
    got = ptxc.load(tmp_path / "bf.plan").run({"x": x})
    for k in want:
        np.testing.assert_array_equal(got[k].view(np.uint16), want[k].view(np.uint16))


@pytest.mark.slow
def test_bf16_block_lowers_for_cuda():
    m, _ = _block()
    engine = ptxc.compile(m, target="cuda", arch="sm_90")
    if ptxas_path() is not None:
        assemble(engine.ptx, "sm_90")
