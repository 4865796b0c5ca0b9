"""Code generation: a loop-level module and a :class:`~ptxc.target.Target` in, an
:class:`~.artifact.Artifact` out (kernel table, kernel keys, LLVM IR, PTX or host object code,
weights, memory plan), and nothing of the runtime.

    from ptxc.codegen import build
    artifact = build(loop_module, Target.host())       # or Target.resolve("sm_90") for cuda
    engine = Engine.from_artifact(artifact)            # ptxc.driver: the runtime

``lower_to_ptx(mapped_loop_module, arch="sm_90")`` is the cuda build's first step alone (the
kernels as NVPTX LLVM IR, then PTX: a :class:`~ptxc.ptx.PtxProgram`).

Modules: :mod:`.builder` (the build step), :mod:`.artifact` (what it makes), :mod:`.host` (the cpu
target's optimizer and object code), :mod:`.memory_plan` (the static memory planner).
"""

from .artifact import Artifact
from .builder import build, lower_to_ptx

__all__ = ["Artifact", "build", "lower_to_ptx"]
