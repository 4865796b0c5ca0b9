"""GridSample (opsets 16, 20, 22) and RoiAlign (10, 16, 22): interpreter and compiled cpu against
onnxruntime (onnx's reference where onnxruntime has no kernel: RoiAlign-22, cubic over 3 spatial
dims, 1 spatial dim), cuda compiled with its PTX assembled; the refusals are typed and name the
node; on a GPU (marker ``gpu``) the cuda engine matches onnxruntime too."""

import itertools

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import ptxc
from support.new_ops import check_model, close, graph_model, onnxruntime_run
from ptxc.errors import CompileError, IndexOutOfRangeError, ModelError

RNG = np.random.default_rng(21)


def _gs_model(x, g, opset=22, **attrs):
    return graph_model([helper.make_node("GridSample", ["x", "g"], ["y"], name="gs", **attrs)],
                       {"x": x, "g": g}, ["y"], opset=opset)


def _grid(shape, spread=1.4):
    g = RNG.uniform(-spread, spread, shape).astype(np.float32)
    g.reshape(-1)[:4] = [-1.0, 1.0, 0.0, -0.5]   # corners and centres: ties for nearest
    return g


def _reference(model, feeds):
    ref = ReferenceEvaluator(model)
    return dict(zip(ref.output_names, ref.run(None, feeds)))


def _check_vs(model, feeds, want, rtol=1e-5, atol=1e-5):
    got_i = ptxc.interpret(ptxc.import_onnx(model), feeds)
    got_c = ptxc.compile(model, target="cpu").run(feeds)
    for k, w in want.items():
        close(got_i[k], w, rtol, atol, f"interpreter {k}")
        close(got_c[k], w, rtol, atol, f"cpu {k}")


@pytest.mark.slow
@pytest.mark.parametrize("mode,padding", list(itertools.product(
    ["linear", "nearest", "cubic"], ["zeros", "border", "reflection"])))
def test_grid_sample_4d(mode, padding):
    x = RNG.standard_normal((2, 3, 5, 6)).astype(np.float32)
    g = _grid((2, 4, 3, 2))
    for align in (0, 1):
        check_model(_gs_model(x, g, mode=mode, padding_mode=padding, align_corners=align),
                    {"x": x, "g": g}, rtol=1e-5, atol=1e-5, cuda=align == 0)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_opset16_names(mode):
    x = RNG.standard_normal((1, 2, 4, 5)).astype(np.float32)
    g = _grid((1, 3, 3, 2))
    check_model(_gs_model(x, g, opset=16, mode=mode, padding_mode="border"), {"x": x, "g": g},
                atol=1e-5, cuda=False)


@pytest.mark.slow
@pytest.mark.parametrize("mode,padding", list(itertools.product(
    ["linear", "nearest"], ["zeros", "border", "reflection"])))
def test_grid_sample_volumetric(mode, padding):
    x = RNG.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    g = _grid((1, 2, 3, 2, 3))
    check_model(_gs_model(x, g, opset=20, mode=mode, padding_mode=padding, align_corners=1),
                {"x": x, "g": g}, atol=1e-5, cuda=padding == "zeros")


@pytest.mark.slow
def test_grid_sample_cubic_3d_and_1d_against_onnx_reference():
    """onnxruntime has cubic in 4-D only and no 3-D GridSample: onnx's reference decides."""
    x = RNG.standard_normal((1, 2, 3, 4, 3)).astype(np.float32)
    g = _grid((1, 2, 2, 2, 3), 1.1)
    m = _gs_model(x, g, mode="cubic", padding_mode="reflection")
    _check_vs(m, {"x": x, "g": g}, _reference(m, {"x": x, "g": g}), atol=1e-4)
    x1 = RNG.standard_normal((2, 3, 7)).astype(np.float32)
    g1 = _grid((2, 5, 1))
    m1 = _gs_model(x1, g1, mode="linear", padding_mode="border")
    _check_vs(m1, {"x": x1, "g": g1}, _reference(m1, {"x": x1, "g": g1}))


