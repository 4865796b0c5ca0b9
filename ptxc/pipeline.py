"""The compile spine: options as data, the stage tables, and the one loop that runs the stages.

    options = CompileOptions.make(target="cuda", arch="sm_89", precision="fp16",
                                  pass_options={"map-to-gpu": {"mma_epilogue": "fragment"}})
    passes = build_pipeline(options, "loop")     # pass objects, configured; never text
    run_stages(module, "loop", options)          # graph, tensor and loop stages, in place

``ptxc.compile``, ``ptxc.explore``, ``ptxc.tools.bisect.bisect_model`` and the ``ptxc`` command
all turn their keywords into one :class:`CompileOptions` (one name and one default per option;
tests/test_compile_options.py holds them to it) and run the stages through :func:`run_stages`.

The stages (the names are the same in the API, the CLI and the docs):

=========  ==================================================  =================================
stage      what runs                                           what comes out
=========  ==================================================  =================================
graph      import, then ``graph-opt`` (``graph_passes``);      graph dialect, optimized
           channels-last: the layout passes; fp16/tf32:
           ``lower-precision``
tensor     ``lower-graph-to-tensor,fuse-tensor-elementwise``   tensor dialect (structured ops)
           (cuda: ``sink-collapse-reshapes`` between them)
loop       ``lower-tensor-to-loop,cpu-schedule`` (cpu);        loop dialect (buffers, loop nests;
           ``lower-tensor-to-loop,map-to-gpu`` (cuda); the     cuda: gpu.launch kernels)
           last is the target's schedule pass (tactics)
llvm       loop-to-llvm (llvmlite.ir; cuda: target nvptx)      LLVM IR text, a kernel table
ptx        :func:`ptxc.codegen.lower_to_ptx` (cuda only)       PTX text for one arch
=========  ==================================================  =================================

:data:`STAGE_PIPELINES` and :data:`LAYOUT_PIPELINES` are read-only tables (assigning to them
raises). Nothing changes them at run time: a compile that needs other passes or other options
says so in its options, so the compile cache's key (:meth:`CompileOptions.cache_key`) sees it.

How a stage's passes are built (:func:`build_pipeline`), in this order, later steps winning:

1. the table's passes for the target (or ``graph_passes`` / ``stage_passes`` when given, as
   pipeline text or pass objects), parsed to pass objects;
2. options a table entry takes from the target (:class:`Step`: on cuda, lower-tensor-to-loop's
   ``jam-min-points`` is the threads the GPU holds at once, ``Target.resident_threads``);
3. every pass that declares a ``target`` field (a :class:`ptxc.target.Target`) receives the
   target, and on cuda every pass with an ``arch`` field the target's arch, unless the pass
   says otherwise (``map-to-gpu{arch=sm_80}``): its kernels are then only those the arch has;
4. precision: int8 compiles give ``fold-qdq`` ``fma-multipliers=true`` (the scales are ptxc's
   own calibration's, :class:`ptxc.rewrite.passes.fold_qdq.FoldQDQPass`) unless the graph text
   names that option; fp16 and tf32 end the graph stage with ``lower-precision``;
5. ``pass_options``: per pass name, option values (validated when the options are made).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping
from types import MappingProxyType

import attrs

from .errors import CompileError
from .target import Target

STAGES = ("graph", "tensor", "loop", "llvm", "ptx")
#: the stages whose output is IR the pass manager runs on (the rest is code generation)
IR_STAGES = ("graph", "tensor", "loop")
TARGETS = ("cpu", "cuda")
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
#: the keys of ``stage_passes``: the layout passes of the graph stage, and the later IR stages
STAGE_PASS_KEYS = ("layout", "tensor", "loop")

#: stage progress at INFO (the CLI's progress lines), details at DEBUG (``--verbose``)
log = logging.getLogger("ptxc.compiler")


@attrs.frozen
class Step:
    """One entry of a stage table: pipeline text (one pass, or a named pipeline such as
    ``graph-opt``) and the options it takes from the target, as ``(option, Target attribute)``
    pairs."""

    text: str
    from_target: tuple = ()


def _ro(d: dict) -> Mapping:
    return MappingProxyType(d)


#: each target's passes per IR stage, in order (read-only)
STAGE_PIPELINES: Mapping[str, Mapping[str, tuple]] = _ro({
    "cpu": _ro({
        "graph": (Step("graph-opt"),),
        "tensor": (Step("lower-graph-to-tensor"), Step("fuse-tensor-elementwise")),
        "loop": (Step("lower-tensor-to-loop"), Step("cpu-schedule")),
    }),
    "cuda": _ro({
        "graph": (Step("graph-opt"),),
        "tensor": (Step("lower-graph-to-tensor"), Step("sink-collapse-reshapes"),
                   Step("fuse-tensor-elementwise")),
        # a streaming reduction nest (a pool, a Reduce*) is unrolled and jammed only while it
        # keeps as many points as the GPU holds threads; one with fewer gets a thread per
        # output (tensor_to_loop/nest.py, "Unroll-and-jam")
        "loop": (Step("lower-tensor-to-loop", (("jam_min_points", "resident_threads"),)),
                 Step("map-to-gpu")),
    }),
})

#: the passes appended to the graph stage of a channels-last compile, per target (read-only).
#: On cuda a stride-2 stem on a few channels first becomes a space-to-depth and a stride-1
#: conv on 4x the channels (space-to-depth-stem), and input channels are padded to multiples
#: of 4 (a pixel's channels whole cp.async chunks: 8 bytes of f16, 4 of int8; a 3-channel
#: image pads to 4, not 8 or 16: half the stem convolution's padded work), an int8 conv's to
#: 16 where that adds at most a third (the space-to-depth stem's 12: 16-byte copies).
LAYOUT_PIPELINES: Mapping[str, tuple] = _ro({
    "cpu": (Step("to-channels-last"), Step("cancel-transposes"), Step("eliminate-concat"),
            Step("dce")),
    "cuda": (Step("space-to-depth-stem"),
             Step("to-channels-last{channel-multiple=4 int8-channel-multiple=16}"),
             Step("cancel-transposes"), Step("eliminate-concat"), Step("dce")),
})


# ---- names ----------------------------------------------------------------------------------

def check_target(target: str) -> None:
    if target not in TARGETS:
        raise CompileError(f"unknown target {target!r}; the targets are {', '.join(TARGETS)}")


def resolve_target(target: str, arch: str | None = None) -> str:
    """``"auto"`` is ``"cuda"`` where ``arch`` is given or a usable CUDA GPU is present, else
    ``"cpu"`` (the CPU JIT is the default without a GPU); another name is checked, returned."""
    if target == "auto":
        if arch is not None:
            return "cuda"
        from .target import device_arch
        return "cuda" if device_arch() is not None else "cpu"
    check_target(target)
    return target


def check_stage(stage: str, target: str | None = None) -> None:
    """``stage`` is a stage name, and one ``target`` has (``ptx`` is cuda's only)."""
    if stage not in STAGES:
        raise CompileError(f"unknown stage {stage!r}; the stages are {', '.join(STAGES)}")
    if target is not None:
        check_target(target)
        if stage == "ptx" and target != "cuda":
            raise CompileError(f"stage 'ptx' is the cuda target's; target {target!r} has none")


def resolve_layout(layout: str, module, target: str, precision: str = "fp32") -> str:
    """``nchw`` or ``nhwc`` for ``layout``. ``auto`` is nhwc on target cuda, in a tensor-core
    precision (fp16, tf32, int8, or a model quantized explicitly with Q/DQ ops), for graphs with
    at least four non-grouped 2-D convolutions (what the mma schedule's implicit GEMM takes with
    16-byte copies; bench/RESULTS.md has ResNet-50's numbers). It is nchw elsewhere: the cpu
    target's loops gain nothing from it, and the fp32 tiled schedule has not been timed
    channels-last. Example: ResNet-50, cuda, fp16 -> nhwc; the same in fp32, or on cpu ->
    nchw; a QDQ ResNet-50 on cuda -> nhwc."""
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


# ---- the options ----------------------------------------------------------------------------

def _as_target(value) -> Target:
    if isinstance(value, Target):
        return value
    if isinstance(value, str):
        name = resolve_target(value)
        return Target.resolve() if name == "cuda" else Target.host()
    raise CompileError(f"target: {value!r} is neither 'cpu', 'cuda', 'auto' nor a Target")


def _mapping(value) -> Mapping:
    if value is None:
        return _ro({})
    if not isinstance(value, Mapping):
        raise CompileError(f"expected a mapping, not {value!r}")
    return _ro(dict(value))


def _optional_mapping(value) -> Mapping | None:
    return None if value is None else _mapping(value)


def _pipeline_value(value, what: str):
    """Pipeline text, or pass objects (kept as a tuple)."""
    if value is None or isinstance(value, str):
        return value
    from .rewrite.pass_ import Pass
    items = tuple(value) if isinstance(value, (list, tuple)) else None
    if items is None or not all(isinstance(p, Pass) for p in items):
        raise CompileError(f"{what}: pipeline text or a list of passes, not {value!r}")
    return items


def _tactics(value) -> Mapping:
    from .tactic.tactic_map import tactic_map
    return tactic_map(value)


def _stage_passes(value) -> Mapping:
    out = {}
    for key, v in _mapping(value).items():
        if key not in STAGE_PASS_KEYS:
            raise CompileError(f"stage_passes: no stage {key!r}; the keys are "
                               f"{', '.join(STAGE_PASS_KEYS)} (graph_passes is the graph "
                               "stage's)")
        out[key] = _pipeline_value(v, f"stage_passes[{key!r}]")
    return _ro(out)


def _pass_options(value) -> Mapping:
    """``{pass name: {option: value}}``, each pass and option checked against the pass class
    (a CompileError naming both) and each value converted as pipeline text's are; option names
    become the fields' (snake_case)."""
    from .rewrite.pass_ import get_pass
    out = {}
    for name, opts in _mapping(value).items():
        if not isinstance(opts, Mapping):
            raise CompileError(f"pass_options[{name!r}]: a mapping of option names to values, "
                               f"not {opts!r}")
        try:
            p = get_pass(name, **opts)
        except CompileError as e:
            raise CompileError(f"pass_options: {e}") from None
        fields = [k.replace("-", "_") for k in opts]
        out[name] = _ro({f: getattr(p, f) for f in fields})
    return _ro(out)


@attrs.frozen(unsafe_hash=False)
class CompileOptions:
    """Everything a compile is asked to do, as data (see the module docstring).

    Make one with :meth:`make` (target names and an arch) or directly with a
    :class:`~ptxc.target.Target`. Fields are validated here, once: ``precision`` and
    ``precision_overrides`` (ONNX node -> ``"fp32"``), ``layout``, ``pass_options`` against
    each pass's fields, and which options apply to which target (``threads`` is the cpu
    target's). Mappings are kept read-only. Equal options compare equal (``constant_inputs``
    and ``calibration``, data, are left out of the comparison); :meth:`cache_key` is the
    hashable key.

    ``graph_passes``: the graph stage's own passes (default ``graph-opt``; ``""``: none), text
    or pass objects. ``stage_passes``: the same for ``layout`` (the channels-last passes),
    ``tensor`` and ``loop``, in place of the target's table. ``pass_options``: ``{pass name:
    {option: value}}`` applied to every pass of that name in every stage, last. ``threads``,
    ``cuda_graph`` and ``max_memory`` are the engine's (runtime) options; ``calibration`` and
    ``calibration_cache`` int8's (``ptxc.compile``)."""

    target: Target = attrs.field(default="auto", converter=_as_target)
    precision: str = "fp32"
    precision_overrides: Mapping = attrs.field(default=None, converter=_mapping)
    layout: str = DEFAULT_LAYOUT
    input_shapes: Mapping | None = attrs.field(default=None, converter=_optional_mapping)
    constant_inputs: Mapping | None = attrs.field(default=None, converter=_optional_mapping,
                                                  eq=False)
    graph_passes: object = attrs.field(
        default=None, converter=lambda v: _pipeline_value(v, "graph_passes"))
    stage_passes: Mapping = attrs.field(default=None, converter=_stage_passes)
    pass_options: Mapping = attrs.field(default=None, converter=_pass_options)
    check_numerics: bool = False
    threads: int | None = None
    cuda_graph: bool = True
    max_memory: int | None = None
    calibration: object = attrs.field(default=None, eq=False, repr=False)   # data
    calibration_cache: str | None = None
    tactics: Mapping = attrs.field(default=None, converter=_tactics)
    tuning: str = "off"
    timing_cache: str | None = None
    tuning_budget_s: float | None = None
    tuning_workers: str = "auto"

    def __attrs_post_init__(self):
        from .rewrite.passes.precision import check_precision
        check_precision(self.precision, self.precision_overrides)
        if self.layout not in LAYOUTS:
            raise CompileError(f"unknown layout {self.layout!r}; the layouts are "
                               f"{', '.join(LAYOUTS)}")
        if self.target.kind == "cuda" and self.threads is not None:
            raise CompileError("threads= is for target 'cpu' (the CPU runtime's thread pool)")
        if self.precision != "int8" and (self.calibration is not None
                                         or self.calibration_cache is not None):
            raise CompileError("calibration is for precision='int8'")
        from .driver.memory_limit import _valid
        _valid(self.max_memory)
        from .tune.tuner import check_level
        check_level(self.tuning)
        from .tune.executors import check_workers
        check_workers(self.tuning_workers)
        if self.tuning_budget_s is not None and not (
                isinstance(self.tuning_budget_s, (int, float)) and self.tuning_budget_s > 0):
            raise CompileError(f"tuning_budget_s must be a number of seconds > 0, is "
                               f"{self.tuning_budget_s!r}")

    @classmethod
    def make(cls, target: str | Target = "auto", arch: str | None = None, *,
             precision: str = "fp32", precision_overrides: dict | None = None,
             layout: str = DEFAULT_LAYOUT, input_shapes: dict | None = None,
             constant_inputs: dict | None = None, graph_passes=None,
             stage_passes: dict | None = None, pass_options: dict | None = None,
             check_numerics: bool = False, threads: int | None = None, cuda_graph: bool = True,
             max_memory: int | None = None, calibration=None,
             calibration_cache: str | None = None, tactics: dict | None = None,
             tuning: str = "off", timing_cache: str | None = None,
             tuning_budget_s: float | None = None,
             tuning_workers: str = "auto") -> "CompileOptions":
        """Options from names: ``target`` ``"cpu"`` (this host), ``"cuda"`` (``Target.resolve
        (arch)``: ``arch``, else ``PTXC_CUDA_ARCH``, else the GPU here, else sm_90; a build for
        another GPU needs none) or ``"auto"`` (cuda where ``arch`` is given or a GPU is
        present, else cpu), or a Target; the other keywords are the fields."""
        if isinstance(target, Target):
            if arch is not None and arch != target.arch:
                raise CompileError(f"arch={arch!r} and a Target for {target.arch}: give one")
        else:
            name = resolve_target(target, arch)
            if name == "cpu" and arch is not None:
                raise CompileError(f"arch={arch!r} is for target 'cuda'; the cpu target "
                                   "compiles for this host")
            target = Target.resolve(arch) if name == "cuda" else Target.host()
        return cls(target=target, precision=precision, precision_overrides=precision_overrides,
                   layout=layout, input_shapes=input_shapes, constant_inputs=constant_inputs,
                   graph_passes=graph_passes, stage_passes=stage_passes,
                   pass_options=pass_options, check_numerics=check_numerics, threads=threads,
                   cuda_graph=cuda_graph, max_memory=max_memory, calibration=calibration,
                   calibration_cache=calibration_cache, tactics=tactics, tuning=tuning,
                   timing_cache=timing_cache, tuning_budget_s=tuning_budget_s,
                   tuning_workers=tuning_workers)

    @classmethod
    def from_call(cls, where: str, options: "CompileOptions | None", keywords: dict,
                  defaults: dict) -> "CompileOptions":
        """``options``, or options made from a function's ``keywords`` (:meth:`make`'s names);
        keywords that differ from their ``defaults`` beside ``options`` are a CompileError."""
        if options is None:
            return cls.make(**keywords)
        if not isinstance(options, CompileOptions):
            raise CompileError(f"{where}: options= takes a CompileOptions, not {options!r}")
        given = sorted(k for k, v in keywords.items() if not _is_default(v, defaults[k]))
        if given:
            raise CompileError(f"{where}: give options= or the keywords {given}, not both")
        return options

    @property
    def kind(self) -> str:
        """The target's kind: ``"cpu"`` or ``"cuda"``."""
        return self.target.kind

    def import_options(self) -> dict:
        """The importer's keywords (``input_shapes``, ``constant_inputs``), as plain dicts."""
        return {k: None if v is None else dict(v) for k, v in
                (("input_shapes", self.input_shapes), ("constant_inputs", self.constant_inputs))}

    def cache_key(self) -> str:
        """A stable JSON key of what decides the generated code: the target (its arch and
        limits), precision, overrides, layout, shapes, constant inputs (hashed), the pass
        options, and the passes of every stage as built from these options (at both
        layouts). Left out: check_numerics (a compile with it is not cached), the runtime
        options (threads, cuda_graph, max_memory: applied to an engine) and calibration (int8
        compiles are not cached)."""
        pipelines = {stage: _text(build_pipeline(self, stage, layout="nchw"))
                     for stage in IR_STAGES}
        pipelines["graph/nhwc"] = _text(build_pipeline(self, "graph", layout="nhwc"))
        return json.dumps({
            "target": dict(self.target.key()), "precision": self.precision,
            "precision_overrides": dict(self.precision_overrides), "layout": self.layout,
            "input_shapes": _jsonable(self.input_shapes),
            "constant_inputs": _jsonable(self.constant_inputs),
            "graph_passes": _jsonable(self.graph_passes),
            "stage_passes": _jsonable(self.stage_passes),
            "pass_options": _jsonable(self.pass_options), "pipelines": pipelines,
            "tactics": {k: str(t) for k, t in sorted(self.tactics.items())},
        }, sort_keys=True, default=str)


def _is_default(value, default) -> bool:
    if value is default:
        return True
    if default is None or value is None:
        return False
    try:
        return type(value) is type(default) and bool(value == default)
    except (TypeError, ValueError):
        return False


def _text(passes) -> str:
    from .rewrite.pipeline import format_pipeline
    return format_pipeline(passes)


def _jsonable(v):
    import numpy as np
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return {"dtype": v.dtype.str, "shape": list(v.shape),
                "sha": hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()}
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)   # a pass object: its pipeline text


