"""Plan files: a compiled Engine in one file, loaded without recompiling the model.

    engine.save("model.plan")              # save_plan(engine, path)
    engine = ptxc.load("model.plan")       # load_plan(path, threads=None)

The container (prefix, JSON header, 64-byte aligned blobs, SHA-256) is
:mod:`ptxc.driver.plan_format`; what loading checks of the content is
:mod:`ptxc.driver.plan_checks` and :mod:`ptxc.driver.plan_object`; this module makes the header
of an engine and an engine of a header.

**Header**: the fields are listed once, in :mod:`ptxc.driver.plan_format`'s docstring.

**Blobs by target.** cpu: ``llvm``/``module`` (the LLVM IR text, UTF-8 bytes) and the weights.
cuda: ``ptx``/``module`` (the PTX text, UTF-8 bytes, exactly as compiled) and the weights; the
NVPTX LLVM IR is not stored (the PTX is the program; ``explore`` shows the IR).

**What loading runs.** Loading parses JSON (data only) and views raw arrays of a fixed set of
numeric dtypes; nothing from the file is unpickled, evaluated or imported. A cpu plan stores the
LLVM IR loop-to-llvm emitted, before optimization, and the host object code it was compiled to
(blob ``object``/``module``, with ``host.cpu_features``): loading checks the IR (below) and
loads the object into MCJIT, so neither the LLVM optimizer nor the code generator runs (ResNet-50
loads in well under the 14.6 s its JIT took). The object may use every feature of the CPU it was
built on, so a plan with an object is refused (cause ``target``) on a host whose CPU features
differ (``cpu_name`` is a record). A plan without an object (older ptxc) is optimized for this host's CPU and
JIT-compiled, as a GPU driver JIT-compiles a cuda plan's PTX. Either way no pass, lowering or
code generation of the model compiler runs (the tests make ``run_stages`` and
``lower_loop_to_llvm`` raise while loading). The code is the program, so a plan is trusted as a
shared library is. A cuda plan stores the PTX; loading checks it declares
exactly the table's kernels (``.entry``) with one parameter per table buffer, and nothing
touches the GPU until the first run, where the driver JIT-compiles the PTX for the device (as
it does for any PTX); no LLVM runs, so a cuda plan does not depend on the LLVM version. Before
the JIT a cpu plan's module is checked to define exactly the
table's kernels with the table's signatures and footprints (each buffer's
``dereferenceable`` bytes and the ``range`` of the kernel's iteration arguments, stated by
loop-to-llvm: a slot, binding or trip count edited in the header alone is refused), to declare only the C library functions the CPU
runtime registers and LLVM intrinsics, to call only named functions (no inline assembly, no
calls through pointers) and to hold no global variables: these catch damage and mismatch and
keep a plan's code from calling into the rest of the process; the object code's ELF tables are
checked (:mod:`ptxc.driver.plan_object`) before LLVM's loader reads them, and it may link only
against the kernels and the runtime's functions; but these are no sandbox (a crafted
file with a recomputed checksum can still index outside its buffers). The SHA-256 detects
damage; it does not authenticate.

**Refusals.** Each is a :class:`~ptxc.errors.PlanError` whose message names the file and the
cause and whose ``cause`` attribute is one of :data:`CAUSES`: ``magic`` (not a plan file),
``truncated`` (shorter than its prefix or its header say), ``format`` (another format version,
or a header whose ``format`` is not a ptxc plan), ``checksum`` (a byte changed anywhere),
``header`` (not JSON, missing or ill-typed fields, parts that disagree), ``blob`` (out of the
blob section, overlapping, a dtype outside the numeric set, a weight that does not fit its
buffer), ``version`` (another ptxc version; for cpu another LLVM major version, whose textual
IR this LLVM may not read), ``target`` (a target or arch this machine cannot run: a cpu plan for
another triple; a cuda plan for another arch than the device's — the plan's kernels and tiles
were chosen for that arch, so it is refused as TensorRT refuses an engine built for another
device), ``code`` (the stored IR or PTX does not parse, breaks the rules above, or does not
compile).

**A cuda plan on a machine without a GPU loads** (a decision): the arch is checked at load only
when a device is present (:func:`device_arch`), so a plan built and inspected on a CPU machine
is an Engine there too; its first run raises :class:`~ptxc.errors.DeviceError` saying there is
no GPU. When the plan is loaded where no device is seen and runs where one is (a GPU that
appears later in the process), the first run checks the arch exactly as loading would have
(``CudaProgram(exact_arch=True)``), a DeviceError naming both archs.
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np

from ..errors import CompileError, PlanError
from ..ptx.target import arch_number
from ..target import device_arch  # noqa: F401  (the runtime check asks it; tests patch it here)
from .plan_checks import (_check_code, _check_ptx, _kernel_table,  # noqa: F401  (re-exported)
                          _stored_memory_plan)
from .plan_format import (ALIGN, BLOB_KINDS, CAUSES, DTYPES, FORMAT_NAME,  # noqa: F401
                          FORMAT_VERSION, INTRINSICS, MAGIC, MAX_COUNT, _is_int, _refuse,
                          decode_plan, encode_plan)

__all__ = ["save_plan", "load_plan", "plan_to_bytes", "engine_from_plan", "encode_plan",
           "decode_plan", "MAGIC", "FORMAT_VERSION", "CAUSES"]


# ---- engines -----------------------------------------------------------------------------------

def _versions() -> dict:
    import llvmlite
    import llvmlite.binding as llvm
    from .. import __version__
    return {"ptxc_version": __version__, "llvmlite_version": llvmlite.__version__,
            "llvm_version": ".".join(map(str, llvm.llvm_version_info))}


def _binding(name: str, t) -> dict:
    return {"name": name, "shape": list(t.shape), "dtype": t.element.np_dtype.name}


def _memory_plan(engine, cpu):
    """The engine's memory plan (an ``engine.memory_plan``, else the planned arena of its CPU
    runtime, planned now if it has not run yet), or None when it has none."""
    plan = getattr(engine, "memory_plan", None)
    alloc = getattr(cpu, "allocator", None)
    if plan is None and type(alloc).__name__ == "ArenaAllocator":
        plan = alloc.plan
        if plan is None:
            from .memory_plan import buffers_from_slots, plan_memory
            slots = [s for s in cpu.table.slots if s.kind == "alloc"]
            plan = plan_memory(buffers_from_slots(slots), alloc.alignment, refine=alloc.refine)
    return plan


def _overrides_option(engine) -> dict:
    """``{"precision_overrides": {...}}`` when the engine has any (absent otherwise)."""
    ov = dict(getattr(engine, "precision_overrides", None) or {})
    return {"precision_overrides": ov} if ov else {}


def _overrides(options: dict, source) -> dict:
    """The plan's ``precision_overrides`` (node name -> precision), checked."""
    ov = options.get("precision_overrides") or {}
    if not isinstance(ov, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                           for k, v in ov.items()):
        raise _refuse("header", "precision_overrides is not a map of node names to "
                      "precisions", source)
    return dict(ov)


