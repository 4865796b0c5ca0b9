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

from small_nets import conv_relu_pool


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
    """A device array as run_device sees one after _device_view: a pointer."""

    def __init__(self, ptr):
        self.device_ctypes_pointer = SimpleNamespace(value=ptr)


@pytest.fixture
def faked(monkeypatch):
    """A cuda engine (compiled here, no GPU) whose context state, views, copies, launches and
    synchronize are faked; returns (engine, launches, copies)."""
    engine = ptxc.compile(conv_relu_pool(), target="cuda")
    prog = engine.program
    slots = prog.table.slots
    ptrs = [0x7000_0000 + 0x10000 * i for i in range(len(slots))]   # the engine's pointers
    st = SimpleNamespace(
        shared=SimpleNamespace(cuda=SimpleNamespace(
            device_array=lambda shape, dtype: FakeArray(0x9000_0000))),
        ptrs=ptrs, args=[tuple(ptrs[i] for i in k.buffers) for k in prog.table.kernels],
        bindings={s.name: FakeArray(p) for s, p in zip(slots, ptrs) if s.kind == "arg"},
        nstream=None, stream=None)
    launches, copies = [], []
    ctx = prog.new_context()
    ctx._ready = lambda: st
    ctx._launch_all = lambda st_, args=None, key=None: launches.append(
        (st.args if args is None else args, key))
    ctx._sync = lambda st_: None
    prog._device_view = lambda sh, n, x, what: x
    from numba.cuda.cudadrv import driver as drv
    monkeypatch.setattr(drv, "device_to_device",
                        lambda dst, src, n, stream=None: copies.append(
                            (dst.device_ctypes_pointer.value, src.device_ctypes_pointer.value,
                             n)))
    return engine, ctx, launches, copies


def _arg_of(engine, kernel_args, name):
    """The pointers the kernels got for binding ``name``."""
    prog = engine.program
    i = next(j for j, s in enumerate(prog.table.slots) if s.name == name)
    return {a[pos] for k, a in zip(prog.table.kernels, kernel_args)
            for pos, b in enumerate(k.buffers) if b == i}


def test_run_device_binds_the_callers_pointers(faked):
    engine, ctx, launches, copies = faked
    x, y = FakeArray(0x5000_0000), FakeArray(0x5100_0000)
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
    bind = {n: a.device_ctypes_pointer.value for n, a in ctx._ready().bindings.items()}
    # a misaligned input is copied into the engine's binding; a fresh output copied out of it
    ctx.run_device({"x": FakeArray(0x5000_0004)})
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
    ctx.run_device({"x": FakeArray(0x5000_0000)}, out={"y": FakeArray(0x5000_0000 + 256)})
    (args, key), = launches
    assert _arg_of(engine, args, "x") == {0x5000_0000} and _arg_of(engine, args, "y") == \
        {bind["y"]}
    assert copies == [(0x5000_0000 + 256, bind["y"], yb)]
    assert prog.interop.as_dict()["last"]["y"][0] == "overlaps input 'x'"
