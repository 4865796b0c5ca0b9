"""What loading checks about a plan's content before any of it runs: the kernel table's fields
against bounds the host can honour and against the bindings and weights, the stored LLVM IR
against the rules of what loop-to-llvm emits (an allowlist of callees, the kernels' signatures
and footprints), the memory plan against the table's scratch buffers, and a cuda plan's PTX
entries against the table. Every failure is a :class:`~ptxc.errors.PlanError` naming the
field (see :mod:`ptxc.plan.load` for the trust model these serve, and
:mod:`ptxc.plan.object_code` for the object code's ELF check).

Example: a kernel table whose input slot was shrunk in the header alone::

    _check_code(ir_text, table, "m.plan")
    -> PlanError: m.plan: kernel 'kernel_0' was compiled for 80 bytes of buffer #0; the kernel
       table's slot 'd' holds 32 (8 x float32) [code]
"""

from __future__ import annotations

import math
import re

import numpy as np

from ..codegen.host import LIBGCC, LIBM
from ..codegen.memory_plan import MemoryPlan, buffers_from_slots, host_memory_bytes
from ..errors import PlanError
from .format import DTYPES, INTRINSICS, MAX_COUNT, _is_int, _refuse

__all__ = ["_kernel_table", "_check_code", "_check_ptx", "_stored_memory_plan"]

#: the most chunks a cpu kernel's ``threads`` may ask for (far above any host's cores: a larger
#: number would only queue more calls on the runtime's pool)
MAX_THREADS = 1 << 16


def _kernel_table(header: dict, blobs: dict, source: str):
    """The kernel table, checked against itself, the bindings and the weights."""
    from ..ir.types import TensorType, scalar_from_numpy
    from ..lower.loop_to_llvm import KernelTable
    try:
        _check_table_fields(header["kernel_table"])
        table = KernelTable.from_json(header["kernel_table"])
        for s in table.slots:
            if s.kind not in ("arg", "alloc", "global") or s.dtype not in DTYPES:
                raise ValueError(f"slot {s.name!r}: kind {s.kind!r}, dtype {s.dtype!r}")
            t = s.type
            if t.span != s.span or t.min_element < 0 or not isinstance(s.name, str):
                raise ValueError(f"slot {s.name!r}: span {s.span} for {t}")
        for k in table.kernels:
            if not (isinstance(k.name, str) and all(_is_int(i) and 0 <= i < len(table.slots)
                                                    for i in k.buffers)
                    and _is_int(k.trip_count) and k.trip_count >= 0 and _is_int(k.work)
                    and isinstance(k.parallel, bool) and isinstance(k.pdl, bool)
                    and _is_int(k.threads)
                    and (k.tactic is None or (isinstance(k.tactic, str) and len(k.tactic) < 4096))):
                raise ValueError(f"kernel {k.name!r}")
            most = max([table.slots[i].span for i in k.buffers] + [1])
            if header.get("target") != "cuda" and k.trip_count > most:
                # every kernel's outer loop indexes one of its buffers along that range
                raise ValueError(f"kernel {k.name!r}: trip_count {k.trip_count} is larger than "
                                 f"any of its buffers ({most} elements)")
            if header.get("target") == "cuda":
                dims = (k.grid, k.block)
                if not (all(isinstance(d, tuple) and len(d) == 3
                            and all(_is_int(x) and x >= 1 for x in d) for d in dims)
                        and math.prod(k.block) <= 1024 and _is_int(k.shared_bytes)
                        and k.shared_bytes >= 0):
                    raise ValueError(f"kernel {k.name!r}: launch grid {k.grid!r}, block "
                                     f"{k.block!r}, shared bytes {k.shared_bytes!r}")
        args = {s.name: s for s in table.slots if s.kind == "arg"}
        names = list(table.inputs) + list(table.outputs)
        if sorted(args) != sorted(names) or len(args) != sum(s.kind == "arg"
                                                             for s in table.slots):
            raise ValueError("inputs and outputs are not the argument slots")
        bindings = header["bindings"]
        have = {d: [(b["name"], list(b["shape"]), b["dtype"]) for b in bindings[d]]
                for d in ("inputs", "outputs")}
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, IndexError) as e:
        raise _refuse("header", f"malformed kernel table or bindings ({type(e).__name__}: {e})",
                      source) from None
    for d, names in (("inputs", table.inputs), ("outputs", table.outputs)):
        want = [(n, list(args[n].shape), args[n].dtype) for n in names]
        if have[d] != want:
            raise _refuse("header", f"bindings {d} {have[d]} do not match the kernel table's "
                          f"{want}", source)
    globals_ = {}
    for s in table.slots:
        if s.kind != "global":
            continue
        w = blobs.get(("weight", s.name))
        if w is None or w.dtype.name != s.dtype or w.size < s.span:
            got = "none" if w is None else f"{w.dtype.name}[{w.size}]"
            raise _refuse("blob", f"weight {s.name!r} needs {s.span} of {s.dtype}, the plan "
                          f"holds {got}", source)
        globals_[s.name] = w
    tensor = lambda n: TensorType(args[n].shape, scalar_from_numpy(args[n].dtype))  # noqa: E731
    return (table, globals_, {n: tensor(n) for n in table.inputs},
            {n: tensor(n) for n in table.outputs})


