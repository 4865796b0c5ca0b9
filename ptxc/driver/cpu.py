"""The CPU runtime: load a loop program's host machine code with llvmlite and run its kernels.

    engine = Engine.from_artifact(ptxc.codegen.build(loop_module, Target.host()))  # the way
    program = CpuProgram.from_module(loop_module)     # or CpuProgram(lower_loop_to_llvm(m))
    program.run({"x": x, "y": y})                     # every argument of main; writes in place
    outputs = program({"x": x})                       # allocates the outputs (loop.outputs)

Loading: the program's relocatable object file (``object_code``: what
:func:`ptxc.codegen.host.compile_object` made of the LLVM IR at build time, or what a plan
stores) is loaded into MCJIT, so the runtime runs neither the optimizer nor the code generator.
A program given without object code (``CpuProgram(llvm_program)``, ``from_module``: tests and
tools, and plans from before object code was stored) is compiled by
:func:`~ptxc.codegen.host.compile_object` first. The libm functions the kernels call (``tanh``,
``erf``, and the ``expf``/``powf``/... that LLVM's intrinsics become) and libgcc's
half-precision conversions (:data:`ptxc.codegen.host.LIBM`, :data:`~ptxc.codegen.host.LIBGCC`)
are registered with ``llvm.add_symbol`` from the loaded C libraries, so resolving them does not
depend on how the JIT searches the process.

Execution: kernels run in order. A parallel kernel's outer range is split into one chunk per
thread of a shared pool (``os.cpu_count()`` threads; ctypes releases the GIL during the call);
a kernel with little work (``min_parallel_work`` innermost iterations) or a sequential outer loop
(a top-level ``loop.for``) is one call on the calling thread. A kernel whose schedule names its
threads (``KernelInfo.threads`` > 0, cpu-schedule's ``cpu.threads``) is split into that many
chunks (at most one per iteration), whatever its work: 1 is one call on the calling thread.

Memory: arguments are the caller's arrays (C-contiguous, aligned, not overlapping; written in
place); weights are the arrays of the ``loop.global`` ops; scratch buffers (``loop.alloc``) come
from a :class:`BufferAllocator`. :class:`PerRunAllocator` (the default) gives fresh numpy memory
on every run; ``allocator="arena"`` uses :class:`~ptxc.driver.arena.ArenaAllocator`, the
liveness-based planner's one arena (views at planned offsets, from each slot's ``span``/``dtype``
and ``first``/``last`` kernel), kept across runs.

Run-time checks: a program with index checks has an error-flag scratch slot
(:mod:`ptxc.lower.loop_to_llvm`, "Run-time checks"); it is zeroed before each run and read after
it, and a set flag raises :class:`~ptxc.errors.IndexOutOfRangeError` naming the op.

Concurrency: the compiled code, the kernel table and the weights are shared and read-only; each
run takes an execution context (:class:`CpuContext`: the allocator, so the arena) from the
program's pool (:mod:`ptxc.driver.context`), so runs from many threads never share scratch
memory. The first context uses ``allocator`` itself; later ones its ``fork()``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np

from ..errors import BindingError, CompileError, IndexOutOfRangeError
from ..dialects.loop_memory import allocate, restride
from ..ir.core import Operation
from ..codegen.host import LIBGCC, LIBM, compile_object
from ..ir.types import BufferType
from ..lower.loop_to_llvm import (BufferSlot, LLVMProgram, lower_loop_to_llvm,
                                  new_host_target_machine)


class BufferAllocator(Protocol):
    """Gives memory for the scratch buffers of one run: one 1-D array of ``slot.span`` elements
    of ``slot.dtype`` per slot (an arena planner returns views of one arena)."""

    def allocate(self, slots: list[BufferSlot]) -> list[np.ndarray]: ...

    # optional: ``fork()`` gives an allocator with the same plan and memory of its own, for
    # another execution context; without it the program's runs are serialized


class PerRunAllocator:
    """Fresh numpy memory for every scratch buffer on every run (no reuse)."""

    def fork(self) -> "PerRunAllocator":
        return self  # no state: one serves every context

    def allocate(self, slots: list[BufferSlot]) -> list[np.ndarray]:
        return [np.empty(max(s.span, 1), s.dtype) for s in slots]


@functools.lru_cache(maxsize=None)
def _register_symbols() -> None:
    import llvmlite.binding as llvm
    for lib, names in ((ctypes.util.find_library("m"), LIBM), ("libgcc_s.so.1", LIBGCC)):
        try:
            dll = ctypes.CDLL(lib)
        except OSError:
            continue
        for n in names:
            fn = getattr(dll, n, None)
            if fn is not None:
                llvm.add_symbol(n, ctypes.cast(fn, ctypes.c_void_p).value)


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=os.cpu_count() or 1,
                                       thread_name_prefix="ptxc-cpu")
        return _POOL


class CpuProgram:
    """A JIT-compiled loop program; see the module docstring."""

    def __init__(self, program: LLVMProgram, opt_level: int = 3, threads: int | None = None,
                 min_parallel_work: int = 1 << 15,
                 allocator: BufferAllocator | str | None = None,
                 object_code: bytes | None = None):
        import llvmlite.binding as llvm
        _register_symbols()
        self.program = program
        self.table = program.table
        self.threads = max(1, threads if threads is not None else (os.cpu_count() or 1))
        self.min_parallel_work = min_parallel_work
        if allocator == "arena":
            from .arena import ArenaAllocator
            allocator = ArenaAllocator()
        elif isinstance(allocator, str):
            raise CompileError(f"cpu: unknown allocator {allocator!r} (known: 'arena')")
        self.allocator = allocator or PerRunAllocator()
        self._module = None
        if object_code is None:  # (tests, tools, and plans without object code)
            object_code, self._module = compile_object(program, opt_level)
        tm = new_host_target_machine()  # owned by the engine from here on
        #: the host's machine code of every kernel (a relocatable object file): a plan stores it
        #: and loads it on a host with the same CPU features without optimizing or codegen
        self.object_code = bytes(object_code)
        # an empty module for the engine, then the object: no optimizer, no code generator
        empty = llvm.parse_assembly("")
        empty.triple = program.triple or llvm.get_process_triple()
        self._engine = llvm.create_mcjit_compiler(empty, tm)
        try:
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(self.object_code))
            self._engine.finalize_object()
        except RuntimeError as e:
            raise CompileError(f"cpu: the object code does not load: {e}") from None
        self._fns = []
        for k in self.table.kernels:
            addr = self._engine.get_function_address(k.name)
            if not addr:
                raise CompileError(f"cpu: kernel {k.name} was not compiled")
            proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(k.buffers)),
                                     ctypes.c_int64, ctypes.c_int64)
            self._fns.append(proto(addr))
        self._error_slot = self.table.error_slot
        self._globals = {}
        for s in self.table.slots:
            if s.kind == "global":
                self._globals[s.name] = np.ascontiguousarray(program.globals[s.name])

    @property
    def optimized_text(self) -> str | None:
        """The optimized LLVM IR (None when built from object code)."""
        return None if self._module is None else str(self._module)

    @classmethod
    def from_module(cls, module: Operation, func: str = "main", **kwargs) -> "CpuProgram":
        """Lower a loop-dialect module and compile it."""
        return cls(lower_loop_to_llvm(module, func), **kwargs)

    # ---- running ------------------------------------------------------------------------------
    def _bind(self, buffers: dict) -> list[np.ndarray]:
        args = [s for s in self.table.slots if s.kind == "arg"]
        names = [s.name for s in args]
        unknown = sorted(set(buffers) - set(names))
        missing = [n for n in names if n not in buffers]
        if unknown or missing:
            raise BindingError(f"cpu program: missing buffers {missing}, unknown {unknown}; it "
                               f"takes {names}")
        out = []
        for s in args:
            x = buffers[s.name]
            if not isinstance(x, np.ndarray):
                raise BindingError(f"buffer {s.name!r} must be a numpy array")
            if x.dtype != np.dtype(s.dtype):
                raise BindingError(f"buffer {s.name!r} has dtype {x.dtype}, expected {s.dtype}")
            if s.type.is_default_layout:
                if x.shape != s.shape:
                    raise BindingError(f"buffer {s.name!r} has shape {list(x.shape)}, expected "
                                       f"{list(s.shape)}")
            elif not (x.ndim == 1 and x.size >= s.span):
                raise BindingError(f"buffer {s.name!r} has layout {s.type}: pass its 1-d base "
                                   f"of at least {s.span} elements, not {list(x.shape)}")
            if not (x.flags.c_contiguous and x.flags.aligned):
                raise BindingError(f"buffer {s.name!r} must be C-contiguous and aligned; it is "
                                   "written in place, so it is not copied")
            out.append(x)
        spans = sorted((x.ctypes.data, x.ctypes.data + x.nbytes, n)
                       for x, n in zip(out, names) if x.nbytes)
        for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
            if b0 < a1:
                raise BindingError(f"buffers {an!r} and {bn!r} overlap in memory")
        return out

    def run(self, buffers: dict, on_kernel=None, clock=None) -> None:
        """Run every kernel in order on ``buffers`` (every argument of main, by name): inputs are
        read, outputs written in place. ``on_kernel(index, start, end)``, when given, hears each
        kernel's span read from ``clock()`` (seconds; ``time.perf_counter`` unless given: a test
        passes a fake clock), read just before and just after the kernel's call(s): the
        per-kernel profile of ``ptxc bench --profile``. Safe from many threads: each run takes an
        execution context of its own (:mod:`ptxc.driver.context`)."""
        with self._contexts.take() as ctx:
            ctx.run(buffers, on_kernel, clock)

    def _run(self, allocator: BufferAllocator, buffers: dict, on_kernel=None,
             clock=None) -> None:
        args = self._bind(buffers)
        scratch_slots = [s for s in self.table.slots if s.kind == "alloc"]
        given = allocator.allocate(scratch_slots)
        for s, a in zip(scratch_slots, given, strict=True):
            if a.dtype != np.dtype(s.dtype) or a.size < s.span or not a.flags.c_contiguous:
                raise CompileError(f"cpu: the allocator gave {a.dtype}[{a.size}] for scratch "
                                   f"buffer {s.name!r}, which needs {s.span} of {s.dtype}")
        scratch = iter(given)
        roots = []
        it = iter(args)
        for s in self.table.slots:
            roots.append(next(it) if s.kind == "arg" else next(scratch) if s.kind == "alloc"
                         else self._globals[s.name])
        flag = None if self._error_slot is None else roots[self._error_slot][:1]
        if flag is not None:
            flag[0] = 0
        ptrs = [r.ctypes.data for r in roots]
        keep = roots  # noqa: F841  (the arrays stay alive during the calls)
        clock = clock or time.perf_counter
        for i, (k, fn) in enumerate(zip(self.table.kernels, self._fns)):
            if on_kernel is not None:
                t0 = clock()
                self._run_kernel(k, fn, ptrs)
                on_kernel(i, t0, clock())
            else:
                self._run_kernel(k, fn, ptrs)
        if flag is not None and flag[0]:
            raise IndexOutOfRangeError(f"{self.table.check_failed(flag[0])}: an index is out of "
                                       "range (read at run time; the outputs are not valid)")

    def _run_kernel(self, k, fn, ptrs) -> None:
        """One kernel: a single call, or its outer range split across the pool (into
        ``k.threads`` chunks where its schedule names them, whatever its work)."""
        kargs = [ptrs[i] for i in k.buffers]
        n = k.trip_count
        if n <= 0:
            return
        chunks = min(n, k.threads or self.threads)
        small = k.work < self.min_parallel_work and not k.threads
        if not k.parallel or chunks <= 1 or small:
            fn(*kargs, 0, n)
            return
        bounds = [n * c // chunks for c in range(chunks + 1)]
        futures = [_pool().submit(fn, *kargs, lo, hi) for lo, hi in zip(bounds, bounds[1:])
                   if hi > lo]
        for f in futures:
            f.result()

    # ---- execution contexts -------------------------------------------------------------------
    @property
    def allocator(self) -> BufferAllocator:
        """The scratch allocator of the program's first context; others use its ``fork()``."""
        return self._allocator

    @allocator.setter
    def allocator(self, value: BufferAllocator) -> None:
        from .context import ContextPool
        self._allocator = value
        # an allocator that cannot fork (one arena, no copy) serializes the runs on one context
        limit = None if callable(getattr(value, "fork", None)) else 1
        self._contexts = ContextPool(self._make_context, limit)

    def _make_context(self, first: bool) -> "CpuContext":
        return CpuContext(self, self._allocator if first else self._allocator.fork())

    def new_context(self) -> "CpuContext":
        """A new execution context: its own scratch memory (a fork of the allocator)."""
        fork = getattr(self._allocator, "fork", None)
        if not callable(fork):
            raise CompileError(f"cpu: the allocator {type(self._allocator).__name__} has no "
                               "fork(), so it cannot give a second context its own memory")
        return CpuContext(self, fork())

    def stage(self, inputs: dict) -> tuple[dict, dict]:
        """(buffers, output views) for one run from host inputs; see :meth:`__call__`."""
        if not isinstance(inputs, dict):
            raise BindingError("inputs must be a dict name -> array")
        slots = {s.name: s for s in self.table.slots if s.kind == "arg"}
        unknown = sorted(set(inputs) - set(self.table.inputs))
        missing = [n for n in self.table.inputs if n not in inputs]
        if unknown or missing:
            raise BindingError(f"cpu program: missing inputs {missing}, unknown {unknown}; it "
                               f"takes {list(self.table.inputs)}")
        buffers, views = {}, {}
        for n in self.table.inputs + self.table.outputs:
            t = slots[n].type
            # outputs start as the interpreter's do (NaN for floats), so unwritten elements show
            x = np.asarray(inputs[n]) if n in inputs else allocate(t)
            if x.shape != t.shape or x.dtype != t.element.np_dtype:
                raise BindingError(f"input {n!r} is {x.dtype}{list(x.shape)}, expected {t}")
            if t.is_default_layout:
                buffers[n] = views[n] = np.array(x, order="C")
            else:  # the argument is a base pointer with a layout: scatter into a fresh base
                buffers[n] = np.zeros(max(t.span, 1), x.dtype)
                views[n] = restride(buffers[n], BufferType((buffers[n].size,), t.element), t)
                views[n][...] = x
        return buffers, views

    def __call__(self, inputs: dict, on_kernel=None, clock=None) -> dict:
        """Allocate the output arguments (``loop.outputs``; NaN-filled floats, as the interpreter's
        :func:`~ptxc.dialects.loop.run_main`), run, and return them by name."""
        buffers, views = self.stage(inputs)
        self.run(buffers, on_kernel, clock)
        return {n: np.array(views[n]) for n in self.table.outputs}


class CpuContext:
    """One execution context of a :class:`CpuProgram`: its own scratch allocator (so its own
    arena); one run at a time (a lock), any number of contexts at once."""

    def __init__(self, program: CpuProgram, allocator: BufferAllocator):
        self.program = program
        self.allocator = allocator
        self._lock = threading.Lock()

    def run(self, buffers: dict, on_kernel=None, clock=None) -> None:
        """:meth:`CpuProgram.run` on this context's memory."""
        with self._lock:
            self.program._run(self.allocator, buffers, on_kernel, clock)

    def __call__(self, inputs: dict, on_kernel=None, clock=None) -> dict:
        """:meth:`CpuProgram.__call__` on this context's memory."""
        buffers, views = self.program.stage(inputs)
        self.run(buffers, on_kernel, clock)
        return {n: np.array(views[n]) for n in self.program.table.outputs}