def _cuda_plan_to_bytes(engine) -> bytes:
    cuda = engine.program
    header = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **_versions(),
              "target": "cuda", "arch": cuda.arch, "host": None,
              "options": {"precision": getattr(engine, "precision", "fp32"),
                          **_overrides_option(engine),
                          "cuda_graph": bool(cuda.cuda_graph)},
              "bindings": {"inputs": [_binding(n, t) for n, t in engine.inputs.items()],
                           "outputs": [_binding(n, t) for n, t in
                                       engine.output_bindings.items()]},
              "kernel_table": engine.kernels.to_json(),
              "memory_plan": cuda.plan.to_json()}
    blobs = [("module", "ptx", np.frombuffer(cuda.ptx.encode("utf-8"), np.uint8))]
    globals_ = cuda.ptx_program.globals
    blobs += [(s.name, "weight", globals_[s.name]) for s in engine.kernels.slots
              if s.kind == "global"]
    return encode_plan(header, blobs)


def plan_to_bytes(engine) -> bytes:
    """The plan file of ``engine`` as bytes (deterministic: one engine, one byte string)."""
    import llvmlite.binding as llvm
    if engine.target == "cuda":
        return _cuda_plan_to_bytes(engine)
    if engine.target != "cpu":
        raise PlanError(f"plan: cannot save an engine for target {engine.target!r}; the targets "
                        "are cpu and cuda")
    cpu = engine.program
    prog = cpu.program
    plan = _memory_plan(engine, cpu)
    header = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **_versions(),
              "target": "cpu", "arch": None,
              "host": {"triple": prog.triple, "data_layout": prog.data_layout,
                       "cpu_name": llvm.get_host_cpu_name(),
                       "cpu_features": host_cpu_features()},
              "options": {"precision": getattr(engine, "precision", "fp32"),
                          **_overrides_option(engine),
                          "min_parallel_work": int(cpu.min_parallel_work),
                          "allocator": "arena" if plan is not None else "per-run"},
              "bindings": {"inputs": [_binding(n, t) for n, t in engine.inputs.items()],
                           "outputs": [_binding(n, t) for n, t in
                                       engine.output_bindings.items()]},
              "kernel_table": engine.kernels.to_json()}
    if plan is not None:
        header["memory_plan"] = plan.to_json()
    text = np.frombuffer(prog.text.encode("utf-8"), np.uint8)
    blobs = [("module", "llvm", text)]
    if getattr(cpu, "object_code", None):
        blobs.append(("module", "object", np.frombuffer(cpu.object_code, np.uint8)))
    blobs += [(s.name, "weight", prog.globals[s.name]) for s in engine.kernels.slots
              if s.kind == "global"]
    return encode_plan(header, blobs)