_CALL = re.compile(r"\b(?:call|invoke|callbr)\b([^\n]*)")
_CALLEE = re.compile(r"@|%|\basm\b")


def _calls_not_by_name(text: str) -> bool:
    """Whether some call, invoke or callbr of the IR text may not name its callee directly
    (``@name``): its first ``@``, ``%`` or ``asm`` on the line is not an ``@``. A fast,
    conservative filter (IR has one instruction a line): when it says no, the per-instruction
    walk of :func:`_check_code` could find nothing; when it says yes, the walk decides."""
    for m in _CALL.finditer(text):
        c = _CALLEE.search(m.group(1))
        if c is None or c.group(0) != "@":
            return True
    return False


def _check_table_fields(d: dict) -> None:
    """Every integer field of the header's kernel table is an int within sane bounds (before
    anything computes with it: a dimension of 10**30 would overflow numpy or ctypes), and the
    scratch and binding slots fit the host's memory. A failure is a ValueError naming the
    field, which the caller turns into a PlanError."""
    limit = host_memory_bytes()

    def count(where, v, lo=0, hi=MAX_COUNT):
        if not (_is_int(v) and lo <= v <= hi):
            raise ValueError(f"{where} is {v!r}, not an int in [{lo}, {hi}]")

    slots = d["slots"]
    kernels = d["kernels"]
    if not isinstance(slots, list) or not isinstance(kernels, list):
        raise ValueError("slots and kernels must be lists")
    for i, s in enumerate(slots):
        where = f"slot #{i} ({s.get('name')!r})"
        shape, strides = s["shape"], s["strides"]
        if not isinstance(shape, list) or not isinstance(strides, list) \
                or len(shape) != len(strides) or len(shape) > 64:
            raise ValueError(f"{where}: shape/strides are not two lists of one length <= 64")
        for k, v in enumerate(shape):
            count(f"{where} shape[{k}]", v)
        for k, v in enumerate(strides):
            count(f"{where} strides[{k}]", v, -MAX_COUNT, MAX_COUNT)
        count(f"{where} offset", s["offset"])
        count(f"{where} span", s["span"])
        count(f"{where} first", s.get("first", -1), -1)
        count(f"{where} last", s.get("last", -1), -1)
        if s.get("dtype") in DTYPES and s.get("kind") in ("alloc", "arg"):
            nbytes = s["span"] * np.dtype(s["dtype"]).itemsize
            if nbytes > limit:
                raise ValueError(f"{where}: span of {nbytes:,} bytes is more than this host's "
                                 f"memory ({limit:,} bytes)")
    for i, k in enumerate(kernels):
        where = f"kernel #{i} ({k.get('name')!r})"
        count(f"{where} trip_count", k["trip_count"])
        count(f"{where} work", k["work"], 0, 2**62)
        if not isinstance(k["buffers"], list):
            raise ValueError(f"{where}: buffers is not a list")
        for j, v in enumerate(k["buffers"]):
            count(f"{where} buffers[{j}]", v, 0, len(slots) - 1)
        count(f"{where} shared_bytes", k.get("shared_bytes", 0), 0, 1 << 20)
        count(f"{where} threads", k.get("threads", 0), 0, MAX_THREADS)
        for what in ("grid", "block"):
            if k.get(what) is not None:
                if not isinstance(k[what], list) or len(k[what]) != 3:
                    raise ValueError(f"{where}: {what} is not 3 ints")
                for j, v in enumerate(k[what]):
                    count(f"{where} {what}[{j}]", v, 1, 2**31 - 1)
    checks = d.get("checks", [])
    if not isinstance(checks, list) or not all(isinstance(c, str) for c in checks):
        raise ValueError("checks is not a list of strings")


