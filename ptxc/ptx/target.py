"""The NVPTX target machine: triple, data layout, arch and PTX version.

LLVM's NVPTX back end (through llvmlite, LLVM 22) turns a module for ``nvptx64-nvidia-cuda``
into PTX text for one ``sm_XY`` arch. The PTX ISA version is a target feature; it must be new
enough for the arch (LLVM refuses otherwise) and old enough for the ptxas/driver that consumes
it: 8.0 for sm_90 and older (what CUDA 12.0+ drivers accept), the first version that knows the
arch for newer ones.
"""

from __future__ import annotations

import functools
import re

from ..errors import CompileError

NVPTX_TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = "sm_90"

#: first PTX ISA version (x10) that knows each arch newer than sm_90 (PTX ISA release notes)
_MIN_PTX = {100: 86, 101: 86, 120: 87, 103: 88, 121: 88, 110: 90}
_ARCH = re.compile(r"^sm_(\d+)([af]?)$")


def default_arch() -> str:
    """``PTXC_CUDA_ARCH`` if set, else the current GPU's arch, else ``sm_90``."""
    from ..target import Target
    return Target.resolve().arch


def arch_number(arch: str) -> tuple[int, str]:
    """``"sm_90a"`` -> ``(90, "a")``; a name that is no ``sm_NN[a|f]`` is a CompileError (the
    one parse of an arch name: the driver's compatibility check and map-to-gpu's PDL use it)."""
    m = _ARCH.match(arch or "")
    if not m:
        raise CompileError(f"cuda: {arch!r} is not a CUDA arch (expected sm_NN, e.g. sm_90)")
    return int(m.group(1)), m.group(2)


def check_arch(arch: str) -> str:
    """``arch`` if it names an NVPTX arch (``sm_90``, ``sm_90a``, ``sm_100f``...), else a
    CompileError."""
    m = _ARCH.match(arch or "")
    if not m or int(m.group(1)) < 50:
        raise CompileError(f"ptx: {arch!r} is not a CUDA arch this compiler targets (sm_50 or "
                           "newer, written like 'sm_90')")
    return arch


def ptx_features(arch: str) -> str:
    """The PTX ISA feature for ``arch``: ``+ptx80`` up to sm_90, the first that knows newer
    ones."""
    sm = int(_ARCH.match(check_arch(arch)).group(1))
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
