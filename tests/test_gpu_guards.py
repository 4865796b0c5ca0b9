"""Guards and edges of map-to-gpu that the interpreter's bounds check alone would not catch.

A pointwise guard that lets one thread too many through (``lin <= n``) writes one element past
the nest; when the nest covers a sub-range of its buffers that element is *inside* the buffer, so
no bounds check fires: on a GPU it is a silent wrong write. Here the nests cover the middle of
larger buffers, whose other elements the program never writes (the interpreter fills them with
NaN), and the whole buffer is compared with what numpy says: the written part and the untouched
rest. Likewise a grid one block short, and a tiled matmul whose reduction length leaves a tail
chunk of exactly one element (``K = 33``: one more than a multiple of every chunk size 32, 16, 8).
"""

import numpy as np
from support.loop_ir import const, load, module, op, store
from support.one_node import make_model

from ptxc.compiler import as_module, run_stages
from ptxc.dialects.loop import parallel_loop, run_main
from ptxc.ir import verify
from ptxc.ir.types import F32, BufferType
from ptxc.lower import gpu_map

RNG = np.random.default_rng(33)


def map_only(m, schedule, monkeypatch):
    """map-to-gpu with ``schedule`` then pointwise; returns the launches' schedule names."""
    with monkeypatch.context() as mp:
        mp.setattr(gpu_map, "SCHEDULES",
                   [(n, s) for n, s in gpu_map.SCHEDULES if n in (schedule, "pointwise")])
        gpu_map.map_to_gpu(m)
    verify(m)
    return [o.attributes["schedule"] for o in m.walk() if o.name == "gpu.launch"]


def doubled(shape, lower, upper):
    def body(b, x, y):
        _, p, ivs = parallel_loop(b, lower, upper)
        store(p, op(p, "arith.mul", load(p, x, *ivs), const(p, 2.0, F32)), y, *ivs)
    return module({"x": BufferType(shape, F32), "y": BufferType(shape, F32)}, ["y"], body)


def test_a_1d_nest_inside_a_larger_buffer_writes_exactly_its_points(monkeypatch):
    m = doubled((200,), (10,), (110,))            # 100 points: one block of 128, guarded
    x = RNG.standard_normal(200).astype(np.float32)
    want = np.full(200, np.nan, np.float32)
    want[10:110] = 2 * x[10:110]
    np.testing.assert_array_equal(run_main(m, {"x": x})["y"], want)
    assert map_only(m, "pointwise", monkeypatch) == ["pointwise"]
    np.testing.assert_array_equal(run_main(m, {"x": x})["y"], want)


def test_a_2d_nest_inside_a_larger_buffer_writes_exactly_its_points(monkeypatch):
    m = doubled((6, 64), (1, 3), (4, 50))         # 3 x 47 = 141 points over 160 threads
    x = RNG.standard_normal((6, 64)).astype(np.float32)
    want = np.full((6, 64), np.nan, np.float32)
    want[1:4, 3:50] = 2 * x[1:4, 3:50]
    assert map_only(m, "pointwise", monkeypatch) == ["pointwise"]
    np.testing.assert_array_equal(run_main(m, {"x": x})["y"], want)


def test_every_block_of_a_grid_that_does_not_divide_evenly_runs(monkeypatch):
    m = doubled((300,), (0,), (300,))             # 300 points: 2 blocks of 256
    x = RNG.standard_normal(300).astype(np.float32)
    assert map_only(m, "pointwise", monkeypatch) == ["pointwise"]
    (launch,) = [o for o in m.walk() if o.name == "gpu.launch"]
    assert launch.attributes["grid"][0] * launch.attributes["block"][0] >= 300
    np.testing.assert_array_equal(run_main(m, {"x": x})["y"], 2 * x)


def test_tiled_matmul_with_a_tail_chunk_of_one(monkeypatch):
    a = RNG.standard_normal((64, 33)).astype(np.float32)
    w = RNG.standard_normal((33, 48)).astype(np.float32)
    loop = run_stages(as_module(make_model("MatMul", [("a", a), "w"], consts={"w": w})), "loop")
    assert "tiled" in map_only(loop, "tiled", monkeypatch)
    got = run_main(loop, {"a": a})["y0"]
    want = a.astype(np.float64) @ w.astype(np.float64)
    bound = 2 * 33 * np.finfo(np.float32).eps * (np.abs(a).astype(np.float64) @ np.abs(w))
    assert (np.abs(got - want) <= bound).all(), float(np.abs(got - want).max())