# ---- building a stage's passes ----------------------------------------------------------------

def build_pipeline(options: CompileOptions, stage: str, layout: str | None = None) -> list:
    """The pass objects of IR stage ``stage`` (graph, tensor or loop) for ``options``, built as
    the module docstring says. ``layout`` (graph stage): the resolved layout, ``nchw`` or
    ``nhwc`` (default ``options.layout``, which must not then be ``auto``: that is resolved per
    module, :func:`resolve_layout`)."""
    return [p for _, passes in stage_groups(options, stage, layout) for p in passes]


def stage_groups(options: CompileOptions, stage: str, layout: str | None = None) -> list:
    """:func:`build_pipeline`'s passes in groups, one per table entry or written pipeline, as
    ``(label, passes)``: the label is the entry's text where options changed none of its
    passes, else the passes' pipeline text (the stage log prints the labels)."""
    if stage not in IR_STAGES:
        raise CompileError(f"stage {stage!r} has no pass pipeline; the IR stages are "
                           f"{', '.join(IR_STAGES)}")
    kind = options.target.kind
    written = options.graph_passes if stage == "graph" else options.stage_passes.get(stage)
    groups = _written(written) if written is not None else \
        _from_table(STAGE_PIPELINES[kind][stage], options.target)
    if stage == "graph":
        layout = options.layout if layout is None else layout
        if layout not in ("nchw", "nhwc"):
            raise CompileError(f"build_pipeline: layout {layout!r} is resolved per module "
                               "(resolve_layout); give layout='nchw' or 'nhwc'")
        if layout == "nhwc":
            own = options.stage_passes.get("layout")
            groups += _written(own) if own is not None else \
                _from_table(LAYOUT_PIPELINES[kind], options.target)
        groups = _with_precision(groups, options, written)
    out = []
    for label, passes in groups:
        configured = [_configure(p, options) for p in passes]
        out.append((label if configured == passes else _text(configured), configured))
    return out


