"""libdevice: NVIDIA's bitcode library of math functions (``__nv_expf``, ``__nv_tanh``, ...).

Kernels declare the ``__nv_*`` functions they call (:mod:`ptxc.lower.llvm_scalar`); before
optimization the library is parsed and linked into the module, every function but the kernels
is made internal, and O3 inlines what is called and drops the rest, so the PTX holds only the
kernels. libdevice branches on ``__nvvm_reflect("__CUDA_FTZ")``; LLVM's NVVMReflect pass (run by
the NVPTX pass builder) folds it from the module flag ``nvvm-reflect-ftz`` that the emission
sets to 0 (denormals kept, as numpy).

Where it is looked for, in order: ``$PTXC_LIBDEVICE`` (a file), ``$CUDA_HOME`` / ``$CUDA_PATH``
(``nvvm/libdevice/libdevice*.bc``), ``cuda.pathfinder.find_bitcode_lib("device")``, numba-cuda's
``get_libdevice()``, then ``/usr/local/cuda*/nvvm/libdevice``.
"""

from __future__ import annotations

import functools
import glob
import os

from ..errors import CompileError


def _in_toolkit(root: str | None) -> list[str]:
    if not root:
        return []
    return sorted(glob.glob(os.path.join(root, "nvvm", "libdevice", "libdevice*.bc")),
                  reverse=True)


def _candidates():
    """(where, path or None) in search order; a lookup that fails yields None."""
    env = os.environ.get("PTXC_LIBDEVICE")
    if env:
        yield "$PTXC_LIBDEVICE", env
    for var in ("CUDA_HOME", "CUDA_PATH"):
        for p in _in_toolkit(os.environ.get(var)) or [None]:
            yield f"${var}={os.environ.get(var)!r}", p
    try:
        from cuda import pathfinder
        yield "cuda.pathfinder", pathfinder.find_bitcode_lib("device")
    except Exception:
        yield "cuda.pathfinder", None
    try:
        from numba.cuda.cudadrv.libs import get_libdevice
        yield "numba-cuda", get_libdevice()
    except Exception:
        yield "numba-cuda", None
    for root in sorted(glob.glob("/usr/local/cuda*"), reverse=True):
        for p in _in_toolkit(root):
            yield root, p


def find_libdevice() -> str:
    """The path of libdevice's bitcode; a CompileError saying where it looked if none is found
    (``$PTXC_LIBDEVICE`` naming no file is an error at once: it was asked for)."""
    env = os.environ.get("PTXC_LIBDEVICE")
    if env and not os.path.isfile(env):
        raise CompileError(f"ptx: $PTXC_LIBDEVICE is {env!r}, which is not a file")
    looked = []
    for where, path in _candidates():
        if path and os.path.isfile(path):
            return path
        looked.append(where if not path else f"{where} ({path}: no such file)")
    raise CompileError("ptx: libdevice (libdevice.10.bc) not found; looked in "
                       + ", ".join(looked or ["nowhere"])
                       + ", /usr/local/cuda*/nvvm/libdevice; set PTXC_LIBDEVICE to its path")


@functools.lru_cache(maxsize=4)
def _bitcode(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def needs_libdevice(mod) -> bool:
    """Does the llvmlite module declare a libdevice function?"""
    return any(f.is_declaration and f.name.startswith("__nv_") for f in mod.functions)


def link_libdevice(mod) -> None:
    """Link libdevice into ``mod`` (an llvmlite binding module) if it declares ``__nv_*``
    functions; the library takes the module's triple and data layout (its own are generic)."""
    import llvmlite.binding as llvm
    if not needs_libdevice(mod):
        return
    path = find_libdevice()
    try:
        lib = llvm.parse_bitcode(_bitcode(path))
    except RuntimeError as e:
        raise CompileError(f"ptx: cannot read libdevice {path}: {e}") from None
    lib.triple = mod.triple
    lib.data_layout = mod.data_layout
    mod.link_in(lib)
    missing = sorted(f.name for f in mod.functions
                     if f.is_declaration and f.name.startswith("__nv_"))
    if missing:
        raise CompileError(f"ptx: libdevice {path} does not define {missing}")
