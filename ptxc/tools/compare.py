"""``ptxc compare``: ptxc against onnxruntime on the same inputs, in the spirit of
``polygraphy run --onnxrt``.

    report = compare_model("model.onnx", target="cpu", atol=1e-4, rtol=1e-3, seed=0)
    print(report.format()); sys.exit(0 if report.passed else 1)
    report = compare_model("model.onnx", layerwise=True)   # names the first layer out of bounds

Each output gets its max absolute error, its max relative error (``|ptxc - ort| / |ort|``, as
numpy's ``assert_allclose``; elements where onnxruntime gives 0 count only by their absolute
error) with the index where each occurs, and a verdict: every element within
``|ptxc - ort| <= atol + rtol * |ort|`` (numpy's ``isclose``), NaN where both are NaN.

``layerwise``: the model is first run through ptxc's graph stage to learn which intermediate
tensors survive fusion (the result names of the optimized graph that are tensors of the ONNX
graph; a tensor inside a fused conv+bn+relu exists on neither side once fused, so it cannot be
compared). Those are added as outputs of the ONNX model, and both ptxc and onnxruntime run the
extended model; since every added tensor is materialized anyway, marking it an output does not
change what ptxc fuses. The report lists them in ONNX node order and names the first whose
error exceeds the tolerance (its producing node and op type): where a wrong result starts.
"""

from __future__ import annotations

import attrs
import numpy as np

from ..errors import ModelError, PtxcError


@attrs.frozen
class OutputDiff:
    name: str
    shape: tuple
    max_abs: float
    abs_at: tuple
    max_rel: float
    rel_at: tuple
    bad: int            # elements out of tolerance
    passed: bool
    note: str = ""      # a shape/dtype mismatch or new NaNs
    node: str = ""      # the ONNX node that produces it (op type in brackets)

    def format(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        if self.note:
            return f"{verdict} {self.name}: {self.note}"
        size = int(np.prod(self.shape)) if self.shape else 1
        return (f"{verdict} {self.name}{list(self.shape)}: max abs {self.max_abs:.3g} at "
                f"{list(self.abs_at)}, max rel {self.max_rel:.3g} at {list(self.rel_at)}; "
                f"{self.bad} of {size} out of tolerance"
                + (f"  [{self.node}]" if self.node else ""))


def diff(name: str, got: np.ndarray, ref: np.ndarray, atol: float, rtol: float) -> OutputDiff:
    """Compare one tensor (see the module docstring)."""
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        return OutputDiff(name, ref.shape, np.inf, (), np.inf, (), ref.size, False,
                          f"shape {list(got.shape)}, onnxruntime {list(ref.shape)}")
    if ref.size == 0:
        return OutputDiff(name, ref.shape, 0.0, (), 0.0, (), 0, True)
    a, b = got.astype(np.float64), ref.astype(np.float64)
    with np.errstate(all="ignore"):
        close = np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        d = np.abs(a - b)
        d = np.where(np.isnan(a) & np.isnan(b), 0.0, d)
        d_nan = np.where(np.isnan(d), np.inf, d)
        rel = np.where(b != 0, d_nan / np.abs(b), 0.0)
    ia = int(np.argmax(d_nan))
    ir = int(np.argmax(rel))
    at = lambda i: tuple(int(k) for k in np.unravel_index(i, ref.shape))  # noqa: E731
    bad = int((~close).sum())
    return OutputDiff(name, ref.shape, float(d_nan.reshape(-1)[ia]), at(ia),
                      float(rel.reshape(-1)[ir]), at(ir), bad, bad == 0)


@attrs.frozen
class CompareReport:
    target: str
    precision: str
    atol: float
    rtol: float
    outputs: tuple          # OutputDiff per model output
    layers: tuple = ()      # OutputDiff per surviving intermediate (layerwise), in node order

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs) and all(o.passed for o in self.layers)

    @property
    def first_bad_layer(self) -> OutputDiff | None:
        return next((o for o in self.layers if not o.passed), None)

    def format(self) -> str:
        lines = [f"compare: ptxc ({self.target}, {self.precision}) vs onnxruntime (CPU); "
                 f"atol {self.atol:g}, rtol {self.rtol:g}"]
        if self.layers:
            lines.append(f"layers ({len(self.layers)} intermediate tensors that survive "
                         "fusion, in node order):")
            lines += ["  " + o.format() for o in self.layers]
        lines.append("outputs:")
        lines += ["  " + o.format() for o in self.outputs]
        bad = self.first_bad_layer
        if bad is not None:
            lines.append(f"first layer out of tolerance: {bad.name} [{bad.node}]")
        lines.append("PASSED" if self.passed else "FAILED")
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict:
        return {"target": self.target, "precision": self.precision, "atol": self.atol,
                "rtol": self.rtol, "passed": self.passed,
                "outputs": [attrs.asdict(o) for o in self.outputs],
                "layers": [attrs.asdict(o) for o in self.layers],
                "first_bad_layer": None if self.first_bad_layer is None
                else self.first_bad_layer.name}


