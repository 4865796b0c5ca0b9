"""The compile pipeline: stages in an ordered table, each a pass pipeline over the module.

    engine = ptxc.compile("model.onnx", target="cpu")
    engine = ptxc.compile("model.onnx", target="cuda", arch="sm_90")   # PTX, CUDA runtime
    outputs = engine.run({"input": x})

Stages (the names are the same in the API, the CLI and the docs):

=========  ==================================================  =================================
stage      what runs                                           what comes out
=========  ==================================================  =================================
graph      import, then ``graph-opt``                          graph dialect, optimized
tensor     ``lower-graph-to-tensor,fuse-tensor-elementwise``   tensor dialect (structured ops)
loop       ``lower-tensor-to-loop`` (cpu);                     loop dialect (buffers, loop nests;
           ``lower-tensor-to-loop,map-to-gpu`` (cuda)          cuda: gpu.launch kernels)
llvm       loop-to-llvm (llvmlite.ir; cuda: target nvptx)      LLVM IR text, a kernel table
ptx        :func:`ptxc.ptx.lower_to_ptx` (cuda only)           PTX text for one arch
=========  ==================================================  =================================

The targets share every stage up to ``tensor``; from ``loop`` on, the pipeline depends on the
target (:func:`stage_pipeline`). Every stage up to ``loop`` is a module the interpreter runs
(the gpu dialect included: its reference semantics run a launch's threads in lockstep), so
``check_numerics=True`` compares each pass (lowerings and map-to-gpu included) with the one
before on random inputs.
"""

from __future__ import annotations

import logging
import time

import attrs

from .errors import CompileError
from .frontend.load import as_module
from .ir.core import Operation

STAGES = ("graph", "tensor", "loop", "llvm", "ptx")

#: the pass pipeline of each IR stage, in order (the cpu target's; see :func:`stage_pipeline`)
STAGE_PIPELINES = {
    "graph": "graph-opt",
    "tensor": "lower-graph-to-tensor,fuse-tensor-elementwise",
    "loop": "lower-tensor-to-loop",
}

#: the threads an H200 holds at once (132 SMs x 2048): on cuda, a streaming reduction nest (a
#: pool, a Reduce*: no load shared between points) is unrolled and jammed only while it keeps
#: this many points, so one with fewer gets a thread per output (lower-tensor-to-loop's
#: ``jam-min-points``; tensor_to_loop/nest.py, "Unroll-and-jam")
CUDA_JAM_MIN_POINTS = 132 * 2048

#: where a target's pipeline differs from STAGE_PIPELINES
TARGET_STAGE_PIPELINES = {
    "cpu": {},
    "cuda": {"tensor": "lower-graph-to-tensor,sink-collapse-reshapes,fuse-tensor-elementwise",
             "loop": f"lower-tensor-to-loop{{jam-min-points={CUDA_JAM_MIN_POINTS}}},map-to-gpu"},
}

TARGETS = ("cpu", "cuda")

#: stage progress at INFO (the CLI's progress lines), details at DEBUG (``--verbose``)
log = logging.getLogger("ptxc.compiler")
PRECISIONS = ("fp32", "tf32", "fp16", "int8")
#: ``layout=``: ONNX's channels-first, channels-last inside (to-channels-last), or the policy
#: :func:`resolve_layout` (docs/graph-opt.md, "Layout"), the default.
LAYOUTS = ("nchw", "nhwc", "auto")
DEFAULT_LAYOUT = "auto"
#: the precisions whose convolutions the mma schedule takes channels-last (tensor cores)
CHANNELS_LAST_PRECISIONS = ("fp16", "tf32", "int8")
#: ops that make a graph explicitly quantized (its int8 layers take the mma schedule too)
QDQ_OPS = frozenset({"graph.quantize_linear", "graph.dequantize_linear", "graph.qlinear_conv",
                     "graph.qlinear_matmul"})