def _written(value) -> list:
    from .rewrite.pipeline import parse_pipeline
    if isinstance(value, str):
        return [(value, parse_pipeline(value))] if value.strip() else []
    return [(_text(value), list(value))] if value else []


def _from_table(steps, target: Target) -> list:
    from .rewrite.pipeline import parse_pipeline
    groups = []
    for step in steps:
        passes = parse_pipeline(step.text)
        if step.from_target:
            passes = [attrs.evolve(p, **{opt: getattr(target, attr)
                                         for opt, attr in step.from_target}) for p in passes]
        groups.append((step.text if not step.from_target else _text(passes), passes))
    return groups


def _with_precision(groups: list, options: CompileOptions, written) -> list:
    """int8: fold-qdq with ``fma-multipliers`` (unless the graph text names the option);
    fp16/tf32: ``lower-precision`` last (after BN folding, fusion and the layout, the weights
    are final; :mod:`ptxc.rewrite.passes.precision`)."""
    if options.precision == "int8":
        if isinstance(written, str) and "fma-multipliers" in written:
            return groups
        from .rewrite.passes.fold_qdq import FoldQDQPass
        out = []
        for label, passes in groups:
            own = [attrs.evolve(p, fma_multipliers=True) if isinstance(p, FoldQDQPass) else p
                   for p in passes]
            out.append((label if own == passes else _text(own), own))
        return out
    if options.precision in ("fp16", "tf32"):
        from .rewrite.passes.precision import LowerPrecision
        names = tuple(sorted(k for k, v in options.precision_overrides.items() if v == "fp32"))
        p = LowerPrecision(precision=options.precision, overrides=names)
        return groups + [(str(p), [p])]
    return groups


