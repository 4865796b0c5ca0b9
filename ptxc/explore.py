"""The compiler explorer: the IR of a model after any stage, or after every pass.

    text = ptxc.explore("model.onnx", stage="graph")
    text = ptxc.explore(model, stage="graph", print_ir_after_all=True)   # every pass, in order

Stages are named as everywhere in ptxc: ``graph``, ``tensor``, ``loop``, ``llvm``, ``ptx``. A
stage's text is the IR at the end of that stage, after its passes. ``graph_passes=""`` shows the
graph exactly as imported. The stages run in :func:`ptxc.pipeline.run_stages`, compile's loop;
explore hooks its printing, dumps, timing and ``explain`` into each stage's PassManager.

From ``loop`` on the text depends on the target: ``target="cuda"`` shows the loop IR after
``map-to-gpu`` (``gpu.launch`` kernels), the LLVM IR for NVPTX, and at stage ``ptx`` (cuda's
alone, so it needs no ``target``) the PTX for ``arch``:

    text = ptxc.explore(model, stage="loop", target="cuda")   # mapped loop IR
    text = ptxc.explore(model, stage="ptx", arch="sm_90")      # PTX

``precision="fp16"`` (or ``"tf32"``, with ``precision_overrides``) ends the graph stage with the
``lower-precision`` pass, as ``compile`` does, so every stage shows that precision.
"""

from __future__ import annotations

import io
import os

from .frontend.load import as_module
from .ir.core import Operation
from .ir.printer import print_ir

from .pipeline import (STAGE_PIPELINES, STAGES, CompileOptions,  # noqa: F401  (STAGES: API)
                       check_stage, run_stages)

#: the graph-stage pipeline used when none is given
DEFAULT_GRAPH_PIPELINE = STAGE_PIPELINES["cpu"]["graph"][0].text


def run_graph_stage(module: Operation, passes: str | None = None, **pass_manager):
    """Run the graph stage (``passes``, default ``graph-opt``; nchw, fp32, cpu) on ``module``
    in place; returns the PassManager used (``pass_manager``: its keywords)."""
    managers: list = []
    run_stages(module, "graph", CompileOptions.make("cpu", graph_passes=passes),
               pass_manager=pass_manager, managers=managers, progress=None)
    return managers[0]


def op_counts(module: Operation) -> dict[str, int]:
    """How many ops of each kind ``main`` holds (top level: layers, not the ops inside bodies)."""
    from .dialects.func import func_body, get_func
    counts: dict[str, int] = {}
    for op in func_body(get_func(module)).ops:
        if op.name != "func.return":
            counts[op.name] = counts.get(op.name, 0) + 1
    return counts


def op_count_report(before: dict[str, int], after: dict[str, int]) -> str:
    """A table of op counts before and after, by op kind, as ``//`` comment lines (so explore's
    output still parses)."""
    names = sorted(set(before) | set(after), key=lambda n: (-before.get(n, 0), n))
    width = max([len(n) for n in names] + [5])
    lines = [f"// {'op':<{width}}  before  after"]
    for n in names:
        lines.append(f"// {n:<{width}}  {before.get(n, 0):>6}  {after.get(n, 0):>5}")
    lines.append(f"// {'total':<{width}}  {sum(before.values()):>6}  {sum(after.values()):>5}")
    return "\n".join(lines) + "\n"


