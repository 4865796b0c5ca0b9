"""Plan files: hand-written loop programs compiled into Engines, saved and loaded back.

Round trips give the same bits without the compiler pipeline (its entry points raise while
loading); the bytes follow the documented layout (read here by an independent parser); every
damage, foreign file and mismatch is refused with a PlanError whose ``cause`` names it; Python
payloads in the header or in a weight stay data."""

import hashlib
import json
import pickle
import struct

import numpy as np
import pytest

import ptxc
import ptxc.codegen
import ptxc.codegen.host
import ptxc.compiler
import ptxc.driver.cpu
import ptxc.lower.loop_to_llvm
import ptxc.rewrite.pass_manager
from ptxc.dialects.loop import parallel_loop
from ptxc.codegen import build
from ptxc.driver.engine import Engine
from ptxc.plan import load as planmod
from ptxc.plan.format import decode_plan, encode_plan
from ptxc.driver.load import engine_from_plan
from ptxc.plan.save import plan_to_bytes
from ptxc.errors import PlanError
from ptxc.ir import DenseElements
from ptxc.ir.types import UI8
from ptxc.lower.loop_to_llvm import KernelTable
from ptxc.target import Target
from test_loop_dialect import PROGRAMS, buf, load, module, op, store

ROUND_TRIP = ["weights", "softmax", "int_and_bool", "views", "elementwise_f16", "prefix_sum"]


def cpu_engine(m):
    """The Engine of a loop module built for this host."""
    return Engine.from_artifact(build(m, Target.host()))


@pytest.fixture(scope="module")
def weights_engine():
    m, inputs, _ = PROGRAMS["weights"]()
    return cpu_engine(m), inputs


@pytest.fixture(scope="module")
def good(weights_engine):
    return plan_to_bytes(weights_engine[0])


# ---- an independent reader/writer of the documented layout ---------------------------------

