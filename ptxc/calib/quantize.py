"""Implicit INT8 quantization from a calibration table (TensorRT's ``--int8 --calib``), as an
insertion of Q/DQ pairs that the explicit path (fold-qdq) then turns into int8 layers.

    table = ptxc.calib.calibrate(model, data, "entropy")
    module = ptxc.calib.quantize_int8(model, table)      # graph module with Q/DQ pairs
    engine = ptxc.compile(module, target="cpu")           # graph-opt folds them into int8 ops

Batch norms (and per-channel multiplies and adds by constants) after a conv, gemm or matmul are
folded into its float weights and bias first (the ``fold-batchnorm`` pass, as TensorRT folds them
before it quantizes): the per-channel weight scales then absorb the batch norm's scale, and the
int8 layer's epilogue is one requantization, not a requantization followed by a float
scale and shift (ONNX's ResNet-50 keeps its batch norms; in its layer-1 residual conv that
was two more multiplies, an add and two per-channel loads per output). Folding keeps the folded
op's result name, so the calibration table's names still apply.

For every conv, gemm and matmul with constant float weights (not named in ``exclude``):

* its weights become ``DQ(wq, ws[c])``: symmetric per output channel, ``ws[c] = max|w[c]| / 127``
  and ``wq = rint(w / ws)`` in [-127, 127];
* its input activation ``x`` (calibrated: ``amax`` in the table) becomes ``DQ(Q(x, s))`` with the
  symmetric per-tensor ``s = amax / 127``, zero point 0, int8; every reader of ``x`` reads the
  dequantized value (one pair per tensor), so a layer producing ``x`` ends in the Q and stores
  int8 (no Q/DQ pairs are left between int8 layers once folded).

An add of two int8 layers' outputs (a residual block's last conv and its projection shortcut)
quantizes the shortcut the same way (:func:`_quantize_residual_branches`): it is stored int8
and read as the other layer's int8 residual.

Layers that are skipped (an ``exclude``d ONNX node name, a non-constant weight, a gemm with
alpha/beta not 1, an input without a calibrated range) stay fp32; ``report`` lists, per layer,
what precision it got and why. Scales come from the table alone, so a table read from the
calibration cache gives the same module, bit for bit.
"""

from __future__ import annotations

import numpy as np

from ..dialects.func import func_body, get_func
from ..ir.attributes import DenseElements
from ..ir.builder import Builder
from ..ir.core import OpResult
from ..ir.types import F32, I8

QMAX = 127
LAYERS = ("graph.conv", "graph.gemm", "graph.matmul")


def _weight_axis(op) -> int | None:
    if op.name == "graph.conv":
        return 0
    if op.name == "graph.gemm":
        return 0 if op.attr("transB") else 1
    w = op.operands[1].type
    return 1 if w.rank == 2 else None