def explore(model, stage: str = "graph", *, graph_passes=None,
            input_shapes: dict | None = None, constant_inputs: dict | None = None,
            precision: str = "fp32", precision_overrides: dict | None = None,
            print_ir_after_all: bool = False, print_ir_after_change: bool = False,
            dump_dir: str | None = None, timing: bool = False, check_numerics: bool = False,
            elide_constants: bool = True, report: bool = False, explain: bool = False,
            target: str | None = None, arch: str | None = None, layout: str = "auto",
            dump_constants: bool = False, pass_options: dict | None = None,
            stage_passes: dict | None = None, options: CompileOptions | None = None) -> str:
    """The IR of ``model`` (path, ModelProto, Network or module) at the end of ``stage``, for
    ``target`` (default cpu; cuda for stage ``ptx``); ``arch`` is the CUDA arch of stage ``ptx``.
    The compile options (``graph_passes``, ``precision``, ``layout``, ``pass_options``, ...)
    are ``compile``'s (:class:`~ptxc.pipeline.CompileOptions`), or give ``options``.

    With ``print_ir_after_all`` the text holds the IR after every pass, then the final IR.
    ``layout`` appends the channels-last passes to the graph stage as ``compile`` does
    (``nhwc``, or ``auto`` by its policy). ``report`` adds op counts by kind before and after
    the graph passes (``graph.transpose``: the transposes the layout left); ``explain`` adds, for
    each fusion pattern, where it fired and where it nearly did and why not. Both come as ``//``
    comments ahead of the IR. Constants are elided for display unless ``elide_constants=False``
    (which gives text that ``parse_ir`` reads back).
    """
    check_stage(stage)
    if options is None:
        if target is None:
            target = "cuda" if stage == "ptx" else "cpu"
        if arch is not None and stage != "ptx":
            from .errors import CompileError
            raise CompileError(f"arch={arch!r} chooses the PTX of stage 'ptx'; stage {stage!r} "
                               "does not depend on it")
    keywords = {"target": target, "arch": arch, "graph_passes": graph_passes,
                "input_shapes": input_shapes, "constant_inputs": constant_inputs,
                "precision": precision, "precision_overrides": precision_overrides,
                "check_numerics": check_numerics, "layout": layout,
                "pass_options": pass_options, "stage_passes": stage_passes}
    options = CompileOptions.from_call("explore", options, keywords, _EXPLORE_DEFAULTS)
    target = options.kind
    check_stage(stage, target)
    module = as_module(model, **options.import_options())
    before = op_counts(module)
    stream = io.StringIO()
    from .rewrite.explain import Explain
    collector = Explain() if explain else None
    last = "loop" if stage in ("llvm", "ptx") else stage
    several = last != "graph"

    def pass_manager(s_name: str) -> dict:
        stage_dump = dump_dir
        if dump_dir and several:  # one numbered folder per stage
            stage_dump = os.path.join(dump_dir, f"{STAGES.index(s_name)}-{s_name}")
        return dict(stream=stream, print_ir_after_all=print_ir_after_all,
                    print_ir_after_change=print_ir_after_change, dump_dir=stage_dump,
                    timing=timing, explain=collector if s_name == "graph" else None,
                    dump_constants=dump_constants)

    managers: list = []
    after_graph: dict = {}
    run_stages(module, last, options, pass_manager=pass_manager, managers=managers,
               progress=None,
               on_stage=lambda s_name, m: s_name == "graph" and after_graph.update(op_counts(m)))
    out = stream.getvalue()
    if timing:
        out += "".join(m.timing_report() for m in managers)
    if report:
        out += op_count_report(before, after_graph)
    if options.check_numerics:  # it raised NumericsError naming the pass otherwise: say so
        n = sum(len(m.pass_times) for m in managers)
        m0 = managers[0]
        out += (f"// check-numerics: passed: {n} passes, each within rtol {m0.numerics_rtol:g}"
                f" / atol {m0.numerics_atol:g} of the IR before it on random inputs\n")
    if collector is not None:
        lines = collector.format().splitlines() or ["(no pattern fired or gave a reason)"]
        out += "".join(f"// {line}\n" for line in lines)
    if stage == "loop" and target == "cuda":
        from .explore_kernels import kernel_outlines
        out += kernel_outlines(module)
    if out and not out.endswith("\n"):
        out += "\n"
    if out:
        out += f"// -----// IR at the end of stage {stage} //----- //\n"
    if stage == "ptx":
        from .codegen import lower_to_ptx
        return out + lower_to_ptx(module, arch=options.target.arch).ptx
    if stage == "llvm":
        from .lower.loop_to_llvm import lower_loop_to_llvm
        return out + lower_loop_to_llvm(module, target="nvptx" if target == "cuda" else "cpu").text
    return out + print_ir(module, elide_constants=elide_constants)


#: explore's defaults of the compile options it takes (CompileOptions.from_call)
_EXPLORE_DEFAULTS = {"target": None, "arch": None, "graph_passes": None, "input_shapes": None,
                     "constant_inputs": None, "precision": "fp32", "precision_overrides": None,
                     "check_numerics": False, "layout": "auto", "pass_options": None,
                     "stage_passes": None}
