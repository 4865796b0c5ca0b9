"""The CUDA runtime: load a PtxProgram's PTX onto the GPU and run its kernels.

    program = CudaProgram(ptx_program, memory_plan)    # touches no GPU: builds on any machine
    outputs = program({"x": x})                        # host arrays in, host arrays out
    outputs = program.run_device({"x": dx})            # device arrays in, fresh device arrays out
    program.cuda_graph = False                         # launch kernel by kernel instead

**Nothing touches the GPU until the first run.** A cuda engine compiles, reports its memory and
saves a plan on a machine without a GPU; running it there raises :class:`DeviceError` saying
there is no GPU (not a crash). The first run sets up, in this order, and each step that fails
frees what the earlier ones took:

1. the device: numba-cuda's primary context (``numba.cuda.current_context()``); the device's
   arch is checked against the PTX's (a PTX for a newer arch than the device, or an
   arch-specific ``sm_XXa`` PTX for another arch, cannot load; a plan asks for the same arch
   exactly, ``exact_arch``);
2. the module: ``ctx.create_module_ptx(ptx)`` (the driver JIT-compiles the PTX for the device)
   and one kernel per table entry (``module.get_function(name).kernel``, a ``cuda.core`` Kernel);
3. a ``cuda.core`` stream (``Device.create_stream``), blocking (``nonblocking=False``), so work
   a caller queued on the legacy default stream (numba's ``stream=0``) is ordered before ours
   without an explicit wait; numba wraps the same handle (``cuda.external_stream``) for copies;
4. device memory, three kinds, each one ``cuMemAlloc`` (numba ``device_array``): the **arena**
   of the memory plan (``plan.arena_bytes``; every ``loop.alloc`` slot is the base pointer plus
   its planned offset), the **weights** (every ``loop.global`` packed at 256-byte aligned offsets
   in one buffer, uploaded once with one copy) and the **bindings** (one engine-owned buffer per
   input and output, ``span`` elements of its dtype). The arena and the output buffers are
   filled with 0xFF bytes once (NaN for floats, -1 for ints), so a read of memory no kernel
   wrote shows in the outputs.

**One inference** (``run``): the inputs are copied host-to-device into the input buffers, the
kernels run in table order with each entry's ``grid``/``block`` and the kernel's dynamic shared
bytes (:func:`launch_config`), then the outputs are copied out to fresh host arrays, and the
stream is synchronized. (``run_device`` binds the caller's device memory into the kernels
instead, copying only what cannot be bound: :mod:`ptxc.driver.cuda_interop`.) Every pointer a
kernel gets is fixed at setup (arena, weights, binding buffers), so the launches of one
inference are the same every time: with ``cuda_graph`` (the default) they are captured once,
at the first run, into a CUDA graph (``stream.create_graph_builder()``) that every later run
replays with one ``graph.launch(stream)`` — about 1 µs a kernel instead of 6 measured on an H200
(DESIGN.md). ``cuda_graph = False`` launches each kernel directly; the switch can be flipped
between runs (the graph, once built, is kept).

**Errors.** Any CUDA failure is a :class:`DeviceError` naming the step (module load, a launch
with its kernel, layer, grid and block, the synchronize). Kernels run asynchronously, so a fault
inside one (an illegal address) surfaces at the synchronize, which cannot name it; with
``PTXC_CUDA_SYNC=1`` in the environment (or ``sync_each=True``) every launch is followed by a
synchronize, so the error names the kernel (no graph then). Such a fault leaves the CUDA context
unusable for the rest of the process (the driver's rule, not ours). A failed allocation is an
:class:`OutOfMemoryError` with the bytes requested, the bytes free (``cuMemGetInfo``) and the
engine's total; everything the engine allocated is freed before it is raised (numba's pending
deallocations are flushed), so the process can go on to run a smaller engine.

**Run-time checks.** A program with index checks has an error flag (4 bytes of the arena, see
:mod:`ptxc.lower.loop_to_llvm`): zeroed at the context's setup, read after each inference (4
bytes device-to-host on the context's stream), and cleared again when set, before the
IndexOutOfRangeError naming the check is raised.

**Concurrency.** The module, its kernels and the weights are the program's, shared and
read-only. Everything one inference writes belongs to an execution context
(:class:`CudaContext`, TensorRT's IExecutionContext): its own stream, arena, binding buffers,
launch arguments and CUDA graph, set up at its first run (steps 3 and 4 above, per context).
A context runs one inference at a time (a lock); ``program(inputs)``/``run_device`` take a free
context from the program's pool (:mod:`ptxc.driver.context`) and create one when all are busy,
so N threads run N inferences at once on N streams, each on its own memory: correct by
construction, as no two runs in flight share a pointer they write. Each context costs the
arena plus the bindings in device memory (``device_bytes`` counts the first).
"""

