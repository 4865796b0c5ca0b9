"""Issue 10's accuracy bar on real data: the digits CNN (bench/digits_int8.py: trained on
scikit-learn's bundled digits, committed with its held-out split), int8 with the entropy
calibrator on 500 training images, is within 0.5 points of fp32's accuracy on the 450 held-out
images; fp16 too. The reference is the images' labels. On the cpu engine, and (marker gpu) on
the cuda engine."""

import pytest

import ptxc

from support import bench_scripts


@pytest.mark.slow
@pytest.mark.parametrize("target", [
    "cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_digits_int8_entropy_within_half_a_point_of_fp32(target):
    from ptxc.calib import calibrate, quantize_int8
    d = bench_scripts.load("digits_int8")
    xtr, xte, ytr, yte = d.load_split()
    batch = 50
    module = ptxc.import_onnx(d.MODEL, input_shapes={"x": (batch, 1, 8, 8)})
    fp32 = d.accuracy(module, xte, yte, batch, target=target)
    fp16 = d.accuracy(module, xte, yte, batch, target=target, precision="fp16")
    table = calibrate(module, [{"x": xtr[i:i + batch]} for i in range(0, d.CALIB, batch)],
                      "entropy", progress=False)
    report = []
    int8 = d.accuracy(quantize_int8(module, table, report=report), xte, yte, batch,
                      target=target)
    assert all(r[1] == "int8" for r in report), report      # every layer ran int8
    assert fp32 > 90.0                                       # the model learnt the digits
    assert abs(int8 - fp32) <= 0.5 and abs(fp16 - fp32) <= 0.5, (fp32, fp16, int8)
