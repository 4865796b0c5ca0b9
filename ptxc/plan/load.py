"""Reading a plan file: what the runtime needs to make an Engine again, without recompiling.

    plan = read_plan("model.plan")         # a LoadedPlan: the Artifact and the run options
    plan = plan_from_bytes(data)           # from the bytes
    engine = ptxc.load("model.plan")       # ptxc.driver.load.load_plan: the Engine of it

The container (prefix, JSON header, 64-byte aligned blobs, SHA-256) is :mod:`ptxc.plan.format`;
what loading checks of the content is :mod:`ptxc.plan.checks` and :mod:`ptxc.plan.object_code`;
how a file is read and its signature checked, :mod:`ptxc.plan.trust`; the header is written by
:mod:`ptxc.plan.save`. This module makes an :class:`~ptxc.codegen.artifact.Artifact` of a
checked header and its blobs, with the runtime options the engine was saved with (a
:class:`LoadedPlan`); the runtime makes an Engine of that (:mod:`ptxc.driver.load`,
:meth:`~ptxc.driver.engine.Engine.from_artifact`), as after a compile. This package imports
nothing of the driver: the driver saves through :mod:`ptxc.plan.save` and loads through here.

**What loading runs.** Loading parses JSON (data only) and views raw arrays of a fixed set of
numeric dtypes; nothing from the file is unpickled, evaluated or imported. A cpu plan stores the
LLVM IR loop-to-llvm emitted, before optimization, and the host object code it was compiled to
(blob ``object``/``module``, with ``host.cpu_features``): loading checks the IR (below) and
loads the object into MCJIT, so neither the LLVM optimizer nor the code generator runs
(ResNet-50 loads in well under the 14.6 s its JIT took). The object may use every feature of the
CPU it was built on, so a plan with an object is refused (cause ``target``) on a host whose CPU
features differ (``cpu_name`` is a record). A plan without an object (older ptxc) is optimized
for this host's CPU and JIT-compiled, as a GPU driver JIT-compiles a cuda plan's PTX. Either way
no pass, lowering or code generation of the model compiler runs (the tests make ``run_stages``
and ``lower_loop_to_llvm`` raise while loading). The code is the program, so a plan is trusted
as a shared library is. A cuda plan stores the PTX; loading checks it declares exactly the
table's kernels (``.entry``) with one parameter per table buffer, and nothing touches the GPU
until the first run, where the driver JIT-compiles the PTX for the device (as it does for any
PTX); no LLVM runs, so a cuda plan does not depend on the LLVM version. Before the JIT a cpu
plan's module is checked to define exactly the table's kernels with the table's signatures and
footprints (each buffer's ``dereferenceable`` bytes and the ``range`` of the kernel's iteration
arguments, stated by loop-to-llvm: a slot, binding or trip count edited in the header alone is
refused), to declare only the C library functions the CPU runtime registers and LLVM intrinsics,
to call only named functions (no inline assembly, no calls through pointers) and to hold no
global variables: these catch damage and mismatch and keep a plan's code from calling into the
rest of the process; the object code's ELF tables are checked (:mod:`ptxc.plan.object_code`)
before LLVM's loader reads them, and it may link only against the kernels and the runtime's
functions; but these are no sandbox (a crafted file with a recomputed checksum can still index
outside its buffers). The SHA-256 detects damage; it does not authenticate.

**Refusals.** Each is a :class:`~ptxc.errors.PlanError` whose message names the file and the
cause and whose ``cause`` attribute is one of :data:`CAUSES`: ``magic`` (not a plan file),
``truncated`` (shorter than its prefix or its header say), ``format`` (another format version,
or a header whose ``format`` is not a ptxc plan), ``checksum`` (a byte changed anywhere),
``header`` (not JSON, missing or ill-typed fields, parts that disagree), ``blob`` (out of the
blob section, overlapping, a dtype outside the numeric set, a weight that does not fit its
buffer), ``version`` (another ptxc version; for cpu another LLVM major version, whose textual IR
this LLVM may not read), ``target`` (a target or arch this machine cannot run: a cpu plan for
another triple or other CPU features; a cuda plan for another arch than the device's — the
plan's kernels and tiles were chosen for that arch, so it is refused as TensorRT refuses an
engine built for another device), ``code`` (the stored IR or PTX does not parse, breaks the
rules above, or does not compile).

**A cuda plan on a machine without a GPU loads** (a decision): the arch is checked at load only
when a device is present (:func:`device_arch`), so a plan built and inspected on a CPU machine
is an Engine there too; its first run raises :class:`~ptxc.errors.DeviceError` saying there is
no GPU. When the plan is loaded where no device is seen and runs where one is (a GPU that
appears later in the process), the first run checks the arch exactly as loading would have
(``CudaProgram(exact_arch=True)``), a DeviceError naming both archs.

**A plan records its target** (``built_for``, a :class:`~ptxc.target.Target`): the refusal of a
cuda plan on another arch names the GPU it was built for and the one here. A GPU of the plan's
own arch with another SM count (an H100 PCIe's 114 against the H200's 132) runs it: the code is
valid there, only its tiles were sized for the other chip; loading logs it (``ptxc.plan``, INFO)
and ``ptxc inspect`` notes it.
"""

