"""``ptxc run``'s report (ptxc/tools/run_report.py): the outputs checked against onnxruntime, or
against the interpreter where onnxruntime is missing, and ptxc's latency beside onnxruntime's; the
numbers are the real differences (recomputed here), and a reference that is wrong (the
interpreter on other inputs) is reported as disagreeing; ``--random-weights`` replaces only
weights."""

import re
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ptxc
from ptxc.cli import main
from ptxc.tools.run_report import (TOLERANCE, check_output, check_outputs, interpreter_reference,
                                   random_weights)


def tiny_classifier(path, seed=0):
    """Conv 3->8 + Relu, global average pool, Gemm 8->10, Softmax: ten class scores."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.standard_normal((10, 8)).astype(np.float32), "fc")
    shape = numpy_helper.from_array(np.array([1, 8], np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Reshape", ["p", "shape"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["logits"], transB=1),
             helper.make_node("Softmax", ["logits"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "tiny",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                          [w, fc, shape])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return model


def _number(pattern, text):
    m = re.search(pattern, text)
    assert m, (pattern, text)
    return m.group(1)


def test_run_checks_against_onnxruntime_and_times_both(tmp_path, capsys):
    """The main job's report: the agreement lines carry the real difference and top-1 (both
    recomputed from the saved output and an independent onnxruntime run), and the latency line
    has both runtimes and their ratio."""
    import onnxruntime as ort
    assert main(["run", "light:squeezenet", "--random-weights", "--target", "cpu",
                 "--save-outputs", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"reference: onnxruntime {ort.__version__} (CPU), the same inputs" in out
    assert "agreement: yes (fp32: within 0.0001" in out
    assert re.search(r"latency: ptxc [0-9.]+ ms \(cpu, median of \d+ runs\), onnxruntime "
                     r"[0-9.]+ ms \(CPU, median of \d+\): ptxc / onnxruntime [0-9.]+x", out), out
    assert "note:" not in out
    model = random_weights(onnx.load(ptxc.cli.resolve_model("light:squeezenet")), seed=0)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    (ref,) = ort.InferenceSession(model.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, {"data_0": x})
    ours = np.load(tmp_path / "softmaxout_1.npy")
    err = float(np.abs(ours.astype(np.float64) - ref).max())
    assert _number(r"softmaxout_1: max abs error (\S+) ", out) == f"{err:.2g}"
    cls = int(np.argmax(ref.reshape(-1)))
    assert f"top-1 agrees (class {cls})" in out
    # the softmax is not uniform: its top class stands out
    assert ref.max() > 3 * ref.mean()


def test_light_model_without_random_weights_says_why_its_output_is_flat(capsys):
    assert main(["run", "light:squeezenet", "--target", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "note: light:squeezenet's weights are constants" in out and "--random-weights" in out


def test_run_falls_back_to_the_interpreter_without_onnxruntime(tmp_path, capsys, monkeypatch):
    path = tmp_path / "tiny.onnx"
    tiny_classifier(path)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)   # import onnxruntime: ImportError
    assert main(["run", str(path), "--target", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "reference: ptxc's interpreter (the graph as imported, numpy), the same inputs " \
           "(onnxruntime is not installed" in out
    assert "y: max abs error" in out and "top-1 agrees (class" in out and "agreement: yes" in out
    assert "latency: ptxc" in out and "onnxruntime" not in out.split("latency:")[1]


def test_a_wrong_reference_is_reported_as_disagreeing(tmp_path):
    """The interpreter on the right inputs agrees with the engine; on perturbed inputs it is a
    wrong reference, and the check says so with the difference it measured."""
    path = tmp_path / "tiny.onnx"
    tiny_classifier(path)
    engine = ptxc.compile(str(path), target="cpu")
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    ours = engine.run({"x": x})
    right = check_outputs(ours, interpreter_reference(str(path), {"x": x}).outputs)
    assert right.agrees and right.outputs[0].relative < TOLERANCE["fp32"]
    wrong_ref = interpreter_reference(str(path), {"x": x + 0.5}).outputs
    wrong = check_outputs(ours, wrong_ref)
    assert not wrong.agrees and "agreement: NO" in wrong.format()
    expected = float(np.abs(ours["y"].astype(np.float64) - wrong_ref["y"]).max())
    assert wrong.outputs[0].max_abs == pytest.approx(expected)
    assert wrong.outputs[0].relative > TOLERANCE["fp32"]


def test_top1_shape_and_nan_rules():
    ref = np.array([[0.1, 0.7, 0.2], [0.5, 0.2, 0.3]], np.float32)
    swapped = ref[:, [1, 0, 2]]
    c = check_output("p", swapped, ref)
    assert c.top1 == ((0, 1), (1, 0)) and not c.agrees(1.0)   # within 1.0, but top-1 differs
    assert "top-1 agrees on 0 of 2 samples" in c.format()
    one = check_output("p", swapped[:1], ref[:1])
    assert "top-1 DIFFERS (class 0, reference 1)" in one.format()
    assert check_output("p", ref[:, :2], ref).note            # shapes differ
    nan = ref.copy()
    nan[0, 0] = np.nan
    assert check_output("p", nan, ref).max_abs == np.inf      # a NaN on one side
    assert check_output("p", nan, nan).max_abs == 0.0         # NaN on both sides
    assert check_output("h", np.zeros((1, 4, 4)), np.zeros((1, 4, 4))).top1 == ()  # not a vector


def test_random_weights_replaces_weights_only():
    from onnx import numpy_helper as nh
    model = onnx.load(ptxc.cli.resolve_model("light:resnet50"))
    a, b = random_weights(model, seed=3), random_weights(model, seed=3)
    assert a.SerializeToString() == b.SerializeToString()                  # seeded
    assert not any(n.op_type == "ConstantOfShape" for n in a.graph.node)
    inits = {t.name: nh.to_array(t) for t in a.graph.initializer}
    assert len({float(v.reshape(-1)[0]) for v in inits.values()}) > 100    # not constants
    used = {i for n in a.graph.node for i in n.input}
    assert set(inits) <= used                                              # no stray shapes
    # a non-weight constant keeps its value: the Reshape's shape, a Mul's factor
    rng = np.random.default_rng(0)
    w = nh.from_array(rng.standard_normal((4, 3, 1, 1)).astype(np.float32), "w")
    k = nh.from_array(np.full((4,), 2.0, np.float32), "k")
    shape = nh.from_array(np.array([1, 64], np.int64), "shape")
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Mul", ["c", "k4"], ["m"]),
         helper.make_node("Reshape", ["m", "shape"], ["y"]),
         helper.make_node("Reshape", ["k", "k4s"], ["k4"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [w, k, shape, nh.from_array(np.array([1, 4, 1, 1], np.int64), "k4s")])
    r = {t.name: nh.to_array(t) for t in random_weights(helper.make_model(g), 1).graph.initializer}
    assert not np.array_equal(r["w"], nh.to_array(w))
    np.testing.assert_array_equal(r["k"], 2.0)
    np.testing.assert_array_equal(r["shape"], [1, 64])


def test_random_weights_refuses_a_plan(tmp_path, capsys):
    path = tmp_path / "tiny.onnx"
    tiny_classifier(path)
    plan = tmp_path / "tiny.plan"
    assert main(["compile", str(path), "--target", "cpu", "-o", str(plan)]) == 0
    capsys.readouterr()
    assert main(["run", str(plan), "--random-weights"]) == 2
    assert "--random-weights does not apply to a plan file" in capsys.readouterr().err
    assert main(["run", str(plan)]) == 0
    assert "reference: none (a plan file holds no ONNX model" in capsys.readouterr().out