def _takes_target(field: attrs.Attribute) -> bool:
    return "Target" in str(field.type)


def _configure(p, options: CompileOptions):
    """``p`` with the target given to its ``target``/``arch`` fields (unless set) and the
    options' ``pass_options`` for its name."""
    fields = attrs.fields_dict(type(p))
    target = options.target
    changes = {}
    f = fields.get("target")
    if f is not None and _takes_target(f) and getattr(p, "target") == f.default:
        changes["target"] = target
    f = fields.get("arch")
    if f is not None and target.kind == "cuda" and getattr(p, "arch") == f.default:
        changes["arch"] = target.arch
    if "tactics" in fields and options.tactics and not getattr(p, "tactics"):
        changes["tactics"] = options.tactics
    changes.update(options.pass_options.get(p.name, {}))
    return attrs.evolve(p, **changes) if changes else p


# ---- the stage loop -------------------------------------------------------------------------

def schedule_pass_index(passes: list) -> int | None:
    """Where the target's schedule pass is in a stage's ``passes`` (the pass that takes
    per-kernel tactics: a ``tactics`` field and a ``candidates`` method; cuda ``map-to-gpu``,
    cpu ``cpu-schedule``), or None."""
    for i, p in enumerate(passes):
        if "tactics" in attrs.fields_dict(type(p)) and hasattr(p, "candidates"):
            return i
    return None


