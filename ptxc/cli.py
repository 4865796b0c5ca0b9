"""The ``ptxc`` command.

    ptxc explore MODEL [--stage graph] [--target cpu|cuda] [--passes P] [--print-ir-after-all] ...
    ptxc compile MODEL [--target auto|cpu|cuda] [--arch sm_90] [-o model.plan]   compile; print
                                  bindings, kernels, memory
    ptxc run MODEL|PLAN [--target auto|cpu|cuda] [--input NAME=file.npy] [--save-outputs DIR]
                                  one inference (a cuda engine needs a GPU; auto, the
                                  default, is cuda where a GPU is present, else cpu)
    ptxc bench MODEL|PLAN [--iterations N|--duration S] [--warmup N|--warmup-ms MS]
               [--cuda-graph on|off] [--profile] [--export-profile trace.json] [--json FILE]
                                  latency statistics (as trtexec); per-kernel profile
    ptxc compare MODEL [--target T] [--atol A --rtol R] [--layerwise]
                                  ptxc against onnxruntime on the same inputs (exit 1: mismatch)
    ptxc bisect MODEL             the first rewrite that changes the result beyond tolerance
    ptxc inspect PLAN             what a plan file holds (bindings, kernels, memory plan)
    ptxc ops                      the ONNX op types the importer accepts
    ptxc --version; ptxc -v/--verbose ... (logging under the ``ptxc`` logger); -q/--quiet

Long compiles print their stages on stderr when it is a terminal (not with ``--quiet``).

MODEL is a path to an ONNX file, or ``light:NAME`` for one of the nine model-zoo models shipped
inside the onnx package (``light:resnet50``, ``light:squeezenet``, ...).
Errors print one line, ``ptxc: error: ...``, and exit with status 2; a file error names the
user's path. Output paths, input files and the target's device are checked before compiling.
Options that do not apply to a plan file are refused, with the reason. Ctrl-C exits with status
130 and one line.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from .errors import PtxcError


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


def model_label(spec: str) -> str:
    return spec if spec.startswith("light:") else os.path.basename(spec)


def check_model_file(path: str) -> None:
    if not os.path.exists(path):
        raise PtxcError(f"{path!r}: no such file")
    if os.path.isdir(path):
        raise PtxcError(f"{path!r}: is a directory, not a model file")


#: options that compile a model, and what a plan file has instead
_COMPILE_ONLY = {"target": ("--target", "auto"), "arch": ("--arch", None),
                 "input_shape": ("--input-shape", None), "precision": ("--precision", "fp32"),
                 "fp16": ("--fp16", False), "int8": ("--int8", False), "tf32": ("--tf32", False),
                 "precision_override": ("--precision-override", None),
                 "layout": ("--layout", "nchw")}


def load_engine(args, cuda_graph: str | None = None, needs_device: bool = True):
    """(engine, onnx_path or None) for ``args.model``: a plan file is loaded (options that only
    compiling uses are refused), anything else compiled. ``cuda_graph`` (on/off/None) sets the
    runtime switch; a cuda engine that is to run is refused before compiling when no GPU is
    usable here."""
    parse_inputs(getattr(args, "input", None))  # input files exist, before any compile
    if _is_plan(args.model):
        given = [flag for key, (flag, default) in _COMPILE_ONLY.items()
                 if getattr(args, key, default) not in (default, None, [])]
        if getattr(args, "no_cuda_graph", False) and cuda_graph is None:
            cuda_graph = "off"
        if given:
            raise PtxcError(f"{', '.join(given)} do{'es' if len(given) == 1 else ''} not apply "
                            f"to a plan file ({args.model!r} is already compiled: its target, "
                            "precision and shapes are fixed); compile the model again to change "
                            "them")
        from .driver.plan import load_plan
        engine = load_plan(args.model)
        path = None
    else:
        path = resolve_model(args.model)
        check_model_file(path)
        if getattr(args, "no_cuda_graph", False):
            cuda_graph = "off"
        engine = _compile(args, needs_device=needs_device,
                          cuda_graph_opt=cuda_graph is not None)
    if cuda_graph is not None:
        if engine.target != "cuda":
            raise PtxcError(f"--cuda-graph is for cuda engines; this one is {engine.target}")
        engine.cuda_graph = cuda_graph == "on"
    if needs_device and engine.target == "cuda":
        _require_gpu()
    return engine, path


def _require_gpu() -> None:
    from .driver.plan import device_arch
    if device_arch() is None:
        raise PtxcError("target cuda needs a GPU to run, and none is usable here (compile and "
                        "inspect work without one; --target cpu runs on this host)")


def add_precision_extras(c) -> None:
    """``--tf32`` and ``--precision-override NODE=fp32`` (``--fp16`` is added with the model
    options)."""
    c.add_argument("--tf32", action="store_true", help="compile with precision tf32")
    c.add_argument("--precision-override", action="append", metavar="NODE=fp32",
                   help="keep ONNX node NODE in fp32 under --fp16/--tf32 (repeatable)")


def precision_overrides(args) -> dict | None:
    """``--precision-override NODE=P`` (repeatable) -> {NODE: P}."""
    out = {}
    for item in getattr(args, "precision_override", None) or ():
        node, sep, p = item.rpartition("=")
        if not sep or not node or not p:
            raise PtxcError(f"--precision-override {item!r}: expected NODE=fp32")
        out[node] = p
    return out or None


def add_compile_options(c) -> None:
    c.add_argument("--target", default="auto",
                   help="cpu, cuda, or auto (the default: cuda where a GPU is present, else cpu)")
    c.add_argument("--arch", default=None,
                   help="cuda: the arch to compile for, e.g. sm_90 (default: PTXC_CUDA_ARCH, "
                   "the GPU here, else sm_90)")
    c.add_argument("--precision", default="fp32", help="fp32 (the default), tf32 or fp16")
    add_precision_extras(c)
    c.add_argument("--layout", default="nchw", choices=("nchw", "nhwc", "auto"),
                   help=_LAYOUT_HELP)
    c.add_argument("--input-shape", action="append", metavar="NAME=DIMS",
                   help="bind an input's symbolic dims, e.g. data=1x3x224x224")


def _cmd_explore(args) -> int:
    from .explore import explore
    if args.dump_dir:
        check_output_dir(args.dump_dir, "--dump-dir")
    path = resolve_model(args.model)
    check_model_file(path)
    from .cli_tools import requested_precision
    text = explore(path, stage=args.stage, passes=args.passes,
                   precision=requested_precision(args),
                   precision_overrides=precision_overrides(args),
                   input_shapes=parse_shapes(args.input_shape),
                   print_ir_after_all=args.print_ir_after_all,
                   print_ir_after_change=args.print_ir_after_change, dump_dir=args.dump_dir,
                   timing=args.timing, check_numerics=args.check_numerics,
                   elide_constants=not args.show_constants, report=not args.no_report,
                   explain=args.explain, target=args.target, arch=args.arch,
                   layout=args.layout, dump_constants=args.dump_constants)
    sys.stdout.write(text)
    return 0


def _summary(engine) -> str:
    lines = [repr(engine)]
    t = engine.timings
    lines.append("compile time: " + ", ".join(f"{k} {v:.2f}s" for k, v in t.items())
                 + f" (total {sum(t.values()):.2f}s)")
    if engine.kernels is not None:
        lines.append(f"kernels: {len(engine.kernels.kernels)}")
    if engine.target == "cuda":
        lines.append(f"ptx: {engine.arch}, {len(engine.ptx):,} bytes; CUDA graph "
                     f"{'on' if engine.cuda_graph else 'off'}")
    m = engine.memory_report()
    if m.get("arena_bytes") is not None:
        lines.append(f"memory: arena {m['arena_bytes']:,} bytes, live-bytes lower bound "
                     f"{m['lower_bound_bytes']:,}, without reuse {m['no_reuse_bytes']:,} "
                     f"({m['buffers']} buffers)")
    if m.get("device_bytes") is not None:
        lines.append(f"device memory at the first run: {m['device_bytes']:,} bytes (arena, "
                     f"weights {m['weights_bytes']:,}, bindings {m['bindings_bytes']:,})")
    return "\n".join(lines) + "\n"


def _compile(args, needs_device: bool = False, cuda_graph_opt: bool = False):
    from .cli_tools import requested_precision
    from .compiler import compile as compile_model, resolve_target
    # --arch or --no-cuda-graph ask for the cuda target; otherwise auto picks it where a GPU is
    wants_cuda = bool(args.arch or getattr(args, "no_cuda_graph", False) or cuda_graph_opt)
    target = "cuda" if args.target == "auto" and wants_cuda else resolve_target(args.target)
    if target != "cuda" and wants_cuda:
        what = "--cuda-graph is" if cuda_graph_opt else "--arch and --no-cuda-graph are"
        raise PtxcError(f"{what} for --target cuda (target here: {target})")
    if needs_device and target == "cuda":
        _require_gpu()  # before a long compile, not after
    precision = requested_precision(args)
    cuda = {} if target != "cuda" else {"arch": args.arch}
    path = resolve_model(args.model)
    check_model_file(path)
    calib = {}
    if getattr(args, "calib", None) or getattr(args, "calib_cache", None):
        if precision != "int8":
            raise PtxcError("--calib and --calib-cache are for --int8")
        calib = {"calibration": args.calib, "calibration_cache": args.calib_cache}
    return compile_model(path, target=target, precision=precision,
                         precision_overrides=precision_overrides(args),
                         input_shapes=parse_shapes(args.input_shape),
                         layout=getattr(args, "layout", "nchw"), **cuda, **calib)


def _cmd_compile(args) -> int:
    if args.output:
        check_output_path(args.output, "-o")
    engine = _compile(args)
    if args.no_cuda_graph:
        engine.cuda_graph = False
    sys.stdout.write(_summary(engine))
    if args.output:
        try:
            engine.save(args.output)
        except OSError as e:
            raise file_error(args.output, e, "cannot write") from None
        print(f"plan written to {args.output}")
    return 0


def _is_plan(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(8) == b"PTXCPLAN"
    except OSError:
        return False


def _cmd_run(args) -> int:
    import time
    if args.save_outputs:
        check_output_dir(args.save_outputs, "--save-outputs")
    engine, _ = load_engine(args)
    feeds = make_feeds(engine, args.input, args.seed)
    engine.run(feeds)  # warm-up
    t0 = time.perf_counter()
    out = engine.run(feeds)
    dt = time.perf_counter() - t0
    import numpy as np
    for name, y in out.items():
        stats = f"min {y.min():.6g} max {y.max():.6g} mean {y.mean():.6g}" if y.size else "empty"
        print(f"{name}: {y.dtype}{list(y.shape)} {stats}")
        if args.save_outputs:
            os.makedirs(args.save_outputs, exist_ok=True)
            dest = os.path.join(args.save_outputs, _safe(name) + ".npy")
            try:
                np.save(dest, y)
            except OSError as e:
                raise file_error(dest, e, "cannot write") from None
    print(f"latency: {dt * 1e3:.2f} ms ({engine.target}; `ptxc bench` for statistics)")
    return 0


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _cmd_inspect(args) -> int:
    from .driver.plan_inspect import inspect_plan
    sys.stdout.write(inspect_plan(args.plan))
    return 0


def _cmd_ops(args) -> int:
    from . import SUPPORTED_OPS
    print("\n".join(SUPPORTED_OPS))
    return 0


_LAYOUT_HELP = ("nchw (the default: ONNX's layout), nhwc (convolutions run channels-last "
                "inside, filters KRSC; inputs and outputs unchanged), auto (nhwc on cuda for "
                "conv-heavy graphs); docs/graph-opt.md, 'Layout'")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    p = argparse.ArgumentParser(prog="ptxc", description="ptxc: an open inference compiler.")
    p.add_argument("--version", action="version", version=f"ptxc {__version__}")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="log what ptxc does (Python logging, logger 'ptxc') on stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    sub = p.add_subparsers(dest="command", required=True)

    e = sub.add_parser("explore", help="print the IR of a model at a stage (compiler explorer)")
    e.add_argument("model", help="ONNX file, or light:NAME for an onnx-shipped model")
    e.add_argument("--stage", default="graph", help="graph, tensor, loop, llvm or ptx")
    e.add_argument("--target", default=None,
                   help="cpu or cuda: the loop, llvm and ptx stages depend on it (default cpu; "
                   "cuda for --stage ptx)")
    e.add_argument("--arch", default=None, help="the CUDA arch of --stage ptx, e.g. sm_90")
    e.add_argument("--passes", default=None,
                   help="pass pipeline, e.g. 'dce,cse' ('' for the graph as imported)")
    e.add_argument("--input-shape", action="append", metavar="NAME=DIMS",
                   help="bind an input's symbolic dims, e.g. data=1x3x224x224 (repeatable)")
    e.add_argument("--print-ir-after-all", action="store_true", help="the IR after every pass")
    e.add_argument("--print-ir-after-change", action="store_true",
                   help="the IR after every pass that changed it")
    e.add_argument("--dump-dir", help="write one numbered IR file per pass here (constants "
                   "over 1 KiB elided, unless --dump-constants)")
    e.add_argument("--dump-constants", action="store_true",
                   help="keep every constant in the --dump-dir files (they then parse back)")
    e.add_argument("--timing", action="store_true", help="report time per pass")
    e.add_argument("--check-numerics", action="store_true",
                   help="interpret before and after each pass on random inputs and compare")
    e.add_argument("--explain", action="store_true",
                   help="for each fusion pattern: where it fired, where it nearly did and why not")
    e.add_argument("--no-report", action="store_true",
                   help="leave out the op counts before and after the graph passes")
    e.add_argument("--show-constants", action="store_true",
                   help="print constant contents (blobs) instead of eliding them")
    e.add_argument("--layout", default="nchw", choices=("nchw", "nhwc", "auto"),
                   help=_LAYOUT_HELP)
    e.add_argument("--precision", default="fp32", help="fp32 (the default), tf32 or fp16")
    e.add_argument("--fp16", action="store_true", help="the IR with precision fp16")
    add_precision_extras(e)
    e.set_defaults(fn=_cmd_explore)

    for name, helptext in (("compile", "compile a model; print its bindings, kernels, memory"),
                           ("run", "compile (or load a plan) and run one inference")):
        c = sub.add_parser(name, help=helptext)
        c.add_argument("model", help="ONNX file, light:NAME" + (", or a plan file"
                                                                 if name == "run" else ""))
        add_compile_options(c)
        c.add_argument("--no-cuda-graph", action="store_true",
                       help="cuda: launch kernel by kernel instead of replaying one CUDA graph")
        c.add_argument("--fp16", action="store_true", help="compile with precision fp16")
        c.add_argument("--int8", action="store_true", help="compile with precision int8")
        c.add_argument("--calib", metavar="DIR",
                       help="int8: calibration data (.npy/.npz files or one sub-folder per "
                       "batch; docs/quantization.md)")
        c.add_argument("--calib-cache", metavar="FILE",
                       help="int8: calibration cache (read when it matches, else written)")
        if name == "compile":
            c.add_argument("-o", "--output", help="write the engine to this plan file")
            c.set_defaults(fn=_cmd_compile)
        else:
            c.add_argument("--input", action="append", metavar="NAME=FILE.npy",
                           help="an input from a .npy file (others: seeded random normal)")
            c.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
            c.add_argument("--save-outputs", metavar="DIR", help="write each output as .npy")
            c.set_defaults(fn=_cmd_run)

    from .cli_tools import add_bench, add_bisect, add_compare
    add_bench(sub)
    add_compare(sub)
    add_bisect(sub)

    i = sub.add_parser("inspect", help="show what a plan file holds")
    i.add_argument("plan")
    i.set_defaults(fn=_cmd_inspect)

    o = sub.add_parser("ops", help="list the ONNX op types the importer accepts")
    o.set_defaults(fn=_cmd_ops)
    return p


class _ProgressFormatter(logging.Formatter):
    def format(self, record) -> str:
        return f"ptxc: {record.getMessage()}"


def setup_logging(verbose: bool, quiet: bool, stream=None) -> logging.Handler | None:
    """``--verbose``: every record of the ``ptxc`` logger (DEBUG and up) on stderr, with its
    logger name; otherwise the INFO records (compile stages) as progress lines when stderr is a
    terminal and ``--quiet`` is not given; nothing else."""
    stream = stream or sys.stderr
    log = logging.getLogger("ptxc")
    if verbose:
        h = logging.StreamHandler(stream)
        h.setFormatter(logging.Formatter("ptxc: %(name)s: %(message)s"))
        level = logging.DEBUG
    elif not quiet and getattr(stream, "isatty", lambda: False)():
        h = logging.StreamHandler(stream)
        h.setFormatter(_ProgressFormatter())
        level = logging.INFO
    else:
        return None
    h.setLevel(level)
    h.previous_level = log.level
    log.addHandler(h)
    log.setLevel(min(log.level or level, level))
    return h


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    handler = setup_logging(args.verbose, args.quiet)
    try:
        return args.fn(args)
    except PtxcError as e:
        print(f"ptxc: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ptxc: interrupted", file=sys.stderr)
        return 130
    except OSError as e:  # a file error no command caught: still one line, naming the path
        if isinstance(e, BrokenPipeError):  # `ptxc explore ... | head`
            return 0
        where = f"{e.filename!r}: " if e.filename else ""
        print(f"ptxc: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    finally:
        if handler is not None:
            logging.getLogger("ptxc").removeHandler(handler)
            logging.getLogger("ptxc").setLevel(handler.previous_level)


if __name__ == "__main__":
    sys.exit(main())
