"""GridSample and RoiAlign with random shapes and attributes through every lowering under
check-numerics (the module interpreted before and after each stage on the same random inputs:
lower-graph-to-tensor, generalize, fuse, lower-tensor-to-loop), then JIT-compiled for the CPU and
compared with the graph interpreter on the test's own inputs."""

import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from support.new_ops import check_lowering, graph_model  # noqa: E402

pytestmark = pytest.mark.slow
SETTINGS = settings(max_examples=10, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _check(model, feeds):
    check_lowering(model, feeds, equal_nan=True)


@SETTINGS
@given(r=st.integers(1, 3), data=st.data(), mode=st.sampled_from(["linear", "nearest", "cubic"]),
       padding=st.sampled_from(["zeros", "border", "reflection"]), align=st.integers(0, 1),
       spread=st.sampled_from([0.9, 1.5, 4.0]))
def test_grid_sample(r, data, mode, padding, align, spread):
    if mode == "cubic" and r == 3:
        r = 2  # 64 taps per output: slow under the loop interpreter, covered in test_ops_sample
    dims = tuple(data.draw(st.integers(1, 4)) for _ in range(r))
    out = tuple(data.draw(st.integers(1, 3)) for _ in range(r))
    n, ch = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    rng = np.random.default_rng(sum(dims) * 7 + sum(out))
    x = rng.standard_normal((n, ch) + dims).astype(np.float32)
    g = rng.uniform(-spread, spread, (n,) + out + (r,)).astype(np.float32)
    _check(graph_model([helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode,
                                         padding_mode=padding, align_corners=align)],
                       {"x": x, "g": g}, ["y"], opset=22), {"x": x, "g": g})


@SETTINGS
@given(data=st.data(), mode=st.sampled_from(["avg", "max"]), ratio=st.integers(0, 3),
       half=st.booleans(), scale=st.sampled_from([1.0, 0.5, 0.25]))
def test_roi_align(data, mode, ratio, half, scale):
    h, w = data.draw(st.integers(1, 8)), data.draw(st.integers(1, 8))
    n, ch = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    nr = data.draw(st.integers(1, 4))
    oh, ow = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    rng = np.random.default_rng(h * 31 + w + nr)
    x = rng.standard_normal((n, ch, h, w)).astype(np.float32)
    lo = rng.uniform(-2, max(h, w) / scale, (nr, 2))
    rois = np.concatenate([lo, lo + rng.uniform(-1, 10, (nr, 2))], 1).astype(np.float32)
    bi = rng.integers(0, n, nr).astype(np.int64)
    # batch indices are constants (check-numerics draws random graph inputs); with ratio 0 the
    # rois are too (the compiler needs them then)
    inits = [numpy_helper.from_array(bi, "b")]
    feeds = {"x": x}
    if ratio == 0:
        inits.append(numpy_helper.from_array(rois, "r"))
    else:
        feeds["r"] = rois
    node = helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], mode=mode, output_height=oh,
                            output_width=ow, sampling_ratio=ratio, spatial_scale=scale,
                            coordinate_transformation_mode="half_pixel" if half
                            else "output_half_pixel")
    _check(graph_model([node], feeds, ["y"], opset=16, inits=inits), feeds)