def test_grid_sample_f64_and_nan_grid():
    """f64 computes in f64; a NaN coordinate reads 0 with zeros padding (no read outside X)."""
    x = RNG.standard_normal((1, 1, 4, 4))
    g = _grid((1, 2, 2, 2)).astype(np.float64)
    m = _gs_model(x, g, mode="nearest")
    want = onnxruntime_run(m, {"x": x, "g": g})
    _check_vs(m, {"x": x, "g": g}, want, rtol=1e-12, atol=1e-12)
    g[0, 0, 0] = np.nan
    got = ptxc.compile(m, target="cpu").run({"x": x, "g": g})["y"]
    assert got[0, 0, 0, 0] == 0 and np.isfinite(got).all()


def test_grid_sample_refusals_name_the_node():
    x = RNG.standard_normal((1, 1, 2, 2, 2, 2)).astype(np.float32)
    g = np.zeros((1, 1, 1, 1, 1, 4), np.float32)
    with pytest.raises(ModelError, match=r"'gs'.*1 to 3 spatial dims"):
        ptxc.import_onnx(_gs_model(x, g))
    x4 = np.zeros((1, 1, 2, 2, 2), np.float32)
    g4 = np.zeros((1, 1, 1, 1, 3), np.float32)
    with pytest.raises(ModelError, match=r"'gs'.*GridSample-16 takes a 4-D input"):
        ptxc.import_onnx(_gs_model(x4, g4, opset=16, mode="bilinear"))
    x2, g2 = np.zeros((1, 1, 2, 2), np.float32), np.zeros((1, 1, 1, 2), np.float32)
    with pytest.raises(ModelError, match=r"'gs'.*mode must be one of"):
        ptxc.import_onnx(_gs_model(x2, g2, opset=20, mode="bilinear"))
    with pytest.raises(ModelError, match=r"'gs'.*padding_mode"):
        ptxc.import_onnx(_gs_model(x2, g2, padding_mode="wrap"))


# ---- RoiAlign -----------------------------------------------------------------------------------

ROIS = np.array([[0, 0, 9, 9], [1.5, 2.2, 7.7, 5.1], [-3, -2, 4, 20], [5, 5, 5.2, 5.1],
                 [8, 8, 2, 1], [2, 1, 14, 6]], np.float32)
BATCH = np.array([0, 1, 1, 0, 1, 0], np.int64)


def _ra_model(x, opset, const_rois=False, **attrs):
    inputs = {"x": x} if const_rois else {"x": x, "r": ROIS, "b": BATCH}
    inits = ([numpy_helper.from_array(ROIS, "r"), numpy_helper.from_array(BATCH, "b")]
             if const_rois else [])
    return graph_model([helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], name="ra",
                                         **attrs)], inputs, ["y"], opset=opset, inits=inits)


@pytest.mark.slow
@pytest.mark.parametrize("opset,ctm,mode", [
    (10, None, "avg"), (10, None, "max"), (16, "half_pixel", "avg"), (16, "half_pixel", "max"),
    (16, "output_half_pixel", "avg"), (16, "output_half_pixel", "max")])
def test_roi_align(opset, ctm, mode):
    x = RNG.standard_normal((2, 3, 10, 12)).astype(np.float32)
    kw = {} if ctm is None else {"coordinate_transformation_mode": ctm}
    for ratio in (1, 2, 3):
        m = _ra_model(x, opset, mode=mode, output_height=3, output_width=4,
                      sampling_ratio=ratio, spatial_scale=0.75, **kw)
        check_model(m, {"x": x, "r": ROIS, "b": BATCH}, atol=1e-5, cuda=ratio == 2)


@pytest.mark.slow
@pytest.mark.parametrize("opset,mode", [(10, "avg"), (16, "max"), (16, "avg")])
def test_roi_align_adaptive_constant_rois(opset, mode):
    """sampling_ratio = 0 with rois known at compile time: per-box sample counts."""
    x = RNG.standard_normal((2, 3, 10, 12)).astype(np.float32)
    m = _ra_model(x, opset, const_rois=True, mode=mode, output_height=2, output_width=3,
                  sampling_ratio=0, spatial_scale=1.0)
    check_model(m, {"x": x}, atol=1e-5, cuda=mode == "max")


