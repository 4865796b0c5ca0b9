"""run_device interop on the GPU: torch tensors in and out without host copies (data pointers
checked), DLPack-only inputs, fresh outputs that torch views without a copy, the caller's stream
(marker gpu: skipped without a GPU; torch needed)."""

import numpy as np
import pytest

import ptxc
from ptxc.errors import BindingError

from small_nets import conv_relu_pool as small_net

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
    out = engine.run_device({"x": tx}, out={"y": ty})
    assert out["y"] is ty and ty.data_ptr() == ptr          # written in place, no new tensor
    np.testing.assert_allclose(ty.cpu().numpy(), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ty.cpu().numpy(), engine.run({"x": x})["y"])


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
