"""The CUDA runtime: load a cuda Artifact's PTX onto the GPU and run its kernels.

    program = CudaProgram(artifact, artifact.memory_plan)   # touches no GPU: builds anywhere
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
   without an explicit wait; numba wraps the same handle (``cuda.external_stream``) for copies.
   CUDA graphs are captured on a second, non-blocking stream and launched on the first: a
   capture on a blocking stream fails as soon as another thread touches the legacy stream
   (``CUDA_ERROR_STREAM_CAPTURE_IMPLICIT``);
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
replays with one ``graph.launch(stream)`` — a fraction of a direct launch's host time per
kernel (docs/design.md). ``cuda_graph = False`` launches each kernel directly; the switch can be flipped
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

Modules: this one is the program (its checks, device setup, memory, the pool of contexts);
:mod:`ptxc.driver.cuda_context` runs an inference on one context; :mod:`ptxc.driver.cuda_device`
holds the device helpers and resource records both use.
"""

from __future__ import annotations

import os
import threading
import weakref

import numpy as np

from ..errors import BindingError, CompileError, DeviceError, OutOfMemoryError, PtxcError
from .cuda_context import CudaContext
from .cuda_device import (ALIGN, _align, _ContextState, _describe, _flush,  # noqa: F401
                          _is_oom, _Shared, arch_compatible, arch_number, launch_config,
                          load_kernel, release_retired, retire)
from .cuda_interop import DeviceInterop, InteropCounts

__all__ = ["CudaProgram", "CudaContext", "arch_number", "arch_compatible"]


class CudaProgram(DeviceInterop):
    """A cuda Artifact or PtxProgram (``ptx``, ``arch``, ``table``, ``globals``) and its memory
    plan, runnable on the GPU; see the module docstring. Construction checks the table (every
    kernel has its launch shape) and the plan (it places exactly the table's scratch slots),
    nothing more."""

    def __init__(self, ptx_program, plan, cuda_graph: bool = True, *, exact_arch: bool = False,
                 sync_each: bool | None = None):
        from ..codegen.memory_plan import buffers_from_slots
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
        self._io_cache = None  # DeviceInterop._io_slots
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
            # graphs are captured on a stream of their own, non-blocking: a capture on the
            # blocking stream is invalidated by any legacy-default-stream call of another
            # thread (numba's cuda.to_device: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT on the H200)
            st.capture_stream = cdev.create_stream(options=cc.StreamOptions(nonblocking=True))
            st.stream_handle = int(st.stream.handle)
            st.nstream = cuda.external_stream(st.stream_handle)
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
                st.flag_host = cuda.pinned_array(1, np.int32)
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
        from ..codegen.memory_plan import buffers_from_slots
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
        release_retired()
        with self._shared_lock:
            if self._shared is None:
                self._shared = self._setup()
                # a dropped program gives its module and weights back, at the next run of any
                # program (retire: never inside the garbage collector), not at exit (the
                # driver tears the context down then, and numba may be half gone)
                weakref.finalize(self, retire, self._shared).atexit = False
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
        release_retired()
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
