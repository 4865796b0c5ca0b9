"""Run-time index checks: a Gather index out of range is a typed IndexOutOfRangeError from the
interpreter (every stage) and from the compiled program (the error flag the kernels set),
never garbage and never a crash; negative indices count from the end, as ONNX says.

Regression cases from the fuzzing campaign of issue 13: index 5 and -6 on an axis of 5 gave
garbage, 2**31 - 1 killed the process with SIGSEGV."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import ptxc
from ptxc.errors import IndexOutOfRangeError, RunError
from ptxc.lower.loop_to_llvm import ERROR_SLOT

BAD = [5, -6, 2**31 - 1, -2**31, 2**63 - 1, -2**63, 6, 1000]


def gather_model(data_shape=(5, 4), idx_shape=(3,), axis=0, idx_type=TensorProto.INT64,
                 then_relu=False):
    out_shape = list(data_shape[:axis]) + list(idx_shape) + list(data_shape[axis + 1:])
    nodes = [helper.make_node("Gather", ["d", "i"], ["g" if then_relu else "y"], axis=axis,
                              name="emb")]
    if then_relu:
        nodes.append(helper.make_node("Relu", ["g"], ["y"], name="r"))
    g = helper.make_graph(nodes, "gather",
                          [helper.make_tensor_value_info("d", TensorProto.FLOAT, data_shape),
                           helper.make_tensor_value_info("i", idx_type, idx_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


DATA = np.arange(20, dtype=np.float32).reshape(5, 4) - 7


@pytest.fixture(scope="module")
def engine():
    return ptxc.compile(gather_model(), target="cpu")


def test_negative_indices_follow_onnx(engine):
    for idx in ([0, -1, 4], [-5, -2, 2], [3, 3, -3]):
        i = np.array(idx, np.int64)
        np.testing.assert_array_equal(engine.run({"d": DATA, "i": i})["y"], np.take(DATA, i, 0))


@pytest.mark.parametrize("bad", BAD)
def test_bad_index_raises_typed_error_then_next_run_is_right(engine, bad):
    i = np.array([1, bad, 2], np.int64)
    with pytest.raises(IndexOutOfRangeError, match="Gather 'emb' axis 0 \\(size 5\\)"):
        engine.run({"d": DATA, "i": i})
    good = np.array([4, -5, 0], np.int64)
    np.testing.assert_array_equal(engine.run({"d": DATA, "i": good})["y"],
                                  np.take(DATA, good, 0))


def test_the_error_is_a_ptxc_error_and_an_index_error():
    assert issubclass(IndexOutOfRangeError, RunError)
    assert issubclass(IndexOutOfRangeError, ptxc.PtxcError)
    assert issubclass(IndexOutOfRangeError, IndexError)


@pytest.mark.parametrize("stage", ["graph", "tensor", "loop"])
def test_interpreter_raises_the_same_error_at_every_stage(stage):
    m = gather_model()
    module = ptxc.parse_ir(ptxc.explore(m, stage=stage))
    i = np.array([5, 0, 0], np.int64)
    with pytest.raises(IndexOutOfRangeError, match="'emb'.*index 5 out of range \\[-5, 5\\)"):
        ptxc.interpret(module, {"d": DATA, "i": i})
    i = np.array([-1, 0, 2], np.int64)
    np.testing.assert_array_equal(ptxc.interpret(module, {"d": DATA, "i": i})["y"],
                                  np.take(DATA, i, 0))


def test_int32_indices_axis_1_and_a_fused_consumer():
    m = gather_model((2, 5, 3), (2, 2), axis=1, idx_type=TensorProto.INT32, then_relu=True)
    e = ptxc.compile(m, target="cpu")
    d = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    i = np.array([[0, -1], [4, -5]], np.int32)
    np.testing.assert_array_equal(e.run({"d": d, "i": i})["y"], np.maximum(np.take(d, i, 1), 0))
    for bad in (5, -6, 2**31 - 1, -2**31):
        with pytest.raises(IndexOutOfRangeError, match="axis 1 \\(size 5\\)"):
            e.run({"d": d, "i": np.array([[0, 1], [bad, 2]], np.int32)})


def test_the_error_flag_is_a_planned_scratch_slot(engine):
    t = engine.kernels
    k = t.error_slot
    assert k is not None and t.slots[k].name == ERROR_SLOT and t.slots[k].dtype == "int32"
    assert (t.slots[k].first, t.slots[k].last) == (0, len(t.kernels) - 1)
    assert t.checks == ("Gather 'emb' axis 0 (size 5)",)
    assert ERROR_SLOT in engine.memory_plan.offsets


def test_no_flag_without_checks():
    from support.small_nets import conv_relu_pool
    e = ptxc.compile(conv_relu_pool(), target="cpu")
    assert e.kernels.error_slot is None and e.kernels.checks == ()


def test_saved_plan_keeps_its_checks(engine, tmp_path):
    engine.save(tmp_path / "g.plan")
    loaded = ptxc.load(tmp_path / "g.plan")
    assert loaded.kernels.checks == engine.kernels.checks
    with pytest.raises(IndexOutOfRangeError, match="'emb'"):
        loaded.run({"d": DATA, "i": np.array([0, 7, 0], np.int64)})
    np.testing.assert_array_equal(loaded.run({"d": DATA, "i": np.array([1, 2, 3])})["y"],
                                  DATA[[1, 2, 3]])


def test_concurrent_contexts_keep_their_own_flag(engine):
    """One thread's bad index never fails another thread's run (each context has its flag)."""
    import threading
    good = np.array([4, -5, 0], np.int64)
    want = np.take(DATA, good, 0)
    errors, wrong, raised = [], [0], [0]

    def work(bad):
        try:
            for _ in range(100):
                if bad:
                    try:
                        engine.run({"d": DATA, "i": np.array([0, 9, 0], np.int64)})
                    except IndexOutOfRangeError:
                        raised[0] += 1
                else:
                    wrong[0] += engine.run({"d": DATA, "i": good})["y"].tobytes() \
                        != want.tobytes()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k % 2,)) for k in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == [] and wrong[0] == 0 and raised[0] == 300


def test_cuda_kernel_with_a_check_assembles():
    from ptxc.ptx import assemble, ptxas_path
    if ptxas_path() is None:
        pytest.skip("ptxas is not installed")
    e = ptxc.compile(gather_model(), target="cuda", arch="sm_90")
    assert e.kernels.error_slot is not None
    assert "st.global.b32" in e.ptx or "st.global.u32" in e.ptx
    assemble(e.ptx, "sm_90")


@pytest.mark.gpu
def test_cuda_bad_index_raises_then_next_run_is_right():
    e = ptxc.compile(gather_model(), target="cuda")
    for bad in (5, -6, 2**31 - 1, -2**63):
        with pytest.raises(IndexOutOfRangeError, match="'emb'"):
            e.run({"d": DATA, "i": np.array([0, bad, 1], np.int64)})
        good = np.array([4, -5, 0], np.int64)
        np.testing.assert_array_equal(e.run({"d": DATA, "i": good})["y"], np.take(DATA, good, 0))


def indexed_model(op, ishape, oshape, **attrs):
    inputs = [helper.make_tensor_value_info("d", TensorProto.FLOAT, (3, 2)),
              helper.make_tensor_value_info("i", TensorProto.INT64, ishape)]
    names = ["d", "i"]
    if op.startswith("Scatter"):
        inputs.append(helper.make_tensor_value_info("u", TensorProto.FLOAT, oshape[1]))
        names.append("u")
        oshape = oshape[0]
    g = helper.make_graph([helper.make_node(op, names, ["y"], name="n1", **attrs)], op, inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, oshape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])


@pytest.mark.parametrize("op,ishape,oshape,good,bad,attrs", [
    ("GatherElements", (2, 2), (2, 2), [[0, -1], [2, 1]], [[0, 3], [2, 1]], {"axis": 0}),
    ("GatherND", (2, 1), (2, 2), [[0], [-1]], [[0], [7]], {}),
    ("ScatterND", (1, 1), ((3, 2), (1, 2)), [[-1]], [[3]], {}),
    ("ScatterElements", (1, 2), ((3, 2), (1, 2)), [[0, -3]], [[0, -4]], {"axis": 0}),
])
def test_every_indexed_op_checks_its_indices(op, ishape, oshape, good, bad, attrs):
    """GatherElements, GatherND, ScatterND, ScatterElements: right on valid (negative)
    indices against onnxruntime; IndexOutOfRangeError on a bad one from the interpreter at every
    stage and from the cpu engine."""
    from support import light_models as lm
    m = indexed_model(op, ishape, oshape, **attrs)
    d = np.arange(6, dtype=np.float32).reshape(3, 2)
    feeds = {"d": d, "i": np.array(good, np.int64)}
    if op.startswith("Scatter"):
        feeds["u"] = np.full(oshape[1], 9.0, np.float32)
    e = ptxc.compile(m, target="cpu")
    (ref,) = lm.onnxruntime_outputs(m, feeds).values()
    np.testing.assert_array_equal(e.run(feeds)["y"], ref)
    feeds["i"] = np.array(bad, np.int64)
    for stage in ("graph", "tensor", "loop"):
        with pytest.raises(IndexOutOfRangeError, match="'n1'.*out of range"):
            ptxc.interpret(ptxc.parse_ir(ptxc.explore(m, stage=stage)), feeds)
    with pytest.raises(IndexOutOfRangeError, match=f"{op} 'n1'"):
        e.run(feeds)
