"""run_device's zero-copy binding, without a GPU: the decision (binding_plan), the CUDA graph
cache's policy, and run_device's bookkeeping on a cuda engine whose device is faked (the caller's
pointers must reach the kernels' arguments, copies happen only where the plan says, and the
counters say so). The same on a real GPU with torch tensors: tests/gpu/test_interop.py."""

from types import SimpleNamespace

import numpy as np
import pytest

import ptxc
from ptxc.driver.cuda_graphs import GraphCache
from ptxc.driver.cuda_interop import BIND_ALIGN, binding_plan

from support.small_nets import conv_relu_pool


def test_binding_plan_binds_aligned_disjoint_buffers():
    why = binding_plan({"x": (0x10000, 1200)}, {"y": (0x20000, 400)})
    assert why == {"x": None, "y": None}


def test_binding_plan_copies_misaligned_and_overlapping():
    why = binding_plan({"x": (0x10004, 1200), "z": (0x30000, 64)},
                       {"y": (0x30000 - 256, 400), "w": (0x40000, 16), "v": (0x40000, 16),
                        "u": (0x50010, 8)})
    assert why["x"] == f"address 0x10004 is not {BIND_ALIGN}-byte aligned"
    assert why["z"] is None
    assert why["y"] == "overlaps input 'z'"          # [0x2ff00, 0x30090) meets [0x30000, +64)
    assert why["w"] is None and why["v"] == "overlaps output 'w'"
    assert "not 256-byte aligned" in why["u"]
    # touching is not overlapping; empty buffers overlap nothing
    assert binding_plan({"x": (0x1000, 256)}, {"y": (0x1100, 4), "e": (0x1000, 0)}) == \
        {"x": None, "y": None, "e": None}


def test_graph_cache_captures_a_pointer_set_on_its_second_sight():
    captured, closed = [], []

    class G:
        def __init__(self, key):
            self.key = key

        def close(self):
            closed.append(self.key)

    def capture(key):
        return lambda: (captured.append(key) or G(key), G(("builder", key)))
    c = GraphCache(size=2, remember=2)
    assert c.lookup(None, capture(None), eager=True).key is None     # the engine's: at once
    assert c.lookup("a", capture("a")) is None                       # new: launch directly
    assert c.lookup("b", capture("b")) is None
    assert c.lookup("a", capture("a")).key == "a"                    # seen: captured
    assert c.lookup("a", capture("a")).key == "a" and captured == [None, "a"]  # replayed
    assert c.lookup("b", capture("b")).key == "b"                    # evicts None (LRU)
    assert None not in c and closed == [None, ("builder", None)] and c.captures == 3
    for k in "cde":                                                  # only 2 remembered
        assert c.lookup(k, capture(k)) is None
    assert c.lookup("c", capture("c")) is None
    c.close()
    assert len(c) == 0 and set(closed) >= {"a", "b"}


class FakeArray:
    """A device array as run_device reads one: a ``__cuda_array_interface__`` (v3) over a
    pointer, and numba's ``device_ctypes_pointer`` (the fresh outputs run_device allocates)."""

    def __init__(self, ptr, shape=(1,), dtype=np.float32, strides=None, readonly=False,
                 stream=None):
        self.device_ctypes_pointer = SimpleNamespace(value=ptr)
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": np.dtype(dtype).str, "data": (ptr, readonly),
            "strides": strides, "stream": stream, "version": 3}


def dev(engine, name, ptr, **kw):
    """A FakeArray of binding ``name``'s shape and dtype at ``ptr``."""
    slot = engine.program._io_slots()[name]
    return FakeArray(ptr, slot.shape, slot.dtype, **kw)


