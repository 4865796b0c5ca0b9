"""run_device interop on the GPU: torch tensors in and out without any copy (the kernels get the
tensors' data pointers: ``engine.program.interop`` counts no copy and names the pointers), the
kernels reading the caller's memory on every run (graph replays included), copies only where a
tensor cannot be bound (misaligned, an out= overlapping an input, a fresh output), DLPack-only
inputs, fresh outputs that torch views without a copy, the caller's stream (marker gpu: skipped
without a GPU; torch needed). The binding logic without a GPU: tests/test_interop_binding.py."""

import numpy as np
import pytest

import ptxc
from ptxc.errors import BindingError

from support.small_nets import conv_relu_pool as small_net

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def setup():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    engine = ptxc.compile(small_net(), target="cuda")
    x = np.random.default_rng(3).standard_normal((1, 3, 10, 10)).astype(np.float32)
    ref = ptxc.interpret(small_net().to_module(), {"x": x})["y"]
    return torch, engine, x, ref


class DLPackOnly:
    """Exposes a tensor through DLPack alone (no __cuda_array_interface__)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None, **kw):
        return self.t.__dlpack__(stream=stream, **kw) if stream is not None \
            else self.t.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def test_torch_in_torch_out_zero_copy(setup):
    torch, engine, x, ref = setup
    tx = torch.from_numpy(x).cuda()
    ty = torch.empty((1, 4, 5, 5), dtype=torch.float32, device="cuda")
    ptr = ty.data_ptr()
    torch.cuda.synchronize()
    engine.program.interop.reset()
    out = engine.run_device({"x": tx}, out={"y": ty})
    assert out["y"] is ty and ty.data_ptr() == ptr          # written in place, no new tensor
    c = engine.program.interop.as_dict()
    assert c["copied"] == 0 and c["copied_bytes"] == 0 and c["direct"] == 2
    # the kernels read x and wrote y at the tensors' own addresses
    assert c["last"] == {"x": ("direct", tx.data_ptr()), "y": ("direct", ptr)}
    np.testing.assert_allclose(ty.cpu().numpy(), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ty.cpu().numpy(), engine.run({"x": x})["y"])


def _ref(x):
    return ptxc.interpret(small_net().to_module(), {"x": x})["y"]


@pytest.mark.parametrize("graph", [True, False])
def test_kernels_read_and_write_the_callers_tensors_on_every_run(setup, graph):
    """Same tensors, new contents each run: with no copy, only kernels that read tx where it is
    (a replayed CUDA graph included) can follow; a second pair of tensors gets its own graph."""
    torch, _, x, _ = setup
    engine = ptxc.compile(small_net(), target="cuda")  # its own: no pointer set seen before
    engine.cuda_graph = graph
    rng = np.random.default_rng(7)
    pairs = [(torch.empty((1, 3, 10, 10), device="cuda"),
              torch.empty((1, 4, 5, 5), device="cuda")) for _ in range(2)]
    engine.program.interop.reset()
    for i in range(6):
        tx, ty = pairs[i // 3 if i < 3 else i % 2]      # a a a, then b a b
        xi = rng.standard_normal(x.shape).astype(np.float32)
        tx.copy_(torch.from_numpy(xi))                   # in place: same data_ptr
        ty.fill_(float("nan"))
        engine.run_device({"x": tx}, out={"y": ty})
        np.testing.assert_allclose(ty.cpu().numpy(), _ref(xi), rtol=1e-5, atol=1e-5)
        assert engine.program.interop.last["y"] == ("direct", ty.data_ptr())
    c = engine.program.interop.as_dict()
    assert c["copied"] == 0 and c["direct"] == 12
    # a pointer set is captured on its second sight: a (run 2) and b (run 5)
    assert c["graphs_captured"] == (2 if graph else 0)


def test_only_unbindable_tensors_are_copied(setup):
    torch, engine, x, ref = setup
    p = engine.program
    base = torch.empty(x.size + 1, device="cuda")
    tx = base[1:].view(x.shape)                              # 4 bytes past an aligned address
    tx.copy_(torch.from_numpy(x))
    ty = torch.empty((1, 4, 5, 5), device="cuda")
    p.interop.reset()
    engine.run_device({"x": tx}, out={"y": ty})
    np.testing.assert_allclose(ty.cpu().numpy(), ref, rtol=1e-5, atol=1e-5)
    c = p.interop.as_dict()
    assert c["copied"] == 1 and c["copied_bytes"] == x.nbytes and c["direct"] == 1
    assert "aligned" in c["last"]["x"][0] and c["last"]["y"] == ("direct", ty.data_ptr())
    # an out= over the input's memory: the input is read in place, the output copied after
    big = torch.empty(x.size, device="cuda")
    big.copy_(torch.from_numpy(x).reshape(-1))
    tx2, ty2 = big.view(x.shape), big[:100].view(1, 4, 5, 5)
    p.interop.reset()
    engine.run_device({"x": tx2}, out={"y": ty2})
    np.testing.assert_allclose(ty2.cpu().numpy(), ref, rtol=1e-5, atol=1e-5)
    c = p.interop.as_dict()
    assert c["last"]["y"][0] == "overlaps input 'x'" and c["copied"] == 1
    assert c["last"]["x"] == ("direct", tx2.data_ptr())
    # a fresh output (no out=): one copy out of the engine's binding, counted
    p.interop.reset()
    fresh = engine.run_device({"x": torch.from_numpy(x).cuda()})["y"]
    np.testing.assert_allclose(fresh.copy_to_host(), ref, rtol=1e-5, atol=1e-5)
    c = p.interop.as_dict()
    assert c["copied"] == 1 and c["direct"] == 1 and c["last"]["y"][0].startswith("fresh")


def test_fresh_output_is_viewed_by_torch_without_a_copy(setup):
    torch, engine, x, ref = setup
    out = engine.run_device({"x": torch.from_numpy(x).cuda()})["y"]
    t = torch.as_tensor(out, device="cuda")
    assert t.data_ptr() == out.device_ctypes_pointer.value
    np.testing.assert_allclose(t.cpu().numpy(), ref, rtol=1e-5, atol=1e-5)


def test_dlpack_only_input(setup):
    torch, engine, x, ref = setup
    tx = torch.from_numpy(x).cuda()
    torch.cuda.synchronize()
    out = engine.run_device({"x": DLPackOnly(tx)})["y"]
    np.testing.assert_allclose(out.copy_to_host(), ref, rtol=1e-5, atol=1e-5)


def test_callers_stream(setup):
    torch, engine, x, ref = setup
    s = torch.cuda.Stream()
    ty = torch.full((1, 4, 5, 5), float("nan"), device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        tx = torch.from_numpy(x).to("cuda", non_blocking=False) * 2.0  # queued on s
        engine.run_device({"x": tx}, out={"y": ty}, stream=s)
        tz = ty + 0.0                                                  # ordered after it on s
    s.synchronize()
    want = ptxc.interpret(small_net().to_module(), {"x": x * 2})["y"]
    np.testing.assert_allclose(tz.cpu().numpy(), want, rtol=1e-5, atol=1e-5)
    engine.run_device({"x": tx}, out={"y": ty}, stream=torch.cuda.current_stream())
    torch.cuda.current_stream().synchronize()
    np.testing.assert_allclose(ty.cpu().numpy(), want, rtol=1e-5, atol=1e-5)


def test_bad_out_and_stream_are_binding_errors(setup):
    torch, engine, x, _ = setup
    tx = torch.from_numpy(x).cuda()
    with pytest.raises(BindingError, match="not outputs"):
        engine.run_device({"x": tx}, out={"z": tx})
    with pytest.raises(BindingError, match="expected"):
        engine.run_device({"x": tx}, out={"y": tx})
    with pytest.raises(BindingError, match="stream"):
        engine.run_device({"x": tx}, stream="not a stream")
