"""The ``ptxc tune``, ``ptxc calibrate``, ``ptxc bench``, ``ptxc compare`` and ``ptxc bisect``
commands (their arguments and entry points; the work is in :mod:`ptxc.tools` and
:mod:`ptxc.calib`). :mod:`ptxc.cli` registers them."""

from __future__ import annotations

import sys

from .cli_options import (add_model, add_options, check_model_file, check_output_path,
                          is_plan, load_engine, make_feeds, model_label, parse_shapes,
                          requested_precision, require_gpu, resolve_model, target_of,
                          write_json)
from .errors import PtxcError


def add_model_options(c, plan_ok: bool) -> None:
    """The options every command that compiles a model takes."""
    add_model(c, plan_ok)
    add_options(c, "compile", "inputs")


# ---- tune ----------------------------------------------------------------------------------------

def cmd_tune(args) -> int:
    """Compile with tuning (default ``fast``), write the timing cache, print each distinct
    kernel's tactic and times (as ``ptxc inspect`` does for a tuned plan)."""
    from .cli_options import compile_from_args, check_output_path
    from .plan.inspect import _tuning
    if args.tuning == "off":
        raise PtxcError("ptxc tune measures: --tuning fast or full (off is the heuristic; "
                        "ptxc compile --timing-cache F reads a cache without measuring)")
    if args.output:
        check_output_path(args.output, "-o")
    if args.ray:
        args.tuning_workers = "ray" if args.ray == "local" else f"ray:{args.ray}"
    engine = compile_from_args(args)
    print("\n".join(_tuning(engine.tuning)))
    print(f"timing cache: {args.timing_cache}")
    if args.output:
        engine.save(args.output)
        print(f"plan written to {args.output}")
    return 0


def add_tune(sub) -> None:
    t = sub.add_parser("tune", help="auto-tune a model's kernels on this machine into a timing "
                       "cache (TensorRT's builder with a timing cache)")
    add_model(t, plan_ok=False)
    add_options(t, "compile", "calib", "tuning", tuning={"default": "fast"},
                timing_cache={"required": True})
    t.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="measure on the Ray cluster at ADDRESS ('local': a local instance); "
                   "the same as --tuning-workers ray:ADDRESS")
    t.add_argument("-o", "--output", help="also write the tuned engine to this plan file")
    t.set_defaults(fn=cmd_tune)


# ---- calibrate -----------------------------------------------------------------------------------

def cmd_calibrate(args) -> int:
    """Calibrate on ``--data`` into ``--cache`` (always anew: this command's job is the cache);
    with ``--report``, hold back the last batches, rank the layers by the output error each
    causes alone in int8 (:func:`ptxc.calib.sensitivity`), print the table and write the JSON."""
    from .calib import calibrate, make_calibrator, sensitivity
    from .errors import CalibrationError
    check_output_path(args.cache, "--cache")
    if args.report:
        check_output_path(args.report, "--report")
    else:
        given = [f for f, v in (("--max-error", args.max_error), ("--held-out", args.held_out))
                 if v is not None]
        if given:
            raise PtxcError(f"{' and '.join(given)} {'are' if len(given) > 1 else 'is'} for "
                            "the sensitivity report: give --report FILE too")
    options = {}
    if args.percentile is not None:
        if args.method != "percentile":
            raise CalibrationError("--percentile is for --method percentile")
        options["percentile"] = args.percentile
    make_calibrator(args.method, **options)  # an unknown method: refused before the model loads
    path = resolve_model(args.model)
    check_model_file(path)
    shapes = parse_shapes(args.input_shape)
    progress = not args.quiet
    report = None
    if args.report:
        report = sensitivity(path, args.data, method=args.method, cache=args.cache,
                             held_out=0.2 if args.held_out is None else args.held_out,
                             max_error=args.max_error,
                             metric=args.metric, input_shapes=shapes, progress=progress,
                             **options)
        table = report.table
    else:
        table = calibrate(path, args.data, args.method, cache=args.cache, refresh=True,
                          input_shapes=shapes, progress=progress, **options)
    print(f"calibration cache written to {args.cache}: {len(table.amax)} tensors, "
          f"{table.settings['method']}, {table.batches} batch{'es' if table.batches != 1 else ''}"
          + (f" ({len(report.held_out)} more held out)" if report is not None else ""))
    if report is not None:
        sys.stdout.write(report.text())
        write_json(args.report, report.to_json())
        print(f"report written to {args.report}")
    return 0