from __future__ import annotations

import logging
import os
import time

import attrs
import numpy as np

from ..codegen.artifact import Artifact
from ..codegen.host import LIBGCC, LIBM, host_cpu_features
from ..errors import CompileError
from ..target import Target, arch_number, device_arch, device_target
from .checks import _check_code, _check_ptx, _kernel_table, _stored_memory_plan
from .format import ALIGN, CAUSES, FORMAT_VERSION, MAGIC, _is_int, _refuse, decode_plan
from .object_code import check_object

__all__ = ["LoadedPlan", "read_plan", "plan_from_bytes", "CAUSES"]

log = logging.getLogger("ptxc.plan")


@attrs.frozen
class LoadedPlan:
    """What a checked plan holds for the runtime: the :class:`Artifact` and the options the
    engine ran with (``min_parallel_work``: cpu plans; ``cuda_graph``: cuda plans), with the
    seconds reading it took and where it came from (for messages)."""

    artifact: Artifact
    precision: str
    precision_overrides: dict
    source: str
    load_seconds: float
    min_parallel_work: int | None = None
    cuda_graph: bool = True
    tuning: tuple | None = None


def read_plan(path, *, key=None) -> LoadedPlan:
    """Read and check the plan at ``path`` (see the module docstring for what runs). The file
    is read under the trust model of :mod:`ptxc.plan.trust`: a regular file, its prefix
    checked before the rest is read, and its signature checked against ``key`` (or
    ``PTXC_PLAN_KEY``)."""
    from .trust import read_plan_file, verify
    path = os.fspath(path)
    buf = verify(read_plan_file(path, MAGIC, FORMAT_VERSION, ALIGN), key, path)
    return plan_from_bytes(buf, source=path)


def plan_from_bytes(data, *, source: str = "<plan>") -> LoadedPlan:
    """The checked content of the bytes of a plan file (see the module docstring)."""
    t0 = time.perf_counter()
    header, blobs = decode_plan(data, source)
    _check_runtime(header, source)
    if header.get("target") == "cuda":
        return _cuda_plan(header, blobs, source, t0)
    table, globals_, _, _ = _kernel_table(header, blobs, source)
    text = _text_blob(blobs, "llvm", "a cpu plan", "LLVM module", source)
    obj = _object_code(header, blobs, table, source)
    _check_code(text, table, source)  # the IR the object was compiled from keeps to the rules
    options = header.get("options")
    work = options.get("min_parallel_work") if isinstance(options, dict) else None
    if not _is_int(work) or work < 0:
        raise _refuse("header", "options lack min_parallel_work", source)
    plan = _stored_memory_plan(header, table, source)
    host = header["host"]
    artifact = Artifact(_plan_target(header, source), table, text, globals_, plan,
                        object_code=obj, triple=host["triple"], data_layout=host["data_layout"])
    return LoadedPlan(artifact, options.get("precision", "fp32"), _overrides(options, source),
                      source, time.perf_counter() - t0, min_parallel_work=work,
                      tuning=_tuning(header, source))


def _cuda_plan(header: dict, blobs: dict, source: str, t0: float) -> LoadedPlan:
    table, globals_, _, _ = _kernel_table(header, blobs, source)
    ptx = _text_blob(blobs, "ptx", "a cuda plan", "PTX", source)
    _check_ptx(ptx, table, source)
    options = header.get("options")
    if not isinstance(options, dict) or not isinstance(options.get("cuda_graph"), bool):
        raise _refuse("header", "options lack cuda_graph", source)
    plan = _stored_memory_plan(header, table, source)
    if plan is None:
        raise _refuse("header", "a cuda plan without its memory plan", source)
    artifact = Artifact(_plan_target(header, source), table, "", globals_, plan, ptx=ptx)
    return LoadedPlan(artifact, options.get("precision", "fp32"), _overrides(options, source),
                      source, time.perf_counter() - t0, cuda_graph=options["cuda_graph"],
                      tuning=_tuning(header, source))


