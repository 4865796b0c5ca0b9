"""What :class:`~ptxc.driver.cuda.CudaProgram` offers beyond running: per-kernel and per-run
device times for ``ptxc bench`` (CUDA timing events), and the views it takes of other
libraries' device memory and streams for ``run_device`` (``__cuda_array_interface__``,
``__dlpack__``, ``__cuda_stream__``, torch and numba streams). A mixin, so that the runtime
module keeps to running; it uses the program's execution contexts and launch helpers.
"""

from __future__ import annotations

import numpy as np

from ..errors import BindingError, PtxcError


def describe(e: Exception) -> str:
    from .cuda import _describe
    return _describe(e)


class DeviceInterop:
    # ---- profiling (ptxc bench) -----------------------------------------------------------
    def kernel_times(self, inputs: dict) -> list[tuple[float, float]]:
        """(start, duration) in milliseconds of device time of each kernel, in table order, the
        start counted from the first kernel's: one inference from host arrays sets up and fills
        the input bindings of an execution context, then its kernels are launched once more one
        by one (no graph), each between two timing events on its stream."""
        from .cuda import _launch_one
        with self._contexts.take() as ctx:
            ctx(inputs)
            with ctx._lock:
                st = ctx._ready()
                sh = st.shared
                opts = sh.cc.EventOptions(timing_enabled=True)
                events = [st.stream.record(options=opts)]
                for k, kern, cfg, args in zip(self.table.kernels, sh.kernels, st.configs,
                                              st.args):
                    _launch_one(sh.cc, st.stream, k, kern, cfg, args, "profiling")
                    events.append(st.stream.record(options=opts))
                ctx._sync(st)
                return [(float(a - events[0]), float(b - a)) for a, b in zip(events, events[1:])]

    def launch_times(self, runs: int) -> list[float]:
        """Milliseconds of device time of ``runs`` inferences on the inputs already bound (by an
        earlier run, on the pool's most recently used context): each whole launch sequence (the
        graph, or the kernels) between two timing events, so the host's share of a run's latency
        is what these do not cover."""
        with self._contexts.take() as ctx:
            with ctx._lock:
                st = ctx._ready()
                opts = st.shared.cc.EventOptions(timing_enabled=True)
                pairs = []
                for _ in range(runs):
                    e0 = st.stream.record(options=opts)
                    ctx._launch_all(st)
                    pairs.append((e0, st.stream.record(options=opts)))
                ctx._sync(st)
                return [float(b - a) for a, b in pairs]

    def _device_view(self, st: object, n: str, x, what: str):
        """A numba device array over ``x``'s memory (no copy), checked against binding ``n``."""
        cuda = st.cuda
        s = self._arg_slots[n]
        try:
            if hasattr(x, "__cuda_array_interface__"):
                v = cuda.as_cuda_array(x)  # synchronizes the stream it names, if any
            elif hasattr(x, "__dlpack__"):
                from cuda.core.utils import StridedMemoryView
                m = StridedMemoryView(x, stream_ptr=-1)
                if not m.is_device_accessible:
                    raise BindingError(f"run_device: {what} {n!r} is host memory (DLPack); "
                                       "run() takes host arrays")
                desc = {"shape": tuple(m.shape), "strides": m.strides and tuple(
                    k * np.dtype(m.dtype).itemsize for k in m.strides),
                        "typestr": np.dtype(m.dtype).str, "data": (int(m.ptr), False),
                        "version": 3}
                v = cuda.from_cuda_array_interface(desc, owner=x, sync=False)
            else:
                raise BindingError(f"run_device: {what} {n!r} is a {type(x).__name__}, not a "
                                   "device array (__cuda_array_interface__ or __dlpack__); "
                                   "run() takes host arrays")
        except PtxcError:
            raise
        except Exception as e:  # noqa: BLE001
            raise BindingError(f"run_device: {what} {n!r}: its device array interface is not "
                               f"usable ({describe(e)})") from None
        if tuple(v.shape) != tuple(s.shape) or v.dtype != np.dtype(s.dtype):
            raise BindingError(f"run_device: {what} {n!r} is {v.dtype}{list(v.shape)}, "
                               f"expected {s.type}")
        if v.size and not v.is_c_contiguous():
            raise BindingError(f"run_device: {what} {n!r} is not C-contiguous")
        return v

    @staticmethod
    def _caller_stream(st: object, stream):
        """A cuda.core Stream over the caller's ``stream`` (see :meth:`run_device`)."""
        cc = st.cc
        try:
            if isinstance(stream, cc.Stream):
                return stream
            if hasattr(stream, "__cuda_stream__"):
                return cc.Device().create_stream(stream)
            handle = getattr(stream, "cuda_stream", None)  # torch.cuda.Stream
            if handle is None and hasattr(stream, "handle"):  # numba Stream
                h = stream.handle
                handle = getattr(h, "value", h)
            if handle is None and isinstance(stream, int):
                handle = stream
            if handle is None:
                raise TypeError(f"{type(stream).__name__} is no CUDA stream")
            return cc.Stream.from_handle(int(handle or 0))
        except Exception as e:  # noqa: BLE001
            raise BindingError(f"run_device: stream= {stream!r} is not usable as a CUDA stream "
                               f"({describe(e)})") from None