def quantize_weights(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(int8 weights, float32 scales along ``axis``): symmetric per channel."""
    other = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.abs(w).max(axis=other).astype(np.float32)
    scale = np.where(amax > 0, amax / np.float32(QMAX), np.float32(1.0)).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -QMAX, QMAX).astype(np.int8)
    return q, scale


def quantize_int8(model, table, exclude=(), report: list | None = None):
    """A graph module of ``model`` with Q/DQ pairs from ``table`` (a CalibrationTable or a dict
    tensor name -> amax); see the module docstring. ``report`` (a list) receives one
    ``(layer, precision, why)`` per conv/gemm/matmul."""
    from ..frontend.load import as_module
    from ..rewrite.pass_manager import PassManager
    amax = table.amax if hasattr(table, "amax") else dict(table)
    module = as_module(model)
    PassManager("fold-batchnorm").run(module)
    body = func_body(get_func(module, "main"))
    exclude = set(exclude)
    pairs: dict = {}    # activation -> its DQ
    origin: dict = {}   # DQ -> activation
    int8_layers = set()
    for op in list(body.ops):
        if op.name not in LAYERS:
            continue
        label = op.loc or op.name
        x = op.operands[0]
        src = origin.get(x, x)  # a sibling layer already paired x: its readers read the DQ
        why = _skip_reason(op, src, amax, exclude)
        if why is not None:
            if report is not None:
                report.append((label, "fp32", why))
            continue
        w = op.operands[1]
        if src not in pairs:
            pairs[src] = _insert_pair(body, src, float(amax[src.name_hint]) / QMAX)
            origin[pairs[src]] = src
        axis = _weight_axis(op)
        wq, ws = quantize_weights(w.op.attributes["value"].array, axis)
        b = Builder.before_op(op)
        cq = b.create("graph.constant", [], {"value": DenseElements(wq)}).result
        cs = b.create("graph.constant", [], {"value": DenseElements(ws)}).result
        cz = b.create("graph.constant", [], {"value": DenseElements(
            np.zeros(ws.shape, np.int8))}).result
        op.set_operand(1, b.create("graph.dequantize_linear", [cq, cs, cz],
                                   {"axis": axis}).result)
        int8_layers.add(op)
        if report is not None:
            report.append((label, "int8", "per-channel weights, per-tensor input "
                                          f"(amax {float(amax[src.name_hint]):.6g})"))
    _quantize_residual_branches(body, amax, int8_layers)
    return module


#: ops a layer's output may pass through and still count as that layer's output (a batch norm
#: graph-opt folds into the conv)
_THROUGH = ("graph.batch_normalization",)


def _layer_output(v, int8_layers) -> bool:
    """``v`` is the output of an int8 layer (through a batch norm)."""
    op = v.op if isinstance(v, OpResult) else None
    while op is not None and op.name in _THROUGH:
        x = op.operands[0]
        op = x.op if isinstance(x, OpResult) else None
    return op is not None and op in int8_layers


def _quantize_residual_branches(body, amax, int8_layers) -> None:
    """``add(a, b)`` (or a two-input ``sum``) of two int8 layers' float outputs (a ResNet
    block's last conv and its projection shortcut): the later-defined one gets a Q/DQ pair, as
    TensorRT stores the shortcut in int8. Its layer then ends in the Q (fold-qdq: an int8
    result, a quarter of the bytes) and the other layer takes the add into its epilogue with an
    int8 residual (fuse-epilogues, fold-qdq's output units). Without it the shortcut conv wrote
    f32 and the block's last conv read it: in ResNet-50 both that shortcut conv and the conv
    reading its f32 output were slower than the next block's, whose residual is int8
    (bench/history/2026-12-02.md). An add whose operand is already dequantized (an
    identity shortcut: the previous block's output, paired as a conv input) has nothing to do."""
    order = {op: i for i, op in enumerate(body.ops)}
    for op in list(body.ops):
        if op.name not in ("graph.add", "graph.sum") or len(op.operands) != 2:
            continue   # graph.sum: ONNX's Sum of two (ONNX's model zoo ResNet-50) is an add
        a, b = op.operands
        if a.type != b.type or a.type.element != F32:
            continue
        if not all(_layer_output(v, int8_layers) for v in (a, b)):
            continue
        later = max((a, b), key=lambda v: order.get(v.op, -1))
        scale = float(amax.get(later.name_hint, 0.0)) / QMAX
        if scale > 0:
            _insert_pair(body, later, scale)


def _skip_reason(op, x, amax, exclude) -> str | None:
    if op.loc in exclude:
        return "excluded (precision override)"
    w = op.operands[1]
    if x.type.element != F32 or w.type.element != F32:
        return f"not f32 ({x.type.element})"
    if not (isinstance(w, OpResult) and w.op.name == "graph.constant"):
        return "weights are not a constant"
    if _weight_axis(op) is None:
        return "batched matmul weights"
    if op.name == "graph.gemm" and (op.attr("alpha") != 1.0 or op.attr("beta") != 1.0
                                    or op.attr("transA")):
        return "gemm with alpha/beta not 1 or transA"
    a = amax.get(x.name_hint)
    if a is None:
        return f"input {x.name_hint!r} has no calibrated range"
    if not a > 0:
        return f"input {x.name_hint!r} is all zeros on the calibration data"
    return None


def _insert_pair(body, x, scale: float):
    """``DQ(Q(x))`` right after ``x`` is defined; every other reader of ``x`` reads the DQ."""
    b = Builder.after_op(x.op) if isinstance(x, OpResult) else Builder.before_op(body.first_op)
    s = b.create("graph.constant", [], {"value": DenseElements(np.array(scale, np.float32))})
    z = b.create("graph.constant", [], {"value": DenseElements(np.array(0, np.int8))})
    q = b.create("graph.quantize_linear", [x, s.result, z.result], {"axis": 0, "to": I8},
                 result_names=[f"{x.name_hint}.q"])
    dq = b.create("graph.dequantize_linear", [q.result, s.result, z.result], {"axis": 0},
                  result_names=[f"{x.name_hint}.dq"])
    x.replace_uses_if(dq.result, lambda use: use.op is not q)
    return dq.result
