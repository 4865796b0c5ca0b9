"""Contractions the schedules see: a two-operand Einsum that is a (batched) matrix product lowers
to ``tensor.matmul`` (graph_to_tensor/einsum.py), so an f16 einsum gets tensor-core kernels as a
MatMul does; other einsums keep their generic. A tf32 channels-last conv rounds its factors
(tensor/generalize.py ``_conv_last``), so it computes what tf32 computes and maps to mma.

* cpu numerics against numpy.einsum (float64) for contraction einsums (batched, transposed
  operands, operands copied into matmul order, broadcast batch, mat-vec, dot) and for einsums
  that are not contractions, in f32 and f16; the tensor stage holds a tensor.matmul exactly for
  the contractions, with copies only where the letters' order needs them;
* compiled for cuda in fp16 (no GPU needed): the contraction's kernel is mma or wgmma on sm_90,
  mma on sm_80, and the PTX assembles with ptxas;
* a tf32 conv in channels-last layout on cpu equals, bit for bit, the conv of its inputs rounded
  to tf32 (inputs built so that the rounded products and sums are exact) and not the f32 conv;
  on cuda sm_90 its kernels are mma, as a channels-first tf32 conv's are.
"""

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from onnx import helper

import ptxc
from ptxc.compiler import as_module, run_stages
from ptxc.dialects.arith import round_tf32
from ptxc.dialects.func import func_body, get_func
from ptxc.lower.graph_to_tensor.einsum import matmul_plan
from ptxc.ptx import assemble
from support.new_ops import graph_model, needs_ptxas
from support.one_node import NP_TO_ONNX

RNG = np.random.default_rng(0)

#: (equation, shape of a, shape of b, copies the lowering makes: operands and result)
CONTRACTIONS = [
    ("ij,jk->ik", (5, 7), (7, 6), 0),
    ("bij,bjk->bik", (2, 3, 4), (2, 4, 5), 0),
    ("bhqd,bhkd->bhqk", (2, 3, 5, 4), (2, 3, 6, 4), 0),     # attention scores: B read transposed
    ("bhqk,bhkd->bhqd", (2, 3, 5, 6), (2, 3, 6, 4), 0),
    ("ji,jk->ki", (7, 5), (7, 6), 0),                       # the product of the swapped operands
    ("ik,jk->ij", (5, 7), (6, 7), 0),
    ("bij,jk->bik", (2, 3, 4), (4, 5), 0),                  # an M dim of A's batch
    ("bqhd,bkhd->bhqk", (2, 5, 3, 4), (2, 6, 3, 4), 2),     # both operands copied
    ("ijk,jkl->il", (2, 3, 4), (3, 4, 5), 0),               # two K letters, flattened
    ("...ij,...jk->...ik", (1, 3, 4), (3, 4, 5), 0),        # broadcast batch
    ("...ij,...jk->...ki", (2, 3, 4, 5), (1, 3, 5, 6), 0),  # result read as the swapped product
    ("ij,j->i", (5, 7), (7,), 0),                           # mat-vec
    ("i,i->", (7,), (7,), 0),                               # dot
]

#: einsums that are no matrix product (one operand, a diagonal, an outer product, three
#: operands, a letter summed out of one operand), with their operand shapes
OTHERS = [
    ("ij->j", [(4, 5)]),
    ("ii->i", [(4, 4)]),
    ("i,j->ij", [(4,), (5,)]),
    ("bi,bj->bij", [(2, 4), (2, 5)]),
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
    ("ij,k->i", [(3, 4), (5,)]),
    ("iij,jk->ik", [(3, 3, 4), (4, 5)]),
]


def einsum_model(eq, *xs):
    """One Einsum node over inputs a, b, ... (the output's type given: onnx's inference does
    not broadcast an einsum's batch dims of size 1)."""
    names = "abcd"[:len(xs)]
    out = np.einsum(eq, *xs)
    return graph_model([helper.make_node("Einsum", list(names), ["y"], equation=eq)],
                       dict(zip(names, xs)), ["y"],
                       out_types={"y": (NP_TO_ONNX[out.dtype], out.shape)})


def operands(shapes, dt):
    return [RNG.standard_normal(s).astype(dt) for s in shapes]


def tensor_ops(model) -> list[str]:
    m = as_module(model)
    run_stages(m, "tensor")
    return [op.name for op in func_body(get_func(m)).ops]