def test_roi_align_opset22_against_onnx_reference():
    x = RNG.standard_normal((2, 2, 8, 9)).astype(np.float32)
    m = _ra_model(x, 22, mode="avg", output_height=2, output_width=2, sampling_ratio=2)
    feeds = {"x": x, "r": ROIS, "b": BATCH}
    _check_vs(m, feeds, _reference(m, feeds))


def test_roi_align_adaptive_data_rois_refused_by_compiler():
    """The interpreter runs it (counts from the data); the compiler refuses, naming the node."""
    x = RNG.standard_normal((2, 3, 10, 12)).astype(np.float32)
    m = _ra_model(x, 16, sampling_ratio=0)
    feeds = {"x": x, "r": ROIS, "b": BATCH}
    close(ptxc.interpret(ptxc.import_onnx(m), feeds)["y"], onnxruntime_run(m, feeds)["y"],
          1e-5, 1e-5)
    with pytest.raises(CompileError, match=r"roi_align.*'ra'.*sampling_ratio = 0.*compile time"):
        ptxc.compile(m, target="cpu")
    # the same model compiles once the rois are bound at compile time
    e = ptxc.compile(m, target="cpu", constant_inputs={"r": ROIS})
    close(e.run({"x": x, "b": BATCH})["y"], onnxruntime_run(m, feeds)["y"], 1e-5, 1e-5)


def test_roi_align_bad_batch_index_is_typed():
    x = RNG.standard_normal((2, 1, 4, 4)).astype(np.float32)
    m = _ra_model(x, 16, sampling_ratio=1)
    bad = BATCH.copy()
    bad[2] = 5
    feeds = {"x": x, "r": ROIS, "b": bad}
    with pytest.raises(IndexOutOfRangeError, match="RoiAlign 'ra'"):
        ptxc.interpret(ptxc.import_onnx(m), feeds)
    with pytest.raises(IndexOutOfRangeError, match="RoiAlign 'ra'"):
        ptxc.compile(m, target="cpu").run(feeds)


def test_roi_align_refusals_name_the_node():
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(ModelError, match=r"'ra'.*mode must be avg or max"):
        ptxc.import_onnx(_ra_model(x, 16, mode="sum"))
    with pytest.raises(ModelError, match=r"'ra'.*coordinate_transformation_mode"):
        ptxc.import_onnx(_ra_model(x, 16, coordinate_transformation_mode="align_corners"))
    with pytest.raises(ModelError, match=r"'ra'.*sampling_ratio must be >= 0"):
        ptxc.import_onnx(_ra_model(x, 16, sampling_ratio=-1))


# ---- on the GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_grid_sample_cuda(mode):
    x = RNG.standard_normal((2, 3, 9, 11)).astype(np.float32)
    g = _grid((2, 5, 7, 2))
    for padding in ("zeros", "border", "reflection"):
        m = _gs_model(x, g, mode=mode, padding_mode=padding)
        got = ptxc.compile(m, target="cuda").run({"x": x, "g": g})["y"]
        close(got, onnxruntime_run(m, {"x": x, "g": g})["y"], 1e-5, 1e-5, padding)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_cuda(mode):
    x = RNG.standard_normal((2, 3, 10, 12)).astype(np.float32)
    feeds = {"x": x, "r": ROIS, "b": BATCH}
    m = _ra_model(x, 16, mode=mode, output_height=3, output_width=4, sampling_ratio=2)
    close(ptxc.compile(m, target="cuda").run(feeds)["y"], onnxruntime_run(m, feeds)["y"],
          1e-5, 1e-5)
    m0 = _ra_model(x, 16, const_rois=True, mode=mode, sampling_ratio=0)
    close(ptxc.compile(m0, target="cuda").run({"x": x})["y"],
          onnxruntime_run(m0, {"x": x})["y"], 1e-5, 1e-5)
