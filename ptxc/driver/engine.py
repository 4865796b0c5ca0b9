"""The Engine: a compiled model, its bindings and its runtime program.

    engine = ptxc.compile("model.onnx", target="cpu")
    engine = Engine.from_artifact(ptxc.codegen.build(loop_module, target))  # the same, by hand
    engine.inputs, engine.outputs        # {name: TensorType}
    outputs = engine.run({"data": x})    # dict[str, np.ndarray] -> dict[str, np.ndarray]
    engine.memory_report()               # arena peak beside the live-bytes lower bound
    engine.timings                       # seconds per compile stage
    engine.save("model.plan")            # a plan file; ptxc.load("model.plan") reads it back
    ctx = engine.create_context()        # an execution context: scratch memory of its own
    ctx.run({"data": x})                 # engine.run is thread-safe too (a pool of contexts)

    engine = ptxc.compile("model.onnx", target="cuda")   # builds without a GPU; runs on one
    engine.ptx                           # the PTX text
    engine.run_device({"data": dx})      # device arrays in, fresh numba device arrays out
    engine.cuda_graph = False            # launch kernel by kernel instead of one CUDA graph

A wrong input name, shape or dtype is a BindingError naming the binding and what it expects.
An engine is made of an :class:`~ptxc.codegen.artifact.Artifact` only (:meth:`Engine.from_artifact`:
code generation is :mod:`ptxc.codegen`'s, never the runtime's). The runtimes are
:mod:`ptxc.driver.cpu` and :mod:`ptxc.driver.cuda`; both place the scratch buffers by the
Artifact's static memory plan (:mod:`ptxc.codegen.memory_plan`).
"""

from __future__ import annotations

import time

from ..errors import BindingError, DeviceError
from ..ir.interpreter import check_inputs
from ..ir.types import TensorType


def _bindings(table) -> tuple[dict, dict]:
    """(inputs, outputs): name -> TensorType of a kernel table's argument slots, in order."""
    slots = {s.name: s for s in table.slots if s.kind == "arg"}
    tensor = lambda n: TensorType(slots[n].shape, slots[n].type.element)  # noqa: E731
    return ({n: tensor(n) for n in table.inputs}, {n: tensor(n) for n in table.outputs})


