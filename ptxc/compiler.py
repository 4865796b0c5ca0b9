"""The compile pipeline: stages in an ordered table, each a pass pipeline over the module.

    engine = ptxc.compile("model.onnx", target="cpu")
    outputs = engine.run({"input": x})

Stages (the names are the same in the API, the CLI and the docs):

=========  ==================================================  =================================
stage      what runs                                           what comes out
=========  ==================================================  =================================
graph      import, then ``graph-opt``                          graph dialect, optimized
tensor     ``lower-graph-to-tensor,fuse-tensor-elementwise``   tensor dialect (structured ops)
loop       ``lower-tensor-to-loop``                            loop dialect (buffers, loop nests)
llvm       loop-to-llvm (llvmlite.ir)                          LLVM IR text, a kernel table
=========  ==================================================  =================================

Every stage up to ``loop`` is a module the interpreter runs, so ``check_numerics=True`` compares
each pass (lowerings included) with the one before on random inputs.
"""

from __future__ import annotations

import time

from .errors import CompileError
from .ir.core import Operation

STAGES = ("graph", "tensor", "loop", "llvm", "ptx")

#: the pass pipeline of each IR stage, in order
STAGE_PIPELINES = {
    "graph": "graph-opt",
    "tensor": "lower-graph-to-tensor,fuse-tensor-elementwise",
    "loop": "lower-tensor-to-loop",
}

TARGETS = ("cpu", "cuda")
PRECISIONS = ("fp32",)


def as_module(model, input_shapes=None, constant_inputs=None) -> Operation:
    """A graph-dialect module from a path, bytes, ModelProto, Network or module (copied)."""
    if isinstance(model, Operation):
        return model.clone()
    from .frontend.network import Network
    if isinstance(model, Network):
        return model.to_module()
    from .frontend.onnx_import import import_onnx
    return import_onnx(model, input_shapes=input_shapes, constant_inputs=constant_inputs)


def check_stage(stage: str) -> None:
    if stage not in STAGES:
        raise CompileError(f"unknown stage {stage!r}; the stages are {', '.join(STAGES)}")
    if stage == "ptx":
        raise CompileError("stage 'ptx' is not built yet: the CUDA target is planned work")


def run_stages(module: Operation, until: str, *, graph_passes: str | None = None,
               timings: dict | None = None, **pm_options) -> Operation:
    """Run the IR stages on ``module`` in place, up to and including ``until`` (graph, tensor or
    loop). ``pm_options`` go to every PassManager (check_numerics, print_ir_after_all, ...)."""
    from .rewrite.pass_manager import PassManager
    order = ["graph", "tensor", "loop"]
    if until not in order:
        raise CompileError(f"run_stages goes up to graph, tensor or loop, not {until!r}")
    for stage in order[:order.index(until) + 1]:
        pipeline = STAGE_PIPELINES[stage]
        if stage == "graph" and graph_passes is not None:
            pipeline = graph_passes
        t0 = time.perf_counter()
        PassManager(pipeline, **pm_options).run(module)
        if timings is not None:
            timings[stage] = time.perf_counter() - t0
    return module


def compile(model, target: str = "cpu", precision: str = "fp32", *,
            input_shapes: dict | None = None, constant_inputs: dict | None = None,
            graph_passes: str | None = None, check_numerics: bool = False, threads=None):
    """Compile a model (path, ModelProto, Network or graph module) into an Engine."""
    if target not in TARGETS:
        raise CompileError(f"unknown target {target!r}; the targets are {', '.join(TARGETS)}")
    if target == "cuda":
        raise CompileError("target 'cuda' is not built yet (NVPTX code generation and the GPU "
                           "runtime are planned work); use target='cpu'")
    if precision not in PRECISIONS:
        raise CompileError(f"precision {precision!r} is not supported yet; supported: "
                           f"{', '.join(PRECISIONS)}")
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    module = as_module(model, input_shapes, constant_inputs)
    timings["import"] = time.perf_counter() - t0
    run_stages(module, "loop", graph_passes=graph_passes, timings=timings,
               check_numerics=check_numerics)
    from .driver.engine import Engine
    return Engine.for_cpu(module, timings=timings, threads=threads)
