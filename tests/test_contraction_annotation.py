"""The ``contraction`` annotation of loop nests (ptxc/dialects/loop_contraction.py): written by
lower-tensor-to-loop on the nests of ``tensor.matmul`` and ``tensor.conv``, checked by the
verifier, kept through clone and the text round trip, and the only way a nest becomes a
contraction for the mma and wgmma schedules (gpu_map/contraction.py)."""

import re

import numpy as np
import pytest

import ptxc
from support.contraction_ir import loop_module, matmul_model
from ptxc.compiler import as_module, run_stages
from ptxc.dialects.func import func_body, functions
from ptxc.dialects.loop_contraction import ATTR, annotation
from ptxc.errors import VerifyError
from ptxc.ir import parse_ir, print_ir
from ptxc.ir.verifier import verify
from ptxc.lower.gpu_map.contraction import analyze
from ptxc.rewrite.pass_manager import PassManager


def nests(m):
    return [op for f in functions(m) for op in func_body(f).ops if op.name == "loop.parallel"]


def marked(m):
    return [op for op in nests(m) if ATTR in op.attributes]


def lowered(net, precision):
    m = as_module(net)
    run_stages(m, "loop", precision=precision)
    return m


def matmul_net(batch=2, m_=24, k=40, n=13, seed=0):
    """``x [batch, M, K] @ w [K, N]``: the weight broadcast over the batch."""
    rng = np.random.default_rng(seed)
    net = ptxc.Network("mm")
    x = net.add_input("x", (batch, m_, k))
    w = net.add_constant(rng.standard_normal((k, n)).astype(np.float32))
    net.mark_output(net.add_matmul(x, w, name="mm"), "y")
    return net


def conv_net(groups=1, seed=0):
    rng = np.random.default_rng(seed)
    net = ptxc.Network("conv")
    x = net.add_input("x", (2, 8, 10, 10))
    w = rng.standard_normal((16, 8 // groups, 3, 3)).astype(np.float32)
    net.mark_output(net.add_conv(x, w, None, padding=1, groups=groups, name="conv"), "y")
    return net


@pytest.mark.parametrize("precision, kind", [("fp32", "f32"), ("fp16", "f16"),
                                             ("tf32", "tf32")])
def test_matmul_nests_say_what_the_matmul_knew(precision, kind):
    """Both nests of the unroll-and-jam (n 0..7 stepped by 8, the remainder 8..12) carry the
    matmul's roles: the batch dim, read by x only, is an M dim; n is the weight's."""
    m = lowered(matmul_net(), precision)
    got = [(op.attributes[ATTR], op.attr("step")) for op in marked(m)]
    assert got == [(("matmul", kind, "MMN", "K"), (1, 1, 8)),
                   (("matmul", kind, "MMN", "K"), None)]
    # the nests that are no contraction (the fp16 input's cast) carry none
    assert all(annotation(op) is None for op in nests(m) if op not in marked(m))


def test_conv_nests_name_their_roles():
    """An NCHW conv: the input reads n, p, q (M), the weights the output channel (N), three K
    loops (c, kh, kw); a grouped conv's group dim is read by both factors (B). The mma schedule
    multiplies the transpose of an NCHW conv (its contiguous q is an M dim)."""
    (a, _) = marked(lowered(conv_net(), "fp16"))
    assert a.attributes[ATTR] == ("conv", "f16", "NMMM", "KKK")
    c = analyze(a)
    assert (c.m_dims, c.n_dims, c.batch) == ([0], [1, 2, 3], [])
    (g, _) = marked(lowered(conv_net(groups=4), "fp16"))
    assert g.attributes[ATTR] == ("conv", "f16", "MMBNM", "KKK")
    assert analyze(g).batch == [2]


def test_int8_conv_is_s8():
    from support import int8_ir
    m = as_module(int8_ir.conv_model(2, 16, 8, 8, 32, 3, 3, pad=1))
    run_stages(m, "loop")
    kinds = {op.attributes[ATTR][:2] for op in marked(m)}
    assert kinds == {("conv", "s8")}


def test_annotation_round_trips_through_text_and_clone():
    m = lowered(matmul_net(), "fp16")
    text = print_ir(m)
    assert 'contraction = ["matmul", "f16", "MMN", "K"]' in text
    again = parse_ir(text)
    assert print_ir(again) == text
    assert [op.attributes[ATTR] for op in marked(again)] == \
        [op.attributes[ATTR] for op in marked(m)]
    op = marked(m)[0]
    assert op.clone().attributes[ATTR] == op.attributes[ATTR]


def test_without_the_annotation_no_contraction_schedule_takes_the_nest():
    """The same f16 nest: annotated, the mma schedule takes it; with the annotation removed it
    is no contraction (nothing re-derives one from the loops) and the tiled schedule maps it."""
    def schedules(drop):
        m = loop_module(matmul_model(64, 40, 48))
        (op,) = marked(m)
        assert op.attributes[ATTR] == ("matmul", "f16", "MN", "K")
        if drop:
            del op.attributes[ATTR]
            assert analyze(op) is None
        PassManager("map-to-gpu").run(m)
        return {o.attributes["schedule"] for f in functions(m) for o in func_body(f).ops
                if o.name == "gpu.launch"}
    assert "mma" in schedules(drop=False)
    assert schedules(drop=True) == {"tiled"}


@pytest.mark.parametrize("key, value, says", [
    (2, "MNN", "contraction roles 'MNN' must give B, M or N for each of the 2 dims"),
    (2, "NM", "contraction roles 'NM', but the factors' loads read the dims as 'MN'"),
    (1, "tf32", "an accumulator's update is not acc + a * b of tf32 loads"),
    (3, "KK", "the body is not one perfect nest of 2 reduction loop(s)"),
    (0, "pool", "contraction source 'pool' is not one of matmul, conv"),
])
def test_the_verifier_checks_the_annotation_against_the_nest(key, value, says):
    m = loop_module(matmul_model(64, 40, 48))
    verify(m)
    (op,) = marked(m)
    v = list(op.attributes[ATTR])
    v[key] = value
    op.attributes[ATTR] = tuple(v)
    with pytest.raises(VerifyError, match=re.escape(f'"loop.parallel" (node \'mm\'): {says}')):
        verify(m)


def test_a_pass_that_changes_the_factors_must_update_the_annotation():
    """contraction_ir.fold_casts turns the f32 matmul's loads into f16 loads cast to f32; it
    says so in the annotation. Left f32, the verifier refuses the nest."""
    m = loop_module(matmul_model(16, 32, 16))
    (op,) = marked(m)
    op.attributes[ATTR] = ("matmul", "f32", "MN", "K")
    with pytest.raises(VerifyError, match="not acc [+] a [*] b of f32 loads"):
        verify(m)