def _check_code(text: str, table, source: str) -> None:
    """The stored IR parses and keeps to what loop-to-llvm emits; see the module docstring."""
    import llvmlite.binding as llvm
    from llvmlite.binding import ValueKind
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as e:
        raise _refuse("code", f"the stored LLVM IR does not parse: {e}", source) from None
    allowed = set(LIBM) | set(LIBGCC)
    kernels = {k.name: k for k in table.kernels}
    defined = set()
    suspicious = _calls_not_by_name(text)
    for f in mod.functions:
        if f.is_declaration:
            if not (f.name.startswith(INTRINSICS) or f.name in allowed):
                raise _refuse("code", f"the IR declares {f.name!r}, which is neither a C math "
                              "function of the runtime nor an LLVM intrinsic ptxc emits",
                              source)
            continue
        k = kernels.get(f.name)
        if k is None:
            raise _refuse("code", f"the IR defines {f.name!r}, which is no kernel of the table",
                          source)
        if len(list(f.arguments)) != len(k.buffers) + 2:
            raise _refuse("code", f"kernel {f.name!r} takes {len(list(f.arguments))} arguments; "
                          f"the table gives it {len(k.buffers)} buffers and a range", source)
        defined.add(f.name)
        _check_footprint(f, k, table, source)
        if not suspicious:  # every call names its callee with @: no walk (17k instructions of
            continue        # ResNet-50 through the FFI took 1.7 s)
        for block in f.blocks:
            for ins in block.instructions:
                if ins.opcode in ("call", "invoke", "callbr"):
                    callee = list(ins.operands)[-1]
                    if callee.value_kind != ValueKind.function:
                        raise _refuse("code", f"kernel {f.name!r} calls through a pointer or "
                                      "inline assembly", source)
    if set(kernels) - defined:
        raise _refuse("code", f"the IR lacks kernels {sorted(set(kernels) - defined)}", source)
    if list(mod.global_variables) or "module asm" in text:
        raise _refuse("code", "the IR holds global variables or module assembly", source)


_DEREF = re.compile(rb"^dereferenceable\((\d+)\)$")
_RANGE = re.compile(rb"^range\(i64 (-?\d+), (-?\d+)\)$")


def _check_footprint(fn, kernel, table, source: str) -> None:
    """The kernel table against the footprint the kernel's code states in its signature
    (:func:`ptxc.lower.loop_to_llvm._state_footprint`): each buffer's slot is exactly as large
    as the bytes the code was compiled to touch (``dereferenceable``), and the trip count is the
    one the code's range arguments allow (``range``). This is what refuses a header edited alone
    (a binding and its slot shrunk, a trip count grown, buffers swapped): the kernels would
    read or write past their buffers."""
    args = list(fn.arguments)

    def attr(a, pattern):
        for x in a.attributes:
            m = pattern.match(x)
            if m:
                return tuple(int(g) for g in m.groups())
        return None

    for j, (a, i) in enumerate(zip(args, kernel.buffers)):
        s = table.slots[i]
        want = s.span * np.dtype(s.dtype).itemsize
        have = (attr(a, _DEREF) or (0,))[0]
        if have != want:
            raise _refuse("code", f"kernel {kernel.name!r} was compiled for {have} bytes of "
                          f"buffer #{j}; the kernel table's slot {s.name!r} holds {want} "
                          f"({s.span} x {s.dtype})", source)
    for a in args[-2:]:
        r = attr(a, _RANGE)
        if r != (0, kernel.trip_count + 1):
            top = "none" if r is None else r[1] - 1
            raise _refuse("code", f"kernel {kernel.name!r} was compiled for a trip count of "
                          f"{top}; the kernel table says {kernel.trip_count}", source)