from __future__ import annotations

import os
import re
import threading
import weakref

import numpy as np

from ..errors import (BindingError, CompileError, DeviceError, IndexOutOfRangeError,
                      OutOfMemoryError, PtxcError)
from .cuda_graphs import GraphCache
from .cuda_interop import DeviceInterop, InteropCounts, run_device

__all__ = ["CudaProgram", "arch_number", "arch_compatible"]

#: alignment of every device buffer placed in a shared allocation (weights, arena slots)
ALIGN = 256


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def arch_number(arch: str) -> tuple[int, str]:
    """``"sm_90a"`` -> ``(90, "a")``; a name that is no ``sm_NN[a|f]`` is a CompileError."""
    m = re.fullmatch(r"sm_(\d+)([af]?)", arch or "")
    if not m:
        raise CompileError(f"cuda: {arch!r} is not a CUDA arch (expected sm_NN, e.g. sm_90)")
    return int(m.group(1)), m.group(2)


def arch_compatible(ptx_arch: str, device_arch: str, exact: bool = False) -> bool:
    """Whether PTX built for ``ptx_arch`` loads on a device of ``device_arch``: PTX is forward
    compatible (the driver JIT-compiles sm_80 PTX for an sm_90 device), not backward; an
    arch-specific target (``sm_90a``) runs on that arch only. ``exact`` asks for the same arch."""
    if exact:
        return ptx_arch == device_arch
    (want, suffix), (have, _) = arch_number(ptx_arch), arch_number(device_arch)
    return want == have if suffix else want <= have


def load_kernel(module, info):
    """The cuda.core kernel of table entry ``info`` from a loaded numba-cuda ``module``; a kernel
    that launches with more than 48 KiB of dynamic shared memory is allowed that much first
    (CUDA's opt-in: ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``)."""
    fn = module.get_function(info.name)
    if info.dynamic_shared > 48 * 1024:
        from numba.cuda.cudadrv.driver import binding, driver
        attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        driver.cuKernelSetAttribute(attr, int(info.dynamic_shared), fn.handle, fn.device.id)
    return fn.kernel


def launch_config(info):
    """The cuda.core LaunchConfig of table entry ``info`` (grid, block, dynamic shared bytes)."""
    import cuda.core as cc
    return cc.LaunchConfig(grid=tuple(info.grid), block=tuple(info.block),
                           shmem_size=int(info.dynamic_shared))


class _Shared:
    """What every context of a program shares, set up at the first run: the device, the loaded
    module and its kernels, and the weights (see the module docstring)."""

    def __init__(self):
        self.cuda = None          # the numba.cuda module
        self.cc = None            # the cuda.core module
        self.ctx = None           # numba Context
        self.dev_id = None        # the device ordinal
        self.module = None        # numba CudaPythonModule (a weak proxy; the context owns it)
        self.kernels = []         # one cuda.core Kernel per table entry
        self.weights = None       # numba DeviceNDArray (uint8)
        self.device_arch = None

    def release(self) -> None:
        """Unload the module and drop the weights (flushed now, not at numba's next flush)."""
        if self.module is not None and self.ctx is not None:
            try:
                self.ctx.unload_module(self.module)
            except Exception:  # noqa: BLE001  (teardown of a possibly broken context)
                pass
        self.module = None
        self.kernels = []
        self.weights = None
        _flush(self.ctx)