def load_onnx(model):
    import onnx
    if isinstance(model, onnx.ModelProto):
        return model
    try:
        return onnx.load(model)
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"{model}: cannot read the ONNX model ({type(e).__name__}: {e})") \
            from None


def surviving_tensors(proto, input_shapes=None, layout: str = "nchw",
                      target: str = "cpu", graph_passes=None) -> list[str]:
    """The intermediate tensors of ``proto`` that ptxc's optimized graph still computes, in ONNX
    node order (see the module docstring)."""
    from ..compiler import as_module, run_stages
    from ..dialects.func import func_body, get_func
    module = as_module(proto.SerializeToString(), input_shapes)
    run_stages(module, "graph", layout=layout, target=target, graph_passes=graph_passes)
    names = {r.name_hint for op in func_body(get_func(module, "main")).ops
             for r in op.results if r.name_hint}
    outputs = {o.name for o in proto.graph.output}
    inits = {i.name for i in proto.graph.initializer}
    order = []
    for n in proto.graph.node:
        if n.op_type in ("Constant", "ConstantOfShape"):
            continue
        for t in n.output:
            if t and t in names and t not in outputs and t not in inits and t not in order:
                order.append(t)
    return order


def with_outputs(proto, names: list[str]):
    """A copy of ``proto`` whose graph also outputs ``names`` (types from shape inference)."""
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    try:
        inferred = onnx.shape_inference.infer_shapes(m)
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"layerwise: ONNX shape inference failed ({e})") from None
    infos = {v.name: v for v in inferred.graph.value_info}
    missing = [n for n in names if n not in infos]
    for n in names:
        if n in infos:
            m.graph.output.append(infos[n])
    return m, [n for n in names if n not in missing]


def run_onnxruntime(proto, feeds: dict) -> dict:
    try:
        import onnxruntime as ort
    except ImportError:
        raise PtxcError("ptxc compare needs onnxruntime (pip install onnxruntime)") from None
    try:
        sess = ort.InferenceSession(proto.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(names, feeds)))
    except Exception as e:  # noqa: BLE001
        raise PtxcError(f"onnxruntime could not run the model: {type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else ''}") from None


def node_labels(proto) -> dict:
    """Tensor name -> ``node (OpType)`` of the node producing it."""
    out = {}
    for i, n in enumerate(proto.graph.node):
        for t in n.output:
            out[t] = f"{n.name or f'{n.op_type}_{i}'} ({n.op_type})"
    return out


def compare_model(model, *, target: str = "cpu", precision: str = "fp32", atol: float = 1e-4,
                  rtol: float = 1e-3, seed: int = 0, inputs: dict | None = None,
                  input_shapes: dict | None = None, layerwise: bool = False,
                  engine=None, make_feeds=None, layout: str = "nchw",
                  graph_passes=None) -> CompareReport:
    """Run ptxc and onnxruntime on the same inputs and compare (see the module docstring).
    ``engine``: a compiled engine to use instead of compiling (its outputs must be the model's;
    not with ``layerwise``). ``make_feeds(engine)``: the inputs, else seeded random normal
    (``inputs`` overriding by name). ``graph_passes``: compile's (default graph-opt)."""
    from ..compiler import compile as compile_model
    proto = load_onnx(model)
    layers: list[str] = []
    if layerwise:
        if engine is not None:
            raise PtxcError("layerwise compares a model, not a compiled engine or plan")
        proto, layers = with_outputs(proto, surviving_tensors(proto, input_shapes, layout,
                                                              target, graph_passes))
    if engine is None:
        engine = compile_model(proto, target=target, precision=precision,
                               input_shapes=input_shapes, layout=layout,
                               graph_passes=graph_passes)
    if make_feeds is not None:
        feeds = make_feeds(engine)
    else:
        rng = np.random.default_rng(seed)
        feeds = {}
        for name, t in engine.inputs.items():
            if inputs and name in inputs:
                feeds[name] = np.asarray(inputs[name])
            elif t.element.is_float:
                feeds[name] = rng.standard_normal(t.shape).astype(t.element.np_dtype)
            else:
                feeds[name] = np.zeros(t.shape, t.element.np_dtype)
    got = engine.run(feeds)
    ref = run_onnxruntime(proto, feeds)
    labels = node_labels(proto)
    model_outputs = [o.name for o in proto.graph.output if o.name not in layers]

    def one(n):
        if n not in got:
            return OutputDiff(n, (), np.inf, (), np.inf, (), 0, False,
                              "ptxc has no such output", labels.get(n, ""))
        return attrs.evolve(diff(n, got[n], ref[n], atol, rtol), node=labels.get(n, ""))
    return CompareReport(engine.target, getattr(engine, "precision", precision), atol, rtol,
                         tuple(one(n) for n in model_outputs), tuple(one(n) for n in layers))