def run_stages(module, until: str = "loop", options: CompileOptions | None = None, *,
               timings: dict | None = None, on_stage=None, pass_manager=None,
               managers: list | None = None, progress: logging.Logger | None = log,
               tuner=None, **option_keywords):
    """Run the IR stages on ``module`` in place, up to and including ``until`` (graph, tensor or
    loop), as ``options`` ask (or options made from ``option_keywords``, :meth:`CompileOptions.
    make`'s names, target ``cpu`` unless named); returns ``module``. ``layout="auto"`` is
    resolved on the module before the graph stage.

    The hooks (compile and explore use them; the loop is this one): ``pass_manager``, keywords
    for each stage's :class:`~ptxc.rewrite.pass_manager.PassManager` (print_ir_after_all,
    dump_dir, explain, numerics_rtol, ...), or a function of the stage name that returns them;
    ``check_numerics`` comes from the options unless given there. ``managers`` receives each
    stage's PassManager after it ran; ``on_stage(stage, module)`` is called after each stage;
    ``timings[stage]`` gets its seconds; ``progress`` logs each stage (None: quiet).
    ``tuner`` (a :class:`ptxc.tune.tuner.Tuner`): in the loop stage, the passes before the
    schedule pass run, then ``tuner.choose_tactics(module, schedule_pass)`` gives tactics per
    kernel key, which join the options' own (``options.tactics`` win), then the rest runs."""
    from .rewrite.pass_manager import PassManager
    if options is None:
        options = CompileOptions.make(**{"target": "cpu", **option_keywords})
    elif option_keywords:
        raise CompileError(f"run_stages: give options= or the keywords "
                           f"{sorted(option_keywords)}, not both")
    if until not in IR_STAGES:
        raise CompileError(f"run_stages goes up to graph, tensor or loop, not {until!r}")
    layout = resolve_layout(options.layout, module, options.kind, options.precision)
    for stage in IR_STAGES[:IR_STAGES.index(until) + 1]:
        groups = stage_groups(options, stage, layout)
        kw = dict(pass_manager(stage) if callable(pass_manager) else (pass_manager or {}))
        kw.setdefault("check_numerics", options.check_numerics)
        flat = [p for _, passes in groups for p in passes]
        at = schedule_pass_index(flat) if tuner is not None and stage == "loop" else None
        t0 = time.perf_counter()
        if progress is not None:
            progress.info("%s stage (%s) ...", stage, ",".join(label for label, _ in groups))
        if at is None:
            pms = [PassManager(flat, **kw)]
            pms[0].run(module)
        else:
            pms = [PassManager(flat[:at], **kw)]
            pms[0].run(module)
            t1 = time.perf_counter()
            chosen = {**tuner.choose_tactics(module, flat[at]), **options.tactics}
            if timings is not None:
                timings["tuning"] = time.perf_counter() - t1
            pms.append(PassManager([attrs.evolve(flat[at], tactics=chosen), *flat[at + 1:]],
                                   **kw))
            pms[1].run(module)
        seconds = time.perf_counter() - t0
        if progress is not None:
            progress.info("%s stage done in %.2f s", stage, seconds)
        if timings is not None:
            timings[stage] = seconds
        if managers is not None:
            managers.extend(pms)
        if on_stage is not None:
            on_stage(stage, module)
    return module
