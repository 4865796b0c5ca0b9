"""The ``ptxc`` command.

    ptxc explore MODEL [--stage graph] [--target cpu|cuda] [--passes P] [--print-ir-after-all] ...
    ptxc compile MODEL [--target auto|cpu|cuda] [--arch sm_90] [-o model.plan]   compile; print
                                  bindings, kernels, memory
    ptxc run MODEL|PLAN [--target auto|cpu|cuda] [--input NAME=file.npy] [--save-outputs DIR]
                                  one inference (a cuda engine needs a GPU; auto, the
                                  default, is cuda where a GPU is present, else cpu)
    ptxc inspect PLAN             what a plan file holds (bindings, kernels, memory plan)
    ptxc ops                      the ONNX op types the importer accepts

MODEL is a path to an ONNX file, or ``light:NAME`` for one of the nine model-zoo models shipped
inside the onnx package (``light:resnet50``, ``light:squeezenet``, ...).
Errors print one line, ``ptxc: error: ...``, and exit with status 2.
"""

from __future__ import annotations

import argparse
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


def _cmd_explore(args) -> int:
    from .explore import explore
    text = explore(resolve_model(args.model), stage=args.stage, passes=args.passes,
                   input_shapes=parse_shapes(args.input_shape),
                   print_ir_after_all=args.print_ir_after_all,
                   print_ir_after_change=args.print_ir_after_change, dump_dir=args.dump_dir,
                   timing=args.timing, check_numerics=args.check_numerics,
                   elide_constants=not args.show_constants, report=not args.no_report,
                   explain=args.explain, target=args.target, arch=args.arch,
                   layout=args.layout)
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


def _compile(args):
    from .compiler import compile as compile_model, resolve_target
    # --arch or --no-cuda-graph ask for the cuda target; otherwise auto picks it where a GPU is
    target = ("cuda" if args.target == "auto" and (args.arch or args.no_cuda_graph)
              else resolve_target(args.target))
    cuda = {} if target != "cuda" else {"arch": args.arch,
                                        "cuda_graph": not args.no_cuda_graph}
    if target != "cuda" and (args.arch or args.no_cuda_graph):
        raise PtxcError("--arch and --no-cuda-graph are for --target cuda (target here: "
                        f"{target})")
    return compile_model(resolve_model(args.model), target=target,
                         precision=args.precision, input_shapes=parse_shapes(args.input_shape),
                         layout=args.layout, **cuda)


def _cmd_compile(args) -> int:
    engine = _compile(args)
    sys.stdout.write(_summary(engine))
    if args.output:
        engine.save(args.output)
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

    import numpy as np
    if _is_plan(args.model):
        from .driver.plan import load_plan
        engine = load_plan(args.model)
        if args.no_cuda_graph:
            engine.cuda_graph = False
    else:
        engine = _compile(args)
    given = {}
    for item in args.input or ():
        name, sep, path = item.partition("=")
        if not sep:
            raise PtxcError(f"--input {item!r}: expected NAME=FILE.npy")
        try:
            given[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise PtxcError(f"--input {name}: cannot read {path!r}: {e}") from None
    rng = np.random.default_rng(args.seed)
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
    engine.run(feeds)  # warm-up
    t0 = time.perf_counter()
    out = engine.run(feeds)
    dt = time.perf_counter() - t0
    for name, y in out.items():
        stats = f"min {y.min():.6g} max {y.max():.6g} mean {y.mean():.6g}" if y.size else "empty"
        print(f"{name}: {y.dtype}{list(y.shape)} {stats}")
        if args.save_outputs:
            os.makedirs(args.save_outputs, exist_ok=True)
            np.save(os.path.join(args.save_outputs, _safe(name) + ".npy"), y)
    print(f"latency: {dt * 1e3:.2f} ms ({engine.target})")
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
    p = argparse.ArgumentParser(prog="ptxc", description="ptxc: an open inference compiler.")
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
    e.add_argument("--dump-dir", help="write one numbered, parseable IR file per pass here")
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
    e.set_defaults(fn=_cmd_explore)

    for name, helptext in (("compile", "compile a model; print its bindings, kernels, memory"),
                           ("run", "compile (or load a plan) and run one inference")):
        c = sub.add_parser(name, help=helptext)
        c.add_argument("model", help="ONNX file, light:NAME" + (", or a plan file"
                                                                 if name == "run" else ""))
        c.add_argument("--target", default="auto",
                       help="cpu, cuda, or auto (the default: cuda where a GPU is present, else "
                       "cpu)")
        c.add_argument("--arch", default=None,
                       help="cuda: the arch to compile for, e.g. sm_90 (default: PTXC_CUDA_ARCH, "
                       "the GPU here, else sm_90)")
        c.add_argument("--no-cuda-graph", action="store_true",
                       help="cuda: launch kernel by kernel instead of replaying one CUDA graph")
        c.add_argument("--precision", default="fp32", help="fp32")
        c.add_argument("--layout", default="nchw", choices=("nchw", "nhwc", "auto"),
                       help=_LAYOUT_HELP)
        c.add_argument("--input-shape", action="append", metavar="NAME=DIMS",
                       help="bind an input's symbolic dims, e.g. data=1x3x224x224")
        if name == "compile":
            c.add_argument("-o", "--output", help="write the engine to this plan file")
            c.set_defaults(fn=_cmd_compile)
        else:
            c.add_argument("--input", action="append", metavar="NAME=FILE.npy",
                           help="an input from a .npy file (others: seeded random normal)")
            c.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
            c.add_argument("--save-outputs", metavar="DIR", help="write each output as .npy")
            c.set_defaults(fn=_cmd_run)

    i = sub.add_parser("inspect", help="show what a plan file holds")
    i.add_argument("plan")
    i.set_defaults(fn=_cmd_inspect)

    o = sub.add_parser("ops", help="list the ONNX op types the importer accepts")
    o.set_defaults(fn=_cmd_ops)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except PtxcError as e:
        print(f"ptxc: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `ptxc explore ... | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
