"""The device side of the CUDA runtime: arch compatibility, loading a kernel and its launch
configuration from the table, and the device resources a program shares (:class:`_Shared`: the
device, the loaded module, the weights) and one execution context owns (:class:`_ContextState`:
stream, arena, bindings, launch arguments, graphs), with their release. Split from
:mod:`ptxc.driver.cuda` (the program: setup and contexts) and :mod:`ptxc.driver.cuda_context`
(running an inference on one context).

Example: ``arch_compatible("sm_80", "sm_90")`` is True (PTX is forward compatible: the driver
JIT-compiles it for the newer device); ``arch_compatible("sm_90a", "sm_100")`` is False (an
``a`` arch's PTX runs only on that arch).
"""

from __future__ import annotations

import collections

from ..target import arch_number
from .cuda_graphs import GraphCache

__all__ = ["ALIGN", "arch_number", "arch_compatible", "load_kernel", "launch_config", "retire",
           "release_retired"]

#: alignment of every device buffer placed in a shared allocation (weights, arena slots)
ALIGN = 256


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def arch_compatible(ptx_arch: str, device_arch: str, exact: bool = False) -> bool:
    """Whether PTX built for ``ptx_arch`` loads on a device of ``device_arch``: PTX is forward
    compatible (the driver JIT-compiles sm_80 PTX for an sm_90 device), not backward; an
    arch-specific target (``sm_90a``) runs on that arch only. ``exact`` asks for the device's
    own arch: the same number (a device reports ``sm_90``; a plan with a wgmma kernel was
    built for ``sm_90a``, which is that device's)."""
    (want, suffix), (have, _) = arch_number(ptx_arch), arch_number(device_arch)
    if exact or suffix:
        return want == have
    return want <= have


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
    """The cuda.core LaunchConfig of table entry ``info`` (grid, block, dynamic shared bytes;
    programmatic stream serialization where the kernel is ``pdl``: it waits for the kernels
    before it itself, gpu.launch's docstring)."""
    import cuda.core as cc
    pdl = {"programmatic_stream_serialization": True} if info.pdl else {}
    return cc.LaunchConfig(grid=tuple(info.grid), block=tuple(info.block),
                           shmem_size=int(info.dynamic_shared), **pdl)


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
        self.live_states = 0      # context states set up over this and not yet released

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
        self.stream = None        # cuda.core Stream (blocking: ordered after the legacy stream)
        self.capture_stream = None  # cuda.core Stream (non-blocking) that graphs are captured on
        self.nstream = None       # numba Stream over the same handle
        self.arena = None         # numba DeviceNDArray (uint8)
        self.bindings = {}        # name -> numba DeviceNDArray (uint8), context-owned
        self.ptrs = []            # the pointer of each table slot (args: the engine's bindings)
        self.graphs = GraphCache()  # captured CUDA graphs by pointer set (None: the bindings')
        self.last = (None, None)  # (args, graph key) of the last inference: launch_times replays it
        self.flag = None          # the error flag: a 4-byte view of the arena (None: no checks)
        self.flag_host = None     # numba pinned int32[1] the flag is copied into after each run
        self.stream_handle = 0    # int(stream.handle): the CUstream of the driver calls
        self.bound = {}           # pointer set -> cuda_interop.Binding (run_device)
        self.foreign = {}         # CUstream handle -> cuda.core Stream (producers' streams)
        self.released = False
        shared.live_states += 1

    def foreign_stream(self, handle: int):
        """A cuda.core Stream over another library's ``handle`` (not owned: never closed),
        kept for the next run (at most 16: a caller creating streams does not grow this)."""
        s = self.foreign.get(handle)
        if s is None:
            if len(self.foreign) >= 16:
                self.foreign.clear()
            s = self.foreign[handle] = self.shared.cc.Stream.from_handle(int(handle))
        return s

    def release(self) -> None:
        """Free what this context holds: graphs, stream, device memory (once; a second call
        does nothing)."""
        if self.released:
            return
        self.released = True
        self.shared.live_states -= 1
        self.graphs.close()
        for stream in (self.stream, self.capture_stream):
            try:
                if stream is not None:
                    stream.close()
            except Exception:  # noqa: BLE001  (teardown of a possibly broken context)
                pass
        self.stream = self.nstream = self.capture_stream = None
        self.configs, self.args, self.ptrs, self.last = [], [], [], (None, None)
        self.arena = self.flag = self.flag_host = None
        self.bound, self.foreign = {}, {}
        self.bindings = {}
        _flush(self.shared.ctx)


#: states whose owner the garbage collector dropped, freed at the next safe point
_RETIRED: collections.deque = collections.deque()


def retire(state) -> None:
    """The finalizer of a dropped program (``state``: its :class:`_Shared`) or context (its
    :class:`_ContextState`): queue it, call no driver function. A program and its contexts
    reference each other, so the cyclic garbage collector drops them together, at any
    allocation of any thread, and runs their finalizers in no set order: a module unloaded
    before the graphs and stream that launch its kernels were destroyed, from inside the
    collector, crashed the process (a segfault while 'Garbage-collecting' in a compile on the
    H200). numba defers its own frees the same way. ``deque.append`` takes no lock, so a
    collection that interrupts a drain cannot deadlock."""
    _RETIRED.append(state)


def release_retired() -> None:
    """Free what :func:`retire` queued, contexts before their program's module (a program's
    :class:`_Shared` waits while a context state set up over it is live). Called where the
    runtime is about to use the device anyway (a run, an explicit release), outside the
    garbage collector."""
    items = []
    while _RETIRED:
        try:
            items.append(_RETIRED.popleft())
        except IndexError:  # another thread drained it meanwhile
            break
    for st in items:
        if isinstance(st, _ContextState):
            st.release()
    for st in items:
        if isinstance(st, _Shared):
            if st.live_states > 0:
                _RETIRED.append(st)   # a context over it is still set up: later
            else:
                st.release()


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
