"""Small float models and their QDQ versions made by onnxruntime.quantization.quantize_static,
shared by the Q/DQ folding tests and bench/ (a small CNN built with onnx.helper)."""

import os
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def small_cnn(seed: int = 0, classes: int = 10) -> onnx.ModelProto:
    """x 1x3x16x16 -> conv3x3(8)+relu -> conv3x3 s2(16)+relu -> conv1x1(16) + residual, relu
    -> global average pool -> flatten -> gemm(10) (transB) -> logits."""
    rng = np.random.default_rng(seed)

    def w(name, *shape):
        fan_in = int(np.prod(shape[1:]))
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32), name)

    def b(name, n):
        return numpy_helper.from_array((rng.standard_normal(n) * 0.1).astype(np.float32), name)

    inits = [w("w1", 8, 3, 3, 3), b("b1", 8), w("w2", 16, 8, 3, 3), b("b2", 16),
             w("w3", 16, 16, 1, 1), b("b3", 16), w("wf", classes, 16), b("bf", classes)]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Relu", ["c2"], ["r2"], name="relu2"),
        n("Conv", ["r2", "w3", "b3"], ["c3"], name="conv3"),
        n("Add", ["c3", "r2"], ["s3"], name="add3"),
        n("Relu", ["s3"], ["r3"], name="relu3"),
        n("GlobalAveragePool", ["r3"], ["p"], name="gap"),
        n("Flatten", ["p"], ["f"], name="flatten"),
        n("Gemm", ["f", "wf", "bf"], ["logits"], name="fc", transB=1),
    ]
    return _image_classifier("small_cnn", nodes, inits, [1, 3, 16, 16], classes)


def _image_classifier(name, nodes, inits, x_shape, classes) -> onnx.ModelProto:
    """An opset-13 model (IR 8) from float input ``x`` of ``x_shape`` to ``logits`` [1, classes]."""
    g = helper.make_graph(nodes, name,
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                         [1, classes])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def small_resnet(seed: int = 0, classes: int = 10) -> onnx.ModelProto:
    """ResNet-50's layer kinds in the old (Caffe2) export's form, small: convs without bias,
    each followed by its own BatchNormalization, a bottleneck whose input also feeds the
    residual ``Sum``, relu after the sum, a 4x4 AveragePool (not global), Reshape, Gemm.
    x 1x3x8x8 -> conv3x3(8)+bn+relu -> [conv1x1(4)+bn+relu -> conv3x3(8)+bn] + the block's
    input -> relu -> avg pool 4x4 s4 (2x2) -> reshape (1, 32) -> gemm(10) -> logits."""
    rng = np.random.default_rng(seed)

    def w(name, *shape):
        fan_in = int(np.prod(shape[1:]))
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32), name)

    def vec(name, n, lo=None):
        v = rng.uniform(0.5, 1.5, n) if lo else rng.standard_normal(n) * 0.1
        return numpy_helper.from_array(v.astype(np.float32), name)

    inits = [w("w1", 8, 3, 3, 3), w("w2", 4, 8, 1, 1), w("w3", 8, 4, 3, 3), w("wf", classes, 32),
             vec("bf", classes), numpy_helper.from_array(np.array([1, 32], np.int64), "shape")]
    n = helper.make_node
    nodes = []
    for i, c in ((1, 8), (2, 4), (3, 8)):
        inits += [vec(f"s{i}", c, True), vec(f"b{i}", c), vec(f"m{i}", c), vec(f"v{i}", c, True)]
    nodes += [
        n("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["c1", "s1", "b1", "m1", "v1"], ["n1"], name="bn1"),
        n("Relu", ["n1"], ["r1"], name="relu1"),
        n("Conv", ["r1", "w2"], ["c2"], name="conv2"),
        n("BatchNormalization", ["c2", "s2", "b2", "m2", "v2"], ["n2"], name="bn2"),
        n("Relu", ["n2"], ["r2"], name="relu2"),
        n("Conv", ["r2", "w3"], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["c3", "s3", "b3", "m3", "v3"], ["n3"], name="bn3"),
        n("Sum", ["n3", "r1"], ["s"], name="sum"),
        n("Relu", ["s"], ["r"], name="relu"),
        n("AveragePool", ["r"], ["p"], name="pool", kernel_shape=[4, 4], strides=[4, 4]),
        n("Reshape", ["p", "shape"], ["f"], name="reshape"),
        n("Gemm", ["f", "wf", "bf"], ["logits"], name="fc", transB=1),
    ]
    return _image_classifier("small_resnet", nodes, inits, [1, 3, 8, 8], classes)


def quantize_qdq(model: onnx.ModelProto, samples, per_channel: bool = True,
                 reduce_range: bool = True) -> onnx.ModelProto:
    """``model`` quantized by onnxruntime's quantize_static in QDQ format (int8 activations and
    weights, symmetric weights), calibrated by min-max on ``samples`` (input dicts)."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(samples)

        def get_next(self):
            return next(self.it, None)

    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset < 13:  # per-axis DequantizeLinear needs opset 13
        from onnx import version_converter
        model = version_converter.convert_version(model, 13)
        model.ir_version = max(model.ir_version, 7)  # initializers need not be graph inputs
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "f.onnx"), os.path.join(d, "q.onnx")
        onnx.save(model, src)
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        per_channel=per_channel, reduce_range=reduce_range)
        return onnx.load(dst)