def resolve_layout(layout: str, module: Operation, target: str,
                   precision: str = "fp32") -> str:
    """``nchw`` or ``nhwc`` for ``layout``. ``auto`` is nhwc on target cuda, in a tensor-core
    precision (fp16, tf32, int8, or a model quantized explicitly with Q/DQ ops), for graphs with
    at least four non-grouped 2-D convolutions (what the mma schedule's implicit GEMM takes with
    16-byte copies: ResNet-50 b32 fp16 runs at 0.91x torch.compile's throughput on the H200 this
    way). It is nchw elsewhere: the cpu target's loops gain nothing from it, and the fp32 tiled
    schedule has not been timed channels-last. Example: ResNet-50, cuda, fp16 -> nhwc; the same
    in fp32, or on cpu -> nchw; a QDQ ResNet-50 on cuda -> nhwc."""
    if layout not in LAYOUTS:
        raise CompileError(f"unknown layout {layout!r}; the layouts are {', '.join(LAYOUTS)}")
    if layout != "auto":
        return layout
    if target != "cuda":
        return "nchw"
    if precision not in CHANNELS_LAST_PRECISIONS and not any(
            op.name in QDQ_OPS for op in module.walk()):
        return "nchw"
    from .rewrite.passes.channels_last import prefers_channels_last
    return "nhwc" if prefers_channels_last(module) else "nchw"


#: the passes appended to the graph stage of a channels-last compile (:func:`layout_passes`), per
#: target. On cuda a stride-2 stem on a few channels first becomes a space-to-depth and a
#: stride-1 conv on 4x the channels (space-to-depth-stem), and input channels are padded to
#: multiples of 4 (a pixel's channels whole cp.async chunks: 8 bytes of f16, 4 of int8; a
#: 3-channel image pads to 4, not 8 or 16: half the stem convolution's padded work), an int8
#: conv's to 16 where that adds at most a third (the space-to-depth stem's 12: 16-byte copies).
#: Part of the compile cache's key, as the stage pipelines are.
LAYOUT_PIPELINES = {
    "cpu": "to-channels-last,cancel-transposes,eliminate-concat,dce",
    "cuda": "space-to-depth-stem,to-channels-last{channel-multiple=4 int8-channel-multiple=16},"
            "cancel-transposes,eliminate-concat,dce",
}


def layout_passes(layout: str, target: str) -> str:
    """The passes appended to the graph stage for a resolved ``layout``: ''
    for nchw, else :data:`LAYOUT_PIPELINES` of ``target``."""
    if layout != "nhwc":
        return ""
    return LAYOUT_PIPELINES[target]


def resolve_target(target: str) -> str:
    """``"auto"`` is ``"cuda"`` where a usable CUDA GPU is present and ``"cpu"`` elsewhere (the
    CPU JIT is the default without a GPU); any other name is checked and returned."""
    if target == "auto":
        from .target import device_arch
        return "cuda" if device_arch() is not None else "cpu"
    check_target(target)
    return target


def check_target(target: str) -> None:
    if target not in TARGETS:
        raise CompileError(f"unknown target {target!r}; the targets are {', '.join(TARGETS)}")


def stage_pipeline(stage: str, target: str = "cpu") -> str:
    """The pass pipeline of IR stage ``stage`` (graph, tensor or loop) for ``target``."""
    check_target(target)
    return TARGET_STAGE_PIPELINES[target].get(stage, STAGE_PIPELINES[stage])


def pipeline_for_arch(pipeline: str, arch: str | None) -> str:
    """``pipeline`` (text) with ``arch`` given to each ``map-to-gpu`` that names none: the
    schedules then write only kernels that arch has (the wgmma form is sm_90's). Unchanged
    when ``arch`` is None (map-to-gpu then assumes :func:`ptxc.ptx.default_arch`, as
    lower_to_ptx does). Example: ``lower-tensor-to-loop,map-to-gpu`` with sm_80 ->
    ``lower-tensor-to-loop,map-to-gpu{arch=sm_80}``."""
    if not arch or "map-to-gpu" not in pipeline:
        return pipeline
    from .ptx.target import check_arch
    check_arch(arch)      # a CompileError naming the arch, before any pass option parses it
    from .rewrite.pipeline import parse_pipeline
    passes = [attrs.evolve(p, arch=arch) if p.name == "map-to-gpu" and not p.arch else p
              for p in parse_pipeline(pipeline)]
    return ",".join(str(p) for p in passes)