#: a tuning record's fields and their types (ptxc.tune.tuner.Row.to_json)
_TUNING_FIELDS = {"key": str, "loc": (str, type(None)), "kernels": int, "tactic": str,
                  "source": str, "time_s": (int, float, type(None)),
                  "default_time_s": (int, float, type(None)), "candidates": int,
                  "rejected": list}


def _tuning(header: dict, source: str) -> tuple | None:
    """The plan's tuning record (a tuned build's), checked; None where it has none. It is
    information only (the tactics are in the code already): ``inspect`` prints it."""
    rows = header.get("tuning")
    if rows is None:
        return None
    ok = isinstance(rows, list) and all(
        isinstance(r, dict) and set(r) == set(_TUNING_FIELDS)
        and all(isinstance(r[k], t) and not isinstance(r[k], bool) for k, t in
                _TUNING_FIELDS.items()) for r in rows)
    if not ok:
        raise _refuse("header", "the tuning record is not a list of kernel records "
                      f"({', '.join(_TUNING_FIELDS)})", source)
    return tuple(rows)


# ---- the target: what the plan was built for, and what this machine is ------------------------

def recorded_target(header: dict) -> Target | None:
    """The plan's ``built_for`` as a Target, or None where it is missing or no Target (the
    load refuses that, cause ``header``: :func:`_plan_target`; inspect shows it as it is)."""
    d = header.get("built_for")
    if not isinstance(d, dict):
        return None
    try:
        return Target.from_dict(d)
    except (CompileError, TypeError, ValueError, AttributeError, KeyError):
        return None


def describe(t: Target) -> str:
    """``h200 (sm_90, 132 SMs)``; a cpu target: ``znver3 (cpu)``."""
    if t.kind == "cpu":
        return f"{t.arch} (cpu)"
    return f"{t.name or 'a GPU'} ({t.arch}, {t.sms} SMs)"


def _plan_target(header: dict, source: str) -> Target:
    """The Target the plan's code was built for: its ``built_for``, of the plan's kind and of
    its arch's number (``arch`` says what the PTX is for: sm_90a is an sm_90 GPU's own)."""
    t = recorded_target(header)
    if t is None:
        raise _refuse("header", "the header lacks built_for, the target the plan was built "
                      "for (a ptxc.target.Target)", source)
    kind, arch = header.get("target"), header.get("arch")
    if t.kind != kind or (kind == "cuda" and t.sm != arch_number(arch)[0]):
        raise _refuse("header", f"built_for ({describe(t)}) is not the plan's target "
                      f"({kind}{', ' + arch if kind == 'cuda' else ''})", source)
    return t.with_arch(arch) if kind == "cuda" else t


def _device_here(arch: str) -> str:
    """The GPU here, for a message: ``NVIDIA H100 PCIe (sm_90, 114 SMs)``, or its arch alone."""
    t = device_target()
    return describe(t) if t is not None and t.arch == arch else arch


def _check_device(header: dict, arch: str, source: str) -> None:
    """A cuda plan's arch against the GPU here (none here: it loads, and its run says so)."""
    have = device_arch()
    if have is None:
        return
    built = recorded_target(header)
    built = built if built is not None and built.kind == "cuda" else None
    # exact: tiles were chosen for the arch (an sm_90a plan is an sm_90 device's own), as the
    # runtime's check of a plan (ptxc.driver.cuda_device.arch_compatible, exact=True)
    if arch_number(arch)[0] != arch_number(have)[0]:
        built_for = f", built for {describe(built)}" if built is not None else ""
        raise _refuse("target", f"a cuda plan for {arch}{built_for}; this GPU is "
                      f"{_device_here(have)} (recompile with arch={have!r})", source)
    here = device_target()
    if built is not None and here is not None and here.arch == have and built.sms != here.sms:
        log.info("%s: built for %s; this GPU is %s: it runs, with tiles sized for %d SMs",
                 source, describe(built), describe(here), built.sms)