def add_calibrate(sub) -> None:
    c = sub.add_parser("calibrate", help="int8: calibrate a model into a calibration cache; "
                       "--report: the per-layer sensitivity and which layers to keep in fp32")
    add_model(c, plan_ok=False)
    c.add_argument("--data", required=True, metavar="DIR|FILE.npz",
                   help="calibration data: a folder (one .npy/.npz file or sub-folder per "
                   "batch) or one .npz of arrays named by input with a leading sample axis, "
                   "split into batches of the model's batch size (docs/quantization.md)")
    c.add_argument("--method", default="entropy", metavar="METHOD",
                   help="the calibrator: entropy (the default), minmax, percentile or mse")
    c.add_argument("--percentile", type=float, default=None,
                   help="--method percentile: the percentile of |x| (default 99.99)")
    c.add_argument("--cache", required=True, metavar="FILE",
                   help="the calibration cache to write (ptxc compile --int8 --calib-cache "
                   "FILE reads it, with no data)")
    c.add_argument("--report", metavar="R.json",
                   help="rank the layers by the output error each causes alone in int8, on "
                   "held-out batches; a table on stdout, JSON to R.json")
    c.add_argument("--max-error", type=float, default=None, metavar="E",
                   help="with --report: propose the layers to keep in fp32 (worst first, the "
                   "int8 model measured each time) until its error is at most E")
    c.add_argument("--metric", default="rel-max", choices=("rel-max", "cosine"),
                   help="the error that ranks the layers and that --max-error bounds: rel-max "
                   "(max |int8 - fp32| / max |fp32|, the default) or cosine (1 - cosine)")
    c.add_argument("--held-out", type=float, default=None, metavar="FRACTION",
                   help="with --report: the last FRACTION of the batches (at least one) are "
                   "held back from calibration and measured on (default 0.2)")
    add_options(c, "input_shape")
    c.set_defaults(fn=cmd_calibrate)


# ---- bench ---------------------------------------------------------------------------------------

def cmd_bench(args) -> int:
    from .tools.bench import bench_engine
    from .tools.profile import onnx_op_types, profile_engine
    for flag, path in (("--json", args.json), ("--export-profile", args.export_profile)):
        if path:
            check_output_path(path, flag)
    if args.warmup is not None and args.warmup_ms is not None:
        raise PtxcError("give --warmup or --warmup-ms, not both")
    if args.iterations is not None and args.duration is not None:
        raise PtxcError("give --iterations or --duration, not both")
    engine, path = load_engine(args, cuda_graph=args.cuda_graph)
    feeds = make_feeds(engine, args.input, args.seed)
    result = bench_engine(engine, feeds, model=model_label(args.model), warmup=args.warmup,
                          warmup_s=None if args.warmup_ms is None else args.warmup_ms / 1e3,
                          iterations=args.iterations, duration_s=args.duration)
    sys.stdout.write(result.format())
    report = result.to_json()
    if args.profile or args.export_profile:
        prof = profile_engine(engine, feeds, onnx_op_types(path) if path else {})
        if args.profile:
            sys.stdout.write(prof.format())
        report["profile"] = prof.to_json()
        if args.export_profile:
            write_json(args.export_profile, prof.chrome_trace())
            print(f"trace written to {args.export_profile} (chrome://tracing, Perfetto)")
    if args.json:
        write_json(args.json, report)
        print(f"results written to {args.json}")
    return 0