def check_stage(stage: str, target: str | None = None) -> None:
    """``stage`` is a stage name, and one ``target`` has (``ptx`` is cuda's only)."""
    if stage not in STAGES:
        raise CompileError(f"unknown stage {stage!r}; the stages are {', '.join(STAGES)}")
    if target is not None:
        check_target(target)
        if stage == "ptx" and target != "cuda":
            raise CompileError(f"stage 'ptx' is the cuda target's; target {target!r} has none")


def graph_pipeline(graph_passes: str | None = None, precision: str = "fp32",
                   precision_overrides: dict | None = None, extra: str = ""):
    """The graph stage's passes: ``graph_passes`` (default ``graph-opt``), ``extra`` (the layout
    passes), then, for a reduced ``precision``, ``lower-precision`` (last: after BN folding,
    fusion and the layout the weights are final; :mod:`ptxc.rewrite.passes.precision`).
    Pipeline text for fp32, a list of passes for int8 (:func:`_own_scales`), else a list of
    that text and the pass."""
    from .rewrite.passes.precision import LowerPrecision, check_precision
    check_precision(precision, precision_overrides)
    text = STAGE_PIPELINES["graph"] if graph_passes is None else graph_passes
    if extra:
        text = f"{text},{extra}" if text.strip() else extra
    if precision == "int8":   # quantize_int8 rewrote the model already, with its own scales:
        return _own_scales(text)   # fold-qdq may round their multipliers
    if precision not in ("fp16", "tf32"):
        return text
    names = tuple(sorted(k for k, v in (precision_overrides or {}).items() if v == "fp32"))
    return [text, LowerPrecision(precision=precision, overrides=names)]


def _own_scales(text: str):
    """The passes of ``text`` with each ``fold-qdq`` given ``fma-multipliers=true``: in implicit
    int8 the scales are ptxc's own calibration's, so its requantization multipliers may move by
    2 ulps to where one fma converts and scales each sum (fold_qdq.FoldQDQPass). A text that
    sets the option itself (``graph_passes``) is kept as it is."""
    from .rewrite.passes.fold_qdq import FoldQDQPass
    from .rewrite.pipeline import parse_pipeline
    if "fma-multipliers" in text:
        return text
    return [attrs.evolve(p, fma_multipliers=True) if isinstance(p, FoldQDQPass) else p
            for p in parse_pipeline(text)]


def run_stages(module: Operation, until: str, *, graph_passes: str | None = None,
               timings: dict | None = None, target: str = "cpu", layout: str = DEFAULT_LAYOUT,
               on_stage=None, precision: str = "fp32", precision_overrides: dict | None = None,
               arch: str | None = None, **pm_options) -> Operation:
    """Run the IR stages on ``module`` in place, up to and including ``until`` (graph, tensor or
    loop), with ``target``'s pipelines; ``layout`` (LAYOUTS) appends the channels-last passes
    to the graph stage (after ``graph_passes`` when given). ``pm_options`` go to every
    PassManager (check_numerics, print_ir_after_all, ...); ``on_stage(stage, module)`` is called
    after each stage; ``precision``/``precision_overrides`` end the graph stage with
    ``lower-precision`` (:func:`graph_pipeline`); ``arch`` (cuda) goes to map-to-gpu
    (:func:`pipeline_for_arch`)."""
    from .rewrite.pass_manager import PassManager
    order = ["graph", "tensor", "loop"]
    if until not in order:
        raise CompileError(f"run_stages goes up to graph, tensor or loop, not {until!r}")
    extra = layout_passes(resolve_layout(layout, module, target, precision), target)
    for stage in order[:order.index(until) + 1]:
        pipeline = stage_pipeline(stage, target)
        if stage == "graph":
            pipeline = graph_pipeline(graph_passes, precision, precision_overrides, extra)
        elif target == "cuda":
            pipeline = pipeline_for_arch(pipeline, arch)
        t0 = time.perf_counter()
        log.info("%s stage (%s) ...", stage, pipeline)
        PassManager(pipeline, **pm_options).run(module)
        log.info("%s stage done in %.2f s", stage, time.perf_counter() - t0)
        if timings is not None:
            timings[stage] = time.perf_counter() - t0
        if on_stage is not None:
            on_stage(stage, module)
    return module