def _stored_memory_plan(header: dict, table, source: str):
    """The header's memory plan, checked against the kernel table's scratch slots (None when
    the header has none)."""
    d = header.get("memory_plan")
    if d is None:
        return None
    try:
        plan = MemoryPlan.from_json(d)
    except PlanError as e:
        raise _refuse("header", str(e), source) from None
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError,
            ZeroDivisionError) as e:  # (alignment 0)
        raise _refuse("header", f"malformed memory plan ({type(e).__name__}: {e})",
                      source) from None
    if not (_is_int(plan.arena_bytes) and 0 <= plan.arena_bytes <= host_memory_bytes()):
        raise _refuse("header", f"memory_plan.arena_bytes {plan.arena_bytes!r} is more than "
                      f"this host's memory ({host_memory_bytes():,} bytes)", source)
    want = [(b.name, b.size, b.first, b.last)
            for b in buffers_from_slots([s for s in table.slots if s.kind == "alloc"])]
    have = [(b.name, b.size, b.first, b.last) for b in plan.buffers]
    if have != want:
        raise _refuse("header", "the memory plan does not match the kernel table's scratch "
                      "buffers", source)
    return plan


_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(([^)]*)\)")


def _check_ptx(text: str, table, source: str) -> None:
    """The stored PTX declares exactly the table's kernels, each with one parameter per
    buffer (what catches a PTX of another model or a cut one; the driver checks the rest)."""
    if not re.search(r"^\s*\.version\s+\d+\.\d+", text, re.M) or \
            not re.search(r"^\s*\.target\s+sm_\w+", text, re.M):
        raise _refuse("code", "the PTX lacks its .version or .target directive", source)
    entries = {m.group(1): m.group(2).count(".param") for m in _ENTRY.finditer(text)}
    kernels = {k.name: len(k.buffers) for k in table.kernels}
    if set(entries) != set(kernels):
        raise _refuse("code", f"the PTX's kernels {sorted(entries)} are not the table's "
                      f"{sorted(kernels)}", source)
    for name, n in kernels.items():
        if entries[name] != n:
            raise _refuse("code", f"kernel {name} takes {entries[name]} parameters in the PTX; "
                          f"the table gives it {n} buffers", source)
    _check_ptx_pdl(text, table, source)
    _check_ptx_footprint(text, table, source)


_FIRST_WRITE = re.compile(r"^\s*(?:griddepcontrol\.wait|(?:st|atom|red)\.\S*)", re.M)


def _check_ptx_pdl(text: str, table, source: str) -> None:
    """A kernel the table launches with programmatic stream serialization (``pdl``) must wait
    for the kernels before it (``griddepcontrol.wait``) before it writes memory, or it could
    overwrite what they still read or write what they then overwrite (its copies of constant
    weights may come before the wait: mma_kernel._Builder._prologue)."""
    starts = {m.group(1): m.end() for m in _ENTRY.finditer(text)}
    for k in table.kernels:
        if not k.pdl:
            continue
        first = _FIRST_WRITE.search(text, starts[k.name])
        if first is None or "griddepcontrol.wait" not in first.group(0):
            raise _refuse("code", f"kernel {k.name} is launched as a programmatic dependent "
                          "launch (pdl) but its PTX does not wait for the kernels before it "
                          "(griddepcontrol.wait) before it writes memory", source)


_FOOTPRINT = re.compile(r"^// ptxc footprint (\S+) grid (\d+) (\d+) (\d+) block (\d+) (\d+) "
                        r"(\d+) shared (\d+) bytes((?: \d+)*)$", re.M)


def _check_ptx_footprint(text: str, table, source: str) -> None:
    """The kernel table against the footprint lines the PTX states
    (:func:`ptxc.ptx.footprint_lines`): each kernel's grid, block and shared bytes, and the
    bytes of each of its buffers. A launch grown, a binding or slot shrunk, or buffers swapped
    in the header alone would make the kernels index past their buffers."""
    stated = {}
    for m in _FOOTPRINT.finditer(text):
        g = m.groups()
        if g[0] in stated:
            raise _refuse("code", f"the PTX states kernel {g[0]}'s footprint twice", source)
        stated[g[0]] = (tuple(map(int, g[1:4])), tuple(map(int, g[4:7])), int(g[7]),
                        tuple(int(x) for x in g[8].split()))
    for k in table.kernels:
        want = (tuple(k.grid), tuple(k.block), k.shared_bytes,
                tuple(table.slots[i].span * np.dtype(table.slots[i].dtype).itemsize
                      for i in k.buffers))
        have = stated.get(k.name)
        if have != want:
            raise _refuse("code", f"kernel {k.name} was compiled for grid, block, shared bytes "
                          f"and buffer bytes {have}; the kernel table says {want}", source)
