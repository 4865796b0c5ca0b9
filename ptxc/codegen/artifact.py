"""The Artifact: everything code generation made of a loop module for one target, and nothing of
the runtime.

    artifact = ptxc.codegen.build(loop_module, Target.resolve("sm_90"))
    artifact.target          # the Target it was built for (arch sm_90a for a wgmma program)
    artifact.table           # the kernel table: kernels in order, launch shapes, root buffers
    artifact.kernel_keys     # per kernel, the identity of its code: equal keys, the same code
    artifact.ptx             # cuda: the PTX text; cpu: None
    artifact.object_code     # cpu: the host's relocatable object file; cuda: None
    artifact.llvm_text       # the LLVM IR loop-to-llvm emitted (cpu: what the object came from)
    artifact.globals         # weight name -> read-only numpy array
    artifact.memory_plan     # the static memory plan of the scratch buffers

An engine is made of an Artifact (:meth:`ptxc.driver.engine.Engine.from_artifact`) and a plan
file stores one (:mod:`ptxc.plan`), so the same build serves both: what runs after a compile and
what runs after a load is the same data. An Artifact read back from a plan has no
``kernel_keys`` (a plan does not store them) and, for cuda, no LLVM IR (the PTX is the program).
"""

from __future__ import annotations

import hashlib
import re

import attrs

from ..lower.kernel_table import KernelTable
from ..target import Target
from .memory_plan import MemoryPlan

__all__ = ["Artifact", "function_keys"]


@attrs.frozen(eq=False)
class Artifact:
    """One build; see the module docstring. ``triple``/``data_layout`` are the LLVM host
    target of a cpu build (empty for cuda). ``memory_plan`` is None only for a cpu plan file
    saved without one (its runtime then allocates per run)."""

    target: Target
    table: KernelTable
    llvm_text: str
    globals: dict
    memory_plan: MemoryPlan | None
    kernel_keys: tuple = ()
    ptx: str | None = None
    object_code: bytes | None = None
    triple: str = ""
    data_layout: str = ""

    @property
    def kind(self) -> str:
        """``"cpu"`` or ``"cuda"``: the target's kind."""
        return self.target.kind

    @property
    def arch(self) -> str:
        """The arch the code is for (``sm_90``, ``sm_90a``; on cpu the host CPU's name)."""
        return self.target.arch

    @property
    def kernel_names(self) -> list[str]:
        return [k.name for k in self.table.kernels]


_DEFINE = re.compile(r'^define [^\n]*?@"?([\w.$]+)"?\(', re.M)


def function_keys(text: str, table: KernelTable) -> tuple[str, ...]:
    """Per kernel of ``table``, a SHA-256 of its function's text in the LLVM IR ``text`` with
    its own name replaced (the cpu build's kernel keys: on cpu each kernel is one function)."""
    bodies = {}
    for m in _DEFINE.finditer(text):
        name, at = m.group(1), m.start()
        end = text.find("\n}\n", at)
        body = text[at:end if end >= 0 else len(text)]
        bodies[name] = body.replace(f'"{name}"', '"kernel"').replace(f"@{name}(", "@kernel(")
    return tuple(hashlib.sha256(bodies.get(k.name, k.name).encode()).hexdigest()
                 for k in table.kernels)
