"""The NVPTX target machine: triple, data layout, arch and PTX version.

LLVM's NVPTX back end (through llvmlite, LLVM 22) turns a module for ``nvptx64-nvidia-cuda``
into PTX text for one ``sm_XY`` arch. The PTX ISA version is a target feature; it must be new
enough for the arch (LLVM refuses otherwise) and old enough for the ptxas/driver that consumes
it: 8.0 for sm_90 and older (what CUDA 12.0+ drivers accept), the first version that knows the
arch for newer ones. What an arch name is (:func:`~ptxc.target.arch_number`,
:func:`~ptxc.target.check_arch`) is the Target's: this module parses none.
"""

from __future__ import annotations

import functools

from ..target import Target, arch_number, check_arch

NVPTX_TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = "sm_90"

#: first PTX ISA version (x10) that knows each arch newer than sm_90 (PTX ISA release notes)
_MIN_PTX = {100: 86, 101: 86, 120: 87, 103: 88, 121: 88, 110: 90}


def default_arch() -> str:
    """``PTXC_CUDA_ARCH`` if set, else the current GPU's arch, else ``sm_90``."""
    return Target.resolve().arch


def ptx_features(arch: str) -> str:
    """The PTX ISA feature for ``arch``: ``+ptx80`` up to sm_90, the first that knows newer
    ones."""
    sm = arch_number(check_arch(arch))[0]
    return f"+ptx{max(80, _MIN_PTX.get(sm, 80 if sm <= 90 else 90))}"


@functools.lru_cache(maxsize=None)
def _initialized() -> bool:
    import llvmlite.binding as llvm
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return True


@functools.lru_cache(maxsize=None)
def target_machine(arch: str, opt_level: int = 3):
    """The NVPTX target machine for ``arch`` (cached: it is only used to optimize and emit, never
    handed to a JIT, so one per arch is shared)."""
    import llvmlite.binding as llvm
    _initialized()
    target = llvm.Target.from_triple(NVPTX_TRIPLE)
    return target.create_target_machine(cpu=check_arch(arch), features=ptx_features(arch),
                                        opt=opt_level)


@functools.lru_cache(maxsize=None)
def nvptx_data_layout() -> str:
    """LLVM's data layout for nvptx64 (64-bit generic and global pointers, 32-bit shared)."""
    return str(target_machine(DEFAULT_ARCH).target_data)
