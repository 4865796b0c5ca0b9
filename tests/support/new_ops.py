"""Shared checks for the ops of issue 11 (tests/test_ops_*.py): a small ONNX model runs on the
interpreter and on the compiled cpu target and matches onnxruntime (an independent reference);
compiled for cuda (no GPU needed), its PTX assembles with ptxas where ptxas is installed."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import ptxc
from ptxc.ptx import assemble, ptxas_path
from .one_node import NP_TO_ONNX


#: the stages a property test of a new op's lowering runs, interpreting before and after each
LOWERING = ("lower-graph-to-tensor,generalize-named-ops,fuse-tensor-elementwise,"
            "lower-tensor-to-loop")


def check_lowering(model, feeds, equal_nan=False):
    """The interpreter's outputs of ``model`` before lowering equal the cpu-compiled loop
    module's after it (``check_numerics``: the interpreter also runs after every pass)."""
    from ptxc.driver.cpu import CpuProgram
    from ptxc.ir import interpret
    from ptxc.rewrite import PassManager
    import ptxc.lower.tensor_to_loop  # noqa: F401  (registers the pass)
    module = ptxc.import_onnx(model)
    want = interpret(module, feeds)
    PassManager(LOWERING, check_numerics=True).run(module)
    got = CpuProgram.from_module(module, threads=1, min_parallel_work=0)(feeds)
    for k, w in want.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-5, equal_nan=equal_nan,
                                   err_msg=k)


def graph_model(nodes, inputs, outputs, opset=21, inits=(), out_types=None):
    """``inputs``: name -> array; ``outputs``: names; shapes inferred (``out_types``: name ->
    (onnx elem type, shape) of outputs or intermediates where onnx's shape inference cannot
    say, e.g. after GroupNormalization-21)."""
    vis = [helper.make_tensor_value_info(n, NP_TO_ONNX[x.dtype], x.shape)
           for n, x in inputs.items()]
    out_types = out_types or {}
    outs = [helper.make_tensor_value_info(o, *out_types.get(o, (0, None))) for o in outputs]
    g = helper.make_graph(nodes, "g", vis, outs, list(inits),
                          value_info=[helper.make_tensor_value_info(n, *t)
                                      for n, t in out_types.items() if n not in outputs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10 if opset >= 21 else 8
    return onnx.shape_inference.infer_shapes(m)


def onnxruntime_run(model, feeds):
    if model.opset_import[0].version > 23:  # newer than this onnxruntime: onnx's reference
        from onnx.reference import ReferenceEvaluator
        ref = ReferenceEvaluator(model)
        return dict(zip(ref.output_names, ref.run(None, feeds)))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def close(got, want, rtol=1e-5, atol=1e-6, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, \
        (what, got.shape, got.dtype, want.shape, want.dtype)
    if got.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)


def check_model(model, feeds, rtol=1e-5, atol=1e-6, cuda=True):
    """Interpreter and cpu against onnxruntime; cuda compiled and assembled."""
    want = onnxruntime_run(model, feeds)
    module = ptxc.import_onnx(model)
    got_i = ptxc.interpret(module, feeds)
    got_c = ptxc.compile(model, target="cpu").run(feeds)
    for name, w in want.items():
        close(got_i[name], w, rtol, atol, f"interpreter {name}")
        close(got_c[name], w, rtol, atol, f"cpu {name}")
    if cuda:
        engine = ptxc.compile(model, target="cuda", arch="sm_90")
        if ptxas_path() is not None:
            assemble(engine.ptx, "sm_90")
    return want


needs_ptxas = pytest.mark.skipif(ptxas_path() is None, reason="ptxas is not installed")
