"""libdevice: NVIDIA's bitcode library of math functions (``__nv_expf``, ``__nv_tanh``, ...).

Kernels declare the ``__nv_*`` functions they call (:mod:`ptxc.lower.llvm_scalar`); before
optimization the library is parsed and linked into the module, every function but the kernels
is made internal, and O3 inlines what is called and drops the rest, so the PTX holds only the
kernels. libdevice branches on ``__nvvm_reflect("__CUDA_FTZ")``; LLVM's NVVMReflect pass (run by
the NVPTX pass builder) folds it from the module flag ``nvvm-reflect-ftz`` that the emission
sets to 0 (denormals kept, as numpy).

Parsed once per process. libdevice is 450 KB of bitcode with 352 functions, and parsing it took
0.2 s of every cuda compile (then O3 walked its unused functions until it dropped them). The
first link parses it once and keeps, as bitcode, only what ptxc's emission can call
(:func:`libdevice_functions`, 42 functions and their helpers after
internalize + global DCE: 59 KB, parsed in about 20 ms); every link parses that. A module that
declares an ``__nv_*`` function outside that set (an emitter change that did not list it) links
the whole library, parsed for that link, so the cache can make a link slower, never wrong.
Building the cache takes a lock: threads compiling at once parse the library once.

Before -> after:  link 1: parse 450 KB, link, O3 over 352+ functions;
                  link 2: parse 450 KB, ...
    ->            link 1: parse 450 KB once, trim to 42 functions (kept as 59 KB of bitcode),
                          parse 59 KB, link, O3 over the kernels and 42 functions;
                  link 2: parse 59 KB, link, ...

Where it is looked for, in order: ``$PTXC_LIBDEVICE`` (a file), ``$CUDA_HOME`` / ``$CUDA_PATH``
(``nvvm/libdevice/libdevice*.bc``), ``cuda.pathfinder.find_bitcode_lib("device")``, numba-cuda's
``get_libdevice()``, then ``/usr/local/cuda*/nvvm/libdevice``.
"""

from __future__ import annotations

import functools
import glob
import os
import threading

from ..errors import CompileError

#: math op -> libdevice function stem (``__nv_<stem>f`` for f32, ``__nv_<stem>`` for f64), the
#: functions the NVPTX emission (:mod:`ptxc.lower.llvm_scalar`) calls for the math ops
#: (sqrt is not here: libdevice's ``__nv_sqrtf`` is ``sqrt.approx`` unless ``__CUDA_PREC_SQRT``
#: reflects to 1, which LLVM 22 only takes from a process-wide option; ``llvm.sqrt`` is
#: ``sqrt.rn``, correctly rounded as numpy's)
MATH_STEMS = {"exp": "exp", "log": "log", "tanh": "tanh", "erf": "erf", "abs": "fabs",
              "floor": "floor", "ceil": "ceil"}
#: the trigonometric family: libm's double function (CPU), libdevice's (GPU), same names
TRIG = ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")
MATH_STEMS.update({n: n for n in TRIG})
#: the libdevice stems the emission calls outside ``MATH_STEMS`` (``math.fmod``-like
#: ``arith.rem``, ``pow``)
EXTRA_STEMS = ("fmod", "pow")


def libdevice_functions() -> frozenset:
    """Every ``__nv_*`` function the NVPTX emission may declare (f32 and f64 forms): the part of
    libdevice kept parsed for the process."""
    stems = set(MATH_STEMS.values()) | set(EXTRA_STEMS)
    return frozenset(f"__nv_{s}{sfx}" for s in stems for sfx in ("", "f"))


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


_TRIMMED: dict = {}          # path -> bitcode of the part of libdevice ptxc calls
_TRIM_LOCK = threading.Lock()
#: how many times the whole library was parsed (by the trim, or by a link outside its set)
stats = {"full_parses": 0}


def _parse_full(path: str):
    import llvmlite.binding as llvm
    try:
        lib = llvm.parse_bitcode(_bitcode(path))
    except RuntimeError as e:
        raise CompileError(f"ptx: cannot read libdevice {path}: {e}") from None
    stats["full_parses"] += 1
    return lib


def trimmed_bitcode(path: str) -> bytes:
    """libdevice at ``path`` kept to the functions ptxc's emission can call and what they use
    (parsed once per process and path; see the module docstring)."""
    with _TRIM_LOCK:
        bc = _TRIMMED.get(path)
        if bc is None:
            import llvmlite.binding as llvm
            from .target import target_machine
            lib = _parse_full(path)
            keep = libdevice_functions()
            for f in lib.functions:
                if not f.is_declaration and f.name not in keep:
                    f.linkage = "internal"
            pm = llvm.create_new_module_pass_manager()
            pm.add_global_dead_code_eliminate_pass()
            pm.run(lib, llvm.create_pass_builder(target_machine("sm_90"),
                                                 llvm.create_pipeline_tuning_options()))
            bc = _TRIMMED[path] = lib.as_bitcode()
        return bc


def link_libdevice(mod) -> None:
    """Link libdevice into ``mod`` (an llvmlite binding module) if it declares ``__nv_*``
    functions; the library takes the module's triple and data layout (its own are generic)."""
    import llvmlite.binding as llvm
    if not needs_libdevice(mod):
        return
    path = find_libdevice()
    needed = {f.name for f in mod.functions if f.is_declaration and f.name.startswith("__nv_")}
    if needed <= libdevice_functions():
        try:
            lib = llvm.parse_bitcode(trimmed_bitcode(path))
        except RuntimeError as e:
            raise CompileError(f"ptx: cannot read libdevice {path}: {e}") from None
    else:
        lib = _parse_full(path)
    lib.triple = mod.triple
    lib.data_layout = mod.data_layout
    mod.link_in(lib)
    missing = sorted(f.name for f in mod.functions
                     if f.is_declaration and f.name.startswith("__nv_"))
    if missing:
        raise CompileError(f"ptx: libdevice {path} does not define {missing}")