def compile(model, target: str = "auto", precision: str = "fp32", *,
            input_shapes: dict | None = None, constant_inputs: dict | None = None,
            graph_passes: str | None = None, check_numerics: bool = False, threads=None,
            arch: str | None = None, cuda_graph: bool = True, layout: str = DEFAULT_LAYOUT,
            cache: bool | None = None, calibration=None, calibration_cache: str | None = None,
            precision_overrides: dict | None = None, max_memory: int | None = None):
    """Compile a model (path, ModelProto, Network or graph module) into an Engine.

    ``layout``: ``"auto"`` (the default, :func:`resolve_layout`'s policy: channels-last for
    conv-heavy graphs on cuda in fp16, tf32 or int8), ``"nchw"`` (ONNX's layout throughout) or
    ``"nhwc"`` (convolutional layers run channels-last inside, to-channels-last; inputs and
    outputs keep their ONNX layout).

    ``target="auto"`` (the default): cuda where a GPU is present, else cpu.
    ``target="cpu"``: JIT-compiled for this host (``threads``: the pool's size). ``target="cuda"``:
    PTX for ``arch`` (default :func:`ptxc.ptx.default_arch`: ``PTXC_CUDA_ARCH``, the GPU here,
    else sm_90) and the CUDA runtime (:mod:`ptxc.driver.cuda`), which touches no GPU until the
    first run, so a cuda engine compiles and saves on a machine without one; ``cuda_graph``:
    replay the launches of an inference from one CUDA graph (False: launch each kernel).
    ``cache``: look the compile up in (and store it into) the compile cache,
    :mod:`ptxc.plan.cache` (None: on unless ``PTXC_CACHE=0``; never with check_numerics).

    ``precision="int8"`` (docs/quantization.md; cpu and interpreter numerics, integer loops on
    cuda): ``calibration`` is a :class:`ptxc.calib.CalibrationTable`, or calibration data (a
    folder, an iterable of input dicts) calibrated with the entropy calibrator;
    ``calibration_cache`` a calibration cache file (read when it matches: no data runs; written
    after calibrating). Layers named in ``precision_overrides`` (ONNX node name -> "fp32") stay
    fp32. ``engine.layer_precisions`` lists (layer, precision, why). The compile cache is not
    used for int8.

    ``precision="fp16"`` or ``"tf32"``: TensorRT's rules (:mod:`ptxc.rewrite.passes.precision`,
    docs/lowering.md "Precision"); ``precision_overrides`` keeps the named nodes in fp32. Both
    targets accept every precision (the cpu target for numerics: it computes exactly what the
    GPU's kernels compute, f16 storage included).

    ``max_memory`` (bytes): the engine's memory budget (weights, scratch arena and bindings of
    one execution context; :mod:`ptxc.driver.memory_limit`): an engine that needs more is a
    CompileError naming the layer of its largest scratch buffer; concurrent runs take only as
    many contexts as fit."""
    from .driver.memory_limit import _valid
    _valid(max_memory)
    target = resolve_target(target)
    if layout not in LAYOUTS:
        raise CompileError(f"unknown layout {layout!r}; the layouts are {', '.join(LAYOUTS)}")
    from .rewrite.passes.precision import check_precision
    check_precision(precision, precision_overrides)
    layer_precisions = None
    if precision == "int8":
        model, layer_precisions = _quantize_int8(model, calibration, calibration_cache,
                                                 precision_overrides, input_shapes,
                                                 constant_inputs)
        cache = False
    elif calibration is not None or calibration_cache is not None:
        raise CompileError("calibration is for precision='int8'")
    if target == "cpu" and arch is not None:
        raise CompileError(f"arch={arch!r} is for target 'cuda'; the cpu target compiles for "
                           "this host")
    if target == "cuda" and threads is not None:
        raise CompileError("threads= is for target 'cpu' (the CPU runtime's thread pool)")
    key = None
    if cache is not False and not check_numerics:
        from .plan import cache as compile_cache
        if compile_cache.cache_dir() is not None:
            if target == "cuda" and arch is None:
                from .ptx.target import default_arch
                arch = default_arch()
            key = compile_cache.cache_key(model, target, {
                "precision": precision, "precision_overrides": precision_overrides,
                "arch": arch, "input_shapes": input_shapes,
                "constant_inputs": constant_inputs, "graph_passes": graph_passes,
                "layout": layout, "precision_overrides": precision_overrides})
            engine = compile_cache.lookup(key, threads)
            if engine is not None:
                if target == "cuda":
                    engine.cuda_graph = cuda_graph
                engine.max_memory = max_memory
                return engine
    from .gc_pause import fewer_collections
    with fewer_collections():  # the stages build large object graphs
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        log.info("importing %s", model if isinstance(model, (str, bytes)) and len(model) < 300
                 else type(model).__name__)
        module = as_module(model, input_shapes, constant_inputs)
        timings["import"] = time.perf_counter() - t0
        from .rewrite.provenance import annotate_kernels, collect
        prov: dict = {}  # loc -> the ONNX nodes an op there computes (fusions included)
        run_stages(module, "loop", graph_passes=graph_passes, timings=timings, target=target,
                   check_numerics=check_numerics, layout=layout, precision=precision,
                   precision_overrides=precision_overrides, arch=arch,
                   on_stage=lambda stage, m: stage != "loop" and collect(m, prov))
        annotate_kernels(module, prov)
        from .codegen import build
        from .driver.engine import Engine
        from .target import Target
        log.info("%s ...", "PTX code generation" if target == "cuda"
                 else "LLVM code generation and JIT compilation")
        artifact = build(module, Target.resolve(arch) if target == "cuda" else Target.host(),
                         timings=timings)
        engine = Engine.from_artifact(artifact, timings=timings, threads=threads,
                                      cuda_graph=cuda_graph)
        engine.precision = precision
        engine.layer_precisions = layer_precisions
        engine.precision_overrides = dict(precision_overrides or {})
        engine.max_memory = max_memory
        log.info("compiled in %.2f s (%d kernels)", sum(engine.timings.values()),
                 len(engine.kernels.kernels) if engine.kernels is not None else 0)
        if key is not None:
            compile_cache.store(key, engine)
    return engine


def _quantize_int8(model, calibration, calibration_cache, overrides, input_shapes,
                   constant_inputs):
    """(graph module with int8 Q/DQ pairs, per-layer report) for precision int8."""
    from .calib import CalibrationTable, calibrate, quantize_int8
    overrides = dict(overrides or {})
    bad = {k: v for k, v in overrides.items() if v not in PRECISIONS}
    if bad:
        raise CompileError(f"precision_overrides {bad}: precisions are {', '.join(PRECISIONS)}")
    module = as_module(model, input_shapes, constant_inputs)
    if isinstance(calibration, CalibrationTable):
        table = calibration
    elif calibration is None and calibration_cache is None:
        raise CompileError("precision='int8' needs calibration= (a CalibrationTable, a folder "
                           "or an iterable of input dicts) or calibration_cache=")
    else:
        table = calibrate(module, calibration, "entropy", cache=calibration_cache)
    report: list = []
    q = quantize_int8(module, table, exclude={k for k, v in overrides.items() if v != "int8"},
                      report=report)
    return q, report