class Engine:
    def __init__(self, target: str, program, inputs: dict, outputs: dict, timings: dict,
                 llvm_text: str = "", kernels=None):
        self.target = target
        self.program = program
        self.inputs = inputs      # name -> TensorType, in binding order
        #: binding name -> the model's name of an output (they differ for an output named as an
        #: input: its binding is ``<name>_out``; the user sees the model's name)
        self._public = dict(zip(kernels.outputs, kernels.public)) if kernels is not None \
            and getattr(kernels, "public", ()) else {}
        self.output_bindings = outputs  # binding name -> TensorType, as the runtime names them
        self.outputs = {self._public.get(n, n): t for n, t in outputs.items()}  # model names
        self.timings = timings
        self.llvm_text = llvm_text
        self.kernels = kernels
        self.memory_plan = None   # a MemoryPlan when the runtime uses the planned arena
        self.artifact = None      # the Artifact it was made of (Engine.from_artifact)
        self.precision = "fp32"
        self.layer_precisions = None  # int8: (layer, precision, why) per conv/gemm/matmul
        self.tuning = None        # tuned builds: per distinct kernel, ptxc.tune.tuner.Row JSON
        self.layout = None        # tuned builds with layout "auto": the layout measured faster
        self.layout_times = None  # ... and both layouts' seconds (ptxc.tune.layout)
        self._max_memory = None
        self._explicit_contexts = 0

    @property
    def max_memory(self) -> int | None:
        """The engine's memory limit in bytes (None: none); setting it refuses (CompileError)
        an engine that needs more for one context and caps its contexts to what fits
        (:mod:`ptxc.driver.memory_limit`)."""
        return self._max_memory

    @max_memory.setter
    def max_memory(self, value) -> None:
        from .memory_limit import check_max_memory
        check_max_memory(self, value)

    @classmethod
    def from_artifact(cls, artifact, *, threads: int | None = None, cuda_graph: bool = True,
                      timings: dict | None = None, min_parallel_work: int | None = None,
                      exact_arch: bool = False) -> "Engine":
        """The engine of a build (:func:`ptxc.codegen.build`) or of a plan file's Artifact:
        cpu: the host object loaded into MCJIT (``threads``: the pool's size); cuda: the CUDA
        runtime over the PTX (``cuda_graph``; ``exact_arch``: a plan's arch must be the
        device's own), which touches no GPU until the first run. No code is generated here
        (a cpu Artifact without object code, from an older plan, is compiled for this host).
        ``timings`` (the build's) gain ``jit``, the seconds loading the cpu code took."""
        timings = dict(timings or {})
        plan = artifact.memory_plan
        if artifact.kind == "cuda":
            from .cuda import CudaProgram
            program = CudaProgram(artifact, plan, cuda_graph=cuda_graph, exact_arch=exact_arch)
        else:
            from ..lower.kernel_table import LLVMProgram
            from .arena import ArenaAllocator
            from .cpu import CpuProgram
            t0 = time.perf_counter()
            kwargs = {} if min_parallel_work is None else {"min_parallel_work": min_parallel_work}
            program = CpuProgram(LLVMProgram(artifact.llvm_text, artifact.table, artifact.globals,
                                             artifact.triple, artifact.data_layout),
                                 threads=threads,
                                 allocator=None if plan is None else ArenaAllocator(plan=plan),
                                 object_code=artifact.object_code, **kwargs)
            timings["jit"] = timings.get("jit", 0.0) + time.perf_counter() - t0
        engine = cls(artifact.kind, program, *_bindings(artifact.table), timings,
                     artifact.llvm_text, artifact.table)
        engine.memory_plan = plan
        engine.artifact = artifact
        return engine

    # ---- cuda ----------------------------------------------------------------------------------
    @property
    def ptx(self) -> str | None:
        """The PTX text of a cuda engine (None for cpu)."""
        return self.program.ptx if self.target == "cuda" else None

    @property
    def arch(self) -> str | None:
        """The CUDA arch the PTX is for (None for cpu)."""
        return self.program.arch if self.target == "cuda" else None

    @property
    def cuda_graph(self) -> bool:
        """Whether a cuda engine replays its launches from one CUDA graph (False for cpu)."""
        return self.target == "cuda" and self.program.cuda_graph

    @cuda_graph.setter
    def cuda_graph(self, value: bool) -> None:
        if self.target != "cuda":
            raise DeviceError(f"cuda_graph is a switch of cuda engines; this one is "
                              f"{self.target}")
        self.program.cuda_graph = bool(value)

    def run_device(self, inputs: dict, out: dict | None = None, stream=None) -> dict:
        """Run one inference on device arrays (``__cuda_array_interface__`` or ``__dlpack__``:
        torch, cupy, numba): inputs by name; outputs into ``out`` (by name, e.g. torch tensors)
        or fresh numba device arrays; on the caller's ``stream`` when given (ordered on it,
        returns without waiting). No host copies; the kernels read and write the caller's
        tensors in place where they are aligned and do not overlap (``out=`` for zero copies;
        ``program.interop`` counts what was bound and what copied). Cuda engines only; see
        :mod:`ptxc.driver.cuda_interop`."""
        if self.target != "cuda":
            raise DeviceError(f"run_device runs cuda engines; this one is {self.target} (use "
                              "run)")
        if not isinstance(inputs, dict):
            raise BindingError(f"Engine.run_device takes a dict name -> device array, got "
                               f"{type(inputs).__name__}")
        got = self.program.run_device(inputs, out=self._to_bindings(out), stream=stream)
        return {self._public.get(n, n): got[n] for n in self.output_bindings}

    def _to_bindings(self, out):
        """An ``out=`` dict by the model's output names -> by binding names."""
        if not out or not self._public or not isinstance(out, dict):
            return out
        inv = {v: k for k, v in self._public.items()}
        return {inv.get(k, k): v for k, v in out.items()}

    def memory_report(self) -> dict:
        """The arena's peak bytes beside the live-bytes lower bound and the sum without reuse
        (intermediate buffers only: bindings and weights are the caller's and the engine's).
        A cuda engine adds the device bytes it allocates at its first run: ``weights_bytes``,
        ``bindings_bytes`` and ``device_bytes`` (arena + weights + bindings)."""
        p = self.memory_plan
        if p is None:
            return {"arena_bytes": None, "lower_bound_bytes": None, "no_reuse_bytes": None}
        out = {"arena_bytes": p.arena_bytes, "lower_bound_bytes": p.lower_bound_bytes,
               "no_reuse_bytes": p.no_reuse_bytes, "buffers": len(p.buffers)}
        if self.target == "cuda":
            out.update(weights_bytes=self.program.weights_bytes,
                       bindings_bytes=self.program.io_bytes,
                       device_bytes=self.program.device_bytes)
        return out

    def save(self, path, key=None) -> None:
        """Write this engine to a plan file; ``ptxc.load(path)`` reads it back without
        recompiling the model (see :mod:`ptxc.plan`). ``key`` (bytes or str, or
        ``PTXC_PLAN_KEY``): sign it with HMAC-SHA256; loading then needs the same key
        (:mod:`ptxc.plan.trust`)."""
        from ..plan.save import save_plan
        save_plan(self, path, key=key)

    def run(self, inputs: dict) -> dict:
        """Run one inference: inputs by name, outputs by name (fresh arrays). Safe to call from
        any number of threads at once: each run takes an execution context of its own from the
        program's pool (:mod:`ptxc.driver.context`), so concurrent runs never share memory."""
        return self._run(self.program, inputs)

    def create_context(self) -> "ExecutionContext":
        """A new execution context (TensorRT's IExecutionContext): its own scratch arena (cuda:
        also its own stream, binding buffers and CUDA graph). One context runs one inference at
        a time; several contexts run at once from several threads. Under ``max_memory`` a
        context that does not fit is an OutOfMemoryError."""
        from .memory_limit import check_new_context
        pool = getattr(self.program, "_contexts", None)
        check_new_context(self, self._explicit_contexts
                          + (len(pool.contexts) if pool is not None else 0))
        ctx = ExecutionContext(self, self.program.new_context())
        self._explicit_contexts += 1
        return ctx

    def _run(self, runner, inputs: dict) -> dict:
        if not isinstance(inputs, dict):
            raise BindingError(f"Engine.run takes a dict name -> array, got "
                               f"{type(inputs).__name__}")
        arrays = check_inputs(list(self.inputs), list(self.inputs.values()), inputs, "engine")
        # (np.ascontiguousarray would turn rank-0 inputs into rank 1)
        feeds = {n: x if x.flags.c_contiguous else x.copy() for n, x in zip(self.inputs, arrays)}
        out = runner(feeds)
        return {self._public.get(n, n): out[n] for n in self.output_bindings}

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {t}" for n, t in self.inputs.items())
        outs = ", ".join(f"{n}: {t}" for n, t in self.outputs.items())
        return f"<Engine {self.target} ({ins}) -> ({outs})>"


class ExecutionContext:
    """One execution context of an Engine (see :meth:`Engine.create_context`)."""

    def __init__(self, engine: Engine, context):
        self.engine = engine
        self.context = context  # the runtime's: CpuContext or CudaContext

    def run(self, inputs: dict) -> dict:
        """One inference on this context's memory; as :meth:`Engine.run`."""
        return self.engine._run(self.context, inputs)

    def run_device(self, inputs: dict, out: dict | None = None, stream=None) -> dict:
        """One inference on device arrays (cuda engines); as :meth:`Engine.run_device`."""
        if self.engine.target != "cuda":
            raise DeviceError(f"run_device runs cuda engines; this one is "
                              f"{self.engine.target} (use run)")
        if not isinstance(inputs, dict):
            raise BindingError(f"run_device takes a dict name -> device array, got "
                               f"{type(inputs).__name__}")
        e = self.engine
        got = self.context.run_device(inputs, out=e._to_bindings(out), stream=stream)
        return {e._public.get(n, n): got[n] for n in e.output_bindings}