class _ContextState:
    """What one execution context owns on the device: its stream, scratch arena, binding
    buffers, the pointer arguments of each launch into them, and its captured CUDA graph."""

    def __init__(self, shared: _Shared):
        self.shared = shared
        self.configs = []         # one cuda.core LaunchConfig per table entry
        self.args = []            # one tuple of pointer ints per table entry
        self.stream = None        # cuda.core Stream
        self.nstream = None       # numba Stream over the same handle
        self.arena = None         # numba DeviceNDArray (uint8)
        self.bindings = {}        # name -> numba DeviceNDArray (uint8), context-owned
        self.ptrs = []            # the pointer of each table slot (args: the engine's bindings)
        self.graphs = GraphCache()  # captured CUDA graphs by pointer set (None: the bindings')
        self.last = (None, None)  # (args, graph key) of the last inference: launch_times replays it
        self.flag = None          # the error flag: a 4-byte view of the arena (None: no checks)

    def release(self) -> None:
        """Free what this context holds: graphs, stream, device memory."""
        self.graphs.close()
        try:
            if self.stream is not None:
                self.stream.close()
        except Exception:  # noqa: BLE001  (teardown of a possibly broken context)
            pass
        self.stream = self.nstream = None
        self.configs, self.args, self.ptrs, self.last = [], [], [], (None, None)
        self.arena = self.flag = None
        self.bindings = {}
        _flush(self.shared.ctx)


def _flush(ctx) -> None:
    """Free numba's pending deallocations now."""
    if ctx is not None:
        try:
            ctx.memory_manager.deallocations.clear()
        except Exception:  # noqa: BLE001
            pass


def _is_oom(e: Exception) -> bool:
    code = getattr(e, "code", None)
    return "OUT_OF_MEMORY" in str(getattr(code, "name", code)) or "OUT_OF_MEMORY" in str(e)


def _describe(e: Exception) -> str:
    return f"{type(e).__name__}: {e}"


