"""The runtime: engines (:mod:`.engine`, made of a :class:`~ptxc.codegen.artifact.Artifact`),
execution contexts (:mod:`.context`), the CPU runtime (:mod:`.cpu`, its scratch arena
:mod:`.arena`), the CUDA runtime (:mod:`.cuda` and its ``cuda_*`` modules: device setup,
contexts, graphs, interop with other frameworks' device arrays) and memory limits
(:mod:`.memory_limit`). Code generation is :mod:`ptxc.codegen`'s; plan files are
:mod:`ptxc.plan`'s: an engine writes one through :mod:`ptxc.plan.save`, and :mod:`.load` makes
an engine of what :mod:`ptxc.plan.load` reads."""
