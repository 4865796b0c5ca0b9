"""What the ``ptxc`` commands share: their common options, declared once, and the helpers that
read them (models, shapes, inputs, precision, output paths, compiling or loading an engine).

    add_model(parser, plan_ok=True)                  # the MODEL positional
    add_options(parser, "compile", "inputs", "calib")        # groups or single options
    add_options(parser, "compile", target={"default": None}) # a command's own default/help

Why a table: seven commands take overlapping sets of options (``--target``, ``--arch``, the
precision flags, ``--layout``, ``--input-shape``, ``--input``/``--seed``, ``--atol``/``--rtol``);
declared per command they drifted (help texts, defaults, which commands had ``--int8``). Each
option is declared here once, with whether it only means something when compiling: that one
flag also decides which options a plan file refuses (:func:`load_engine`).

Before -> after: ``compile``, ``run``, ``bench`` and ``compare`` each declared ``--fp16`` and
``--int8`` (two copies of each, in cli.py and cli_tools.py); now ``add_options(c, "compile")``.
"""

from __future__ import annotations

import json
import os

import attrs

from .errors import PtxcError

_LAYOUT_HELP = ("auto (the default: nhwc on cuda for conv-heavy graphs in fp16, tf32, int8 or "
                "with Q/DQ, else nchw), nchw (ONNX's layout), nhwc (convolutions run channels-last "
                "inside, filters KRSC; inputs and outputs unchanged); docs/graph-opt.md, "
                "'Layout'")


@attrs.frozen
class Option:
    flags: tuple
    kwargs: dict
    compile_only: bool = False   # means nothing to an already compiled plan file
    #: the compile option (CompileOptions.make's keyword) it sets, or None
    field: str | None = None

    @property
    def dest(self) -> str:
        return self.kwargs.get("dest") or self.flags[-1].lstrip("-").replace("-", "_")

    @property
    def default(self):
        return self.kwargs.get("default", False if self.kwargs.get("action") == "store_true"
                               else None)


def _opt(*flags, compile_only=False, field=None, **kwargs) -> Option:
    return Option(flags, kwargs, compile_only, field)


#: every shared option, by its argparse dest
OPTIONS = {o.dest: o for o in (
    _opt("--target", default="auto", compile_only=True, field="target",
         help="cpu, cuda, or auto (the default: cuda where a GPU is present or --arch is given, "
         "else cpu)"),
    _opt("--arch", default=None, compile_only=True, field="arch",
         help="cuda: the arch to compile for, e.g. sm_90 or sm_89 (default: PTXC_CUDA_ARCH, the "
         "GPU here, else sm_90); no GPU is needed to compile for one"),
    _opt("--precision", default="fp32", compile_only=True, field="precision",
         help="fp32 (the default), tf32, fp16 or int8"),
    _opt("--fp16", action="store_true", compile_only=True, field="precision",
         help="compile with precision fp16"),
    _opt("--int8", action="store_true", compile_only=True, field="precision",
         help="compile with precision int8"),
    _opt("--tf32", action="store_true", compile_only=True, field="precision",
         help="compile with precision tf32"),
    _opt("--precision-override", action="append", metavar="NODE=fp32", compile_only=True,
         field="precision_overrides",
         help="keep ONNX node NODE in fp32 under --fp16/--tf32/--int8 (repeatable; ptxc "
         "calibrate --report proposes int8's)"),
    _opt("--layout", default="auto", choices=("nchw", "nhwc", "auto"), compile_only=True,
         field="layout", help=_LAYOUT_HELP),
    _opt("--input-shape", action="append", metavar="NAME=DIMS", compile_only=True,
         field="input_shapes",
         help="bind an input's symbolic dims, e.g. data=1x3x224x224 (repeatable)"),
    _opt("--calib", metavar="DIR|FILE.npz", compile_only=True, field="calibration",
         help="int8: calibration data (a folder of .npy/.npz files or one sub-folder per "
         "batch, or one .npz split along its leading axis; docs/quantization.md)"),
    _opt("--calib-cache", metavar="FILE", compile_only=True, field="calibration_cache",
         help="int8: calibration cache (read when it matches, else written)"),
    _opt("--passes", default=None, dest="graph_passes", compile_only=True,
         field="graph_passes",
         help="the graph stage's pass pipeline, e.g. 'dce,cse' (default graph-opt; '' for the "
         "graph as imported)"),
    _opt("--check-numerics", action="store_true", compile_only=True, field="check_numerics",
         help="interpret before and after each pass on random inputs and compare"),
    _opt("--no-cuda-graph", action="store_true", field="cuda_graph",
         help="cuda: launch kernel by kernel instead of replaying one CUDA graph"),
    _opt("--tuning", default="off", choices=("off", "fast", "full"), compile_only=True,
         field="tuning",
         help="auto-tune each kernel on the target: off (the default: the heuristic), fast (a "
         "few candidates each) or full (all); docs/tuning.md"),
    _opt("--timing-cache", metavar="FILE", compile_only=True, field="timing_cache",
         help="timing cache: tactics measured before are reused, new ones written back"),
    _opt("--tuning-budget", type=float, metavar="SECONDS", dest="tuning_budget_s",
         compile_only=True, field="tuning_budget_s",
         help="stop measuring after this many seconds (the rest: cache or heuristic)"),
    _opt("--tuning-workers", default="auto", metavar="WHERE", compile_only=True,
         field="tuning_workers",
         help="where tuning measures: auto (every GPU of this host where it has several, else "
         "here), here, every-gpu, ray (a local Ray instance) or ray:ADDRESS (a cluster)"),
    _opt("--input", action="append", metavar="NAME=FILE.npy",
         help="an input from a .npy file (others: seeded random normal)"),
    _opt("--seed", type=int, default=0, help="seed of the random inputs"),
    _opt("--atol", type=float, default=1e-4, help="absolute tolerance (1e-4)"),
    _opt("--rtol", type=float, default=1e-3, help="relative tolerance (1e-3)"),
)}