class CudaProgram(DeviceInterop):
    """A PtxProgram (``ptx``, ``arch``, ``table``, ``globals``) and its memory plan, runnable on
    the GPU; see the module docstring. Construction checks the table (every kernel has its
    launch shape) and the plan (it places exactly the table's scratch slots), nothing more."""

    def __init__(self, ptx_program, plan, cuda_graph: bool = True, *, exact_arch: bool = False,
                 sync_each: bool | None = None):
        from .memory_plan import buffers_from_slots
        self.ptx_program = ptx_program
        self.ptx: str = ptx_program.ptx
        self.arch: str = ptx_program.arch
        arch_number(self.arch)
        self.table = ptx_program.table
        self.plan = plan
        self.cuda_graph = bool(cuda_graph)
        self.exact_arch = exact_arch
        if sync_each is None:
            sync_each = os.environ.get("PTXC_CUDA_SYNC", "") not in ("", "0")
        self.sync_each = bool(sync_each)
        for k in self.table.kernels:
            for what in ("grid", "block"):
                v = getattr(k, what, None)
                if not (isinstance(v, tuple) and len(v) == 3
                        and all(isinstance(d, int) and d >= 1 for d in v)):
                    raise CompileError(f"cuda: kernel {k.name} ({k.loc}) has {what} {v!r}, not "
                                       "3 ints >= 1 (was the module mapped with map-to-gpu?)")
            if int(np.prod(k.block)) > 1024:
                raise CompileError(f"cuda: kernel {k.name} ({k.loc}) has block {k.block}: more "
                                   "than 1024 threads")
        allocs = [s for s in self.table.slots if s.kind == "alloc"]
        want = [(b.name, b.size, b.first, b.last) for b in buffers_from_slots(allocs)]
        have = [(b.name, b.size, b.first, b.last) for b in plan.buffers]
        if want != have:
            raise CompileError("cuda: the memory plan does not place the kernel table's scratch "
                               "buffers (name, bytes, first, last kernel)")
        # weights: packed, each at an aligned offset of one buffer
        self._weights: dict[str, np.ndarray] = {}
        self._weight_offsets: dict[str, int] = {}
        at = 0
        for s in self.table.slots:
            if s.kind != "global":
                continue
            w = np.ascontiguousarray(ptx_program.globals[s.name]).reshape(-1)
            if w.dtype != np.dtype(s.dtype) or w.size < s.span:
                raise CompileError(f"cuda: weight {s.name!r} is {w.dtype}[{w.size}]; its slot "
                                   f"needs {s.span} of {s.dtype}")
            self._weights[s.name] = w
            self._weight_offsets[s.name] = at
            at = _align(at + w.nbytes)
        self.weights_bytes = at
        self._arg_slots = {s.name: s for s in self.table.slots if s.kind == "arg"}
        self.io_bytes = sum(_align(max(s.nbytes, 1)) for s in self._arg_slots.values())
        from .context import ContextPool
        self._error_offset = None  # the error flag's offset in the arena (run-time checks)
        if self.table.error_slot is not None:
            b = self._slot_buffers()[self.table.error_slot]
            if plan.live[b.name] is not None:
                self._error_offset = plan.offsets[b.name]
        self._shared: _Shared | None = None
        self._shared_lock = threading.Lock()
        self._contexts = ContextPool(lambda first: CudaContext(self))
        #: what run_device did with the caller's memory (bound directly or copied), counted
        self.interop = InteropCounts()

    # ---- facts -----------------------------------------------------------------------------
    @property
    def device_bytes(self) -> int:
        """Device memory the program allocates at its first run: arena, weights and binding
        buffers (each rounded to 256 bytes; the module's code is the driver's). Each further
        execution context adds its own arena and bindings."""
        return _align(max(self.plan.arena_bytes, 1)) + self.weights_bytes + self.io_bytes

    @property
    def ready(self) -> bool:
        """Whether the device setup has been done (a first run happened)."""
        return self._shared is not None

    # ---- setup -----------------------------------------------------------------------------
    def _setup(self) -> _Shared:
        try:
            from numba import cuda
            import cuda.core as cc
        except Exception as e:  # noqa: BLE001  (a missing or broken CUDA Python stack)
            raise DeviceError(f"cuda engine: the CUDA Python packages do not import "
                              f"({_describe(e)}); numba-cuda and cuda-core are needed to run "
                              "it") from None
        try:
            available = cuda.is_available()
        except Exception as e:  # noqa: BLE001
            raise DeviceError(f"cuda engine: cannot ask for a CUDA GPU ({_describe(e)})") from None
        if not available:
            raise DeviceError("cuda engine: no CUDA GPU is available on this machine (no driver "
                              "or no device); it compiles and saves here, and runs on a machine "
                              "with a GPU")
        sh = _Shared()
        sh.cuda, sh.cc = cuda, cc
        try:
            self._setup_into(sh)
        except BaseException:
            sh.release()
            raise
        return sh

    def _setup_into(self, sh: _Shared) -> None:
        cuda = sh.cuda
        step = "context"
        try:
            sh.ctx = cuda.current_context()
            dev = cuda.get_current_device()
            sh.dev_id = dev.id
            major, minor = dev.compute_capability
            sh.device_arch = f"sm_{major}{minor}"
        except Exception as e:  # noqa: BLE001
            raise DeviceError(f"cuda engine: cannot open the CUDA device ({_describe(e)})") \
                from None
        if not arch_compatible(self.arch, sh.device_arch, self.exact_arch):
            raise DeviceError(f"cuda engine: its PTX is for {self.arch}"
                              + (" (a plan runs on its own arch only)" if self.exact_arch else "")
                              + f"; this GPU is {sh.device_arch}: recompile with "
                              f"arch={sh.device_arch!r}")
        try:
            step = "loading the PTX module"
            sh.module = sh.ctx.create_module_ptx(self.ptx)
            by_name = {}
            for k in self.table.kernels:
                step = f"looking up kernel {k.name}"
                if k.name not in by_name:
                    by_name[k.name] = load_kernel(sh.module, k)
                sh.kernels.append(by_name[k.name])
        except PtxcError:
            raise
        except Exception as e:  # noqa: BLE001  (CUDA errors of numba-cuda and cuda.core)
            raise DeviceError(f"cuda engine: {step} failed on {sh.device_arch} "
                              f"({_describe(e)})") from None
        sh.weights = self._alloc(sh, max(self.weights_bytes, 1), "the weights", sh.release)
        from numba.cuda.cudadrv import driver as drv
        try:
            if self.weights_bytes:
                host = np.zeros(self.weights_bytes, np.uint8)
                for name, w in self._weights.items():
                    o = self._weight_offsets[name]
                    host[o:o + w.nbytes] = w.view(np.uint8)
                drv.host_to_device(sh.weights, host, self.weights_bytes)
        except Exception as e:  # noqa: BLE001
            raise DeviceError(f"cuda engine: uploading the weights failed ({_describe(e)})") \
                from None

    def _setup_context(self, sh: _Shared) -> _ContextState:
        """A context's stream, arena, bindings and launch arguments (freed again on failure)."""
        st = _ContextState(sh)
        try:
            self._setup_context_into(st)
        except BaseException:
            st.release()
            raise
        return st

    def _setup_context_into(self, st: _ContextState) -> None:
        sh = st.shared
        cuda, cc = sh.cuda, sh.cc
        try:
            cdev = cc.Device(sh.dev_id)
            cdev.set_current()
            st.stream = cdev.create_stream(options=cc.StreamOptions(nonblocking=False))
            st.nstream = cuda.external_stream(int(st.stream.handle))
        except Exception as e:  # noqa: BLE001
            raise DeviceError(f"cuda engine: creating the stream failed on {sh.device_arch} "
                              f"({_describe(e)})") from None
        st.arena = self._alloc(sh, max(self.plan.arena_bytes, 1), "the scratch arena",
                               st.release)
        for name, s in self._arg_slots.items():
            st.bindings[name] = self._alloc(sh, max(s.nbytes, 1), f"binding {name!r}",
                                            st.release)
        from numba.cuda.cudadrv import driver as drv
        try:
            drv.device_memset(st.arena, 0xFF, st.arena.nbytes, stream=st.nstream)
            for name in self.table.outputs:
                b = st.bindings[name]
                drv.device_memset(b, 0xFF, b.nbytes, stream=st.nstream)
            if self._error_offset is not None:  # the error flag starts clear
                st.flag = st.arena[self._error_offset:self._error_offset + 4]
                drv.device_memset(st.flag, 0, 4, stream=st.nstream)
            st.nstream.synchronize()
        except Exception as e:  # noqa: BLE001
            raise DeviceError(f"cuda engine: filling the arena and outputs with 0xFF failed "
                              f"({_describe(e)})") from None
        # the launches: configs and pointer arguments, fixed from here on
        arena = st.arena.device_ctypes_pointer.value
        weights = sh.weights.device_ctypes_pointer.value
        ptrs = []
        for s, b in zip(self.table.slots, self._slot_buffers()):
            if s.kind == "arg":
                ptrs.append(st.bindings[s.name].device_ctypes_pointer.value)
            elif s.kind == "global":
                ptrs.append(weights + self._weight_offsets[s.name])
            elif b is None or self.plan.live[b.name] is None or b.size == 0:
                ptrs.append(arena)  # never dereferenced: an unused or empty scratch slot
            else:
                ptrs.append(arena + self.plan.offsets[b.name])
        st.ptrs = ptrs
        for k in self.table.kernels:
            st.configs.append(launch_config(k))
            st.args.append(tuple(ptrs[i] for i in k.buffers))

    def _slot_buffers(self) -> list:
        """The planner's record of each slot (None for args and globals), in slot order."""
        from .memory_plan import buffers_from_slots
        allocs = iter(buffers_from_slots([s for s in self.table.slots if s.kind == "alloc"]))
        return [next(allocs) if s.kind == "alloc" else None for s in self.table.slots]

    def _alloc(self, sh: _Shared, nbytes: int, what: str, release):
        try:
            return sh.cuda.device_array(nbytes, np.uint8)
        except Exception as e:  # noqa: BLE001
            if not _is_oom(e):
                raise DeviceError(f"cuda engine: allocating {nbytes:,} bytes for {what} failed "
                                  f"({_describe(e)})") from None
            release()  # free ours first, so "free" counts what the device really has
            try:
                free = f"{sh.ctx.get_memory_info().free:,}"
            except Exception:  # noqa: BLE001
                free = "an unknown number of"
            raise OutOfMemoryError(f"cuda engine: out of device memory allocating {what}: "
                                   f"requested {nbytes:,} bytes, {free} bytes free (the engine "
                                   f"needs {self.device_bytes:,} bytes in all: arena "
                                   f"{self.plan.arena_bytes:,}, weights {self.weights_bytes:,}, "
                                   f"bindings {self.io_bytes:,}); nothing stays allocated") \
                from None

    def _ready_shared(self) -> _Shared:
        with self._shared_lock:
            if self._shared is None:
                self._shared = self._setup()
                # a dropped program gives its module and weights back (not at exit: the
                # driver tears the context down then, and numba may be half gone)
                weakref.finalize(self, _Shared.release, self._shared).atexit = False
            return self._shared

    def _drop_shared_if_idle(self) -> None:
        """After a failed context setup: free the module and weights too when no context is
        set up, so a failed first run leaves the device as it found it."""
        with self._shared_lock:
            if self._shared is None:
                return
            if any(c._state is not None for c in self._contexts.contexts):
                return
            self._shared.release()
            self._shared = None

    def release(self) -> None:
        """Free the device resources now (the next run sets them up again); dropping the
        program does it too."""
        for c in self._contexts.clear():
            c.release()
        with self._shared_lock:
            if self._shared is not None:
                self._shared.release()
                self._shared = None

    def new_context(self) -> "CudaContext":
        """A new execution context: its own stream, arena, bindings and graph (set up at its
        first run); the module and weights are the program's."""
        return CudaContext(self)

    # ---- running ---------------------------------------------------------------------------
    def __call__(self, inputs: dict) -> dict:
        """One inference from host arrays (by name, every input) to fresh host arrays; safe
        from many threads (each run takes an execution context of its own)."""
        with self._contexts.take() as ctx:
            return ctx(inputs)

    def run_device(self, inputs: dict, out: dict | None = None, stream=None) -> dict:
        """One inference from device arrays to device arrays (see
        :meth:`CudaContext.run_device`); safe from many threads."""
        with self._contexts.take() as ctx:
            return ctx.run_device(inputs, out=out, stream=stream)

    def _check_names(self, inputs, kind: str) -> None:
        """``inputs`` is a dict holding exactly the program's inputs (a BindingError otherwise)."""
        if not isinstance(inputs, dict):
            raise BindingError(f"inputs must be a dict name -> {kind}")
        unknown = sorted(set(inputs) - set(self.table.inputs))
        missing = [n for n in self.table.inputs if n not in inputs]
        if unknown or missing:
            raise BindingError(f"cuda program: missing inputs {missing}, unknown {unknown}; it "
                               f"takes {list(self.table.inputs)}")


