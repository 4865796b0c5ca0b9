"""What :class:`~ptxc.driver.cuda.CudaProgram` offers beyond running from host arrays:
``run_device`` on other libraries' device memory (``__cuda_array_interface__``, ``__dlpack__``;
torch, cupy, numba), on the caller's stream (``__cuda_stream__``, torch and numba streams), and
per-kernel and per-run device times for ``ptxc bench`` (CUDA timing events). A mixin and a
function, so that the runtime module keeps to running; they use the program's execution contexts
and launch helpers.

**Zero copies where the memory allows.** ``run_device`` binds the caller's device pointers
straight into the kernels as their input and output buffers: an input tensor is read where it
is, an ``out=`` tensor is written where it is. Its shape and dtype must be the binding's and it
must be C-contiguous (a BindingError otherwise, as before); it is copied through the engine's
own binding buffer (one device-to-device copy) only when

* its address is not aligned to 256 bytes (the engine's own buffers are: vector and ``cp.async``
  loads of tensor-core kernels need 16, and a sliced tensor can start anywhere), or
* it is an output that overlaps an input or another output (kernel pointers are ``noalias``;
  kernels never write an input: bufferization writes in place only over scratch buffers), or
* it is an output without ``out=``: it goes to a fresh numba device array, copied from the
  binding buffer, so that the pointers stay those of the engine and the CUDA graph is replayed
  (a fresh array's address is new every run; pass ``out=`` for zero copies).

:func:`binding_plan` makes that decision (no GPU needed: unit-tested on the CPU), and
``program.interop`` (:class:`InteropCounts`) counts it: bindings bound directly, bindings copied
and their bytes, CUDA graphs captured, and the last run's pointer per binding. The launches of
an inference then depend on the caller's pointers: a CUDA graph is replayed for a pointer set
seen before (:mod:`ptxc.driver.cuda_graphs`), a new one is launched kernel by kernel.
"""

from __future__ import annotations

import threading

import attrs
import numpy as np

from ..errors import BindingError, DeviceError, OutOfMemoryError, PtxcError

#: the alignment of a caller's pointer bound into kernels (the engine's buffers' alignment)
BIND_ALIGN = 256


def binding_plan(inputs: dict, outs: dict, align: int = BIND_ALIGN) -> dict:
    """Which of the caller's buffers the kernels can use directly: ``inputs`` and ``outs`` map a
    binding name to ``(pointer, nbytes)`` (shape, dtype and contiguity already checked); returns
    name -> None (bind it) or the reason it is copied. Example: inputs ``{"x": (0x1000, 64)}``,
    outs ``{"y": (0x1020, 64)}`` -> ``{"x": None, "y": "overlaps input 'x'"}``."""
    why = {}
    for n, (ptr, nbytes) in inputs.items():
        why[n] = None if ptr % align == 0 else f"address {ptr:#x} is not {align}-byte aligned"
    spans = [(n, "input", p, p + b) for n, (p, b) in inputs.items() if b]
    for n, (ptr, nbytes) in outs.items():
        if ptr % align:
            why[n] = f"address {ptr:#x} is not {align}-byte aligned"
            continue
        hit = next((f"overlaps {kind} {m!r}" for m, kind, a, b in spans
                    if nbytes and ptr < b and a < ptr + nbytes), None)
        why[n] = hit
        if nbytes:
            spans.append((n, "output", ptr, ptr + nbytes))
    return why


@attrs.define
class InteropCounts:
    """What ``run_device`` did with the caller's memory since the program was built (or
    :meth:`reset`): ``direct`` bindings bound into the kernels, ``copied`` bindings that went
    through an engine buffer (``copied_bytes`` in all; fresh outputs included),
    ``graphs_captured`` CUDA graphs captured (by ``run`` too), and ``last``: name -> (``"direct"``
    or the reason for the copy, the pointer the kernels got) of the last ``run_device``."""

    direct: int = 0
    copied: int = 0
    copied_bytes: int = 0
    graphs_captured: int = 0
    last: dict = attrs.field(factory=dict)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, repr=False, eq=False)

    def add(self, direct: int = 0, copied: int = 0, copied_bytes: int = 0,
            graphs_captured: int = 0, last: dict | None = None) -> None:
        with self._lock:
            self.direct += direct
            self.copied += copied
            self.copied_bytes += copied_bytes
            self.graphs_captured += graphs_captured
            if last is not None:
                self.last = last

    def reset(self) -> None:
        with self._lock:
            self.direct = self.copied = self.copied_bytes = self.graphs_captured = 0
            self.last = {}

    def as_dict(self) -> dict:
        with self._lock:
            return {"direct": self.direct, "copied": self.copied,
                    "copied_bytes": self.copied_bytes, "graphs_captured": self.graphs_captured,
                    "last": dict(self.last)}


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
        from .cuda_context import _launch_one
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
        earlier run, on the pool's most recently used context, with the same pointers: the
        caller's where run_device bound them): each whole launch sequence (the graph, or the
        kernels) between two timing events, so the host's share of a run's latency is what these
        do not cover."""
        with self._contexts.take() as ctx:
            with ctx._lock:
                st = ctx._ready()
                opts = st.shared.cc.EventOptions(timing_enabled=True)
                pairs = []
                args, key = st.last
                for _ in range(runs):
                    e0 = st.stream.record(options=opts)
                    ctx._launch_all(st, args, key)
                    pairs.append((e0, st.stream.record(options=opts)))
                ctx._sync(st)
                return [float(b - a) for a, b in pairs]

    def _device_view(self, st: object, n: str, x, what: str):
        """A numba device array over ``x``'s memory (no copy), checked against binding ``n``."""
        cuda = st.cuda
        s = self._arg_slots[n]
        try:
            if isinstance(x, np.ndarray):  # numpy exports __dlpack__ too: name the mistake
                raise BindingError(f"run_device: {what} {n!r} is a numpy array in host memory, "
                                   "not a device array; run() takes host arrays")
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