def host_cpu_features() -> str:
    """The host CPU's LLVM feature string, sorted (what an object file's code may use)."""
    import llvmlite.binding as llvm
    return ",".join(sorted(llvm.get_host_cpu_features().flatten().split(",")))


def _object_code(header: dict, blobs: dict, table, source: str) -> bytes | None:
    """A cpu plan's host object code, when it has one: refused (cause ``target``) unless this
    host's CPU features are the ones it was built for, since the code may use any of them (the
    CPU name only tunes scheduling: it is a record), and (cause ``code``) unless its ELF
    structure passes :func:`~ptxc.driver.plan_object.check_object`, so that LLVM's object
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
    from .cpu import _LIBGCC, _LIBM
    from .plan_object import check_object
    code = obj.tobytes()
    try:
        check_object(code, host.get("triple"), [k.name for k in table.kernels],
                     set(_LIBM) | set(_LIBGCC))
    except ValueError as e:
        raise _refuse("code", f"the stored object code is malformed: {e}", source) from None
    return code


def save_plan(engine, path, key=None) -> None:
    """Write ``engine`` to ``path`` (atomically: a crash leaves the old file or none); with
    ``key`` (or ``PTXC_PLAN_KEY``) the plan is signed (:mod:`ptxc.driver.plan_trust`)."""
    from .plan_trust import sign
    data = sign(plan_to_bytes(engine), key)
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".ptxc-plan-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_plan(path, *, threads: int | None = None, key=None, max_memory: int | None = None):
    """Read the plan at ``path`` into an Engine (see the module docstring for what runs). The
    file is read under the trust model of :mod:`ptxc.driver.plan_trust`: a regular file, its
    prefix checked before the rest is read, and its signature checked against ``key`` (or
    ``PTXC_PLAN_KEY``). ``max_memory``: the engine's memory budget, as ``compile``'s."""
    from .memory_limit import _valid
    from .plan_trust import read_plan_file, verify
    _valid(max_memory)
    path = os.fspath(path)
    buf = verify(read_plan_file(path, MAGIC, FORMAT_VERSION, ALIGN), key, path)
    engine = engine_from_plan(buf, threads=threads, source=path)
    engine.max_memory = max_memory
    return engine


def _check_runtime(header: dict, source: str) -> None:
    """Versions and target: can this ptxc, LLVM and machine run the plan?"""
    import llvmlite.binding as llvm
    from .. import __version__
    if header.get("ptxc_version") != __version__:
        raise _refuse("version", f"written by ptxc {header.get('ptxc_version')!r}; this is "
                      f"ptxc {__version__} (recompile the model)", source)
    target = header.get("target")
    if target == "cuda":
        arch, have = header.get("arch"), device_arch()
        if not isinstance(arch, str):
            raise _refuse("header", "a cuda plan without its arch", source)
        from .cuda_device import arch_compatible
        try:
            arch_number(arch)
        except CompileError:
            raise _refuse("header", f"a cuda plan for {arch!r}, not a CUDA arch", source) \
                from None
        # exact: tiles were chosen for the arch (an sm_90a plan is an sm_90 device's own); no
        # GPU here: loads, and its run says so
        if have is not None and not arch_compatible(arch, have, exact=True):
            raise _refuse("target", f"a cuda plan for {arch}; this GPU is {have} (recompile "
                          f"with arch={have!r})", source)
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


def _allocator(header: dict, table, source: str):
    from .memory_plan import ArenaAllocator
    plan = _stored_memory_plan(header, table, source)
    return None if plan is None else ArenaAllocator(plan=plan)


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


def _cuda_engine_from_plan(header: dict, blobs: dict, source: str, t0: float):
    from .cuda import CudaProgram
    from .engine import Engine
    table, globals_, inputs, outputs = _kernel_table(header, blobs, source)
    ptx = _text_blob(blobs, "ptx", "a cuda plan", "PTX", source)
    _check_ptx(ptx, table, source)
    options = header.get("options")
    if not isinstance(options, dict) or not isinstance(options.get("cuda_graph"), bool):
        raise _refuse("header", "options lack cuda_graph", source)
    plan = _stored_memory_plan(header, table, source)
    if plan is None:
        raise _refuse("header", "a cuda plan without its memory plan", source)
    arch = header["arch"]
    try:
        from ..ptx import PtxProgram
        prog = PtxProgram(ptx=ptx, arch=arch, llvm_text="", table=table, globals=globals_)
        cuda = CudaProgram(prog, plan, cuda_graph=options["cuda_graph"], exact_arch=True)
    except CompileError as e:
        raise _refuse("header", f"the kernel table, arch or memory plan cannot make a cuda "
                      f"program: {e}", source) from None
    engine = Engine("cuda", cuda, inputs, outputs, {"load": time.perf_counter() - t0}, "",
                    table)
    engine.precision = options.get("precision", "fp32")
    engine.precision_overrides = _overrides(options, source)
    engine.memory_plan = plan
    return engine


def engine_from_plan(data, *, threads: int | None = None, source: str = "<plan>"):
    """An Engine from the bytes of a plan file (see the module docstring)."""
    from ..lower.loop_to_llvm import LLVMProgram
    from .cpu import CpuProgram
    from .engine import Engine
    t0 = time.perf_counter()
    header, blobs = decode_plan(data, source)
    _check_runtime(header, source)
    if header.get("target") == "cuda":
        return _cuda_engine_from_plan(header, blobs, source, t0)
    table, globals_, inputs, outputs = _kernel_table(header, blobs, source)
    text = _text_blob(blobs, "llvm", "a cpu plan", "LLVM module", source)
    obj = _object_code(header, blobs, table, source)
    _check_code(text, table, source)  # the IR the object was compiled from keeps to the rules
    options = header.get("options")
    work = options.get("min_parallel_work") if isinstance(options, dict) else None
    if not _is_int(work) or work < 0:
        raise _refuse("header", "options lack min_parallel_work", source)
    allocator = _allocator(header, table, source)
    host = header["host"]
    prog = LLVMProgram(text, table, globals_, host["triple"], host["data_layout"])
    t1 = time.perf_counter()
    try:
        cpu = CpuProgram(prog, threads=threads, min_parallel_work=work, allocator=allocator,
                         object_code=obj)
    except CompileError as e:
        raise _refuse("code", f"the stored LLVM IR does not compile: {e}", source) from None
    t2 = time.perf_counter()
    engine = Engine("cpu", cpu, inputs, outputs, {"load": t1 - t0, "jit": t2 - t1}, text, table)
    engine.precision = options.get("precision", "fp32")
    engine.precision_overrides = _overrides(options, source)
    engine.memory_plan = allocator.plan if allocator is not None else None
    return engine