class CudaContext:
    """One execution context of a :class:`CudaProgram` (TensorRT's IExecutionContext): its own
    stream, scratch arena, binding buffers and CUDA graph, set up at its first run. One inference
    at a time on a context (a lock); contexts run at once from several threads, each on its own
    stream, sharing the program's module and weights (read-only)."""

    def __init__(self, program: CudaProgram):
        self.program = program
        self._state: _ContextState | None = None
        self._lock = threading.Lock()

    def _ready(self) -> _ContextState:
        p = self.program
        sh = p._ready_shared()
        if self._state is None:
            try:
                self._state = p._setup_context(sh)
            except BaseException:
                p._drop_shared_if_idle()
                raise
            weakref.finalize(self, _ContextState.release, self._state).atexit = False
        else:
            sh.cuda.current_context()  # current on this thread too
        return self._state

    def release(self) -> None:
        """Free this context's stream, arena, bindings and graph now."""
        with self._lock:
            if self._state is not None:
                self._state.release()
                self._state = None

    def _launch_all(self, st: _ContextState, args: list | None = None, key=None) -> None:
        """Queue the kernels of one inference on the stream: ``args`` (one pointer tuple per
        kernel; the engine's bindings' when None) under graph key ``key`` (the pointer set; None
        for the bindings'), replaying a CUDA graph when enabled and one is due
        (:class:`~ptxc.driver.cuda_graphs.GraphCache`), else launching kernel by kernel."""
        p = self.program
        sh = st.shared
        cc = sh.cc
        args = st.args if args is None else args
        st.last = (args, key)
        if p.cuda_graph and not p.sync_each:
            graph = st.graphs.lookup(key, lambda: self._capture(st, args), eager=key is None)
            if graph is not None:
                try:
                    graph.launch(st.stream)
                except Exception as e:  # noqa: BLE001
                    raise DeviceError(f"cuda engine: launching the CUDA graph failed "
                                      f"({_describe(e)})") from None
                return
        for k, kern, cfg, a in zip(p.table.kernels, sh.kernels, st.configs, args):
            _launch_one(cc, st.stream, k, kern, cfg, a, "launching")
            if p.sync_each:
                try:
                    st.stream.sync()
                except Exception as e:  # noqa: BLE001
                    raise DeviceError(f"cuda engine: kernel {k.name} ({k.loc}, grid {k.grid}, "
                                      f"block {k.block}) failed while running "
                                      f"({_describe(e)})") from None

    def _capture(self, st: _ContextState, args: list) -> tuple:
        """(graph, builder): the launches with ``args`` captured into a CUDA graph."""
        p = self.program
        sh = st.shared
        gb = graph = None
        try:
            gb = st.stream.create_graph_builder()
            gb.begin_building()
            for k, kern, cfg, a in zip(p.table.kernels, sh.kernels, st.configs, args):
                _launch_one(sh.cc, gb, k, kern, cfg, a, "capturing")
            gb.end_building()
            graph = gb.complete()
            p.interop.add(graphs_captured=1)
            return graph, gb
        except PtxcError:
            raise
        except Exception as e:  # noqa: BLE001
            raise DeviceError(f"cuda engine: capturing the CUDA graph of "
                              f"{len(p.table.kernels)} kernels failed "
                              f"({_describe(e)}); cuda_graph=False launches directly") from None
        finally:
            if gb is not None and graph is None:  # a failed capture: end it
                try:
                    if gb.is_building:
                        gb.end_building()
                    gb.close()
                except Exception:  # noqa: BLE001
                    pass

    def _sync(self, st: _ContextState) -> None:
        """Wait for the inference; then read the error flag (a set flag is cleared for the next
        run and raised as IndexOutOfRangeError naming the check)."""
        try:
            st.nstream.synchronize()
            if st.flag is None:
                return
            flag = st.flag.copy_to_host(stream=st.nstream)
            st.nstream.synchronize()
            value = int(flag.view(np.int32)[0])
            if value:
                from numba.cuda.cudadrv import driver as drv
                drv.device_memset(st.flag, 0, 4, stream=st.nstream)
                st.nstream.synchronize()
        except Exception as e:  # noqa: BLE001
            raise DeviceError(f"cuda engine: the inference failed on the device "
                              f"({_describe(e)}); set PTXC_CUDA_SYNC=1 to find the kernel") \
                from None
        if value:
            raise IndexOutOfRangeError(f"{self.program.table.check_failed(value)}: an index is "
                                       "out of range (read at run time; the outputs are not "
                                       "valid)")

    def __call__(self, inputs: dict) -> dict:
        """One inference from host arrays (by name, every input) to fresh host arrays."""
        from ..dialects.loop import restride
        from ..ir.types import BufferType
        p = self.program
        p._check_names(inputs, "array")
        staged = {}
        for n in p.table.inputs:
            s = p._arg_slots[n]
            t = s.type
            x = np.asarray(inputs[n])
            if x.shape != t.shape or x.dtype != np.dtype(s.dtype):
                raise BindingError(f"input {n!r} is {x.dtype}{list(x.shape)}, expected {t}")
            if t.is_default_layout:
                staged[n] = np.ascontiguousarray(x).reshape(-1)
            else:  # the binding is a base pointer with a layout: scatter into a host base
                base = np.zeros(max(s.span, 1), x.dtype)
                restride(base, BufferType((base.size,), t.element), t)[...] = x
                staged[n] = base
        with self._lock:
            st = self._ready()
            from numba.cuda.cudadrv import driver as drv
            try:
                for n, x in staged.items():
                    if x.nbytes:
                        drv.host_to_device(st.bindings[n], x, x.nbytes, stream=st.nstream)
            except Exception as e:  # noqa: BLE001
                raise DeviceError(f"cuda engine: copying the inputs to the device failed "
                                  f"({_describe(e)})") from None
            self._launch_all(st)
            bases = {}
            try:
                for n in p.table.outputs:
                    s = p._arg_slots[n]
                    bases[n] = np.empty(max(s.span, 1), np.dtype(s.dtype))
                    if s.nbytes:
                        drv.device_to_host(bases[n], st.bindings[n], s.nbytes, stream=st.nstream)
            except Exception as e:  # noqa: BLE001
                raise DeviceError(f"cuda engine: the inference or the copy of its outputs "
                                  f"failed ({_describe(e)}); set PTXC_CUDA_SYNC=1 to find the "
                                  "kernel") from None
            self._sync(st)
        out = {}
        for n in p.table.outputs:
            t = p._arg_slots[n].type
            base = bases[n]
            if t.is_default_layout:
                out[n] = base[:t.size].reshape(t.shape)
            else:
                out[n] = np.array(restride(base, BufferType((base.size,), t.element), t))
        return out

    def run_device(self, inputs: dict, out: dict | None = None, stream=None) -> dict:
        """One inference from device arrays to device arrays, on the caller's memory where it
        can be bound into the kernels (:func:`ptxc.driver.cuda_interop.run_device`)."""
        return run_device(self, inputs, out, stream)


def _launch_one(cc, stream, k, kern, cfg, args, doing: str) -> None:
    try:
        cc.launch(stream, cfg, kern, *args)
    except Exception as e:  # noqa: BLE001
        raise DeviceError(f"cuda engine: {doing} kernel {k.name} ({k.loc}, grid {k.grid}, "
                          f"block {k.block}, schedule {k.schedule}) failed "
                          f"({_describe(e)})") from None
