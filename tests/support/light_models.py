"""The nine model-zoo models shipped with onnx (onnx/backend/test/data/light), and a way to give
them random weights.

Their weights are ConstantOfShape nodes that fill every tensor with one constant, so their expected
outputs are nearly uniform and prove little. ``with_random_weights`` replaces each such node by an
initializer of random values (scaled so activations stay in range through deep networks), which
makes a comparison against onnxruntime meaningful.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
from onnx import numpy_helper

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
NAMES = sorted(os.path.basename(p)[len("light_"):-len(".onnx")]
               for p in glob.glob(os.path.join(LIGHT_DIR, "light_*.onnx")))


def path(name: str) -> str:
    return os.path.join(LIGHT_DIR, f"light_{name}.onnx")


def load(name: str) -> onnx.ModelProto:
    return onnx.load(path(name))


def expected_output(name: str) -> np.ndarray:
    t = onnx.TensorProto()
    with open(os.path.join(LIGHT_DIR, f"light_{name}_output_0.pb"), "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def runtime_inputs(model: onnx.ModelProto):
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def dummy_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The inputs the ONNX backend test runner feeds these models (arange / n, float32)."""
    out = {}
    for vi in runtime_inputs(model):
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1
                      for d in vi.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        out[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return out


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {vi.name: rng.standard_normal(tuple(d.dim_value for d in
                                               vi.type.tensor_type.shape.dim)).astype(np.float32)
            for vi in runtime_inputs(model)}


def with_random_weights(model: onnx.ModelProto, seed: int = 0,
                        logits: bool = True, gain: float = 1.0) -> onnx.ModelProto:
    """A copy of ``model`` with every ConstantOfShape replaced by a random initializer.

    With ``logits`` (the default) a final Softmax is dropped and its input becomes the output:
    with random weights the logits of a deep network are large, the softmax saturates to a
    one-hot vector, and comparing those would prove little.

    Scale by role: BatchNormalization's scale and variance uniform in [0.5, 1.5]; tensors of rank
    >= 2 (weights) He-normal over their fan-in, times ``gain``; other vectors (biases, BN shifts)
    normal * 0.1. A ``gain`` below 1 keeps a deep residual network's activations inside fp16's
    range (the fp16 tests; with gain 1 ResNet-50's logits reach 3e5).
    """
    rng = np.random.default_rng(seed)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    role: dict[str, str] = {}
    for n in g.node:
        if n.op_type == "BatchNormalization":
            for i in (1, 4):
                if len(n.input) > i:
                    role[n.input[i]] = "positive"
    keep = []
    new_inits = []
    for n in g.node:
        if n.op_type != "ConstantOfShape":
            keep.append(n)
            continue
        shape = tuple(int(d) for d in inits[n.input[0]])
        out = n.output[0]
        if role.get(out) == "positive":
            arr = rng.uniform(0.5, 1.5, shape)
        elif len(shape) >= 2:
            fan_in = int(np.prod(shape[1:]))
            arr = rng.standard_normal(shape) * (np.sqrt(2.0 / fan_in) * gain)
        else:
            arr = rng.standard_normal(shape) * 0.1
        new_inits.append(numpy_helper.from_array(arr.astype(np.float32), out))
    del g.node[:]
    g.node.extend(keep)
    g.initializer.extend(new_inits)
    if m.ir_version < 4:  # old IR: every initializer must also be a graph input
        for t in new_inits:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims))
    if logits:
        m = without_final_softmax(m) or m
    return m


def without_final_softmax(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """A copy of ``model`` whose output is the input of its final Softmax (the logits), or None
    when the model does not end in a Softmax."""
    g = model.graph
    if not (g.node and g.node[-1].op_type == "Softmax" and len(g.output) == 1
            and g.node[-1].output[0] == g.output[0].name):
        return None
    m = onnx.ModelProto()
    m.CopyFrom(model)
    sm = m.graph.node[-1]
    out = onnx.ValueInfoProto()
    out.CopyFrom(m.graph.output[0])
    out.name = sm.input[0]
    del m.graph.output[:]
    m.graph.output.append(out)
    del m.graph.node[-1]
    return m


def softmax_is_ill_conditioned(logits: np.ndarray) -> bool:
    """Whether the softmax of these fp32 logits depends on rounding: their own rounding error
    (about 1e-6 of their magnitude after long sums) moves them by more than 1e-3, which changes
    the probabilities by more than the 1e-3 the tests allow. The constant-weight light models
    make every logit about 6.8e9 (squeezenet): a different summation order (BLAS threads) then
    changes the softmax completely."""
    return float(np.max(np.abs(logits))) * 1e-6 > 1e-3


def onnxruntime_outputs(model: onnx.ModelProto, inputs: dict) -> dict[str, np.ndarray]:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs)))


def fp16_friendly(name: str):
    """(model, inputs, onnxruntime fp32 outputs) of light model ``name`` with random weights
    whose outputs fit fp16: He-normal weights (gain 1), or gain 0.7 where the logits of those
    would leave fp16's range (ResNet-50 reaches 3e5, ShuffleNet 5e6). The shipped constant
    weights make every logit about 6.8e9: no fp16 engine can hold that, in TensorRT either."""
    for gain in (1.0, 0.7):
        model = with_random_weights(load(name), seed=1, gain=gain)
        inputs = random_inputs(model, seed=2)
        ref = onnxruntime_outputs(model, inputs)
        if max(float(np.abs(v).max()) for v in ref.values()) < 1e3:
            break
    return model, inputs, ref


def assert_matches_reference(got: np.ndarray, ref: np.ndarray) -> None:
    """The bar for a model output against onnxruntime: rtol 1e-3, atol 1e-5 on the output's own
    scale (``1e-5 * max(1, max|ref|)``). Probabilities (at most 1) get atol 1e-5 exactly; logits
    of a deep network with random weights reach 1e5, where fp32 rounding alone leaves absolute
    differences of 1e-2 on the elements near zero."""
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, got.dtype, ref.shape)
    scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-5 * scale)
