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


@attrs.frozen
class IoSlot:
    """What run_device checks a caller's array against, for one input or output: its slot's
    index in the table (its pointer's place), shape, dtype, bytes, type (for messages) and
    whether its layout is the default (row-major) one."""

    index: int
    shape: tuple
    dtype: np.dtype
    nbytes: int
    type: str
    default_layout: bool


_DTYPES: dict = {}   # CUDA array interface typestr -> numpy dtype


def _c_contiguous(shape: tuple, strides: tuple, itemsize: int) -> bool:
    """Whether byte ``strides`` are row-major for ``shape`` (extent-1 axes may have any)."""
    step = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != step:
            return False
        step *= extent
    return True


def device_array_pointer(x, slot: IoSlot, where: str, output: bool = False
                         ) -> tuple[int, int | None]:
    """(pointer, producer stream or None) of the device array ``x``, read from its
    ``__cuda_array_interface__`` (torch, cupy, numba) or, without one, its ``__dlpack__``
    (cuda.core's StridedMemoryView), and checked against ``slot``: shape, dtype, C-contiguous,
    and writable if it is an ``output``; a BindingError naming ``where`` otherwise.

    The interface is read here rather than through numba's ``as_cuda_array``, which builds a
    device array object and synchronizes the host with the producer's stream: together a large
    part of each run_device call's host time (bench/host_overhead.py,
    bench/history/2026-12-02.md). The producer's stream is
    returned instead, for the caller to order the inference after it on the device.

    Example: a torch float32 tensor of shape (1, 4) at 0x7f0000 on the legacy stream ->
    ``(0x7f0000, 1)`` for a slot of float32[1, 4]; a (4, 1) tensor -> BindingError "... is
    float32[4, 1], expected ...".
    """
    if isinstance(x, np.ndarray):  # numpy exports __dlpack__ too: name the mistake
        raise BindingError(f"{where} is a numpy array in host memory, not a device array; "
                           "run() takes host arrays")
    try:
        d = x.__cuda_array_interface__
    except AttributeError:
        d = None
    except Exception as e:  # noqa: BLE001  (torch: a tensor that requires grad)
        raise BindingError(f"{where}: its device array interface is not usable "
                           f"({describe(e)})") from None
    try:
        if d is not None:
            shape, typestr = tuple(d["shape"]), d["typestr"]
            ptr, readonly = d["data"]
            strides, stream = d.get("strides"), d.get("stream")
            dtype = _DTYPES.get(typestr)
            if dtype is None:
                dtype = _DTYPES[typestr] = np.dtype(typestr)
            if d.get("mask") is not None:
                raise BindingError(f"{where} has a mask (__cuda_array_interface__), which "
                                   "run_device does not take")
        elif hasattr(x, "__dlpack__"):
            from cuda.core.utils import StridedMemoryView
            m = StridedMemoryView(x, stream_ptr=-1)
            if not m.is_device_accessible:
                raise BindingError(f"{where} is host memory (DLPack); run() takes host arrays")
            shape, dtype, ptr, readonly, stream = (tuple(m.shape), np.dtype(m.dtype), m.ptr,
                                                   m.readonly, None)
            strides = m.strides and tuple(k * dtype.itemsize for k in m.strides)
        else:
            raise BindingError(f"{where} is a {type(x).__name__}, not a device array "
                               "(__cuda_array_interface__ or __dlpack__); run() takes host "
                               "arrays")
    except PtxcError:
        raise
    except Exception as e:  # noqa: BLE001
        raise BindingError(f"{where}: its device array interface is not usable "
                           f"({describe(e)})") from None
    if shape != slot.shape or dtype != slot.dtype:
        raise BindingError(f"{where} is {dtype}{list(shape)}, expected {slot.type}")
    if strides is not None and slot.nbytes and not _c_contiguous(shape, strides,
                                                                 dtype.itemsize):
        raise BindingError(f"{where} is not C-contiguous")
    if readonly and output:
        raise BindingError(f"{where} is read-only")
    return int(ptr or 0), stream


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

    def launch_times(self, runs: int, before_each=None) -> list[float]:
        """Milliseconds of device time of ``runs`` inferences on the inputs already bound (by an
        earlier run, on the pool's most recently used context, with the same pointers: the
        caller's where run_device bound them): each whole launch sequence (the graph, or the
        kernels) between two timing events, so the host's share of a run's latency is what these
        do not cover. ``before_each(stream_handle)``, where given, queues work before each
        timed run on the same stream, outside the events (the tuner's L2 flush)."""
        with self._contexts.take() as ctx:
            with ctx._lock:
                st = ctx._ready()
                opts = st.shared.cc.EventOptions(timing_enabled=True)
                pairs = []
                args, key = st.last
                for _ in range(runs):
                    if before_each is not None:
                        before_each(st.stream_handle)
                    e0 = st.stream.record(options=opts)
                    ctx._launch_all(st, args, key)
                    pairs.append((e0, st.stream.record(options=opts)))
                ctx._sync(st)
                return [float(b - a) for a, b in pairs]

    def _io_slots(self) -> dict:
        """name -> :class:`IoSlot` of every input and output (computed once: a slot's type is
        rebuilt on each access, a measurable part of run_device's host time:
        bench/host_overhead.py)."""
        io = self._io_cache
        if io is None:
            index = {s.name: i for i, s in enumerate(self.table.slots) if s.kind == "arg"}
            io = {}
            for n in self.table.inputs + self.table.outputs:
                s = self._arg_slots[n]
                t = s.type
                io[n] = IoSlot(index[n], tuple(t.shape), np.dtype(s.dtype), s.nbytes, str(t),
                               t.is_default_layout)
            self._io_cache = io
        return io

    def _device_pointer(self, n: str, x, what: str) -> tuple[int, int | None]:
        """(device pointer, producer stream or None) of ``x`` for binding ``n`` (``what``:
        "input" or "out"), checked against its shape, dtype and C-contiguity
        (:func:`device_array_pointer`)."""
        return device_array_pointer(x, self._io_slots()[n], f"run_device: {what} {n!r}",
                                    output=what == "out")

    @staticmethod
    def _copy_on_device(st: object, dst: int, src: int, nbytes: int) -> None:
        """Queue a device-to-device copy of ``nbytes`` on the context's stream."""
        from numba.cuda.cudadrv.driver import driver
        driver.cuMemcpyDtoDAsync(dst, src, nbytes, st.stream_handle)

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


