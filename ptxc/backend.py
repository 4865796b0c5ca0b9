"""ptxc as an ONNX backend (``onnx.backend.base.Backend``), as onnx-tensorrt offers one.

    rep = ptxc.backend.prepare(model, device="CPU")
    outputs = rep.run([x])          # a list in the order of the model's inputs

This is how the ONNX backend test suite drives ptxc. The model is imported when it is prepared.
Two things an ONNX backend must accept that ptxc's static compile API asks for explicitly are
bound from the first ``run``'s inputs instead, as TensorRT binds them from an optimization profile:
symbolic input dimensions (``input_shapes``) and inputs that decide a shape
(``constant_inputs``). Such a rep recompiles when a later run's inputs differ in those respects.

Device "CPU" has two modes: ``compile`` (the default: graph-opt, the lowerings and the LLVM JIT,
an Engine) and ``interpret`` (the graph-dialect interpreter on the imported graph, the reference).
Device "CUDA" (compile mode only) compiles with ``target="cuda"``: PTX run on the current GPU.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from .errors import ModelError, ShapeInputError
from .frontend.onnx_import import import_onnx, load_model
from .ir.interpreter import interpret


class PtxcRep(BackendRep):
    def __init__(self, model: onnx.ModelProto, mode: str = "compile", target: str = "cpu"):
        if mode not in ("compile", "interpret"):
            raise ValueError(f"mode must be 'compile' or 'interpret', not {mode!r}")
        self.model = model
        self.mode = mode
        self.target = target
        inits = {t.name for t in model.graph.initializer}
        self.input_names = [vi.name for vi in model.graph.input if vi.name not in inits]
        self.output_names = [vi.name for vi in model.graph.output]
        self.module = None
        self.engine = None
        self.engine_key = None
        self.bound_key = None
        self.shape_inputs: tuple[str, ...] = ()
        try:
            self.module = import_onnx(model)
        except ShapeInputError as e:
            if not e.inputs:
                raise
            self.shape_inputs = e.inputs
        except ModelError as e:
            if "symbolic" not in str(e) and "has no shape" not in str(e):
                raise

    def _bind(self, feeds: dict) -> None:
        """(Re)import with symbolic dims and shape inputs bound from these inputs."""
        consts = {n: feeds[n] for n in self.shape_inputs}
        shapes = {n: np.shape(x) for n, x in feeds.items() if n not in consts}
        key = (tuple(sorted((n, s) for n, s in shapes.items())),
               tuple((n, np.asarray(x).tobytes()) for n, x in sorted(consts.items())))
        if key == self.bound_key:
            return
        while True:
            try:
                self.module = import_onnx(self.model, input_shapes=shapes, constant_inputs=consts)
                break
            except ShapeInputError as e:
                new = [n for n in e.inputs if n not in consts]
                if not new:
                    raise
                self.shape_inputs += tuple(new)
                consts.update({n: feeds[n] for n in new})
                shapes = {n: s for n, s in shapes.items() if n not in consts}
        self.bound_key = key

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if not isinstance(inputs, (list, tuple)):
                inputs = [inputs]
            feeds = dict(zip(self.input_names, inputs))
        if self.module is None or self.shape_inputs or self.bound_key is not None:
            self._bind(feeds)
        runtime = {n: x for n, x in feeds.items() if n not in self.shape_inputs}
        if self.mode == "interpret":
            out = interpret(self.module, runtime)
        else:
            if self.engine is None or self.engine_key != self.bound_key:
                from .compiler import compile as compile_model
                self.engine = compile_model(self.module, target=self.target)
                self.engine_key = self.bound_key
            out = self.engine.run(runtime)
        return tuple(out[n] for n in self.output_names)


class PtxcBackend(Backend):
    """The ONNX backend; ``mode`` is "compile" (an engine for device CPU or CUDA) or "interpret"
    (the reference, device CPU only)."""

    mode = "compile"

    @classmethod
    def _target(cls, device: str) -> str:
        """The compile target of an ONNX device string ("CPU", "CUDA", "CUDA:0")."""
        kind = str(device).split(":")[0].upper()
        if kind == "CUDA" and cls.mode == "compile":
            return "cuda"
        if kind == "CPU":
            return "cpu"
        raise ValueError(f"ptxc's {cls.mode} backend does not run on device {device!r}")

    @classmethod
    def is_compatible(cls, model, device: str = "CPU", **kwargs) -> bool:
        from .frontend.onnx_import import supported_ops
        ops = set(supported_ops())
        return all(n.op_type in ops and n.domain in ("", "ai.onnx") for n in model.graph.node)

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs) -> PtxcRep:
        target = cls._target(device)
        proto, _ = load_model(model)
        return PtxcRep(proto, cls.mode, target)

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            cls._target(device)
        except ValueError:
            return False
        return True


class PtxcInterpreterBackend(PtxcBackend):
    """The ONNX backend over the graph-dialect interpreter (the reference semantics)."""

    mode = "interpret"


prepare = PtxcBackend.prepare
run_model = PtxcBackend.run_model
supports_device = PtxcBackend.supports_device