#: option groups, by name
GROUPS = {
    "compile": ("target", "arch", "precision", "fp16", "int8", "tf32", "precision_override",
                "layout", "input_shape"),
    "calib": ("calib", "calib_cache"),
    "tuning": ("tuning", "timing_cache", "tuning_budget_s", "tuning_workers"),
    "inputs": ("input", "seed"),
    "tolerance": ("atol", "rtol"),
}


def add_options(parser, *names: str, **overrides) -> None:
    """Add the named groups and options (:data:`GROUPS`, :data:`OPTIONS`) to ``parser``; a
    keyword ``dest={...}`` changes that option's argparse keywords for this command (its default
    or help), and ``dest=None`` leaves it out."""
    dests = [d for n in names for d in GROUPS.get(n, (n,))]
    for d in dests:
        if d not in OPTIONS:
            raise KeyError(f"no shared option or group {d!r}")
        if d in overrides and overrides[d] is None:
            continue
        o = OPTIONS[d]
        parser.add_argument(*o.flags, **{**o.kwargs, **(overrides.get(d) or {})})


def add_model(parser, plan_ok: bool = False) -> None:
    parser.add_argument("model", help="ONNX file, or light:NAME for an onnx-shipped model"
                        + (", or a plan file" if plan_ok else ""))


# ---- reading the options ----------------------------------------------------------------------

def resolve_model(spec: str) -> str:
    """A model path from a CLI argument (``light:NAME`` names an onnx-shipped model)."""
    if spec.startswith("light:"):
        import onnx
        light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
        path = os.path.join(light, f"light_{spec[len('light:'):]}.onnx")
        if not os.path.exists(path):
            names = sorted(f[len("light_"):-len(".onnx")] for f in os.listdir(light)
                           if f.endswith(".onnx"))
            raise PtxcError(f"no light model {spec!r}; there are: {', '.join(names)}")
        return path
    return spec


def model_label(spec: str) -> str:
    return spec if spec.startswith("light:") else os.path.basename(spec)


def check_model_file(path: str) -> None:
    if not os.path.exists(path):
        raise PtxcError(f"{path!r}: no such file")
    if os.path.isdir(path):
        raise PtxcError(f"{path!r}: is a directory, not a model file")


