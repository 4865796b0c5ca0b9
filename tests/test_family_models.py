"""Issue 11's model families, one small model each built with onnx.helper with the family's
characteristic ops, compiled on cpu and matched against onnxruntime (the interpreter too), and
compiled for cuda with the PTX assembled by ptxas, and run on the GPU (``gpu`` marker, the H200):

* a decoder block: rotary embeddings from Range, Sin/Cos, position ids from CumSum, a causal
  mask from Trilu and Where, attention as MatMul-Softmax-MatMul;
* a UNet ResBlock: GroupNormalization, SiLU, Conv, a sinusoidal timestep embedding (Sin/Cos) through
  Gemm added per channel, the residual;
* a detector head: Conv, Sigmoid, TopK over the anchors, GatherElements of the boxes;
* a Swin window shift: the rolled token order from Range and Mod, written with ScatterND.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ptxc
from support.new_ops import check_model, close, graph_model, onnxruntime_run

RNG = np.random.default_rng(7)


def w(name, *shape, scale=0.3):
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def c(name, value, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def n(op, ins, outs, **kw):
    return helper.make_node(op, ins, outs, **kw)


def decoder_block_rotary_causal():
    S, D = 6, 8
    x = RNG.standard_normal((1, S, D)).astype(np.float32)
    mask_in = np.ones((1, S), np.int64)
    nodes = [
        # position ids = cumsum(attention_mask) - 1, frequencies from Range
        n("CumSum", ["mask", "ax1"], ["cs"]), n("Sub", ["cs", "one"], ["pos"]),
        n("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
        n("Range", ["r0", "rD2", "r1"], ["fi"]), n("Cast", ["fi"], ["fif"], to=TensorProto.FLOAT),
        n("Mul", ["fif", "neg_log_base"], ["fe"]), n("Exp", ["fe"], ["freq"]),
        n("Unsqueeze", ["posf", "ax2"], ["pos3"]), n("Mul", ["pos3", "freq"], ["ang"]),
        n("Sin", ["ang"], ["sin"]), n("Cos", ["ang"], ["cos"]),
        # q, k projections, rotary on halves
        n("MatMul", ["x", "wq"], ["q"]), n("MatMul", ["x", "wk"], ["k"]),
        n("MatMul", ["x", "wv"], ["v"]),
        n("Split", ["q", "halves"], ["q1", "q2"], axis=2),
        n("Split", ["k", "halves"], ["k1", "k2"], axis=2),
        n("Mul", ["q1", "cos"], ["a1"]), n("Mul", ["q2", "sin"], ["a2"]), n("Sub", ["a1", "a2"], ["qr1"]),
        n("Mul", ["q1", "sin"], ["a3"]), n("Mul", ["q2", "cos"], ["a4"]), n("Add", ["a3", "a4"], ["qr2"]),
        n("Mul", ["k1", "cos"], ["b1"]), n("Mul", ["k2", "sin"], ["b2"]), n("Sub", ["b1", "b2"], ["kr1"]),
        n("Mul", ["k1", "sin"], ["b3"]), n("Mul", ["k2", "cos"], ["b4"]), n("Add", ["b3", "b4"], ["kr2"]),
        n("Concat", ["qr1", "qr2"], ["qr"], axis=2), n("Concat", ["kr1", "kr2"], ["kr"], axis=2),
        # causal mask: Trilu of ones, Where(-inf)
        n("Trilu", ["ones_ss"], ["tri"], upper=0), n("Cast", ["tri"], ["trib"], to=TensorProto.BOOL),
        n("Transpose", ["kr"], ["kt"], perm=[0, 2, 1]), n("MatMul", ["qr", "kt"], ["sc"]),
        n("Mul", ["sc", "scale"], ["scs"]), n("Where", ["trib", "scs", "ninf"], ["masked"]),
        n("Softmax", ["masked"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["att"]),
        n("Add", ["att", "x"], ["y"]),
    ]
    inits = [c("ax1", 1), c("ax2", -1), c("one", 1), c("r0", 0), c("rD2", D // 2), c("r1", 1),
             c("halves", [D // 2, D // 2]),
             numpy_helper.from_array(np.array(-np.log(10000.0) / (D // 2), np.float32),
                                     "neg_log_base"),
             w("wq", D, D), w("wk", D, D), w("wv", D, D),
             numpy_helper.from_array(np.ones((S, S), np.float32), "ones_ss"),
             numpy_helper.from_array(np.array(1 / np.sqrt(D), np.float32), "scale"),
             numpy_helper.from_array(np.array(-np.inf, np.float32), "ninf")]
    feeds = {"x": x, "mask": mask_in}
    return graph_model(nodes, feeds, ["y"], opset=17, inits=inits), feeds, dict(rtol=1e-4,
                                                                                 atol=1e-5)


def unet_resblock_groupnorm_timestep():
    C, H, W, T = 8, 6, 6, 4
    x = RNG.standard_normal((1, C, H, W)).astype(np.float32)
    t = np.array([[37.0]], np.float32)
    half = T // 2
    freqs = np.exp(-np.log(10000.0) * np.arange(half) / half).astype(np.float32)
    nodes = [
        n("GroupNormalization", ["x", "g1", "b1"], ["gn1"], num_groups=4, epsilon=1e-5),
        n("Sigmoid", ["gn1"], ["s1"]), n("Mul", ["gn1", "s1"], ["a1"]),
        n("Conv", ["a1", "cw1", "cb1"], ["h1"], pads=[1, 1, 1, 1]),
        n("Mul", ["t", "freqs"], ["targ"]), n("Sin", ["targ"], ["ts"]), n("Cos", ["targ"], ["tc"]),
        n("Concat", ["ts", "tc"], ["temb"], axis=1),
        n("Gemm", ["temb", "tw", "tb"], ["tproj"], transB=1),
        n("Unsqueeze", ["tproj", "axes23"], ["t4"]), n("Add", ["h1", "t4"], ["h2"]),
        n("GroupNormalization", ["h2", "g2", "b2"], ["gn2"], num_groups=2, epsilon=1e-5),
        n("Sigmoid", ["gn2"], ["s2"]), n("Mul", ["gn2", "s2"], ["a2"]),
        n("Conv", ["a2", "cw2", "cb2"], ["h3"], pads=[1, 1, 1, 1]),
        n("Add", ["x", "h3"], ["y"]),
    ]
    inits = [w("g1", C, scale=1.0), w("b1", C), w("g2", C, scale=1.0), w("b2", C),
             w("cw1", C, C, 3, 3, scale=0.1), w("cb1", C), w("cw2", C, C, 3, 3, scale=0.1),
             w("cb2", C), w("tw", C, T), w("tb", C),
             numpy_helper.from_array(freqs.reshape(1, half), "freqs"), c("axes23", [2, 3])]
    feeds = {"x": x, "t": t}
    m = graph_model(nodes, feeds, ["y"], opset=21, inits=inits,
                    out_types={v: (TensorProto.FLOAT, [1, C, H, W]) for v in ("y", "gn1", "gn2")})
    return m, feeds, dict(rtol=1e-4, atol=1e-4)


def detector_head_topk():
    C, A, K = 4, 1, 5  # one anchor per location: scores and boxes share the index
    x = RNG.standard_normal((1, C, 4, 4)).astype(np.float32)
    nodes = [
        n("Conv", ["x", "cls_w", "cls_b"], ["logits"]),
        n("Sigmoid", ["logits"], ["prob"]), n("Reshape", ["prob", "flat"], ["scores"]),
        n("Conv", ["x", "box_w", "box_b"], ["boxes_raw"]),
        n("Reshape", ["boxes_raw", "box_shape"], ["boxes4"]),
        n("Transpose", ["boxes4"], ["boxes"], perm=[0, 2, 1]),
        n("TopK", ["scores", "k"], ["top_scores", "top_idx"], axis=1),
        n("Unsqueeze", ["top_idx", "ax2"], ["idx3"]),
        n("Expand", ["idx3", "idx_shape"], ["idx4"]),
        n("GatherElements", ["boxes", "idx4"], ["top_boxes"], axis=1),
    ]
    inits = [w("cls_w", A, C, 1, 1), w("cls_b", A), w("box_w", 4, C, 1, 1), w("box_b", 4),
             c("flat", [1, -1]), c("box_shape", [1, 4, -1]), c("k", [K]), c("ax2", [2]),
             c("idx_shape", [1, K, 4])]
    feeds = {"x": x}
    return graph_model(nodes, feeds, ["top_scores", "top_idx", "top_boxes"], opset=17,
                       inits=inits), feeds, dict(rtol=1e-5, atol=1e-6)


def swin_window_shift_mod_scatternd():
    L, D, shift = 8, 3, 3
    x = RNG.standard_normal((L, D)).astype(np.float32)
    nodes = [
        n("Range", ["r0", "rL", "r1"], ["ids"]), n("Add", ["ids", "sh"], ["ids_s"]),
        n("Mod", ["ids_s", "len"], ["dst"]),  # token i moves to (i + shift) mod L
        n("Unsqueeze", ["dst", "ax1"], ["dst2"]),
        n("ScatterND", ["zeros", "dst2", "x"], ["rolled"]),
        n("Mul", ["rolled", "two"], ["y"]),
    ]
    inits = [c("r0", 0), c("rL", L), c("r1", 1), c("sh", shift), c("len", L), c("ax1", [1]),
             numpy_helper.from_array(np.zeros((L, D), np.float32), "zeros"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    feeds = {"x": x}
    np.testing.assert_allclose(onnxruntime_run(m := graph_model(nodes, feeds, ["y"], opset=17,
                                                                 inits=inits), feeds)["y"],
                               2 * np.roll(x, shift, axis=0), rtol=1e-6)  # the reference itself
    return m, feeds, dict(rtol=1e-5, atol=1e-6)


FAMILIES = {"decoder": decoder_block_rotary_causal, "unet": unet_resblock_groupnorm_timestep,
            "detector": detector_head_topk, "swin": swin_window_shift_mod_scatternd}


@pytest.mark.slow
@pytest.mark.parametrize("name", FAMILIES)
def test_family_model_on_cpu_matches_onnxruntime(name):
    """Interpreter and cpu engine against onnxruntime; the cuda compile assembles."""
    model, feeds, tol = FAMILIES[name]()
    check_model(model, feeds, **tol)


@pytest.mark.gpu
@pytest.mark.parametrize("name", FAMILIES)
def test_family_model_on_cuda_matches_onnxruntime(name):
    model, feeds, tol = FAMILIES[name]()
    got = ptxc.compile(model, target="cuda").run(feeds)
    for out, want in onnxruntime_run(model, feeds).items():
        close(got[out], want, what=f"cuda {out}", **tol)
