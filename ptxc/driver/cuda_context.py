"""Running one inference on one execution context of a :class:`~ptxc.driver.cuda.CudaProgram`:
copy the inputs in, launch every kernel on the context's stream (or replay its captured CUDA
graph), synchronize, read the error flag, copy the outputs out. The module docstring of
:mod:`ptxc.driver.cuda` describes the steps and the errors; the program (setup, device memory,
the pool of contexts) lives there.

Example::

    ctx = program.new_context()        # a CudaContext: nothing touches the GPU yet
    ctx({"x": x})                      # first run: stream, arena, bindings, graph; then runs
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

import numpy as np

from ..errors import BindingError, DeviceError, IndexOutOfRangeError, PtxcError
from .cuda_device import _ContextState, _describe, retire
from .cuda_interop import run_device

if TYPE_CHECKING:
    from .cuda import CudaProgram

__all__ = ["CudaContext"]


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
            weakref.finalize(self, retire, self._state).atexit = False
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
            gb = st.capture_stream.create_graph_builder()  # see CudaProgram: non-blocking
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
        """Wait for the inference and read the error flag: it is copied into pinned host memory
        behind the kernels, so one stream synchronize covers both (a set flag is cleared for
        the next run and raised as IndexOutOfRangeError naming the check)."""
        from numba.cuda.cudadrv import driver as drv
        value = 0
        try:
            if st.flag is not None:
                drv.device_to_host(st.flag_host, st.flag, 4, stream=st.nstream)
            st.nstream.synchronize()
            if st.flag is not None:
                value = int(st.flag_host[0])
            if value:
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
        from ..dialects.loop_memory import restride
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
            try:  # as bytes: numba's buffer protocol refuses ml_dtypes' bfloat16 ('E')
                for n, x in staged.items():
                    if x.nbytes:
                        drv.host_to_device(st.bindings[n], x.view(np.uint8), x.nbytes,
                                           stream=st.nstream)
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
                        drv.device_to_host(bases[n].view(np.uint8), st.bindings[n], s.nbytes,
                                           stream=st.nstream)
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