def _ptr(v) -> int:
    return int(v.device_ctypes_pointer.value or 0)


def run_device(ctx, inputs: dict, out: dict | None = None, stream=None) -> dict:
    """One inference of context ``ctx`` from device arrays to device arrays, binding the
    caller's memory into the kernels where :func:`binding_plan` allows (module docstring).

    ``inputs``: by name, anything with ``__cuda_array_interface__`` (torch, cupy, numba) or
    ``__dlpack__`` (viewed through cuda.core's ``StridedMemoryView``, no copy), C-contiguous, of
    each input's shape and dtype. ``out``: by name, device arrays (same protocols) that receive
    the outputs (e.g. torch tensors: torch then owns the results, no allocation here); the others
    go to fresh numba device arrays, which ``torch.as_tensor(a, device="cuda")`` views without a
    copy. ``stream``: the caller's stream (a torch or cuda.core stream, anything with
    ``__cuda_stream__``, a numba stream, or a ``CUstream`` address as an int): the inference is
    ordered after the work queued on it so far, the work queued on it later waits for the
    inference, and this returns without waiting (as a TensorRT ``enqueueV3``); without
    ``stream`` the outputs are complete on return."""
    from .cuda import _describe, _is_oom
    p = ctx.program
    p._check_names(inputs, "device array")
    for n in p.table.inputs + p.table.outputs:
        t = p._arg_slots[n].type
        if not t.is_default_layout:
            raise BindingError(f"run_device: binding {n!r} has layout {t}, which a "
                               "device-to-device copy cannot scatter; use run()")
    out = dict(out or {})
    unknown = sorted(set(out) - set(p.table.outputs))
    if unknown:
        raise BindingError(f"run_device: out= names {unknown} are not outputs; the outputs "
                           f"are {list(p.table.outputs)}")
    with ctx._lock:
        st = ctx._ready()
        cuda = st.shared.cuda
        from numba.cuda.cudadrv import driver as drv
        views = {n: p._device_view(st.shared, n, inputs[n], "input") for n in p.table.inputs}
        targets = {n: p._device_view(st.shared, n, a, "out") for n, a in out.items()}
        caller = p._caller_stream(st.shared, stream) if stream is not None else None
        if caller is not None:
            try:
                st.stream.wait(caller)  # after what the caller queued so far
            except Exception as e:  # noqa: BLE001
                raise DeviceError(f"run_device: cannot order after the caller's stream "
                                  f"({_describe(e)})") from None
        nbytes = {n: s.nbytes for n, s in p._arg_slots.items()}
        why = binding_plan({n: (_ptr(v), nbytes[n]) for n, v in views.items()},
                           {n: (_ptr(v), nbytes[n]) for n, v in targets.items()})
        index = {s.name: i for i, s in enumerate(p.table.slots) if s.kind == "arg"}
        ptrs = list(st.ptrs)
        last, copied, copied_bytes = {}, 0, 0
        for n, v in {**views, **targets}.items():
            if why[n] is None and nbytes[n]:
                ptrs[index[n]] = _ptr(v)
        for n in p.table.inputs + p.table.outputs:
            direct = n in why and why[n] is None
            last[n] = ("direct" if direct else why.get(n) or "fresh output (no out=)",
                       ptrs[index[n]])
        try:
            for n, v in views.items():
                if why[n] is not None and nbytes[n]:
                    drv.device_to_device(st.bindings[n], v, nbytes[n], stream=st.nstream)
                    copied, copied_bytes = copied + 1, copied_bytes + nbytes[n]
        except Exception as e:  # noqa: BLE001
            raise DeviceError(f"cuda engine: copying the inputs on the device failed "
                              f"({_describe(e)})") from None
        if ptrs == st.ptrs:
            ctx._launch_all(st)
        else:
            args = [tuple(ptrs[i] for i in k.buffers) for k in p.table.kernels]
            ctx._launch_all(st, args, tuple(ptrs[index[n]] for n in index))
        outs = {}
        for n in p.table.outputs:
            s = p._arg_slots[n]
            if n in targets and why[n] is None:
                continue  # the kernels wrote it
            try:
                outs[n] = targets[n] if n in targets else cuda.device_array(
                    s.shape, np.dtype(s.dtype))
            except Exception as e:  # noqa: BLE001
                if _is_oom(e):
                    raise OutOfMemoryError(f"run_device: out of device memory for output "
                                           f"{n!r} ({s.nbytes:,} bytes)") from None
                raise DeviceError(f"run_device: allocating output {n!r} failed "
                                  f"({_describe(e)})") from None
            try:
                if s.nbytes:
                    drv.device_to_device(outs[n], st.bindings[n], s.nbytes, stream=st.nstream)
                    copied, copied_bytes = copied + 1, copied_bytes + s.nbytes
            except Exception as e:  # noqa: BLE001
                raise DeviceError(f"cuda engine: the inference or the copy of output {n!r} "
                                  f"failed ({_describe(e)})") from None
        p.interop.add(direct=sum(1 for n, w in why.items() if w is None and nbytes[n]),
                      copied=copied, copied_bytes=copied_bytes, last=last)
        if caller is not None:
            try:
                caller.wait(st.stream)  # the caller's later work waits for the inference
            except Exception as e:  # noqa: BLE001
                raise DeviceError(f"run_device: cannot order the caller's stream after the "
                                  f"inference ({_describe(e)})") from None
        else:
            ctx._sync(st)
        return {n: out[n] if n in out else outs[n] for n in p.table.outputs}