#: streams that need no ordering: none named, and the legacy default stream (0 or 1), after
#: which a context's stream (blocking) is ordered by CUDA itself
_ORDERED_STREAMS = (None, 0, 1)
#: pointer sets whose binding a context keeps (:class:`Binding`)
BINDINGS_KEPT = 16


@attrs.frozen
class Binding:
    """How one set of caller pointers enters the kernels (a context keeps the last
    ``BINDINGS_KEPT``, so a caller that reuses its tensors pays this once): ``why`` per binding
    (None: bound directly; else why it is copied, :func:`binding_plan`), the kernels' pointer
    arguments (None: the engine's own) and their CUDA graph key, the input copies
    ``(engine binding, caller pointer, bytes)``, and the bookkeeping of
    :class:`InteropCounts`. Example: x and an ``out=`` y both aligned and disjoint -> why
    ``{"x": None, "y": None}``, args with both pointers, no copies, direct 2."""

    why: dict
    args: list | None
    key: tuple | None
    copy_in: tuple
    direct: int
    last: dict


def plan_binding(p, st, ins: dict, targets: dict) -> Binding:
    """The :class:`Binding` of context state ``st`` of program ``p`` for caller pointers
    ``ins`` (every input) and ``targets`` (the ``out=`` outputs), by name."""
    io = p._io_slots()
    why = binding_plan({n: (ptr, io[n].nbytes) for n, ptr in ins.items()},
                       {n: (ptr, io[n].nbytes) for n, ptr in targets.items()})
    ptrs = list(st.ptrs)
    for n, ptr in {**ins, **targets}.items():
        if why[n] is None and io[n].nbytes:
            ptrs[io[n].index] = ptr
    last = {}
    for n in p.table.inputs + p.table.outputs:
        direct = n in why and why[n] is None
        last[n] = ("direct" if direct else why.get(n) or "fresh output (no out=)",
                   ptrs[io[n].index])
    copy_in = tuple((ptrs[io[n].index], ptr, io[n].nbytes) for n, ptr in ins.items()
                    if why[n] is not None and io[n].nbytes)
    if ptrs == st.ptrs:
        args = key = None
    else:
        args = [tuple(ptrs[i] for i in k.buffers) for k in p.table.kernels]
        key = tuple(ptrs[s.index] for s in io.values())
    return Binding(why, args, key, copy_in,
                   sum(1 for n, w in why.items() if w is None and io[n].nbytes), last)


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
    ``stream`` the outputs are complete on return. An array whose interface names the stream
    that produces it (``__cuda_array_interface__`` v3) is waited for on the device.

    The host's share of a call is kept small (at batch 1 it decides the latency): the
    interfaces are read directly (:func:`device_array_pointer`), the binding of a pointer set
    seen before is reused (:class:`Binding`), and the inference is one CUDA graph launch."""
    from .cuda import _describe, _is_oom
    p = ctx.program
    p._check_names(inputs, "device array")
    io = p._io_slots()
    for n, s in io.items():
        if not s.default_layout:
            raise BindingError(f"run_device: binding {n!r} has layout {s.type}, which a "
                               "device-to-device copy cannot scatter; use run()")
    out = dict(out or {})
    unknown = sorted(set(out) - set(p.table.outputs))
    if unknown:
        raise BindingError(f"run_device: out= names {unknown} are not outputs; the outputs "
                           f"are {list(p.table.outputs)}")
    with ctx._lock:
        st = ctx._ready()
        ins, targets, producers = {}, {}, set()
        for n in p.table.inputs:
            ins[n], s = p._device_pointer(n, inputs[n], "input")
            producers.add(s)
        for n, a in out.items():
            targets[n], s = p._device_pointer(n, a, "out")
            producers.add(s)
        caller = p._caller_stream(st.shared, stream) if stream is not None else None
        try:
            if caller is not None:
                st.stream.wait(caller)  # after what the caller queued so far
            for s in producers.difference(_ORDERED_STREAMS):
                st.stream.wait(st.foreign_stream(s))  # after the arrays' producers
        except Exception as e:  # noqa: BLE001
            raise DeviceError(f"run_device: cannot order after the caller's stream or the "
                              f"streams that produce the arrays ({_describe(e)})") from None
        key = (tuple(ins.values()), tuple(sorted(targets.items())))
        b = st.bound.get(key)
        if b is None:
            b = st.bound[key] = plan_binding(p, st, ins, targets)
            while len(st.bound) > BINDINGS_KEPT:
                del st.bound[next(iter(st.bound))]
        copied = copied_bytes = 0
        try:
            for dst, src, nbytes in b.copy_in:
                p._copy_on_device(st, dst, src, nbytes)
                copied, copied_bytes = copied + 1, copied_bytes + nbytes
        except Exception as e:  # noqa: BLE001
            raise DeviceError(f"cuda engine: copying the inputs on the device failed "
                              f"({_describe(e)})") from None
        ctx._launch_all(st, b.args, b.key)
        outs = {}
        for n in p.table.outputs:
            s = io[n]
            if n in targets and b.why[n] is None:
                continue  # the kernels wrote it
            try:
                if n in targets:
                    dst = targets[n]
                else:
                    outs[n] = st.shared.cuda.device_array(s.shape, s.dtype)
                    dst = _ptr(outs[n])
            except Exception as e:  # noqa: BLE001
                if _is_oom(e):
                    raise OutOfMemoryError(f"run_device: out of device memory for output "
                                           f"{n!r} ({s.nbytes:,} bytes)") from None
                raise DeviceError(f"run_device: allocating output {n!r} failed "
                                  f"({_describe(e)})") from None
            try:
                if s.nbytes:
                    p._copy_on_device(st, dst, st.ptrs[s.index], s.nbytes)
                    copied, copied_bytes = copied + 1, copied_bytes + s.nbytes
            except Exception as e:  # noqa: BLE001
                raise DeviceError(f"cuda engine: the inference or the copy of output {n!r} "
                                  f"failed ({_describe(e)})") from None
        p.interop.add(direct=b.direct, copied=copied, copied_bytes=copied_bytes, last=b.last)
        if caller is not None:
            try:
                caller.wait(st.stream)  # the caller's later work waits for the inference
            except Exception as e:  # noqa: BLE001
                raise DeviceError(f"run_device: cannot order the caller's stream after the "
                                  f"inference ({_describe(e)})") from None
        else:
            ctx._sync(st)
        return {n: out[n] if n in out else outs[n] for n in p.table.outputs}