def is_plan(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(8) == b"PTXCPLAN"
    except OSError:
        return False


def parse_shapes(items) -> dict:
    """``--input-shape x=1x3x224x224`` (repeatable) -> {"x": (1, 3, 224, 224)}."""
    out = {}
    for item in items or ():
        name, sep, dims = item.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = tuple(int(d) for d in dims.split("x")) if dims else ()
        except ValueError:
            raise PtxcError(f"--input-shape {item!r}: expected NAME=D0xD1x...") from None
    return out


def parse_inputs(items) -> dict:
    """``--input NAME=FILE.npy`` (repeatable) -> {name: path}, each file checked readable."""
    out = {}
    for item in items or ():
        name, sep, path = item.partition("=")
        if not sep or not name:
            raise PtxcError(f"--input {item!r}: expected NAME=FILE.npy")
        if not os.path.isfile(path):
            raise PtxcError(f"--input {name}: {path!r} " + (
                "is not a file" if os.path.exists(path) else "does not exist"))
        out[name] = path
    return out


def make_feeds(engine, input_items, seed: int) -> dict:
    """The inputs of one inference: ``--input`` files, the rest seeded random normal (floats) or
    zeros (integers)."""
    import numpy as np
    given = {}
    for name, path in parse_inputs(input_items).items():
        try:
            given[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise PtxcError(f"--input {name}: cannot read {path!r}: {e}") from None
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, t in engine.inputs.items():
        if name in given:
            feeds[name] = given.pop(name)
        elif t.element.is_float:
            feeds[name] = rng.standard_normal(t.shape).astype(t.element.np_dtype)
        else:
            feeds[name] = np.zeros(t.shape, t.element.np_dtype)
    if given:
        raise PtxcError(f"--input names {sorted(given)} are not inputs; the inputs are "
                        f"{list(engine.inputs)}")
    return feeds


#: the precision each flag asks for
PRECISION_FLAGS = {"fp16": "fp16", "int8": "int8", "tf32": "tf32"}


def requested_precision(args) -> str:
    """The precision the flags ask for (CompileOptions checks that ptxc has it)."""
    asked = [p for flag, p in PRECISION_FLAGS.items() if getattr(args, flag, False)]
    if getattr(args, "precision", None) not in (None, "fp32"):
        asked.append(args.precision)
    if len(set(asked)) > 1:
        raise PtxcError(f"conflicting precisions {sorted(set(asked))}: give one")
    return asked[0] if asked else "fp32"


def precision_overrides(args) -> dict | None:
    """``--precision-override NODE=P`` (repeatable) -> {NODE: P}."""
    out = {}
    for item in getattr(args, "precision_override", None) or ():
        node, sep, p = item.rpartition("=")
        if not sep or not node or not p:
            raise PtxcError(f"--precision-override {item!r}: expected NODE=fp32")
        out[node] = p
    return out or None


def target_of(args) -> str:
    """The target ``--target``/``--arch`` ask for (``--arch`` with auto means cuda)."""
    from .pipeline import resolve_target
    return resolve_target(args.target, args.arch)


# ---- files -----------------------------------------------------------------------------------

def file_error(path: str, e: OSError, doing: str) -> PtxcError:
    """One line naming the user's path: ``cannot write 'x/y.plan': No such file or directory``."""
    return PtxcError(f"{doing} {path!r}: {e.strerror or e}")


def check_output_path(path: str, flag: str) -> None:
    """Refuse an output path that cannot be written, before any work is done."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise PtxcError(f"{flag} {path!r}: is a directory")
    if not os.path.isdir(d):
        raise PtxcError(f"{flag} {path!r}: directory {d!r} does not exist")
    if not os.access(d, os.W_OK):
        raise PtxcError(f"{flag} {path!r}: directory {d!r} is not writable")


def check_output_dir(path: str, flag: str) -> None:
    """Make the output directory now (it would be made later anyway), so that one that cannot
    be made or written is refused before any work is done."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise PtxcError(f"{flag} {path!r}: cannot be created: {e.strerror or e}") from None
    if not os.path.isdir(path) or not os.access(path, os.W_OK):
        raise PtxcError(f"{flag} {path!r}: is not a writable directory")


def write_json(path: str, obj) -> None:
    try:
        with open(path, "w") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")
    except OSError as e:
        raise file_error(path, e, "cannot write") from None


# ---- engines ---------------------------------------------------------------------------------

def require_gpu() -> None:
    from .target import device_arch
    if device_arch() is None:
        raise PtxcError("target cuda needs a GPU to run, and none is usable here (compile and "
                        "inspect work without one; --target cpu runs on this host)")


def compile_options(args, needs_device: bool = False, cuda_graph_opt: bool = False):
    """The :class:`~ptxc.pipeline.CompileOptions` of the shared compile options in ``args``
    (``--calib``/``--calib-cache`` where the command has them). ``--arch``, ``--no-cuda-graph``
    or ``cuda_graph_opt`` (bench's ``--cuda-graph``) ask for the cuda target; with
    ``needs_device``, a cuda target without a usable GPU is refused here, before compiling."""
    from .pipeline import CompileOptions, resolve_target
    wants_cuda = bool(args.arch or getattr(args, "no_cuda_graph", False) or cuda_graph_opt)
    target = "cuda" if args.target == "auto" and wants_cuda else resolve_target(args.target)
    if target != "cuda" and wants_cuda:
        what = "--cuda-graph is" if cuda_graph_opt else "--arch and --no-cuda-graph are"
        raise PtxcError(f"{what} for --target cuda (target here: {target})")
    if needs_device and target == "cuda":
        require_gpu()  # before a long compile, not after
    precision = requested_precision(args)
    calib = {}
    if getattr(args, "calib", None) or getattr(args, "calib_cache", None):
        if precision != "int8":
            raise PtxcError("--calib and --calib-cache are for --int8")
        calib = {"calibration": args.calib, "calibration_cache": args.calib_cache}
    return CompileOptions.make(
        target=target, arch=args.arch if target == "cuda" else None, precision=precision,
        precision_overrides=precision_overrides(args),
        input_shapes=parse_shapes(getattr(args, "input_shape", None)),
        layout=getattr(args, "layout", "auto"),
        graph_passes=getattr(args, "graph_passes", None),
        check_numerics=getattr(args, "check_numerics", False),
        cuda_graph=not getattr(args, "no_cuda_graph", False),
        tuning=getattr(args, "tuning", "off"), timing_cache=getattr(args, "timing_cache", None),
        tuning_budget_s=getattr(args, "tuning_budget_s", None),
        tuning_workers=getattr(args, "tuning_workers", "auto"), **calib)


def compile_from_args(args, needs_device: bool = False, cuda_graph_opt: bool = False):
    """Compile ``args.model`` with :func:`compile_options`."""
    from .compiler import compile as compile_model
    options = compile_options(args, needs_device, cuda_graph_opt)
    path = resolve_model(args.model)
    check_model_file(path)
    return compile_model(path, options=options)


def load_engine(args, cuda_graph: str | None = None, needs_device: bool = True):
    """(engine, onnx_path or None) for ``args.model``: a plan file is loaded (the options that
    only compiling uses, :data:`OPTIONS` marked ``compile_only``, are refused when given),
    anything else compiled. ``cuda_graph`` (on/off/None) sets the runtime switch; a cuda engine
    that is to run is refused before compiling when no GPU is usable here."""
    parse_inputs(getattr(args, "input", None))  # input files exist, before any compile
    if is_plan(args.model):
        given = [o.flags[-1] for o in OPTIONS.values() if o.compile_only
                 and getattr(args, o.dest, o.default) not in (o.default, None, [])]
        if getattr(args, "no_cuda_graph", False) and cuda_graph is None:
            cuda_graph = "off"
        if given:
            raise PtxcError(f"{', '.join(given)} do{'es' if len(given) == 1 else ''} not apply "
                            f"to a plan file ({args.model!r} is already compiled: its target, "
                            "precision and shapes are fixed); compile the model again to change "
                            "them")
        from .driver.load import load_plan
        engine = load_plan(args.model)
        path = None
    else:
        path = resolve_model(args.model)
        check_model_file(path)
        if getattr(args, "no_cuda_graph", False):
            cuda_graph = "off"
        engine = compile_from_args(args, needs_device=needs_device,
                                   cuda_graph_opt=cuda_graph is not None)
    if cuda_graph is not None:
        if engine.target != "cuda":
            raise PtxcError(f"--cuda-graph is for cuda engines; this one is {engine.target}")
        engine.cuda_graph = cuda_graph == "on"
    if needs_device and engine.target == "cuda":
        require_gpu()
    return engine, path
