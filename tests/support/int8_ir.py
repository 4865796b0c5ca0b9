"""Small int8 models in the forms fold-qdq and the importer give the int8 layers
(``graph.qlinear_matmul`` / ``graph.qlinear_conv``), for the int8 mma tests and bench/gemm.py.

* :func:`gemm_model`: a QDQ fully connected layer as onnxruntime.quantization writes one
  (int8 input ``x`` [M, K] dequantized, per-channel int8 weights [N, K] (Gemm transB), an int32
  bias, ReLU, an optional residual read through its own DequantizeLinear, QuantizeLinear to an
  int8 output): fold-qdq makes it one qlinear_matmul with the requantization epilogue.
* :func:`matmul_integer_model`: ONNX MatMulInteger with constant int8 B [K, N]: an i32 result.
* :func:`conv_model`: a QDQ convolution (NCHW int8 input and output, per-channel weights, bias,
  ReLU, optional residual) with strides and padding.

Activations are int8 with a zero point ``zx`` (0: TensorRT's symmetric activations; not 0:
onnxruntime's asymmetric ones, which the int8 form folds into the bias).
"""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from . import contraction_ir
from ptxc.compiler import as_module, run_stages

OPSET = 17


def _c(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _qdq_layer(nodes, inits, rng, x_name, w_q, w_axis, n_out, k, zx, relu, residual, out_shape,
               res_shape, layer, zy=-3):
    """DQ(x) -> layer(DQ(w), DQ(bias)) -> [relu] -> [+ DQ(r)] -> Q -> y (int8)."""
    xs = np.float32(0.05)
    ws = (rng.uniform(0.5, 1.5, n_out) / 64).astype(np.float32)
    bias = rng.integers(-2000, 2000, n_out).astype(np.int32)
    inits += [_c("xs", xs), _c("xz", np.int8(zx)), _c("wq", w_q), _c("ws", ws),
              _c("wz", np.zeros(n_out, np.int8)), _c("bq", bias), _c("bs", xs * ws),
              _c("bz", np.zeros(n_out, np.int32)),
              _c("ys", np.float32(0.05 * np.sqrt(k) / 8)), _c("yz", np.int8(zy))]
    nodes += [helper.make_node("DequantizeLinear", [x_name, "xs", "xz"], ["xf"], name="dq_x"),
              helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wf"], name="dq_w",
                               axis=w_axis),
              helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bf"], name="dq_b",
                               axis=0)]
    nodes.append(layer("xf", "wf", "bf", "t"))
    last = "t"
    if relu:
        nodes.append(helper.make_node("Relu", [last], ["t_relu"], name="relu"))
        last = "t_relu"
    if residual:
        inits += [_c("rs", np.float32(0.04)), _c("rz", np.int8(5))]
        nodes += [helper.make_node("DequantizeLinear", ["r", "rs", "rz"], ["rf"], name="dq_r"),
                  helper.make_node("Add", [last, "rf"], ["t_res"], name="add")]
        last = "t_res"
    nodes.append(helper.make_node("QuantizeLinear", [last, "ys", "yz"], ["y"], name="q_y"))
    ins = [helper.make_tensor_value_info("x", TensorProto.INT8, None)]
    if residual:
        ins.append(helper.make_tensor_value_info("r", TensorProto.INT8, res_shape))
    return ins, [helper.make_tensor_value_info("y", TensorProto.INT8, out_shape)]


def _model(nodes, ins, outs, inits, x_shape):
    ins[0] = helper.make_tensor_value_info("x", TensorProto.INT8, x_shape)
    g = helper.make_graph(nodes, "g", ins, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    return m


def gemm_model(M, K, N, zx=0, relu=True, residual=False, seed=0, zy=-3):
    """y = Q(relu(DQ(x) @ DQ(wq).T + DQ(bq)) [+ DQ(r)]) with x int8 [M, K], wq int8 [N, K];
    ``zy`` the output's zero point."""
    rng = np.random.default_rng(seed)
    wq = rng.integers(-127, 128, (N, K)).astype(np.int8)
    nodes, inits = [], []
    ins, outs = _qdq_layer(
        nodes, inits, rng, "x", wq, 0, N, K, zx, relu, residual, [M, N], [M, N],
        lambda x, w, b, y: helper.make_node("Gemm", [x, w, b], [y], name="fc", transB=1), zy)
    return _model(nodes, ins, outs, inits, [M, K])


def matmul_integer_model(M, K, N, a_uint8=False, a_zero=0, w_uint8=False, seed=0):
    """y = MatMulInteger(a, w, a_zero): a int8 (or uint8) [M, K] input, w int8 (or uint8: no
    int8 form when its values pass 127) [K, N] constant, y int32."""
    rng = np.random.default_rng(seed)
    w = rng.integers(0, 256, (K, N)).astype(np.uint8) if w_uint8 else \
        rng.integers(-128, 128, (K, N)).astype(np.int8)
    at = TensorProto.UINT8 if a_uint8 else TensorProto.INT8
    inits, names = [_c("w", w)], ["a", "w"]
    if a_zero:
        inits.append(_c("az", np.array(a_zero, np.uint8 if a_uint8 else np.int8)))
        names.append("az")
    g = helper.make_graph(
        [helper.make_node("MatMulInteger", names, ["y"], name="mm")], "g",
        [helper.make_tensor_value_info("a", at, [M, K])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [M, N])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    return m


def conv_model(N, C, H, W, K, R, S, stride=1, pad=0, zx=0, relu=True, residual=False, seed=0,
               zy=-3):
    """y = Q(relu(conv(DQ(x), DQ(wq)) + DQ(bq)) [+ DQ(r)]), x int8 [N, C, H, W] (NCHW); ``zy``
    the output's zero point."""
    rng = np.random.default_rng(seed)
    wq = rng.integers(-127, 128, (K, C, R, S)).astype(np.int8)
    P = (H + 2 * pad - R) // stride + 1
    Q = (W + 2 * pad - S) // stride + 1
    nodes, inits = [], []
    ins, outs = _qdq_layer(
        nodes, inits, rng, "x", wq, 0, K, C * R * S, zx, relu, residual, [N, K, P, Q],
        [N, K, P, Q],
        lambda x, w, b, y: helper.make_node("Conv", [x, w, b], [y], name="conv",
                                            strides=[stride, stride], pads=[pad] * 4), zy)
    return _model(nodes, ins, outs, inits, [N, C, H, W])


#: the cpu target's tensor and loop passes (``stage_passes``): a cuda compile's graph stage,
#: then loops with nothing mapped to the GPU
UNMAPPED = {"tensor": "lower-graph-to-tensor,fuse-tensor-elementwise",
            "loop": "lower-tensor-to-loop"}


def loop_module(model, layout="nchw", target="cpu"):
    """The model at the loop stage, nothing mapped (``target``'s graph passes: cuda pads
    channels for 16-byte rows)."""
    m = as_module(model)
    run_stages(m, "loop", target=target, layout=layout, stage_passes=UNMAPPED)
    return m


def full_range(rng, shape, dt):
    info = np.iinfo(dt)
    return rng.integers(info.min, int(info.max) + 1, shape).astype(dt)


def inputs_for(model, seed=1) -> dict:
    """Each graph input of ``model``, integers over its type's whole range."""
    return contraction_ir.inputs_for(model, seed, draw=full_range)
