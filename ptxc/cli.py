"""The ``ptxc`` command.

    ptxc explore MODEL [--stage graph] [--passes P] [--print-ir-after-all] [--dump-dir D] ...
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
                   explain=args.explain)
    sys.stdout.write(text)
    return 0


def _cmd_ops(args) -> int:
    from . import SUPPORTED_OPS
    print("\n".join(SUPPORTED_OPS))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ptxc", description="ptxc: an open inference compiler.")
    sub = p.add_subparsers(dest="command", required=True)

    e = sub.add_parser("explore", help="print the IR of a model at a stage (compiler explorer)")
    e.add_argument("model", help="ONNX file, or light:NAME for an onnx-shipped model")
    e.add_argument("--stage", default="graph", help="graph, tensor, loop, llvm or ptx")
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
    e.set_defaults(fn=_cmd_explore)

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
