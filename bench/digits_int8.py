"""INT8 accuracy on real data without a download: a small CNN trained on scikit-learn's bundled
digits (8x8 grey images, 1797 samples) on the CPU with numpy, exported to ONNX, then evaluated on
the held-out split in fp32, fp16 and in int8 with each calibrator (ptxc.calib), on ptxc's cpu
engine or (``--target cuda``) its cuda engine.

    PYTHONPATH=. python bench/digits_int8.py            # train (if needed), evaluate, print
    PYTHONPATH=. python bench/digits_int8.py --retrain  # train again, overwrite the model
    PYTHONPATH=. python bench/digits_int8.py --target cuda

The trained model is committed (bench/models/digits_cnn.onnx) so the evaluation is repeatable;
training takes well under a minute (numpy, Adam, seed 0). Split: sklearn's train_test_split,
test_size=0.25, random_state=0 (1347 train, 450 held out), committed too
(bench/models/digits_split.npz, 60 KB), so a machine without scikit-learn (the GPU machine)
evaluates the same images. Calibration: the first 500 training images (TensorRT's guidance: a
few hundred representative samples).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "models", "digits_cnn.onnx")
SPLIT = os.path.join(HERE, "models", "digits_split.npz")
CALIB = 500


def split_from_sklearn():
    """(x_train, x_test, y_train, y_test) from scikit-learn's bundled digits."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]          # (N, 1, 8, 8) in [0, 1]
    return train_test_split(x, d.target, test_size=0.25, random_state=0)


def save_split(parts, path: str = SPLIT) -> None:
    """The split as uint8 pixels 0..16 (exact: the images are counts) and uint8 labels."""
    xtr, xte, ytr, yte = parts
    np.savez_compressed(path, xtr=np.rint(xtr * 16).astype(np.uint8),
                        xte=np.rint(xte * 16).astype(np.uint8),
                        ytr=ytr.astype(np.uint8), yte=yte.astype(np.uint8))


def load_split(path: str = SPLIT):
    """The committed split (:func:`save_split`), pixels back in [0, 1] as float32."""
    d = np.load(path)
    return (d["xtr"].astype(np.float32) / 16.0, d["xte"].astype(np.float32) / 16.0,
            d["ytr"].astype(np.int64), d["yte"].astype(np.int64))


# ---- a numpy CNN: conv3x3(16)+relu, conv3x3 s2(32)+relu, flatten, gemm(10) -----------------