@pytest.fixture
def faked(monkeypatch):
    """A cuda engine (compiled here, no GPU) whose context state, copies, launches and
    synchronize are faked; returns (engine, ctx, launches, copies)."""
    engine = ptxc.compile(conv_relu_pool(), target="cuda")
    prog = engine.program
    slots = prog.table.slots
    ptrs = [0x7000_0000 + 0x10000 * i for i in range(len(slots))]   # the engine's pointers
    st = SimpleNamespace(
        shared=SimpleNamespace(cuda=SimpleNamespace(
            device_array=lambda shape, dtype: FakeArray(0x9000_0000))),
        ptrs=ptrs, args=[tuple(ptrs[i] for i in k.buffers) for k in prog.table.kernels],
        bindings={s.name: FakeArray(p) for s, p in zip(slots, ptrs) if s.kind == "arg"},
        bound={}, nstream=None, stream=None)
    launches, copies = [], []
    ctx = prog.new_context()
    ctx._ready = lambda: st
    ctx._launch_all = lambda st_, args=None, key=None: launches.append(
        (st.args if args is None else args, key))
    ctx._sync = lambda st_: None
    prog._copy_on_device = lambda st_, dst, src, n: copies.append((dst, src, n))
    return engine, ctx, launches, copies


def _arg_of(engine, kernel_args, name):
    """The pointers the kernels got for binding ``name``."""
    prog = engine.program
    i = next(j for j, s in enumerate(prog.table.slots) if s.name == name)
    return {a[pos] for k, a in zip(prog.table.kernels, kernel_args)
            for pos, b in enumerate(k.buffers) if b == i}


def test_run_device_binds_the_callers_pointers(faked):
    engine, ctx, launches, copies = faked
    x, y = dev(engine, "x", 0x5000_0000), dev(engine, "y", 0x5100_0000)
    got = ctx.run_device({"x": x}, out={"y": y})
    assert got["y"] is y and copies == []                   # nothing copied
    (args, key), = launches
    assert _arg_of(engine, args, "x") == {0x5000_0000}      # the kernels read the caller's x
    assert _arg_of(engine, args, "y") == {0x5100_0000}      # and write the caller's y
    assert key is not None and 0x5000_0000 in key and 0x5100_0000 in key
    c = engine.program.interop.as_dict()
    assert c["direct"] == 2 and c["copied"] == 0 and c["copied_bytes"] == 0
    assert c["last"] == {"x": ("direct", 0x5000_0000), "y": ("direct", 0x5100_0000)}


def test_run_device_copies_only_what_cannot_be_bound(faked):
    engine, ctx, launches, copies = faked
    prog = engine.program
    xb, yb = prog._arg_slots["x"].nbytes, prog._arg_slots["y"].nbytes
    io = prog._io_slots()
    bind = {n: ctx._ready().ptrs[io[n].index] for n in ("x", "y")}
    # a misaligned input is copied into the engine's binding; a fresh output copied out of it
    ctx.run_device({"x": dev(engine, "x", 0x5000_0004)})
    (args, key), = launches
    assert key is None                                     # the engine's own pointers: its graph
    assert _arg_of(engine, args, "x") == {bind["x"]} and _arg_of(engine, args, "y") == {bind["y"]}
    assert copies == [(bind["x"], 0x5000_0004, xb), (0x9000_0000, bind["y"], yb)]
    c = prog.interop.as_dict()
    assert c["direct"] == 0 and c["copied"] == 2 and c["copied_bytes"] == xb + yb
    assert c["last"]["y"] == ("fresh output (no out=)", bind["y"])
    assert "not 256-byte aligned" in c["last"]["x"][0]
    # an out= that overlaps the input: the input is bound, the output copied after the kernels
    launches.clear(), copies.clear(), prog.interop.reset()
    ctx.run_device({"x": dev(engine, "x", 0x5000_0000)},
                   out={"y": dev(engine, "y", 0x5000_0000 + 256)})
    (args, key), = launches
    assert _arg_of(engine, args, "x") == {0x5000_0000} and _arg_of(engine, args, "y") == \
        {bind["y"]}
    assert copies == [(0x5000_0000 + 256, bind["y"], yb)]
    assert prog.interop.as_dict()["last"]["y"][0] == "overlaps input 'x'"