def add_bench(sub) -> None:
    b = sub.add_parser("bench", help="latency statistics of a model or plan (as trtexec)")
    add_model_options(b, plan_ok=True)
    w = b.add_mutually_exclusive_group()
    w.add_argument("--warmup", type=int, metavar="N", help="warm-up runs (default 1)")
    w.add_argument("--warmup-ms", type=float, metavar="MS", help="warm up for MS milliseconds")
    it = b.add_mutually_exclusive_group()
    it.add_argument("--iterations", type=int, metavar="N", help="timed runs (default 10)")
    it.add_argument("--duration", type=float, metavar="S", help="time runs for S seconds")
    b.add_argument("--cuda-graph", choices=("on", "off"), default=None,
                   help="cuda: replay one CUDA graph per inference (on, the default) or launch "
                   "each kernel (off)")
    b.add_argument("--json", metavar="FILE", help="write the results (and profile) as JSON")
    b.add_argument("--profile", action="store_true",
                   help="time each kernel in a profiling run apart from the timed runs; a table "
                   "sorted by time naming the ONNX nodes of each kernel")
    b.add_argument("--export-profile", metavar="TRACE.json",
                   help="write the profile in Chrome's trace-event format (Perfetto opens it)")
    b.set_defaults(fn=cmd_bench)


# ---- compare -------------------------------------------------------------------------------------

def cmd_compare(args) -> int:
    """Exit status: 0 when every output (and layer) is within tolerance, 1 when one is not,
    2 on an error."""
    from .tools.compare import compare_model
    if args.json:
        check_output_path(args.json, "--json")
    path = resolve_model(args.model)
    check_model_file(path)
    if is_plan(path):
        raise PtxcError(f"{args.model!r} is a plan file: compare takes the ONNX model (and the "
                        "plan with --plan PLAN)")
    engine = None
    if args.plan:
        if args.layerwise:
            raise PtxcError("--layerwise compiles the model with extra outputs; it does not "
                            "apply to --plan")
        plan_args = argparse_copy(args, model=args.plan)
        engine, _ = load_engine(plan_args)
    elif args.target == "cuda" or args.arch:
        require_gpu()
    report = compare_model(path, target=target_of(args), precision=requested_precision(args),
                           atol=args.atol, rtol=args.rtol, input_shapes=parse_shapes(
                               args.input_shape), layerwise=args.layerwise, engine=engine,
                           make_feeds=lambda e: make_feeds(e, args.input, args.seed),
                           layout=args.layout, graph_passes=args.graph_passes)
    sys.stdout.write(report.format())
    if args.json:
        write_json(args.json, report.to_json())
    return 0 if report.passed else 1


def argparse_copy(args, **changes):
    import argparse
    d = dict(vars(args))
    d.update(changes)
    return argparse.Namespace(**d)


def add_compare(sub) -> None:
    c = sub.add_parser("compare", help="ptxc against onnxruntime on the same inputs (as "
                       "polygraphy run --onnxrt); exit status 1 when out of tolerance")
    add_model_options(c, plan_ok=False)
    c.add_argument("--plan", metavar="PLAN", help="compare this plan file's engine instead of "
                   "compiling the model")
    add_options(c, "tolerance", "graph_passes")
    c.add_argument("--layerwise", action="store_true",
                   help="also compare every intermediate tensor that survives fusion, and name "
                   "the first layer out of tolerance")
    c.add_argument("--json", metavar="FILE", help="write the report as JSON")
    c.set_defaults(fn=cmd_compare)


# ---- bisect --------------------------------------------------------------------------------------

def cmd_bisect(args) -> int:
    """Exit status: 0 when no rewrite changes the result, 1 when one is named, 2 on an error."""
    from .tools.bisect import bisect_model
    path = resolve_model(args.model)
    check_model_file(path)
    target = target_of(args)
    result = bisect_model(path, graph_passes=args.graph_passes,
                          input_shapes=parse_shapes(args.input_shape), target=target,
                          arch=args.arch if target == "cuda" else None, atol=args.atol,
                          rtol=args.rtol, seed=args.seed, later_stages=not args.graph_only)
    sys.stdout.write(result.format())
    return 1 if result.found else 0


def add_bisect(sub) -> None:
    b = sub.add_parser("bisect", help="replay the rewrites one application at a time and name "
                       "the first that changes the result beyond tolerance")
    add_model(b)
    add_options(b, "graph_passes", "input_shape", "target", "arch", "tolerance", "seed",
                target={"default": "cpu", "help": "the target of the later stages (cpu)"})
    b.add_argument("--graph-only", action="store_true",
                   help="bisect the graph stage only (skip the pass-by-pass check of the "
                   "tensor and loop stages)")
    b.set_defaults(fn=cmd_bisect)