def check_cpu(eq, xs):
    got = ptxc.compile(einsum_model(eq, *xs), target="cpu", cache=False).run(
        dict(zip("abcd", xs)))["y"]
    want = np.einsum(eq, *[x.astype(np.float64) for x in xs])
    assert got.dtype == xs[0].dtype and got.shape == want.shape
    if xs[0].dtype == np.float16:  # summed in f32, rounded once to f16
        tol = np.finfo(np.float16).eps * np.abs(want) + 1e-3
    else:
        k = max(1, int(np.prod([x.size for x in xs])) // max(1, want.size))
        tol = 4 * k * np.finfo(np.float32).eps * np.einsum(eq, *[np.abs(x).astype(np.float64)
                                                                for x in xs])
    assert (np.abs(got - want) <= tol).all(), (eq, np.abs(got - want).max())


@pytest.mark.parametrize("dt", [np.float32, np.float16])
@pytest.mark.parametrize("eq,sa,sb,copies", CONTRACTIONS, ids=[c[0] for c in CONTRACTIONS])
def test_contraction_matches_numpy_and_is_a_matmul(eq, sa, sb, copies, dt):
    xs = operands([sa, sb], dt)
    check_cpu(eq, xs)
    names = tensor_ops(einsum_model(eq, *xs))
    assert names.count("tensor.matmul") == 1 and names.count("tensor.generic") == copies, names


@pytest.mark.parametrize("dt", [np.float32, np.float16])
@pytest.mark.parametrize("eq,shapes", OTHERS, ids=[c[0] for c in OTHERS])
def test_other_einsums_keep_their_generic(eq, shapes, dt):
    xs = operands(shapes, dt)
    check_cpu(eq, xs)
    ins = eq.split("->")[0].split(",")
    assert matmul_plan(ins, eq.split("->")[1], shapes) is None
    assert "tensor.matmul" not in tensor_ops(einsum_model(eq, *xs))


def test_plan_reads_transposed_and_swaps_rather_than_copies():
    p = matmul_plan(["bhqd", "bhkd"], "bhqk", [(2, 3, 5, 4), (2, 3, 6, 4)])
    assert (p.swap, p.b, p.m, p.n, p.k, p.transpose_a, p.transpose_b, p.cost) == \
        (False, "bh", "q", "k", "d", False, True, 0)
    p = matmul_plan(["ji", "jk"], "ki", [(7, 5), (7, 6)])   # (A^T B)^T = B^T A
    assert (p.swap, p.m, p.n, p.transpose_a, p.transpose_b, p.cost) == \
        (True, "k", "i", True, False, 0)
    p = matmul_plan(["bqhd", "bkhd"], "bhqk", [(2, 5, 3, 4), (2, 6, 3, 4)])
    assert (p.copy_x, p.copy_y, p.copy_out, p.cost) == (True, True, False, 120 + 144)
    # a K letter of size 1 on one side broadcasts in einsum: not a matrix product
    assert matmul_plan(["ij", "jk"], "ik", [(3, 1), (4, 5)]) is None


# ---- cuda: tensor-core kernels ------------------------------------------------------------------

CUDA = [("bhqd,bhkd->bhqk", (2, 4, 64, 64), (2, 4, 64, 64)),
        ("bhqk,bhkd->bhqd", (2, 4, 64, 64), (2, 4, 64, 64)),
        ("bij,bjk->bik", (4, 64, 128), (4, 128, 64)),
        ("ij,jk->ik", (128, 256), (256, 128)),
        ("ik,jk->ij", (128, 256), (64, 256)),
        ("ji,jk->ki", (256, 128), (256, 64))]


def compile_cuda(model, arch, precision="fp16", **kw):
    return ptxc.compile(model, target="cuda", arch=arch, precision=precision, cache=False, **kw)


@needs_ptxas
@pytest.mark.parametrize("arch,schedules", [("sm_90", ("mma", "wgmma")), ("sm_80", ("mma",))])
@pytest.mark.parametrize("eq,sa,sb", CUDA, ids=[c[0] for c in CUDA])
def test_f16_einsum_gets_tensor_cores(eq, sa, sb, arch, schedules):
    xs = [np.zeros(sa, np.float16), np.zeros(sb, np.float16)]
    eng = compile_cuda(einsum_model(eq, *xs), arch)
    kernels = eng.program.table.kernels
    assert len(kernels) == 1 and kernels[0].schedule in schedules, \
        [(k.name, k.schedule) for k in kernels]
    assemble(eng.program.ptx, eng.program.arch)


# ---- tf32 channels-last conv ---------------------------------------------------------------------

def near_integers(shape):
    """Nonzero integers in [-7, 7] moved by less than half a tf32 ulp: tf32 rounding gives back
    the integers, whose products and sums f32 holds exactly; f32 keeps the offsets."""
    n = RNG.integers(1, 8, shape) * RNG.choice([-1, 1], shape)
    return (n * (1 + RNG.uniform(-2.0 ** -12, 2.0 ** -12, shape))).astype(np.float32)


def conv_net(w):
    net = ptxc.Network("conv")
    x = net.add_input("x", (2, 8, 6, 6))
    net.mark_output(net.add_conv(x, w, None, padding=1, name="conv1"), "y")
    return net


def conv64(x, w):
    """The 3x3, pad 1 conv of x (NCHW) and w (MCRS) in float64."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    return np.einsum("ncpqrs,mcrs->nmpq", sliding_window_view(xp, (3, 3), axis=(2, 3)),
                     w.astype(np.float64))


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_tf32_conv_rounds_its_factors(layout):
    x, w = near_integers((2, 8, 6, 6)), near_integers((16, 8, 3, 3))
    assert (round_tf32(x) == np.round(x)).all() and (round_tf32(w) == np.round(w)).all()
    tf32 = conv64(round_tf32(x), round_tf32(w))
    fp32 = conv64(x, w)
    assert np.abs(tf32 - fp32).max() > 1e-2                  # the offsets matter
    got = ptxc.compile(conv_net(w), target="cpu", precision="tf32", layout=layout,
                       cache=False).run({"x": x})["y"]
    np.testing.assert_array_equal(got, tf32.astype(np.float32))


@needs_ptxas
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_tf32_conv_maps_to_mma(layout):
    eng = compile_cuda(conv_net(near_integers((16, 8, 3, 3))), "sm_90", "tf32", layout=layout)
    convs = [k.schedule for k in eng.program.table.kernels if k.schedule != "pointwise"]
    assert convs and set(convs) <= {"mma", "wgmma"}, convs
    assert ".tf32" in eng.program.ptx
    assemble(eng.program.ptx, eng.program.arch)
