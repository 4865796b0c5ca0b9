"""What ``ptxc run`` prints: the outputs, their agreement with a reference run on the same inputs,
and ptxc's latency beside the reference's.

    $ ptxc run light:resnet50 --random-weights
    gpu_0/softmax_1: float32[1, 1000] min 0.000127233 max 0.00501527 mean 0.001
    reference: onnxruntime 1.32.0 (CPU), the same inputs
      gpu_0/softmax_1: max abs error 8.8e-09 (1.8e-06 of its largest value); top-1 agrees (class 713)
      agreement: yes (fp32: within 0.0001 of each output's largest value, every top-1 the same)
    latency: ptxc 1322 ms (cpu, median of 3 runs), onnxruntime 119.1 ms (CPU, median of 16): ...

    check = check_outputs(ours, reference, precision="fp32")    # an Agreement
    model = random_weights(onnx.load("model.onnx"), seed=0)     # a copy with seeded weights

**The reference.** onnxruntime when it is installed (a test dependency of ptxc, not a runtime
one: ``pip install onnxruntime``), on the CPU, or on CUDA when the engine runs on cuda and
onnxruntime has that provider; else ptxc's interpreter (the graph as imported, numpy semantics,
no rewrite), and the output says which. Reduced-precision engines are checked against the fp32
model. A plan file holds no ONNX model, so there is nothing to check it against (``ptxc compare
MODEL --plan PLAN`` does that).

**Agreement** (:func:`check_outputs`): per output, the largest absolute difference and that
difference over the reference's largest magnitude (its scale: a logit of 1e5 and a probability
of 1e-3 are compared at their own scales), and, for an output that holds one vector per sample
(``[N, C]``, ``[N, C, 1, 1]``: class scores), whether each sample's top-1 index is the same. An
output agrees when the relative difference is within the precision's tolerance
(:data:`TOLERANCE`) and every top-1 is the same.

**Latency**: the median of a few runs after a warm-up (at least 3, at most 20, stopping after
about 2 s), ptxc's ``engine.run`` (host arrays in and out, on cuda the copies included) beside the
reference's ``InferenceSession.run`` on the same machine. ``ptxc bench`` measures properly.

**Why random weights** (``--random-weights``, :func:`random_weights`). The nine ``light:`` models
that ship with onnx store every weight as one constant (ConstantOfShape): every class scores
alike (a uniform 0.001 softmax), and two runs agreeing on that proves little. A user's own model
has real weights and needs no flag. The decision: an option that replaces the weights, not a
different default for ``light:`` models (the same name then means one model everywhere: compare,
bench, explore), and not a trained model as the main job (the repository's one,
bench/models/digits_cnn.onnx, classifies 8x8-pixel digits: too small to show a compiler at work;
the README uses it for the shape and int8 flags). The README's main job passes the flag.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time

import attrs
import numpy as np

from ..errors import ModelError, PtxcError

#: how far (relative to an output's largest magnitude) an engine of each precision may be from
#: the fp32 reference and still agree: fp32 only reorders sums; tf32 and fp16 keep 10-bit
#: mantissas (the fp16 tests' bar is 2e-2); int8 rounds every layer to 1/127 of a calibrated
#: range and clips past it (the digits CNN of bench/models, entropy-calibrated: 9e-2), so for
#: int8 the top-1 agreement is what decides and the bound only catches gross errors.
TOLERANCE = {"fp32": 1e-4, "tf32": 2e-2, "fp16": 2e-2, "int8": 2e-1}


# ---- random weights ---------------------------------------------------------------------------

#: the ops whose float constant inputs count as weights, and which inputs
_WEIGHT_INPUTS = {"Conv": (1, 2), "ConvTranspose": (1, 2), "Gemm": (1, 2), "MatMul": (0, 1),
                  "BatchNormalization": (1, 2, 3, 4), "InstanceNormalization": (1, 2),
                  "LayerNormalization": (1, 2), "PRelu": (1,)}
#: inputs that must stay positive: normalization scales and BatchNormalization's variance
_POSITIVE = {("BatchNormalization", 1), ("BatchNormalization", 4),
             ("InstanceNormalization", 1), ("LayerNormalization", 1)}
#: the factor on the scale of a BatchNormalization that a residual Add/Sum reads
RESIDUAL_SCALE = 0.3


def random_weights(model, seed: int = 0):
    """A copy of the ONNX ``model`` whose weights are seeded random values.

    A weight is a float initializer, or the output of a ConstantOfShape whose shape is constant
    (how onnx's light models store theirs), that a Conv, ConvTranspose, Gemm, MatMul, a
    normalization or PRelu reads; other constants (shapes, scales of a Resize, a Clip's bounds)
    keep their values. Draws: normalization scales and BatchNormalization's variance uniform in
    [0.5, 1.5]; tensors of rank 2 or more He-normal over their fan-in; other vectors (biases,
    BatchNormalization's mean and shift) normal with deviation 0.1. The scale of a
    BatchNormalization whose output a residual Add or Sum reads is multiplied by
    :data:`RESIDUAL_SCALE`, as residual networks are initialized (the branch starts small), so
    that the sum does not double block after block: ResNet-50's logits then stay near 1 to 10
    (a softmax with a visible top class) instead of 2e5 (a one-hot softmax).
    """
    import onnx
    from onnx import numpy_helper
    rng = np.random.default_rng(seed)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    readers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    role: dict[str, tuple] = {}   # weight name -> (op type, input index, node)
    for n in g.node:
        for i in _WEIGHT_INPUTS.get(n.op_type, ()):
            if i < len(n.input) and n.input[i]:
                role.setdefault(n.input[i], (n.op_type, i, n))
    residual_bn = {n.output[0] for n in g.node if n.op_type == "BatchNormalization"
                   and any(r.op_type in ("Add", "Sum") for r in readers.get(n.output[0], ()))}

    def draw(name: str, shape: tuple) -> np.ndarray:
        op, i, node = role[name]
        if (op, i) in _POSITIVE:
            arr = rng.uniform(0.5, 1.5, shape)
            if op == "BatchNormalization" and i == 1 and node.output[0] in residual_bn:
                arr = arr * RESIDUAL_SCALE
        elif len(shape) >= 2:
            kt = op == "MatMul" or (op == "Gemm" and not any(
                a.name == "transB" and a.i for a in node.attribute))
            fan_in = shape[-2] if kt else int(np.prod(shape[1:]))
            arr = rng.standard_normal(shape) * np.sqrt(2.0 / max(fan_in, 1))
        else:
            arr = rng.standard_normal(shape) * 0.1
        return arr.astype(np.float32)

    keep, new_inits = [], []
    for n in g.node:
        out = n.output[0] if n.output else ""
        if n.op_type == "ConstantOfShape" and out in role and n.input[0] in inits \
                and _fills_float(n):
            shape = tuple(int(d) for d in numpy_helper.to_array(inits[n.input[0]]))
            new_inits.append(numpy_helper.from_array(draw(out, shape), out))
            continue
        keep.append(n)
    for t in g.initializer:
        if t.name in role and t.data_type == onnx.TensorProto.FLOAT and len(t.dims) >= 1:
            t.CopyFrom(numpy_helper.from_array(draw(t.name, tuple(t.dims)), t.name))
    del g.node[:]
    g.node.extend(keep)
    g.initializer.extend(new_inits)
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    unused = [t.name for t in g.initializer if t.name not in used]
    for name in unused:   # the ConstantOfShapes' shapes: onnxruntime warns about each
        g.initializer.remove(next(t for t in g.initializer if t.name == name))
    if m.ir_version < 4:  # old IR: every initializer is also a graph input
        names = {i.name for i in g.input}
        for name in unused:
            if name in names:
                g.input.remove(next(i for i in g.input if i.name == name))
        for t in new_inits:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims))
    return m


def _fills_float(node) -> bool:
    import onnx
    for a in node.attribute:
        if a.name == "value":
            return a.t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                                     onnx.TensorProto.DOUBLE)
    return True   # no value: zeros of float32


@contextlib.contextmanager
def with_random_weights(args):
    """``args`` itself, or with ``--random-weights`` a copy whose model is a temporary ONNX file
    with :func:`random_weights` (seeded by ``--seed``), removed on leaving."""
    if not getattr(args, "random_weights", False):
        yield args
        return
    from ..cli_options import check_model_file, is_plan, resolve_model
    path = resolve_model(args.model)
    check_model_file(path)
    if is_plan(path):
        raise PtxcError(f"--random-weights does not apply to a plan file ({args.model!r} is "
                        "already compiled); give the ONNX model")
    import argparse
    import onnx
    try:
        model = onnx.load(path)
    except Exception as e:  # noqa: BLE001  (protobuf's own errors)
        raise ModelError(f"{path}: cannot read the ONNX model ({type(e).__name__}: {e})") \
            from None
    with tempfile.TemporaryDirectory(prefix="ptxc-run-") as d:
        tmp = os.path.join(d, os.path.basename(path))
        onnx.save(random_weights(model, seed=args.seed), tmp)
        yield argparse.Namespace(**{**vars(args), "model": tmp})


# ---- the reference ----------------------------------------------------------------------------

@attrs.frozen
class Reference:
    name: str                     # "onnxruntime 1.32.0 (CPU)", "ptxc's interpreter"
    outputs: dict                 # name -> array
    provider: str = ""            # onnxruntime's execution provider: CPU, CUDA
    latency_s: float | None = None
    runs: int = 0
    note: str = ""                # why the interpreter stands in


def median_latency(fn, min_runs: int = 3, max_runs: int = 20, budget_s: float = 2.0):
    """(median seconds, runs): ``fn`` timed after one warm-up call, at least ``min_runs`` times
    and at most ``max_runs``, stopping once ``budget_s`` seconds have passed."""
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_runs and (len(times) < min_runs
                                     or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), len(times)


def onnxruntime_reference(path: str, feeds: dict, target: str, time_it: bool = True) -> Reference:
    """Run the ONNX model at ``path`` in onnxruntime (ImportError when it is not installed;
    PtxcError when it cannot run the model)."""
    import onnxruntime as ort
    providers = ["CPUExecutionProvider"]
    if target == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
        providers.insert(0, "CUDAExecutionProvider")
    so = ort.SessionOptions()
    so.log_severity_level = 3     # errors only: no warnings about unused initializers
    try:
        sess = ort.InferenceSession(path, so, providers=providers)
        names = [o.name for o in sess.get_outputs()]
        outs = dict(zip(names, sess.run(names, feeds)))
        latency, runs = median_latency(lambda: sess.run(names, feeds)) if time_it else (None, 0)
    except Exception as e:  # noqa: BLE001  (onnxruntime's own exception types)
        first = str(e).splitlines()[0] if str(e) else ""
        raise PtxcError(f"onnxruntime could not run the model ({type(e).__name__}: {first})") \
            from None
    provider = sess.get_providers()[0].replace("ExecutionProvider", "")
    return Reference(f"onnxruntime {ort.__version__} ({provider})", outs, provider, latency,
                     runs)


def interpreter_reference(path: str, feeds: dict, note: str = "") -> Reference:
    """The graph as imported (no rewrite), run by ptxc's numpy interpreter."""
    from ..frontend.onnx_import import import_onnx
    from ..ir.interpreter import interpret
    shapes = {k: tuple(v.shape) for k, v in feeds.items()}
    return Reference("ptxc's interpreter (the graph as imported, numpy)",
                     interpret(import_onnx(path, input_shapes=shapes), feeds), note=note)


def reference(path: str, feeds: dict, target: str) -> Reference:
    """onnxruntime's run, else the interpreter's, with the reason in ``note``."""
    try:
        return onnxruntime_reference(path, feeds, target)
    except ImportError:
        note = "onnxruntime is not installed (pip install onnxruntime): no latency to compare"
    except PtxcError as e:
        note = f"{e}: no latency to compare"
    return interpreter_reference(path, feeds, note)


# ---- agreement --------------------------------------------------------------------------------

@attrs.frozen
class OutputCheck:
    name: str
    max_abs: float                 # largest |ours - reference| (inf: a NaN on one side only)
    scale: float                   # the reference's largest magnitude (1 when it is all 0)
    top1: tuple = ()               # per sample: (ours, reference), for class-score outputs
    note: str = ""                 # a shape mismatch

    @property
    def relative(self) -> float:
        return self.max_abs / self.scale

    def agrees(self, tolerance: float) -> bool:
        return not self.note and self.relative <= tolerance and all(a == b for a, b in self.top1)

    def format(self) -> str:
        if self.note:
            return f"{self.name}: {self.note}"
        text = (f"{self.name}: max abs error {self.max_abs:.2g} ({self.relative:.2g} of its "
                f"largest value)")
        if self.top1:
            same = sum(a == b for a, b in self.top1)
            if len(self.top1) == 1:
                a, b = self.top1[0]
                text += (f"; top-1 agrees (class {a})" if a == b
                         else f"; top-1 DIFFERS (class {a}, reference {b})")
            else:
                text += f"; top-1 agrees on {same} of {len(self.top1)} samples"
        return text


def top1(y: np.ndarray) -> np.ndarray | None:
    """Each sample's argmax, for an output of one vector per sample ([N, C], [N, C, 1, 1]):
    a float array of rank 2 or more whose dims after the first have exactly one above 1."""
    y = np.asarray(y)
    if y.ndim < 2 or y.dtype.kind != "f" or sum(d > 1 for d in y.shape[1:]) != 1:
        return None
    return np.argmax(y.reshape(y.shape[0], -1), axis=1)


def check_output(name: str, ours, ref) -> OutputCheck:
    ours, ref = np.asarray(ours), np.asarray(ref)
    if ours.shape != ref.shape:
        return OutputCheck(name, np.inf, 1.0, note=f"shape {list(ours.shape)}, reference "
                           f"{list(ref.shape)}: they differ")
    a, b = ours.astype(np.float64), ref.astype(np.float64)
    with np.errstate(invalid="ignore"):
        d = np.abs(a - b)
    both = np.isnan(a) & np.isnan(b)
    d = np.where(both, 0.0, np.where(np.isnan(d), np.inf, d))
    finite = np.abs(b[np.isfinite(b)])
    scale = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    t_ours, t_ref = top1(a), top1(b)
    pairs = () if t_ours is None else tuple(zip(t_ours.tolist(), t_ref.tolist()))
    return OutputCheck(name, float(d.max()) if d.size else 0.0, scale, pairs)


@attrs.frozen
class Agreement:
    precision: str
    outputs: tuple                 # OutputCheck per output

    @property
    def tolerance(self) -> float:
        return TOLERANCE.get(self.precision, TOLERANCE["fp32"])

    @property
    def agrees(self) -> bool:
        return all(o.agrees(self.tolerance) for o in self.outputs)

    def format(self) -> str:
        lines = ["  " + o.format() for o in self.outputs]
        verdict = "yes" if self.agrees else "NO"
        lines.append(f"  agreement: {verdict} ({self.precision}: within {self.tolerance:g} of "
                     "each output's largest value, every top-1 the same)")
        return "\n".join(lines)


def check_outputs(ours: dict, ref: dict, precision: str = "fp32") -> Agreement:
    """Compare ptxc's outputs with a reference's, output by output (see the module docstring);
    an output the reference lacks is reported as such."""
    checks = []
    for name, y in ours.items():
        if name not in ref:
            checks.append(OutputCheck(name, np.inf, 1.0, note="the reference has no such output"))
        else:
            checks.append(check_output(name, y, ref[name]))
    return Agreement(precision, tuple(checks))


# ---- the report -------------------------------------------------------------------------------

def output_line(name: str, y: np.ndarray) -> str:
    stats = f"min {y.min():.6g} max {y.max():.6g} mean {y.mean():.6g}" if y.size else "empty"
    return f"{name}: {y.dtype}{list(y.shape)} {stats}"


def run_report(engine, feeds: dict, onnx_path: str | None, model_spec: str = "",
               random: bool = False) -> tuple[str, dict]:
    """(the text ``ptxc run`` prints, the outputs): one run's outputs, the check against the
    reference (none for a plan file: ``onnx_path`` None), and the latencies."""
    outputs = engine.run(feeds)
    lines = [output_line(name, y) for name, y in outputs.items()]
    if model_spec.startswith("light:") and not random:
        lines.append(f"note: {model_spec}'s weights are constants, so every class scores "
                     "alike; --random-weights draws seeded random ones")
    ours, runs = median_latency(lambda: engine.run(feeds))
    ref = None
    if onnx_path is None:
        lines.append("reference: none (a plan file holds no ONNX model; `ptxc compare MODEL "
                     "--plan PLAN` checks it against onnxruntime)")
    else:
        ref = reference(onnx_path, feeds, engine.target)
        lines.append(f"reference: {ref.name}, the same inputs"
                     + (f" ({ref.note})" if ref.note else ""))
        lines.append(check_outputs(outputs, ref.outputs, engine.precision).format())
    text = f"latency: ptxc {ours * 1e3:.4g} ms ({engine.target}, median of {runs} runs)"
    if ref is not None and ref.latency_s:
        text += (f", onnxruntime {ref.latency_s * 1e3:.4g} ms ({ref.provider}, median of "
                 f"{ref.runs}): ptxc / onnxruntime {ours / ref.latency_s:.2f}x")
    lines.append(text)
    return "\n".join(lines) + "\n", outputs