def test_run_device_reuses_the_binding_of_a_pointer_set(faked):
    """A pointer set seen before is not planned again (the host's share of a batch-1 call)."""
    engine, ctx, launches, copies = faked
    st = ctx._ready()
    x, y = dev(engine, "x", 0x5000_0000), dev(engine, "y", 0x5100_0000)
    for _ in range(3):
        ctx.run_device({"x": x}, out={"y": y})
    assert len(st.bound) == 1 and len({id(a) for a, _ in launches}) == 1
    ctx.run_device({"x": dev(engine, "x", 0x5200_0000)}, out={"y": y})
    assert len(st.bound) == 2 and _arg_of(engine, launches[-1][0], "x") == {0x5200_0000}
    assert engine.program.interop.as_dict()["direct"] == 8


def test_run_device_orders_after_the_arrays_producer_streams(faked):
    """An array's interface may name the stream that produces it: the inference waits for that
    stream on the device; none named or the legacy stream (which the context's blocking stream
    follows anyway) need no wait."""
    engine, ctx, launches, _ = faked
    st = ctx._ready()
    waited = []
    st.stream = SimpleNamespace(wait=waited.append)
    st.foreign_stream = lambda h: ("stream", h)
    ctx.run_device({"x": dev(engine, "x", 0x5000_0000, stream=1)},
                   out={"y": dev(engine, "y", 0x5100_0000)})
    assert waited == []
    ctx.run_device({"x": dev(engine, "x", 0x5000_0000, stream=0xabc0)},
                   out={"y": dev(engine, "y", 0x5100_0000, stream=0xabc0)})
    assert waited == [("stream", 0xabc0)]


@pytest.mark.parametrize("kw, message", [
    ({"shape": (4, 1)}, r"is float32\[4, 1\], expected"),
    ({"dtype": np.float16}, r"is float16\[1, 3, 10, 10\], expected"),
    ({"strides": (1200, 4, 40, 4)}, "not C-contiguous"),
    ({"readonly": True}, "read-only"),
])
def test_device_array_pointer_refuses_what_does_not_fit(kw, message):
    from ptxc.driver.cuda_interop import IoSlot, device_array_pointer
    from ptxc.errors import BindingError
    slot = IoSlot(0, (1, 3, 10, 10), np.dtype(np.float32), 1200, "f32[1,3,10,10]", True)
    a = FakeArray(0x1000, **{"shape": slot.shape, **kw})
    with pytest.raises(BindingError, match=message):
        device_array_pointer(a, slot, "run_device: out 'y'", output=True)


def test_device_array_pointer_reads_the_interface():
    from ptxc.driver.cuda_interop import IoSlot, device_array_pointer
    from ptxc.errors import BindingError
    slot = IoSlot(0, (2, 1, 3), np.dtype(np.float16), 12, "f16[2,1,3]", True)
    # row-major strides, and any stride on an extent-1 axis, are contiguous
    for strides in (None, (6, 6, 2), (6, 999, 2)):
        a = FakeArray(0x2000, (2, 1, 3), np.float16, strides=strides, stream=7)
        assert device_array_pointer(a, slot, "input 'x'") == (0x2000, 7)
    # a read-only array is a fine input
    assert device_array_pointer(FakeArray(0x2000, (2, 1, 3), np.float16, readonly=True),
                                slot, "input 'x'")[0] == 0x2000
    with pytest.raises(BindingError, match="numpy array in host memory"):
        device_array_pointer(np.zeros((2, 1, 3), np.float16), slot, "input 'x'")
    with pytest.raises(BindingError, match="is a list, not a device array"):
        device_array_pointer([1, 2], slot, "input 'x'")
    masked = FakeArray(0x2000, (2, 1, 3), np.float16)
    masked.__cuda_array_interface__["mask"] = object()
    with pytest.raises(BindingError, match="mask"):
        device_array_pointer(masked, slot, "input 'x'")