def _check_runtime(header: dict, source: str) -> None:
    """Versions and target: can this ptxc, LLVM and machine run the plan?"""
    import llvmlite.binding as llvm
    from .. import __version__
    if header.get("ptxc_version") != __version__:
        raise _refuse("version", f"written by ptxc {header.get('ptxc_version')!r}; this is "
                      f"ptxc {__version__} (recompile the model)", source)
    target = header.get("target")
    if target == "cuda":
        arch = header.get("arch")
        if not isinstance(arch, str):
            raise _refuse("header", "a cuda plan without its arch", source)
        try:
            arch_number(arch)
        except CompileError:
            raise _refuse("header", f"a cuda plan for {arch!r}, not a CUDA arch", source) \
                from None
        _check_device(header, arch, source)
        return
    if target != "cpu":
        raise _refuse("target", f"target {target!r}; this ptxc runs cpu and cuda plans", source)
    llvm_version = header.get("llvm_version")
    major = str(llvm.llvm_version_info[0])
    if not isinstance(llvm_version, str) or llvm_version.split(".")[0] != major:
        raise _refuse("version", f"its LLVM IR is from LLVM {llvm_version!r}; this llvmlite has "
                      f"LLVM {'.'.join(map(str, llvm.llvm_version_info))}", source)
    host = header.get("host")
    if not isinstance(host, dict):
        raise _refuse("header", "a cpu plan without its host (triple, data layout)", source)
    from ..lower.loop_to_llvm import host_target
    triple, layout = host_target()
    if host.get("triple") != triple or host.get("data_layout") != layout:
        raise _refuse("target", f"built for {host.get('triple')!r} (data layout "
                      f"{host.get('data_layout')!r}); this host is {triple!r} ({layout!r})",
                      source)


def _text_blob(blobs: dict, kind: str, plan: str, what: str, source: str) -> str:
    """The code blob ``(kind, "module")`` (PTX or LLVM IR) as text; a missing, mistyped or
    non-UTF-8 blob is a PlanError of cause ``blob``."""
    module = blobs.get((kind, "module"))
    if module is None or module.dtype != np.uint8 or module.ndim != 1:
        raise _refuse("blob", f"{plan} without its {what} (uint8 blob 'module')", source)
    try:
        return module.tobytes().decode("utf-8")
    except UnicodeDecodeError:
        raise _refuse("blob", f"the {what} is not UTF-8 text", source) from None


def _overrides(options: dict, source) -> dict:
    """The plan's ``precision_overrides`` (node name -> precision), checked."""
    ov = options.get("precision_overrides") or {}
    if not isinstance(ov, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                           for k, v in ov.items()):
        raise _refuse("header", "precision_overrides is not a map of node names to "
                      "precisions", source)
    return dict(ov)


def _object_code(header: dict, blobs: dict, table, source: str) -> bytes | None:
    """A cpu plan's host object code, when it has one: refused (cause ``target``) unless this
    host's CPU features are the ones it was built for, since the code may use any of them (the
    CPU name only tunes scheduling: it is a record), and (cause ``code``) unless its ELF
    structure passes :func:`~ptxc.plan.object_code.check_object`, so that LLVM's object
    loader never sees a damaged table; a plan without an object, from an older ptxc, is
    JIT-compiled from its IR."""
    import llvmlite.binding as llvm
    obj = blobs.get(("object", "module"))
    if obj is None:
        return None
    if obj.dtype != np.uint8 or obj.ndim != 1:
        raise _refuse("blob", "the object code is not a uint8 blob", source)
    host = header["host"]
    want, have = host.get("cpu_features"), host_cpu_features()
    if want != have:
        w = set(want.split(",")) if isinstance(want, str) else set()
        h = set(have.split(","))
        diff = sorted(w - h)[:6] + sorted(h - w)[:6]
        raise _refuse("target", f"its machine code is for another CPU (built on "
                      f"{str(host.get('cpu_name'))[:40]!r}; this host is "
                      f"{llvm.get_host_cpu_name()!r}; features differ: {', '.join(diff)}); "
                      "recompile the model here", source)
    code = obj.tobytes()
    try:
        check_object(code, host.get("triple"), [k.name for k in table.kernels],
                     set(LIBM) | set(LIBGCC))
    except ValueError as e:
        raise _refuse("code", f"the stored object code is malformed: {e}", source) from None
    return code