def split(data: bytes):
    """(header dict, blob section bytes) of a well-formed plan."""
    magic, version, hlen = struct.unpack("<8sIQ", data[:20])
    assert magic == b"PTXCPLAN" and version == 2
    start = -(-(20 + hlen) // 64) * 64
    assert data[20 + hlen:start] == b"\0" * (start - 20 - hlen)
    return json.loads(data[20:20 + hlen]), data[start:-32]


def repack(header: dict, section: bytes, version: int = 2, raw_header: bytes | None = None):
    """A plan with this header and blob section and a correct checksum."""
    head = raw_header if raw_header is not None else json.dumps(header).encode()
    start = -(-(20 + len(head)) // 64) * 64
    body = struct.pack("<8sIQ", b"PTXCPLAN", version, len(head)) + head
    body += b"\0" * (start - len(body)) + section
    return body + hashlib.sha256(body).digest()


def edited(data: bytes, edit) -> bytes:
    header, section = split(data)
    edit(header)
    return repack(header, section)


def refused(data, cause: str, *words):
    with pytest.raises(PlanError) as e:
        engine_from_plan(data)
    assert e.value.cause == cause, str(e.value)
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    return e.value


# ---- round trips ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ROUND_TRIP)
def test_round_trip_same_bits_without_the_compiler(name, tmp_path, monkeypatch):
    m, inputs, _ = PROGRAMS[name]()
    engine = cpu_engine(m)
    want = engine.run(inputs)
    path = tmp_path / "model.plan"
    engine.save(path)

    forbidden = _forbidden
    monkeypatch.setattr(ptxc.compiler, "run_stages", forbidden)
    monkeypatch.setattr(ptxc.compiler, "compile", forbidden)
    monkeypatch.setattr(ptxc.lower.loop_to_llvm, "lower_loop_to_llvm", forbidden)
    monkeypatch.setattr(ptxc.driver.cpu, "lower_loop_to_llvm", forbidden)
    monkeypatch.setattr(ptxc.rewrite.pass_manager.PassManager, "run", forbidden)
    monkeypatch.setattr(ptxc.codegen, "build", forbidden)
    monkeypatch.setattr(ptxc.codegen.host, "compile_object", forbidden)
    loaded = ptxc.load(path)
    assert loaded.inputs == engine.inputs and loaded.outputs == engine.outputs
    assert loaded.kernels == engine.kernels and loaded.llvm_text == engine.llvm_text
    assert set(loaded.timings) == {"load", "jit"}
    got = loaded.run(inputs)
    assert set(got) == set(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape
        assert got[k].tobytes() == want[k].tobytes(), k
    # deterministic: the loaded engine saves to the same bytes
    assert plan_to_bytes(loaded) == path.read_bytes()


def test_a_loaded_plan_keeps_the_runtime_options_it_was_saved_with(tmp_path):
    """A cpu plan records the engine's min_parallel_work (the work under which a kernel runs
    on one thread); the loaded engine runs with that value, not the runtime's default, and so
    saves to the same bytes."""
    m, inputs, _ = PROGRAMS["weights"]()
    engine = Engine.from_artifact(build(m, Target.host()), min_parallel_work=7)
    data = plan_to_bytes(engine)
    header, _ = split(data)
    assert header["options"]["min_parallel_work"] == 7
    (tmp_path / "m.plan").write_bytes(data)
    for loaded in (engine_from_plan(data), ptxc.load(tmp_path / "m.plan")):
        assert loaded.program.min_parallel_work == 7
        assert plan_to_bytes(loaded) == data
        assert loaded.run(inputs)["y"].tobytes() == engine.run(inputs)["y"].tobytes()


def test_compiled_model_round_trip(tmp_path, monkeypatch):
    """ptxc.compile end to end (a conv with weights, relu, max pool), saved and loaded with the
    compiler disabled: the same bits."""
    rng = np.random.default_rng(0)
    net = ptxc.Network("small")
    x = net.add_input("x", (1, 3, 10, 10))
    y = net.add_conv(x, rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
                     rng.standard_normal(4).astype(np.float32), padding=1)
    net.mark_output(net.add_pooling(net.add_activation(y, "relu"), "max", kernel=2), "y")
    engine = ptxc.compile(net, target="cpu")
    engine.save(tmp_path / "small.plan")
    monkeypatch.setattr(ptxc.compiler, "run_stages", _forbidden)
    loaded = ptxc.load(tmp_path / "small.plan")
    assert any(s.kind == "global" for s in loaded.kernels.slots)
    xs = rng.standard_normal((1, 3, 10, 10)).astype(np.float32)
    assert loaded.run({"x": xs})["y"].tobytes() == engine.run({"x": xs})["y"].tobytes()


def _forbidden(*a, **k):
    raise AssertionError("loading a plan ran the compiler")


def test_layout_matches_the_documented_format(weights_engine, good):
    engine, _ = weights_engine
    header, section = split(good)
    assert hashlib.sha256(good[:-32]).digest() == good[-32:]
    assert header["format"] == "ptxc-plan" and header["format_version"] == 2
    assert header["ptxc_version"] == ptxc.__version__ and header["target"] == "cpu"
    assert header["arch"] is None and header["host"]["triple"] and header["host"]["cpu_name"]
    assert header["options"]["precision"] == "fp32"
    assert ("memory_plan" in header) == (header["options"]["allocator"] == "arena")
    assert header["bindings"] == {"inputs": [{"name": "x", "shape": [3, 8], "dtype": "float32"}],
                                  "outputs": [{"name": "y", "shape": [3, 8],
                                               "dtype": "float32"}]}
    assert KernelTable.from_json(header["kernel_table"]) == engine.kernels
    blobs = {(b["name"], b["kind"]): b for b in header["blobs"]}
    assert set(blobs) == {("module", "llvm"), ("module", "object"), ("w", "weight")}
    start = len(good) - 32 - len(section)
    assert start % 64 == 0 and len(section) == header["data_bytes"]
    for b in blobs.values():
        assert (start + b["offset"]) % 64 == 0
    w, text = blobs[("w", "weight")], blobs[("module", "llvm")]
    w_want = engine.program.program.globals["w"].astype("<f4").tobytes()
    assert section[w["offset"]:w["offset"] + w["nbytes"]] == w_want
    assert section[text["offset"]:text["offset"] + text["nbytes"]].decode() == engine.llvm_text


def test_memory_plan_round_trip(tmp_path):
    mp = pytest.importorskip("ptxc.codegen.memory_plan")
    from ptxc.driver.arena import ArenaAllocator
    m, inputs, _ = PROGRAMS["softmax"]()
    engine = cpu_engine(m)
    engine.program.allocator = ArenaAllocator()
    data = plan_to_bytes(engine)  # before any run: planned while saving
    header, _ = split(data)
    plan = mp.MemoryPlan.from_json(header["memory_plan"])
    assert header["options"]["allocator"] == "arena" and len(plan.buffers) == 2
    want = engine.run(inputs)
    assert engine.program.allocator.plan.offsets == plan.offsets
    engine.save(tmp_path / "a.plan")
    loaded = ptxc.load(tmp_path / "a.plan")
    alloc = loaded.program.allocator
    assert isinstance(alloc, ArenaAllocator) and alloc.plan.offsets == plan.offsets
    assert loaded.memory_plan is alloc.plan
    assert loaded.run(inputs)["y"].tobytes() == want["y"].tobytes()
    # a plan for other scratch buffers is refused
    bad = edited(data, lambda h: h["memory_plan"]["buffers"][0].update(size=8, first=0))
    refused(bad, "header", "memory plan")


def _plan_sharing_live_bytes(plan: dict) -> dict:
    """``plan`` (a memory plan's JSON) edited so that two buffers the kernels use at one step
    share bytes, and consistent in itself: the earlier one's lifetime is cut to end before the
    later one's first use and the later one moved onto it; arena, lower bound and no-reuse
    sizes recomputed here by hand. Only the kernel table says the edit is a lie."""
    from ptxc.codegen.memory_plan import MemoryPlan
    n = len(plan["buffers"])
    for i in range(n):
        for j in range(n):
            d = json.loads(json.dumps(plan))
            a, b = d["buffers"][i], d["buffers"][j]
            roots = [r for r in d["buffers"]
                     if r["alias_of"] is None and r["first"] >= 0 and r["size"]]
            if not (a in roots and b in roots and a["first"] < b["first"] <= a["last"]
                    and a["offset"] != b["offset"]):
                continue
            a["last"] = b["first"] - 1
            b["offset"] = a["offset"]
            al = d["alignment"]
            size = lambda r: -(-r["size"] // al) * al  # noqa: E731
            d["arena_bytes"] = max(r["offset"] + size(r) for r in roots)
            d["no_reuse_bytes"] = sum(size(r) for r in roots)
            steps = range(min(r["first"] for r in roots), max(r["last"] for r in roots) + 1)
            d["lower_bound_bytes"] = max(sum(size(r) for r in roots
                                             if r["first"] <= t <= r["last"]) for t in steps)
            try:
                MemoryPlan.from_json(d)                # a valid plan in itself
            except PlanError:
                continue                               # it overlaps a third buffer: next pair
            return d
    raise AssertionError("no two buffers of this plan can be made to share bytes")


def test_a_memory_plan_edited_in_its_lifetimes_alone_is_refused(cuda_good):
    """A plan's memory plan must match the kernel table's scratch buffers in lifetimes too, not
    only in names and sizes: two buffers live at one step, placed on the same bytes by a plan
    whose lifetimes were edited to be disjoint (checksum recomputed), would corrupt each other.
    Loading refuses it (cause "header"); on cpu nothing else would before the first run (the
    arena's own check, a CompileError there)."""
    m, _, _ = PROGRAMS["softmax"]()
    for data in (plan_to_bytes(cpu_engine(m)), cuda_good):
        header, _ = split(data)
        bad = _plan_sharing_live_bytes(header["memory_plan"])
        refused(edited(data, lambda h: h.update(memory_plan=bad)), "header", "memory plan")


def test_engine_save_and_ptxc_load_api(weights_engine, tmp_path):
    engine, inputs = weights_engine
    assert "load" in ptxc.__all__ and ptxc.load is ptxc.driver.load.load_plan
    engine.save(str(tmp_path / "m.plan"))
    loaded = ptxc.load(str(tmp_path / "m.plan"), threads=1)
    assert loaded.program.threads == 1
    assert loaded.run(inputs)["y"].tobytes() == engine.run(inputs)["y"].tobytes()
    with pytest.raises(PlanError, match="cannot read"):
        ptxc.load(tmp_path / "missing.plan")
    other = Engine("tpu", engine.program, engine.inputs, engine.outputs, {})
    with pytest.raises(PlanError, match="target 'tpu'"):
        plan_to_bytes(other)


# ---- refusals --------------------------------------------------------------------------------

def test_not_a_plan(good):
    refused(b"", "truncated")
    refused(b"PTXC", "truncated")
    refused(b"NOTAPLAN" + good[8:], "magic", "not a ptxc plan")
    refused(b"\x08\x07\x12\x04onnx model bytes", "magic")
    refused(pickle.dumps({"a": 1}), "magic")


def test_every_truncation_is_named(good):
    for n in range(len(good)):
        refused(good[:n], "truncated")


def test_every_flipped_byte_is_refused(good):
    data = bytearray(good)
    hlen = struct.unpack("<Q", good[12:20])[0]
    for i in range(len(good)):
        data[i] ^= 0xFF
        with pytest.raises(PlanError) as e:
            decode_plan(bytes(data))
        data[i] ^= 0xFF
        cause = e.value.cause
        if i < 8:
            assert cause == "magic", i
        elif i < 12:
            assert cause == "format", i
        elif i < 20:
            assert cause in ("truncated", "checksum"), (i, cause)
        else:
            assert cause == "checksum", (i, cause, i - 20 < hlen)
    # a flipped low bit too (a digit of the header becoming another digit)
    for i in range(20, len(good)):
        data[i] ^= 0x01
        with pytest.raises(PlanError):
            decode_plan(bytes(data))
        data[i] ^= 0x01


def test_another_format(good):
    header, section = split(good)
    # version 1, before plans recorded their target, is refused as any other version
    e = refused(repack(header, section, version=1), "format", "version 1", "reads version 2")
    assert "plan" in str(e)
    refused(repack(header, section, version=3), "format", "version 3", "reads version 2")
    refused(edited(good, lambda h: h.update(format="onnx")), "format", "'onnx'")


def test_header_not_json_or_lacking_fields(good):
    header, section = split(good)
    refused(repack(header, section, raw_header=b"{not json"), "header", "JSON")
    refused(repack(header, section, raw_header=b"\xff\xfe{}"), "header", "JSON")
    refused(repack(header, section, raw_header=b"[1, 2]"), "header", "list")
    refused(repack(header, section, raw_header=b"[" * 100000), "header")
    refused(edited(good, lambda h: h.update(format_version=7)), "header", "format version 7")
    for key, cause in [("blobs", "header"), ("data_bytes", "header"), ("kernel_table", "header"),
                       ("bindings", "header"), ("host", "header"), ("options", "header"),
                       ("ptxc_version", "version"), ("llvm_version", "version"),
                       ("target", "target")]:
        refused(edited(good, lambda h: h.pop(key)), cause)
    refused(edited(good, lambda h: h["kernel_table"]["kernels"][0].update(buffers=[0, 9])),
            "header", "kernel")
    refused(edited(good, lambda h: h["kernel_table"]["slots"][0].update(span=1)), "header",
            "span")
    refused(edited(good, lambda h: h["kernel_table"]["slots"][0].update(extra=1)), "header")
    refused(edited(good, lambda h: h["bindings"]["inputs"][0].update(shape=[8, 3])), "header",
            "bindings")
    refused(edited(good, lambda h: h["options"].update(min_parallel_work="many")), "header")


def _blob(h, name):
    return next(b for b in h["blobs"] if b["name"] == name)


def test_blob_out_of_bounds_or_ill_formed(good):
    refused(edited(good, lambda h: _blob(h, "w").update(offset=h["data_bytes"])), "blob",
            "outside")
    refused(edited(good, lambda h: _blob(h, "w").update(offset=-64)), "blob")
    refused(edited(good, lambda h: _blob(h, "w").update(offset=65)), "blob", "aligned")
    refused(edited(good, lambda h: _blob(h, "w").update(nbytes=10 ** 12)), "blob")
    refused(edited(good, lambda h: _blob(h, "w").update(shape=[3, 8, 1000])), "blob")
    refused(edited(good, lambda h: _blob(h, "w").update(offset=0)), "blob", "overlap")
    refused(edited(good, lambda h: _blob(h, "w").update(dtype="object", shape=[12])), "blob",
            "'object'")
    refused(edited(good, lambda h: _blob(h, "w").update(kind="pickle")), "blob")
    refused(edited(good, lambda h: _blob(h, "w").update(name="module", kind="llvm")), "blob",
            "repeated")
    # in bounds, but smaller than the buffer the kernels index
    refused(edited(good, lambda h: _blob(h, "w").update(shape=[2, 8], nbytes=64)), "blob",
            "needs 24 of float32")
    refused(edited(good, lambda h: _blob(h, "w").update(name="v")), "blob", "'w'")
    refused(edited(good, lambda h: _blob(h, "module").update(name="text")), "blob", "module")
    refused(edited(good, lambda h: h.update(data_bytes=h["data_bytes"] - 64)), "blob",
            "outside")
    refused(edited(good, lambda h: h.update(data_bytes=h["data_bytes"] + 64)), "truncated")
    end = max(b["offset"] + b["nbytes"] for b in split(good)[0]["blobs"])
    refused(edited(good, lambda h: h.update(data_bytes=end)), "header", "describes")


def test_a_blob_table_in_any_order_loads(weights_engine, good):
    """The blob table's order is not the blobs' order in the section: a plan that lists them
    in reverse (offsets unchanged) is the same plan, loads and runs alike; the overlap check
    compares the blobs by offset, so a weight moved onto the module's bytes is still refused
    whatever its place in the table."""
    engine, inputs = weights_engine
    header, _ = split(good)
    assert len(header["blobs"]) >= 3
    rev = edited(good, lambda h: h["blobs"].reverse())
    assert rev != good
    assert engine_from_plan(rev).run(inputs)["y"].tobytes() == engine.run(inputs)["y"].tobytes()

    def onto_module(h):
        h["blobs"].reverse()
        _blob(h, "w").update(offset=_blob(h, "module")["offset"] + 64)
    assert _blob(header, "module")["nbytes"] > 64 + 96
    refused(edited(good, onto_module), "blob", "overlap")


def test_another_version(good):
    refused(edited(good, lambda h: h.update(ptxc_version="0.0.1")), "version", "0.0.1",
            ptxc.__version__)
    refused(edited(good, lambda h: h.update(llvm_version="15.0.7")), "version", "15.0.7")


def test_another_target_or_arch(good, monkeypatch):
    refused(edited(good, lambda h: h["host"].update(triple="aarch64-unknown-linux-gnu")),
            "target", "aarch64")
    refused(edited(good, lambda h: h.update(target="tpu")), "target", "'tpu'")

    def cuda(arch):
        return edited(good, lambda h: h.update(target="cuda", arch=arch))
    monkeypatch.setattr(planmod, "device_arch", lambda: "sm_90")
    refused(cuda("sm_80"), "target", "sm_80", "sm_90")
    refused(cuda(None), "header", "arch")
    # a cpu plan relabelled cuda passes the arch check, then its kernels have no launch shape
    refused(cuda("sm_90"), "header", "grid")
    monkeypatch.setattr(planmod, "device_arch", lambda: None)
    refused(cuda("sm_90"), "header", "grid")  # no GPU: no arch check, the rest still runs


def test_device_arch_without_a_gpu():
    arch = planmod.device_arch()
    assert arch is None or (arch.startswith("sm_") and arch[3:].isdigit())


def _with_text(good: bytes, edit) -> bytes:
    header, blobs = decode_plan(good)
    text = edit(blobs[("llvm", "module")].tobytes().decode())
    arrays = [("module", "llvm", np.frombuffer(text.encode(), np.uint8))]
    arrays += [(n, k, a) for (k, n), a in blobs.items() if k != "llvm"]
    return encode_plan({k: v for k, v in header.items() if k not in ("blobs", "data_bytes")},
                       arrays)


def test_code_outside_what_loop_to_llvm_emits(good):
    assert engine_from_plan(_with_text(good, lambda t: t)).run  # the helper alone is fine
    call_system = ('declare i32 @"system"(ptr)\n', 'entry:\n  %"sys" = call i32 @"system"(ptr '
                   '%"b0")\n')

    def add_call(t, decl, call):
        return t.replace("entry:\n", call, 1) + decl
    refused(_with_text(good, lambda t: add_call(t, *call_system)), "code", "'system'")
    asm = 'entry:\n  call void asm sideeffect "nop", ""()\n'
    refused(_with_text(good, lambda t: add_call(t, "", asm)), "code", "inline assembly")
    ptr_call = 'entry:\n  call void %"b0"()\n'
    refused(_with_text(good, lambda t: add_call(t, "", ptr_call)), "code", "pointer")
    refused(_with_text(good, lambda t: t + "\ndefine void @extra() {\n  ret void\n}\n"),
            "code", "'extra'")
    refused(_with_text(good, lambda t: t + '\n@g = global i32 0\n'), "code", "global")
    refused(_with_text(good, lambda t: t.replace("kernel_0", "kernel_9")), "code")
    refused(_with_text(good, lambda t: t[:len(t) // 2]), "code", "does not parse")
    # the table calls kernel_0 with two buffers; its code takes three
    refused(edited(good, lambda h: h["kernel_table"]["kernels"][0].update(buffers=[0, 1])),
            "code", "takes 5 arguments")


# ---- the file is data ----------------------------------------------------------------------------

class _OpensAFile:
    """Unpickling this creates the file at ``path``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_python_payloads_stay_data(tmp_path, monkeypatch):
    marker = tmp_path / "unpickled"
    payload = pickle.dumps(_OpensAFile(marker))
    probe = tmp_path / "probe"
    pickle.loads(pickle.dumps(_OpensAFile(probe))).close()
    assert probe.exists()  # the payload is live: unpickling it would create the marker
    w = np.frombuffer(payload, np.uint8)
    n = w.size

    def body(b, x, y):
        g = b.create("loop.global", [], {"name": "w", "value": DenseElements(w.copy())}).result
        _, p, (i,) = parallel_loop(b, (0,), (n,))
        store(p, op(p, "arith.add", load(p, x, i), load(p, g, i)), y, i)
    m = module({"x": buf((n,), UI8), "y": buf((n,), UI8)}, ["y"], body)
    engine = cpu_engine(m)
    code = f"__import__('os').system('touch {marker}')"
    evil = f"eval(compile({code!r}, 'x', 'exec'))"

    def inject(h):
        h.update({"__reduce__": ["os.system", [f"touch {marker}"]], "py/object": "os.system",
                  "!!python/object/apply:os.system": [f"touch {marker}"], "__class__": evil})
        h["options"]["precision"] = code
        h["host"]["cpu_name"] = evil
        h["kernel_table"]["kernels"][0]["loc"] = code
    data = edited(plan_to_bytes(engine), inject)
    engine_from_plan(data)  # warm: every module a load imports is imported

    def forbidden(*a, **k):
        raise AssertionError("loading a plan unpickled or evaluated something")
    import builtins
    for mod, name in [(pickle, "loads"), (pickle, "load"), (pickle, "Unpickler"),
                      (np, "load"), (builtins, "eval"), (builtins, "exec")]:
        monkeypatch.setattr(mod, name, forbidden)
    loaded = engine_from_plan(data)
    monkeypatch.undo()
    assert not marker.exists()
    assert loaded.kernels.kernels[0].loc == code and loaded.precision == code
    x = np.arange(n, dtype=np.uint8)
    np.testing.assert_array_equal(loaded.run({"x": x})["y"], x + w)
    _, blobs = decode_plan(data)
    assert blobs[("weight", "w")].tobytes() == payload
    assert not marker.exists()


# ---- cuda plans (built and loaded without a GPU) ------------------------------------------------

def small_cuda_engine(arch: str = "sm_90"):
    """A cuda engine with weights, scratch buffers and several kernels (conv, relu, max pool,
    softmax), compiled here for ``arch``: no GPU needed."""
    rng = np.random.default_rng(1)
    net = ptxc.Network("small")
    x = net.add_input("x", (2, 3, 6, 6))
    y = net.add_conv(x, rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
                     rng.standard_normal(4).astype(np.float32), padding=1)
    y = net.add_flatten(net.add_pooling(net.add_activation(y, "relu"), "max", kernel=2))
    net.mark_output(net.add_softmax(y), "y")
    return ptxc.compile(net, target="cuda", arch=arch)


@pytest.fixture(scope="module")
def cuda_engine():
    """A cuda engine with weights, scratch buffers and several kernels, for sm_90."""
    return small_cuda_engine()


@pytest.fixture(scope="module")
def cuda_good(cuda_engine):
    return plan_to_bytes(cuda_engine)


def test_cuda_round_trip_without_the_compiler(cuda_engine, cuda_good, tmp_path, monkeypatch):
    import ptxc.ptx
    from ptxc.errors import DeviceError
    path = tmp_path / "model.plan"
    cuda_engine.save(path)
    assert path.read_bytes() == cuda_good
    for mod, name in ((ptxc.compiler, "run_stages"), (ptxc.compiler, "compile"),
                      (ptxc.lower.loop_to_llvm, "lower_loop_to_llvm"),
                      (ptxc.codegen.builder, "lower_to_ptx"), (ptxc.ptx, "optimize_nvptx"),
                      (ptxc.rewrite.pass_manager.PassManager, "run"), (ptxc.codegen, "build")):
        monkeypatch.setattr(mod, name, _forbidden)
    monkeypatch.setattr(planmod, "device_arch", lambda: None)
    loaded = ptxc.load(path)
    header, blobs = decode_plan(cuda_good)
    assert header["target"] == "cuda" and header["arch"] == "sm_90" and header["host"] is None
    assert header["options"] == {"precision": "fp32", "cuda_graph": True}
    assert blobs[("ptx", "module")].tobytes().decode() == cuda_engine.ptx == loaded.ptx
    assert ("llvm", "module") not in blobs
    assert loaded.kernels == cuda_engine.kernels  # launch shapes, schedules, shared bytes
    assert all(k.grid and k.block and k.schedule for k in loaded.kernels.kernels)
    assert loaded.memory_plan.to_json() == cuda_engine.memory_plan.to_json()
    assert loaded.inputs == cuda_engine.inputs and loaded.outputs == cuda_engine.outputs
    for s in loaded.kernels.slots:
        if s.kind == "global":
            want = cuda_engine.program.ptx_program.globals[s.name]
            assert loaded.program.ptx_program.globals[s.name].tobytes() == want.tobytes()
    assert set(loaded.timings) == {"load"} and loaded.program.exact_arch
    assert plan_to_bytes(loaded) == cuda_good  # deterministic
    from numba import cuda
    monkeypatch.setattr(cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match="no CUDA GPU"):
        loaded.run({"x": np.zeros((2, 3, 6, 6), np.float32)})


def test_cuda_plan_arch_is_checked_against_the_device(cuda_good, monkeypatch):
    monkeypatch.setattr(planmod, "device_arch", lambda: "sm_80")
    refused(cuda_good, "target", "sm_90", "sm_80")
    monkeypatch.setattr(planmod, "device_arch", lambda: "sm_100")
    refused(cuda_good, "target", "sm_90", "sm_100")  # exact: tiles were chosen for sm_90
    monkeypatch.setattr(planmod, "device_arch", lambda: "sm_90")
    assert engine_from_plan(cuda_good).arch == "sm_90"
    # a plan with a wgmma kernel is built for sm_90a: the sm_90 device's own arch
    assert engine_from_plan(edited(cuda_good, lambda h: h.update(arch="sm_90a"))).arch == \
        "sm_90a"
    refused(edited(cuda_good, lambda h: h.update(arch="sm_80a")), "target", "sm_80a", "sm_90")
    refused(edited(cuda_good, lambda h: h.update(arch="gfx90a")), "header", "gfx90a")
    monkeypatch.setattr(planmod, "device_arch", lambda: None)
    assert engine_from_plan(cuda_good).arch == "sm_90"  # no GPU: loads; its run says so
    # the cuda plan does not depend on the LLVM that built it
    assert engine_from_plan(edited(cuda_good, lambda h: h.update(llvm_version="15.0.7")))


def _with_ptx(data: bytes, edit) -> bytes:
    header, blobs = decode_plan(data)
    arrays = []
    for (k, n), a in blobs.items():
        if k == "ptx":
            text = edit(a.tobytes().decode())
            if text is None:
                continue
            a = np.frombuffer(text.encode(), np.uint8)
        arrays.append((n, k, a))
    return encode_plan({k: v for k, v in header.items() if k not in ("blobs", "data_bytes")},
                       arrays)


def test_cuda_plan_refusals(cuda_good, monkeypatch):
    monkeypatch.setattr(planmod, "device_arch", lambda: None)
    assert engine_from_plan(_with_ptx(cuda_good, lambda t: t)).ptx  # the helper alone is fine
    refused(_with_ptx(cuda_good, lambda t: None), "blob", "PTX")
    refused(_with_ptx(cuda_good, lambda t: t.replace(".entry kernel_1(", ".entry other(")),
            "code", "other")
    refused(_with_ptx(cuda_good, lambda t: t.replace(".target sm_90", "")), "code", ".target")
    one_more = "kernel_0_param_0,\n\t.param .u64 kernel_0_param_x"  # first use: the .entry
    refused(_with_ptx(cuda_good, lambda t: t.replace("kernel_0_param_0", one_more, 1)), "code",
            "parameters")

    def kernel0(**kw):
        return edited(cuda_good, lambda h: h["kernel_table"]["kernels"][0].update(**kw))
    refused(kernel0(grid=None), "header", "grid")
    refused(kernel0(block=[2048, 1, 1]), "header", "block")
    refused(kernel0(block=[0, 1, 1]), "header", "block")
    refused(kernel0(grid=[1, 1]), "header", "grid")
    refused(kernel0(shared_bytes=-1), "header", "shared")
    refused(edited(cuda_good, lambda h: h.pop("memory_plan")), "header", "memory plan")
    refused(edited(cuda_good, lambda h: h["options"].pop("cuda_graph")), "header", "cuda_graph")
    refused(edited(cuda_good, lambda h: h.update(arch="gfx90a")), "header", "gfx90a")


def test_a_cuda_plan_edited_in_the_header_alone_is_refused(cuda_good):
    """The PTX states each kernel's footprint (ptxc.ptx.footprint_lines): a binding shrunk with
    its slot, a grid grown or buffers swapped in the header alone, checksum recomputed, is
    refused (PlanError, cause "code")."""
    header, _ = split(cuda_good)
    arg = next(s for s in header["kernel_table"]["slots"]
               if s["kind"] == "arg" and s["shape"] and s["shape"][0] > 1)

    def shrink(h):
        for s in h["kernel_table"]["slots"]:
            if s["name"] == arg["name"]:
                s["shape"] = [1] + s["shape"][1:]
                s["span"] = int(np.prod(s["shape"]))
        for b in h["bindings"]["inputs"] + h["bindings"]["outputs"]:
            if b["name"] == arg["name"]:
                b["shape"] = [1] + b["shape"][1:]
    refused(edited(cuda_good, shrink), "code", "was compiled for")

    def grow(h):
        h["kernel_table"]["kernels"][0]["grid"][0] += 1
    refused(edited(cuda_good, grow), "code", "kernel_0")
    _, blobs = decode_plan(cuda_good)
    ptx = blobs[("ptx", "module")].tobytes().decode()
    assert "// ptxc footprint kernel_0 grid" in ptx
