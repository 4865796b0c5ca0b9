"""The ``ptxc`` command.

    ptxc explore MODEL [--stage graph] [--target cpu|cuda] [--passes P] [--print-ir-after-all] ...
    ptxc compile MODEL [--target auto|cpu|cuda] [--arch sm_90] [-o model.plan]   compile; print
                                  bindings, kernels, memory
    ptxc run MODEL|PLAN [--target auto|cpu|cuda] [--input NAME=file.npy] [--save-outputs DIR]
               [--random-weights]
                                  one inference (a cuda engine needs a GPU; auto, the
                                  default, is cuda where a GPU is present, else cpu),
                                  checked against onnxruntime (else the interpreter) and
                                  timed beside it
    ptxc calibrate MODEL --data DIR|FILE.npz [--method entropy|minmax|percentile|mse]
               --cache FILE [--report R.json [--max-error E] [--metric rel-max|cosine]]
                                  int8: write the calibration cache; the report ranks the
                                  layers by their int8 error and proposes fp32 overrides
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


from .cli_options import (add_model, add_options, check_model_file, check_output_dir,
                          check_output_path, compile_from_args, file_error, load_engine,
                          make_feeds, parse_shapes, precision_overrides, requested_precision,
                          resolve_model)

__all__ = ["main", "build_parser", "setup_logging", "resolve_model"]


def _cmd_explore(args) -> int:
    from .explore import explore
    if args.dump_dir:
        check_output_dir(args.dump_dir, "--dump-dir")
    path = resolve_model(args.model)
    check_model_file(path)
    text = explore(path, stage=args.stage, graph_passes=args.graph_passes,
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


def _cmd_compile(args) -> int:
    if args.output:
        check_output_path(args.output, "-o")
    engine = compile_from_args(args)
    sys.stdout.write(_summary(engine))
    if args.output:
        try:
            engine.save(args.output)
        except OSError as e:
            raise file_error(args.output, e, "cannot write") from None
        print(f"plan written to {args.output}")
    return 0


def _cmd_run(args) -> int:
    """One inference, checked against a reference and timed beside it (ptxc.tools.run_report)."""
    from .tools.run_report import run_report, with_random_weights
    if args.save_outputs:
        check_output_dir(args.save_outputs, "--save-outputs")
    with with_random_weights(args) as run_args:
        engine, path = load_engine(run_args)
        feeds = make_feeds(engine, args.input, args.seed)
        text, out = run_report(engine, feeds, path, args.model, args.random_weights)
    sys.stdout.write(text)
    import numpy as np
    for name, y in out.items() if args.save_outputs else ():
        os.makedirs(args.save_outputs, exist_ok=True)
        dest = os.path.join(args.save_outputs, _safe(name) + ".npy")
        try:
            np.save(dest, y)
        except OSError as e:
            raise file_error(dest, e, "cannot write") from None
    return 0


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _cmd_inspect(args) -> int:
    from .plan.inspect import inspect_plan
    sys.stdout.write(inspect_plan(args.plan))
    return 0


def _cmd_ops(args) -> int:
    from . import SUPPORTED_OPS
    print("\n".join(SUPPORTED_OPS))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    p = argparse.ArgumentParser(prog="ptxc", description="ptxc: an open inference compiler.")
    p.add_argument("--version", action="version", version=f"ptxc {__version__}")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="log what ptxc does (Python logging, logger 'ptxc') on stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    sub = p.add_subparsers(dest="command", required=True)

    e = sub.add_parser("explore", help="print the IR of a model at a stage (compiler explorer)")
    add_model(e)
    e.add_argument("--stage", default="graph", help="graph, tensor, loop, llvm or ptx")
    add_options(e, "compile", int8=None, target={
        "default": None, "help": "cpu or cuda: the loop, llvm and ptx stages depend on it "
        "(default cpu; cuda for --stage ptx)"},
        arch={"help": "the CUDA arch of --stage ptx, e.g. sm_90"},
        fp16={"help": "the IR with precision fp16"})
    add_options(e, "graph_passes")
    e.add_argument("--print-ir-after-all", action="store_true", help="the IR after every pass")
    e.add_argument("--print-ir-after-change", action="store_true",
                   help="the IR after every pass that changed it")
    e.add_argument("--dump-dir", help="write one numbered IR file per pass here (constants "
                   "over 1 KiB elided, unless --dump-constants)")
    e.add_argument("--dump-constants", action="store_true",
                   help="keep every constant in the --dump-dir files (they then parse back)")
    e.add_argument("--timing", action="store_true", help="report time per pass")
    add_options(e, "check_numerics")
    e.add_argument("--explain", action="store_true",
                   help="for each fusion pattern: where it fired, where it nearly did and why not")
    e.add_argument("--no-report", action="store_true",
                   help="leave out the op counts before and after the graph passes")
    e.add_argument("--show-constants", action="store_true",
                   help="print constant contents (blobs) instead of eliding them")
    e.set_defaults(fn=_cmd_explore)

    for name, helptext in (("compile", "compile a model; print its bindings, kernels, memory"),
                           ("run", "compile (or load a plan) and run one inference")):
        c = sub.add_parser(name, help=helptext)
        add_model(c, plan_ok=name == "run")
        add_options(c, "compile", "calib", "no_cuda_graph", "tuning")
        if name == "compile":
            c.add_argument("-o", "--output", help="write the engine to this plan file")
            c.set_defaults(fn=_cmd_compile)
        else:
            add_options(c, "inputs")
            c.add_argument("--save-outputs", metavar="DIR", help="write each output as .npy")
            c.add_argument("--random-weights", action="store_true", help="replace the model's "
                           "weights by seeded random ones (--seed): the light: models' are "
                           "constants")
            c.set_defaults(fn=_cmd_run)

    from .cli_tools import add_bench, add_bisect, add_calibrate, add_compare, add_tune
    add_tune(sub)
    add_calibrate(sub)
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
