"""precision="fp16" | "tf32": the lower-precision pass, its lowering and its numerics.

* Graph level: weights become f16 (a weight out of range is a PrecisionError naming the node),
  model inputs and outputs keep f32, contractions get an f32 accumulator and epilogue, softmax
  stays f32, overrides keep a node in fp32, unknown names are refused (int8 is compile's
  quantize_int8 path, not this pass).
* The contract with the mma schedule (docs/lowering.md, "Precision"): in the loop IR of a
  compiled fp16 matmul/conv each operand load in the reduction is an f16 load widened to f32
  into f32 carried values; in tf32 each load is followed by ``arith.round_tf32``.
* Every pass checked in fp16 (check_numerics with fp16 tolerances), interpreter == CPU JIT.
* The light models in fp16 (random weights) against onnxruntime fp32; no f16 accumulator in
  any reduction; no cast kernel left where a fusion could absorb it.
* tf32 against fp32: the error of a K-long dot product stays under K * 2^-11 * sum |a||b|.
"""

import numpy as np
import pytest

from support import light_models as lm
import ptxc
from ptxc.compiler import as_module, run_stages
from ptxc.dialects.arith import round_tf32
from ptxc.dialects.func import func_body, get_func
from ptxc.errors import CompileError, PrecisionError
from ptxc.ir import print_ir
from ptxc.ir.interpreter import interpret
from ptxc.ir.types import BufferType, TensorType


def mlp(scale=1.0, seed=0):
    """fc(relu) -> fc * c -> tanh -> fc -> softmax, with a residual-free chain and a constant
    multiply: contractions, fused epilogues, an elementwise op between fp16 layers, an fp32 op
    at the end."""
    rng = np.random.default_rng(seed)
    net = ptxc.Network("mlp")
    x = net.add_input("x", (4, 24))
    y = net.add_fully_connected(x, rng.standard_normal((16, 24)).astype(np.float32) * scale,
                                rng.standard_normal(16).astype(np.float32), name="fc1")
    y = net.add_activation(y, "relu", name="relu1")
    y = net.add_fully_connected(y, rng.standard_normal((12, 16)).astype(np.float32) / 4,
                                rng.standard_normal(12).astype(np.float32), name="fc2")
    y = net.add_elementwise(y, net.add_constant(np.linspace(0.5, 2, 12, dtype=np.float32)),
                            "mul", name="scale2")
    z = net.add_activation(y, "tanh", name="tanh2")
    z = net.add_elementwise(z, y, "add", name="res")  # two readers of y: not fused into fc2
    z = net.add_fully_connected(z, rng.standard_normal((5, 12)).astype(np.float32) / 3, None,
                                name="fc3")
    net.mark_output(net.add_softmax(z, name="softmax"), "y")
    return net


def convnet(seed=0):
    rng = np.random.default_rng(seed)
    net = ptxc.Network("conv")
    x = net.add_input("x", (1, 3, 12, 12))
    y = net.add_conv(x, rng.standard_normal((8, 3, 3, 3)).astype(np.float32) / 4,
                     rng.standard_normal(8).astype(np.float32) / 10, padding=1, name="conv1")
    y = net.add_activation(y, "relu", name="relu1")
    y = net.add_pooling(y, "max", kernel=2, name="pool1")
    r = y
    y = net.add_conv(y, rng.standard_normal((8, 8, 3, 3)).astype(np.float32) / 8, None,
                     padding=1, name="conv2")
    y = net.add_elementwise(y, r, "add", name="res2")
    y = net.add_activation(y, "relu", name="relu2")
    y = net.add_global_pooling(y, "average", name="gap")
    y = net.add_flatten(y, name="flat")
    y = net.add_fully_connected(y, rng.standard_normal((4, 8)).astype(np.float32), None,
                                name="fc")
    net.mark_output(y, "y")
    return net


def graph(net, precision, overrides=None, check=False):
    m = as_module(net)
    run_stages(m, "graph", precision=precision, precision_overrides=overrides,
               check_numerics=check)
    return m


def main_ops(m):
    return list(func_body(get_func(m)).ops)


def walk(m):
    yield from m.walk()


# ---- graph level -------------------------------------------------------------------------------