def _cols(x, stride):
    """im2col of a 3x3, pad-1 convolution: (N*Ho*Wo, C*9) and the output size."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ho, wo = (h - 1) // stride + 1, (w - 1) // stride + 1
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    win = win[:, :, ::stride, ::stride][:, :, :ho, :wo]            # (N, C, Ho, Wo, 3, 3)
    return win.transpose(0, 2, 3, 1, 4, 5).reshape(n * ho * wo, c * 9), (ho, wo)


def _uncols(dcols, shape, stride, hw):
    n, c, h, w = shape
    ho, wo = hw
    d = dcols.reshape(n, ho, wo, c, 3, 3)
    dxp = np.zeros((n, c, h + 2, w + 2), np.float32)
    for i in range(3):
        for j in range(3):
            dxp[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride] += \
                d[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return dxp[:, :, 1:-1, 1:-1]


def _conv(x, w, b, stride):
    cols, (ho, wo) = _cols(x, stride)
    y = cols @ w.reshape(w.shape[0], -1).T + b
    return y.reshape(x.shape[0], ho, wo, -1).transpose(0, 3, 1, 2), cols, (ho, wo)


def train(x, y, epochs=8, seed=0):
    rng = np.random.default_rng(seed)

    def he(*s):
        return (rng.standard_normal(s) * np.sqrt(2.0 / np.prod(s[1:]))).astype(np.float32)

    p = {"w1": he(16, 1, 3, 3), "b1": np.zeros(16, np.float32),
         "w2": he(32, 16, 3, 3), "b2": np.zeros(32, np.float32),
         "wf": he(10, 512), "bf": np.zeros(10, np.float32)}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v2 = {k: np.zeros_like(v) for k, v in p.items()}
    lr, step = 2e-3, 0
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for i in range(0, len(x), 32):
            idx = order[i:i + 32]
            xb, yb = x[idx], y[idx]
            c1, cols1, hw1 = _conv(xb, p["w1"], p["b1"], 1)
            r1 = np.maximum(c1, 0)
            c2, cols2, hw2 = _conv(r1, p["w2"], p["b2"], 2)
            r2 = np.maximum(c2, 0)
            f = r2.reshape(len(xb), -1)
            z = f @ p["wf"].T + p["bf"]
            e = np.exp(z - z.max(axis=1, keepdims=True))
            prob = e / e.sum(axis=1, keepdims=True)
            dz = prob
            dz[np.arange(len(xb)), yb] -= 1
            dz /= len(xb)
            g = {"wf": dz.T @ f, "bf": dz.sum(0)}
            dr2 = (dz @ p["wf"]).reshape(r2.shape) * (c2 > 0)
            d2 = dr2.transpose(0, 2, 3, 1).reshape(-1, 32)
            g["w2"], g["b2"] = (d2.T @ cols2).reshape(p["w2"].shape), d2.sum(0)
            dr1 = _uncols(d2 @ p["w2"].reshape(32, -1), r1.shape, 2, hw2) * (c1 > 0)
            d1 = dr1.transpose(0, 2, 3, 1).reshape(-1, 16)
            g["w1"], g["b1"] = (d1.T @ cols1).reshape(p["w1"].shape), d1.sum(0)
            step += 1
            for k in p:  # Adam
                m[k] = 0.9 * m[k] + 0.1 * g[k]
                v2[k] = 0.999 * v2[k] + 0.001 * g[k] ** 2
                mh, vh = m[k] / (1 - 0.9 ** step), v2[k] / (1 - 0.999 ** step)
                p[k] = (p[k] - lr * mh / (np.sqrt(vh) + 1e-8)).astype(np.float32)
    return p


def export(p, path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             n("Relu", ["c1"], ["r1"], name="relu1"),
             n("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1],
               strides=[2, 2]),
             n("Relu", ["c2"], ["r2"], name="relu2"),
             n("Flatten", ["r2"], ["f"], name="flatten"),
             n("Gemm", ["f", "wf", "bf"], ["logits"], name="fc", transB=1)]
    g = helper.make_graph(
        nodes, "digits_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                            ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(v, k) for k, v in p.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model, path)


# ---- evaluation ----------------------------------------------------------------------------------

def accuracy(module_or_model, x, y, batch, input_shapes=None, target="cpu",
             precision="fp32") -> float:
    import ptxc
    engine = ptxc.compile(module_or_model, target=target, input_shapes=input_shapes,
                          precision=precision)
    hits = 0
    for i in range(0, len(x), batch):
        out = engine.run({"x": x[i:i + batch]})["logits"]
        hits += int((out.argmax(1) == y[i:i + batch]).sum())
    return 100.0 * hits / len(x)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--retrain", action="store_true",
                    help="train again (needs scikit-learn); rewrites the model and the split")
    ap.add_argument("--target", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    if args.retrain or not os.path.exists(SPLIT):
        save_split(split_from_sklearn())
    xtr, xte, ytr, yte = load_split()
    if args.retrain or not os.path.exists(MODEL):
        t0 = time.perf_counter()
        export(train(xtr, ytr), MODEL)
        print(f"trained and exported in {time.perf_counter() - t0:.1f} s -> {MODEL}")
    tgt = {"target": args.target}
    import ptxc
    from ptxc.calib import calibrate, quantize_int8
    batch = 50                       # 450 = 9 x 50 held-out images; 500 = 10 x 50 calibration
    shapes = {"x": (batch, 1, 8, 8)}
    module = ptxc.import_onnx(MODEL, input_shapes=shapes)
    rows = [("fp32", "-", accuracy(module, xte, yte, batch, **tgt)),
            ("fp16", "-", accuracy(module, xte, yte, batch, precision="fp16", **tgt))]
    calib = [{"x": xtr[i:i + batch]} for i in range(0, CALIB, batch)]
    for method in ("entropy", "minmax", "percentile", "mse"):
        t0 = time.perf_counter()
        table = calibrate(module, calib, method, progress=False)
        tc = time.perf_counter() - t0
        report = []
        q = quantize_int8(module, table, report=report)
        assert all(r[1] == "int8" for r in report), report
        rows.append(("int8", f"{method} ({tc:.1f} s)", accuracy(q, xte, yte, batch, **tgt)))
    print(f"digits CNN, held-out {len(xte)} images, calibration {CALIB} training images, "
          f"ptxc {args.target} engine")
    print("| precision | calibrator (calibration time) | accuracy % | vs fp32 (points) |")
    print("|---|---|---:|---:|")
    for prec, cal, acc in rows:
        print(f"| {prec} | {cal} | {acc:.2f} | {acc - rows[0][2]:+.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"precision": p, "calibrator": c, "accuracy": a, "target": args.target}
                       for p, c, a in rows], f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
