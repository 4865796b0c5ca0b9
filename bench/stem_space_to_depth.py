"""The experiment that led to the cuda graph pass ``space-to-depth-stem`` (ptxc/rewrite/passes/
space_to_depth.py, the ``crd`` form below, session 17): rewrite a network's stem convolution
(7x7, stride 2, on a few channels: ResNet's) as a space-to-depth of its input and a 4x4
stride-1 convolution on 4x the channels, so that an implicit-GEMM gather reads 16 contiguous
bytes per int8 copy where the 7x7 conv reads 4 (one pixel). The rewrites here are ONNX
rewrites, for timing forms the pass does not make.

    PYTHONPATH=. python3 bench/stem_space_to_depth.py [--form pad|shifted]

prints the rewrite's largest logit difference against the original through onnxruntime (random
weights, ResNet-50 light model, batch 1) and the first kernels ptxc compiles for cuda (fp16;
no GPU needed). Two exact forms (``W`` the 7x7 filter, ``x`` the image):

* ``pad``: ``Pad(x, 3) -> SpaceToDepth(2) -> Conv4x4(W')`` with ``W'[o, (by, bx, c), i, j] =
  W[o, c, 2i + by, 2j + bx]`` (0 past 6). Measured on the H200 (bench/history/2026-12-03.md, session 16):
  the stem kernel int8 74.9 -> 57.6 us, fp16 80.6 -> 68.1, but the input preparation became 4
  kernels and the network slower (int8 0.992 -> 1.049 ms).
* ``shifted``: ``SpaceToDepth(x, 2) -> Conv4x4(W'', pads 2, 2, 1, 1)`` where ``W''`` is ``W``
  moved into an 8x8 filter whose first row and column are zero (input row ``2 oh - 4 + k'``
  for ``k' = k + 1``, so a block row is ``oh - 2 + k' // 2``): no pad before the
  space-to-depth, which is then a reshape and a transpose of the input. It compiles to 2
  preparation kernels and the border fill (the transpose stored by a kernel of its own, as a
  reshape merging the block dims stands before the cast); with the tensor stage's
  ``sink-collapse-reshapes`` (ptxc/lower/sink_reshapes.py, cuda's default since) to one and the
  fill, as the 7x7 stem has (tests/test_sink_reshapes.py). Time it with ``bench/
  resnet50_int8.py --gpu --variant stem-s2d``: not timed yet.
* ``crd``: ``shifted`` with the space-to-depth's channels in (c, by, bx) order (a Reshape, a
  Transpose and a Reshape: SpaceToDepth has only (by, bx, c)). Padding its 12 channels to 16
  then pads c from 3 to 4, which sink-collapse-reshapes moves above the merging reshape so
  that the preparation kernel writes the padded tensor's interior: 16 channels, one 16-byte
  cp.async per pixel in int8 (``--variant "stem-s2d-crd channels-16"``).
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _stem(model):
    """(index, node, filter) of the first 7x7 stride-2 Conv, or ValueError."""
    inits = {t.name: t for t in model.graph.initializer}
    for i, n in enumerate(model.graph.node):
        if n.op_type != "Conv" or n.input[1] not in inits:
            continue
        w = numpy_helper.to_array(inits[n.input[1]])
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if w.shape[2:] == (7, 7) and list(attrs.get("strides", [1, 1])) == [2, 2] and \
                list(attrs.get("pads", [0] * 4)) == [3, 3, 3, 3] and attrs.get("group", 1) == 1:
            return i, n, w
    raise ValueError("no 7x7 stride-2 convolution with pads 3")


def _add_initializer(model, array, name):
    model.graph.initializer.append(numpy_helper.from_array(array, name))
    if model.ir_version < 4:   # initializers were graph inputs before IR 4
        model.graph.input.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape)))


def blocked_filter(w, shift: int):
    """``W'[o, (by, bx, c), i, j] = W8[o, c, 2i + by, 2j + bx]``, W8 the 7x7 filter placed at
    offset ``shift`` (0 or 1) in an 8x8 one of zeros (channel order: SpaceToDepth's DCR)."""
    o, c = w.shape[:2]
    w8 = np.zeros((o, c, 8, 8), w.dtype)
    w8[:, :, shift:shift + 7, shift:shift + 7] = w
    out = np.zeros((o, 4 * c, 4, 4), w.dtype)
    for by in range(2):
        for bx in range(2):
            out[:, (2 * by + bx) * c:(2 * by + bx + 1) * c] = w8[:, :, by::2, bx::2]
    return out


def crd_filter(w):
    """``blocked_filter(w, 1)`` with its channels in (c, by, bx) order, the order of the
    ``crd`` form's space-to-depth: channel ``4 c + 2 by + bx`` (the compiler pass's filter)."""
    from ptxc.rewrite.passes.space_to_depth import blocked_filter as pass_filter
    return pass_filter(w, (1, 1), (4, 4))


def _crd_space_to_depth(m, x, shape):
    """Reshape / Transpose / Reshape nodes of a space-to-depth of ``x`` (NCHW ``shape``) with
    channels (c, by, bx), and the name of its result."""
    n, c, h, w = shape
    _add_initializer(m, np.array([n, c, h // 2, 2, w // 2, 2], np.int64), "stem_s2d_split")
    _add_initializer(m, np.array([n, 4 * c, h // 2, w // 2], np.int64), "stem_s2d_merge")
    return [helper.make_node("Reshape", [x, "stem_s2d_split"], ["stem_s2d_blocks"]),
            helper.make_node("Transpose", ["stem_s2d_blocks"], ["stem_s2d_crd"],
                             perm=[0, 1, 3, 5, 2, 4]),
            helper.make_node("Reshape", ["stem_s2d_crd", "stem_s2d_merge"], ["stem_s2d"])]


def _input_shape(model, name):
    for v in model.graph.input:
        if v.name == name:
            dims = [d.dim_value for d in v.type.tensor_type.shape.dim]
            if len(dims) == 4 and all(dims):
                return dims
    raise ValueError(f"the crd form needs the stem's input {name!r} to be a graph input of "
                     "static NCHW shape")


def rewrite(model, form: str = "shifted"):
    """A copy of ``model`` with its stem rewritten (module docstring)."""
    if form not in ("pad", "shifted", "crd"):
        raise ValueError(f"form must be pad, shifted or crd, not {form!r}")
    m = copy.deepcopy(model)
    i, node, w = _stem(m)
    g = m.graph
    x = node.input[0]
    new = []
    if form == "pad":
        pads = [0, 0, 3, 3, 0, 0, 3, 3]
        opset = max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
        if opset >= 11:
            _add_initializer(m, np.array(pads, np.int64), "stem_s2d_pads")
            new.append(helper.make_node("Pad", [x, "stem_s2d_pads"], ["stem_s2d_padded"]))
        else:
            new.append(helper.make_node("Pad", [x], ["stem_s2d_padded"], pads=pads))
        x = "stem_s2d_padded"
        conv_pads, wb = [0, 0, 0, 0], blocked_filter(w, 0)
    elif form == "shifted":
        conv_pads, wb = [2, 2, 1, 1], blocked_filter(w, 1)
    else:
        conv_pads, wb = [2, 2, 1, 1], crd_filter(w)
    if form == "crd":
        new += _crd_space_to_depth(m, x, _input_shape(m, x))
    else:
        new.append(helper.make_node("SpaceToDepth", [x], ["stem_s2d"], blocksize=2))
    wname = node.input[1] + "_s2d"
    _add_initializer(m, wb, wname)
    new.append(helper.make_node("Conv", ["stem_s2d", wname] + list(node.input[2:]),
                                list(node.output), name=node.name, kernel_shape=[4, 4],
                                strides=[1, 1], pads=conv_pads))
    del g.node[i]
    for k, n in enumerate(new):
        g.node.insert(i + k, n)
    return m


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--form", default="shifted", choices=("pad", "shifted", "crd"))
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from support import light_models as L
    import onnxruntime as ort

    import ptxc
    model = L.with_random_weights(L.load("resnet50"))
    rewritten = rewrite(model, args.form)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    so = ort.SessionOptions()
    so.log_severity_level = 3

    def run(m):
        s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return s.run(None, {m.graph.input[0].name: x})[0]
    a, b = run(model), run(rewritten)
    print(f"logits: max |difference| {np.abs(a - b).max():.3g} of max |logit| "
          f"{np.abs(a).max():.3g}")
    engine = ptxc.compile(rewritten, target="cuda", layout="nhwc", precision="fp16")
    for k in engine.kernels.kernels[:6]:
        print(k.name, k.schedule, getattr(k, "tile", None) or "", k.grid, k.block)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