def test_fp16_graph_types_and_boundaries():
    m = graph(mlp(), "fp16", check=True)
    ops = main_ops(m)
    f = get_func(m)
    assert [a.type.element.name for a in func_body(f).args] == ["f32"]       # inputs keep f32
    ret = [op for op in ops if op.name == "func.return"][0]
    assert [v.type.element.name for v in ret.operands] == ["f32"]           # outputs keep f32
    consts = [op for op in ops if op.name == "graph.constant" and op.results[0].type.rank >= 2]
    assert consts and all(op.results[0].type.element.name == "f16" for op in consts)
    fused = [op for op in ops if op.name == "graph.fused_gemm"]
    assert len(fused) == 3
    for op in fused:
        blk = op.regions[0].blocks[0]
        assert blk.args[0].type.name == "f32"                               # f32 accumulator
        assert [v.type.element.name for v in op.operands[:2]] == ["f16", "f16"]
    softmax = [op for op in ops if op.name == "graph.softmax"][0]
    assert softmax.operands[0].type.element.name == "f32"                  # softmax stays f32
    # fc3 feeds only the f32 softmax: its result is stored f32, no cast kernel between them
    assert fused[-1].results[0].type.element.name == "f32"
    assert fused[0].results[0].type.element.name == "f16"


def test_fp16_interpreted_graph_is_close_to_fp32():
    net = mlp()
    x = np.random.default_rng(5).standard_normal((4, 24)).astype(np.float32)
    ref = interpret(graph(net, "fp32"), {"x": x})["y"]
    got = interpret(graph(net, "fp16"), {"x": x})["y"]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=2e-2, atol=2e-3)
    assert not np.array_equal(got, ref)  # fp16 storage does change the numbers


def test_weight_out_of_range_names_the_node_and_the_override():
    with pytest.raises(PrecisionError, match=r"fc1.*weight.*65504.*precision_overrides"):
        graph(mlp(scale=1e5), "fp16")
    m = graph(mlp(scale=1e5), "fp16", {"fc1": "fp32"})  # kept in fp32: compiles
    fc1 = [op for op in main_ops(m) if op.loc == "fc1"][0]
    assert fc1.name == "graph.fused_gemm" and fc1.operands[1].type.element.name == "f32"
    fc2 = [op for op in main_ops(m) if op.loc == "fc2" and op.name == "graph.fused_gemm"][0]
    assert fc2.operands[1].type.element.name == "f16"
    # fc1 computes in fp32 and stores f16 for fc2: the cast is in its epilogue, no cast op
    assert fc1.results[0].type.element.name == "f16" and fc2.operands[0] is fc1.results[0]


def test_override_by_fused_node_name_and_bad_overrides():
    m = graph(mlp(), "fp16", {"relu1": "fp32"})  # relu1 was fused into fc1: fc1 stays fp32
    fc1 = [op for op in main_ops(m) if op.loc == "fc1"][0]
    assert fc1.operands[1].type.element.name == "f32"
    assert not any(op.name == "graph.cast" and op.operands[0] is not
                   func_body(get_func(m)).args[0] for op in main_ops(m))
    with pytest.raises(CompileError, match="names no node.*'nope'"):
        graph(mlp(), "fp16", {"nope": "fp32"})
    from ptxc.rewrite.pass_ import get_pass
    with pytest.raises(CompileError, match="no policy table for 'int8'"):
        get_pass("lower-precision", precision="int8").run(as_module(mlp()))
    with pytest.raises(CompileError, match="unknown precision 'fp8'"):
        ptxc.compile(mlp(), target="cpu", precision="fp8")
    with pytest.raises(CompileError, match="not raised to 'fp16'"):
        graph(mlp(), "tf32", {"fc1": "fp16"})


def test_fp32_is_unchanged():
    a = print_ir(graph(mlp(), "fp32"))
    m = as_module(mlp())
    run_stages(m, "graph")
    assert print_ir(m) == a and "f16" not in a and "tf32" not in a


# ---- the contract with the mma schedule -------------------------------------------------------

def loop_module(net, precision, target="cpu", check=False):
    m = as_module(net)
    run_stages(m, "loop", precision=precision, target=target, check_numerics=check)
    return m


def reductions(m):
    """Every loop.for that carries values."""
    return [op for op in walk(m) if op.name == "loop.for" and op.results]


def test_f16_accumulator_check_tells_exact_from_rounding_combiners():
    """Max pooling moves f16 values, so its window max runs in f16 (exact); turn the same nest's
    max into a sum and the contract's check lists both of its f16 accumulators."""
    from ptxc.rewrite import PassManager
    from ptxc.rewrite.passes.precision import LowerPrecision, inexact_low_accumulators
    net = ptxc.Network("pool")
    x = net.add_input("x", (1, 2, 5, 5))
    y = net.add_conv(x, np.ones((2, 2, 1, 1), np.float32))
    y = net.add_pooling(y, "max", kernel=3, stride=1)
    net.mark_output(net.add_conv(y, np.ones((2, 2, 1, 1), np.float32)), "y")
    m = net.to_module()
    PassManager(["graph-opt", LowerPrecision(precision="fp16")]).run(m)
    PassManager("lower-graph-to-tensor,generalize-named-ops,fuse-tensor-elementwise,"
                "lower-tensor-to-loop").run(m)
    carried = [r for red in reductions(m) for r in red.results if r.type.name == "f16"]
    assert len(carried) == 2 and inexact_low_accumulators(m) == []   # window rows and columns
    text = print_ir(m).replace('"arith.max"', '"arith.add"')
    assert len(inexact_low_accumulators(ptxc.parse_ir(text))) == 2


