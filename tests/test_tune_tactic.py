"""Tactics (ptxc/tune/tactic.py) and the kernels a tuner sees (ptxc/tune/kernels.py).

A tactic is a value: printed, parsed back with the schedule pass's types, stored as JSON and
read back equal, hashed; applying it sets the pass's options and a bad one is a TuningError
naming it. Kernel keys: two layers of the same shapes and code share one key whatever their
ONNX names and weights; a different shape does not; an isolated kernel computes what the kernel
computes in its model (the interpreter on both).
"""

import numpy as np
import pytest

import ptxc
from ptxc.errors import TuningError
from ptxc.frontend.load import as_module
from ptxc.ir.interpreter import interpret
from ptxc.lower.gpu_map import MapToGpu
from ptxc.pipeline import CompileOptions, run_stages
from ptxc.tactic.kernels import isolate, kernel_key, kernels_of
from ptxc.tactic.tactic import DEFAULT, Tactic


def test_tactic_text_json_round_trip():
    t = Tactic("mma", {"mma_stages": 4, "mma_tiles": ["128x128x2x2"], "pdl": False})
    assert str(t) == "mma{mma-stages=4 mma-tiles=[128x128x2x2] pdl=false}"
    assert Tactic.parse(str(t), MapToGpu) == t
    assert Tactic.from_json(t.to_json()) == t
    assert hash(Tactic.from_json(t.to_json())) == hash(t)
    assert t.digest == Tactic.parse(str(t), MapToGpu).digest != DEFAULT.digest
    assert str(DEFAULT) == "auto" and Tactic.parse("auto") == DEFAULT
    # without the pass's types the values stay text
    assert Tactic.parse("pointwise{block-size=128}").options == {"block_size": "128"}


def test_tactic_apply_sets_options_and_refuses_bad_ones():
    p = MapToGpu()
    q = Tactic("pointwise", {"block_size": 128}).apply(p)
    assert q.block_size == 128 and p.block_size == 256
    assert DEFAULT.apply(p) is p
    with pytest.raises(TuningError, match=r"block-size must be in"):
        Tactic("pointwise", {"block_size": 4096}).apply(p)
    with pytest.raises(TuningError, match=r"has no option no_such"):
        Tactic("pointwise", {"no_such": 1}).apply(p)
    with pytest.raises(TuningError, match=r"has no option no-such"):
        Tactic.parse("pointwise{no-such=1}", MapToGpu)


@pytest.mark.parametrize("bad", [
    {"schedule": "Bad Name"}, {"schedule": "mma", "params": [1]}, [1, 2],
    {"schedule": "mma", "params": {"x": {"nested": 1}}}, {"schedule": "mma", "extra": 1}])
def test_tactic_from_json_refuses_malformed(bad):
    with pytest.raises(TuningError):
        Tactic.from_json(bad)


def test_tactic_parse_names_the_column():
    with pytest.raises(TuningError, match="column"):
        Tactic.parse("mma{mma-stages 4}", MapToGpu)


def _blocks(c_last=8, seed=0):
    """Four conv3x3+relu layers of one shape (other weights, other names), then a 1x1 conv to
    ``c_last`` channels."""
    rng = np.random.default_rng(seed)
    net = ptxc.Network("blocks")
    x = net.add_input("x", (1, 8, 6, 6))
    for i in range(4):
        x = net.add_activation(net.add_conv(
            x, rng.standard_normal((8, 8, 3, 3)).astype(np.float32), None, padding=1), "relu")
    x = net.add_conv(x, rng.standard_normal((c_last, 8, 1, 1)).astype(np.float32), None)
    net.mark_output(x, "y")
    return net


def _loop_module(net):
    m = as_module(net)
    run_stages(m, "loop", CompileOptions.make("cpu"), progress=None)
    return m


def test_kernel_keys_ignore_names_and_weights_not_shapes():
    ks = kernels_of(_loop_module(_blocks()))
    locs = {}
    for k in ks:
        locs.setdefault(k.key, set()).add(k.loc)
        assert kernel_key(k.op) == k.key
    # the middle layers (padded buffer in, padded buffer out) share their kernels' keys
    assert max(len(v) for v in locs.values()) >= 2
    assert [k.key for k in kernels_of(_loop_module(_blocks(seed=1)))] == [k.key for k in ks]
    other = [k.key for k in kernels_of(_loop_module(_blocks(c_last=4)))]
    assert len(other) == len(ks) and other[:-2] == [k.key for k in ks][:-2]
    assert other[-1] != ks[-1].key


def test_isolated_kernel_computes_what_it_computes_in_the_model():
    """The second layer's conv kernel: padded 8x8 buffer in, the interior of the next layer's
    padded buffer out; its isolated module, interpreted, is that convolution (+ relu)."""
    from ptxc.dialects.func import arg_names, func_body, get_func
    m = _loop_module(_blocks())
    k = next(k for k in kernels_of(m) if k.loc == "conv_5" and k.op.name == "loop.parallel"
             and len(func_body(get_func(k.module)).args) == 3)
    iso, outputs = isolate(k.op)
    assert outputs == k.outputs and len(outputs) == 1
    f = get_func(iso)
    types = {n: a.type for n, a in zip(arg_names(f), func_body(f).args)}
    rng = np.random.default_rng(1)
    inputs = {n: rng.standard_normal(t.shape).astype(np.float32) for n, t in types.items()
              if n not in outputs}
    got = interpret(iso, inputs)[outputs[0]]
    w = next(v for v in inputs.values() if v.shape == (8, 8, 3, 3))
    xp = next(v for v in inputs.values() if v.shape == (1, 8, 8, 8))
    ref = np.zeros((1, 8, 6, 6))
    for i in range(3):
        for j in range(3):
            ref += np.einsum("oc,nchw->nohw", w[:, :, i, j], xp[:, :, i:i + 6, j:j + 6])
    assert got.shape == (1, 8, 8, 8)
    # this kernel writes the columns its unroll-and-jam covers (the interpreter leaves the rest
    # NaN; another kernel writes them)
    got = got[:, :, 1:7, 1:7]
    written = ~np.isnan(got)
    assert written.sum() >= got.size // 2
    np.testing.assert_allclose(got[written], np.maximum(ref, 0)[written], rtol=1e-5, atol=1e-5)