def test_fp16_contraction_nests_follow_the_contract():
    m = loop_module(convnet(), "fp16")
    contractions = 0
    for red in reductions(m):
        assert all(r.type.name == "f32" for r in red.results)
        body = [op for op in red.regions[0].blocks[0].ops]
        loads = [op for op in body if op.name == "loop.load"]
        if not loads or any(op.name == "loop.for" for op in body):
            continue
        if not any(str(op.operands[0].type).endswith("xf16>") for op in loads):
            continue
        contractions += 1
        for ld in loads:
            assert ld.results[0].type.name == "f16"
            users = ld.results[0].users
            assert users and all(u.name == "arith.cast" and u.results[0].type.name == "f32"
                                 for u in users)
        assert any(op.name == "arith.mul" for op in body)
    assert contractions >= 2  # conv1/conv2 reductions (their innermost loops)


def test_tf32_rounds_every_operand_load():
    m = loop_module(convnet(), "tf32")
    text = print_ir(m)
    assert "f16" not in text and "arith.round_tf32" in text
    n = 0
    for op in walk(m):
        if op.name == "arith.mul" and op.results[0].type.name == "f32" and \
                op.parent_op is not None and op.parent_op.name == "loop.for":
            srcs = [v.op.name for v in op.operands if hasattr(v, "op")]
            if "arith.round_tf32" in srcs:
                assert srcs == ["arith.round_tf32", "arith.round_tf32"]
                n += 1
    assert n >= 3


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp16", "tf32"])
def test_every_pass_checked_and_cpu_equals_interpreter(precision):
    net = convnet()
    m = loop_module(net, precision, check=True)  # raises NumericsError on a bad pass
    x = np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype(np.float32)
    from ptxc.dialects.loop import run_main
    from ptxc.driver.cpu import CpuProgram
    want = run_main(m, {"x": x})["y"]
    got = CpuProgram.from_module(m)({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    ref = ptxc.compile(net, target="cpu").run({"x": x})["y"]
    tol = 2e-2 if precision == "fp16" else 5e-3
    assert np.abs(got - ref).max() <= tol * np.abs(ref).max()


@pytest.mark.slow
def test_cuda_loop_stage_in_fp16_is_checked_too():
    loop_module(convnet(), "fp16", target="cuda", check=True)


# ---- tf32 numerics ----------------------------------------------------------------------------

@pytest.mark.parametrize("k", [64, pytest.param(1000, marks=pytest.mark.slow)])
def test_tf32_error_is_bounded_by_k_ulps(k):
    rng = np.random.default_rng(k)
    net = ptxc.Network("mm")
    x = net.add_input("x", (8, k))
    w = rng.standard_normal((k, 16)).astype(np.float32)
    net.mark_output(net.add_matmul(x, net.add_constant(w), name="mm"), "y")
    xv = rng.standard_normal((8, k)).astype(np.float32)
    f32 = ptxc.compile(net, target="cpu").run({"x": xv})["y"].astype(np.float64)
    t32 = ptxc.compile(net, target="cpu", precision="tf32").run({"x": xv})["y"]
    exact = xv.astype(np.float64) @ w.astype(np.float64)
    bound = k * 2.0 ** -11 * (np.abs(xv).astype(np.float64) @ np.abs(w))
    err = np.abs(t32 - exact)
    assert (err <= bound).all()
    assert (np.abs(t32 - f32) > 0).any()  # tf32 really rounds
    # the same product with both operands rounded, in float64: tf32 is exactly that, summed in f32
    emul = round_tf32(xv).astype(np.float64) @ round_tf32(w).astype(np.float64)
    assert (np.abs(t32 - emul) <= k * 2.0 ** -24 * (np.abs(xv) @ np.abs(w)) * 2).all()


# ---- plans and the engine ----------------------------------------------------------------------

@pytest.mark.slow
def test_plan_records_precision_and_runs_after_load(tmp_path):
    net = convnet()
    eng = ptxc.compile(net, target="cpu", precision="fp16")
    x = np.random.default_rng(1).standard_normal((1, 3, 12, 12)).astype(np.float32)
    y = eng.run({"x": x})["y"]
    p = tmp_path / "m.plan"
    eng.save(str(p))
    back = ptxc.load(str(p))
    assert back.precision == "fp16"
    np.testing.assert_array_equal(back.run({"x": x})["y"], y)


# ---- the light models --------------------------------------------------------------------------

def standalone_casts(m):
    """Top-level kernels that only convert: every op inside is a load, a float cast, a store,
    index arithmetic or loop structure. Returns (kernel, source buffer) pairs."""
    found = []
    allowed = {"loop.load", "loop.store", "loop.yield", "loop.parallel", "loop.for",
               "arith.constant", "arith.add", "arith.mul", "arith.cast"}
    for op in main_ops(m):
        if op.name not in ("loop.parallel", "loop.for"):
            continue
        inner = [o for o in op.walk() if o is not op]
        casts = [o for o in inner if o.name == "arith.cast"
                 and o.operands[0].type.is_float and o.results[0].type.is_float]
        if casts and all(o.name in allowed and (o.name not in ("arith.add", "arith.mul") or
                                                o.results[0].type.name == "index")
                         for o in inner):
            loads = [o for o in inner if o.name == "loop.load"]
            found.append((op, loads[0].operands[0] if loads else None))
    return found


_LIGHT: dict = {}


def light_fp16(name):
    """(loop module, inputs, onnxruntime logits) of a light model with random weights. Where
    He-normal weights make the fp32 logits leave fp16's range (ResNet-50 reaches 3e5,
    ShuffleNet 5e6: activations grow through the residual and channel-shuffle stages), the
    weights are drawn with gain 0.7 instead: fp16 cannot hold those values in TensorRT either,
    and that is what precision_overrides are for, not this test."""
    if name not in _LIGHT:
        model, inputs, ref = lm.fp16_friendly(name)
        m = as_module(model)
        run_stages(m, "loop", precision="fp16")
        _LIGHT[name] = (m, inputs, ref)
    return _LIGHT[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", lm.NAMES)
def test_light_model_fp16_on_cpu_matches_onnxruntime_fp32(name):
    from ptxc.driver.cpu import CpuProgram
    m, inputs, ref = light_fp16(name)
    got = CpuProgram.from_module(m)(inputs)
    for k, r in ref.items():
        assert got[k].dtype == r.dtype == np.float32
        err = np.abs(got[k].astype(np.float64) - r).max()
        assert err <= 2e-2 * np.abs(r).max(), (k, err, np.abs(r).max())
    # no f16 accumulator in any reduction that rounds (max pooling's exact window max may be)
    from ptxc.rewrite.passes.precision import inexact_low_accumulators
    assert not [r.op.loc for r in inexact_low_accumulators(m)]
    # no cast kernel where a fusion could absorb it: only conversions of a model input remain
    func_args = set(func_body(get_func(m)).args)
    for kernel, src in standalone_casts(m):
        assert src in func_args, f"{name}: cast kernel {kernel.loc} reads {src}"


# ---- the cuda target -----------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name, precision, layout", [
    (name, precision, "auto") for name in ["squeezenet", "resnet50", "inception_v1"]
    for precision in ["fp16", "tf32"]] + [
    ("squeezenet", "fp16", "nchw"),  # channels-first: the mma schedule's scalar operand copies
])
def test_light_model_ptx_in_reduced_precision_assembles(name, precision, layout):
    """Mapped to the GPU in fp16/tf32, the light models' PTX assembles with ptxas (f16 loads and
    stores, cvt between f16 and f32, the tf32 rounding), one entry per launch; in the default
    layout (channels-last for these), and one model channels-first."""
    from test_ptx import check_mapped_ptx, needs_ptxas  # noqa: F401
    from ptxc.ptx import ptxas_path
    if ptxas_path() is None:
        pytest.skip("ptxas (CUDA toolkit) is not installed on this machine")
    m = as_module(lm.path(name))
    run_stages(m, "loop", precision=precision, target="cuda", layout=layout)
    p, rep = check_mapped_ptx(m)
    if precision == "fp16":
        assert ".b16" in p.ptx or ".f16" in p.ptx
    else:
        assert "f16" not in p.ptx.replace("cvt.rn.f16", "")
    print(f"\n{name} {precision}: {len(rep.kernels)} kernels, spilling "
          f"{sum(1 for r in rep.kernels.values() if r.spill_stores)}")


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("name", lm.NAMES)
def test_light_model_fp16_on_cuda_matches_onnxruntime_fp32(name):
    """On the GPU: the same fp16 models within 2e-2 of onnxruntime fp32 (run by the lead on the
    H200; skipped without a GPU)."""
    model, inputs, ref = lm.fp16_friendly(name)
    eng = ptxc.compile(model, target="cuda", precision="fp16")
    got = eng.run(inputs)
    for k, r in ref.items():
        err = np.abs(got[k].astype(np.float64) - r).max()
        assert err <= 2e-2 * np.abs(r).max(), (k, err, np.abs(r).max())
