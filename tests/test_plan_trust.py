"""The plan trust model (issue 13; ptxc/plan/trust.py and the header checks of
ptxc/plan/load.py): files are read only when regular and only after their prefix checks out;
every kernel-table field is bounded; the IR may declare only the intrinsics ptxc emits;
``inspect`` raises only typed errors; HMAC-SHA256 signing.

Crafted plans here carry a recomputed checksum (``repack``), as an attacker's would."""

import os

import numpy as np
import pytest

import ptxc
from ptxc.codegen import build
from ptxc.driver.engine import Engine
from ptxc.plan.inspect import inspect_plan
from ptxc.driver.load import engine_from_plan
from ptxc.plan.save import plan_to_bytes
from ptxc.errors import PlanError
from ptxc.target import Target
from test_loop_dialect import PROGRAMS
from test_plan import edited, refused, repack, split


@pytest.fixture(scope="module")
def engine():
    m, inputs, _ = PROGRAMS["weights"]()
    return Engine.from_artifact(build(m, Target.host())), inputs


@pytest.fixture(scope="module")
def good(engine):
    return plan_to_bytes(engine[0])


def load_refused(path, cause, *words, **kw):
    with pytest.raises(PlanError) as e:
        ptxc.load(path, **kw)
    assert getattr(e.value, "cause", None) == cause, str(e.value)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


# ---- reading the file ----------------------------------------------------------------------

def test_fifo_and_directory_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "p.plan"
    os.mkfifo(fifo)  # opening it for reading would block forever without a writer
    load_refused(fifo, "file", "regular file")
    load_refused(tmp_path, "file", "regular file")
    with pytest.raises(PlanError):
        inspect_plan(fifo)


def test_huge_sparse_file_is_refused_before_it_is_read(tmp_path, good):
    p = tmp_path / "big.plan"
    with open(p, "wb") as f:
        f.write(b"NOTAPLAN" + b"\0" * 12)
        f.truncate(64 << 30)  # 64 GiB, sparse: reading it would exhaust memory
    load_refused(p, "magic")
    with open(p, "r+b") as f:
        f.write(good[:20])  # a real prefix: the size is then what refuses it
    load_refused(p, "file", "larger than this host's memory")
    with open(p, "r+b") as f:  # a header length of 2**40
        f.seek(12)
        f.write((1 << 40).to_bytes(8, "little"))
    load_refused(p, "header", "header length")


# ---- header fields -------------------------------------------------------------------------

def test_a_slot_dimension_of_10_to_the_30_is_a_plan_error(good):
    def big(h):
        s = h["kernel_table"]["slots"][0]
        s["shape"] = [10**30] + s["shape"][1:]
    bad = edited(good, big)
    refused(bad, "header", "shape[0]", str(10**30))


def test_an_oversized_trip_count_is_refused(good):
    bad = edited(good, lambda h: h["kernel_table"]["kernels"][0].update(trip_count=1 << 40))
    refused(bad, "header", "trip_count")
    bad = edited(good, lambda h: h["kernel_table"]["kernels"][0].update(trip_count=10**30))
    refused(bad, "header", "trip_count")


def test_a_scratch_slot_beyond_host_memory_is_refused(good):
    def grow(h):
        for s in h["kernel_table"]["slots"]:
            if s["kind"] == "arg":
                s["span"] = 2**47
                return
    refused(edited(good, grow), "header", "host's memory")


def test_a_trap_call_with_a_recomputed_checksum_is_refused(good):
    header, section = split(good)
    blob = next(b for b in header["blobs"] if b["kind"] == "llvm")
    text = section[blob["offset"]:blob["offset"] + blob["nbytes"]].decode()
    at = text.index("entry:", text.index("define void @")) + len("entry:")
    evil = text[:at] + "\n  call void @llvm.trap()" + text[at:] \
        + "\ndeclare void @llvm.trap()\n"
    data = evil.encode()
    blob["nbytes"] = len(data)
    blob["shape"] = [len(data)]
    # put the new text at the end of the section (64-aligned)
    at = -(-len(section) // 64) * 64
    blob["offset"] = at
    new_section = section + b"\0" * (at - len(section)) + data
    new_section += b"\0" * (-len(new_section) % 64)
    header["data_bytes"] = len(new_section)
    refused(repack(header, new_section), "code", "llvm.trap")


# ---- inspect ---------------------------------------------------------------------------------

@pytest.mark.parametrize("edit", [
    lambda h: h.update(bindings={"inputs": [{"name": 1}], "outputs": 5}),
    lambda h: h.update(kernel_table={"kernels": [{"buffers": [99]}], "slots": "x"}),
    lambda h: h.update(memory_plan={"arena_bytes": "many"}),
    lambda h: h["kernel_table"]["kernels"].append(None),
])
def test_inspect_raises_only_typed_errors(good, tmp_path, edit):
    p = tmp_path / "odd.plan"
    p.write_bytes(edited(good, edit))
    try:
        inspect_plan(p)
    except PlanError:
        pass
    with pytest.raises(PlanError):
        ptxc.load(p)


# ---- signing ----------------------------------------------------------------------------------

def test_signed_plans(engine, tmp_path, monkeypatch):
    e, inputs = engine
    want = e.run(inputs)
    p = tmp_path / "s.plan"
    e.save(p, key="sesame")
    assert ptxc.load(p, key="sesame").run(inputs)["y"].tobytes() == want["y"].tobytes()
    assert ptxc.load(p, key=b"sesame").run(inputs)["y"].tobytes() == want["y"].tobytes()
    load_refused(p, "signature", "give its key")
    load_refused(p, "signature", "does not match", key="other")
    monkeypatch.setenv("PTXC_PLAN_KEY", "sesame")
    ptxc.load(p)  # the key from the environment
    u = tmp_path / "u.plan"
    monkeypatch.delenv("PTXC_PLAN_KEY")
    e.save(u)
    ptxc.load(u)  # unsigned, no key: loads
    load_refused(u, "signature", "not signed", key="sesame")
    # a signed plan changed after signing, checksum recomputed: the HMAC catches it
    data = p.read_bytes()
    body, trailer = data[:-40], data[-40:]
    header, section = split(body)
    header["ptxc_note"] = "changed"
    (tmp_path / "t.plan").write_bytes(repack(header, section) + trailer)
    load_refused(tmp_path / "t.plan", "signature", "does not match", key="sesame")
    assert "signed" in inspect_plan(p)


def test_engine_from_plan_bytes_still_refuses_garbage():
    with pytest.raises(PlanError):
        engine_from_plan(b"PTXCPLAN" + b"\xff" * 40)
    with pytest.raises(PlanError):
        engine_from_plan(np.zeros(3, np.uint8))


def test_a_list_where_a_blob_dtype_should_be_is_a_plan_error(good):
    """Found by the plan fuzzer (tests/fuzz/crashes/plan-02c3d1031dcc647e): a TypeError."""
    bad = edited(good, lambda h: h["blobs"][0].update(dtype=[10**30]))
    refused(bad, "blob", "dtype")


# ---- a header edited alone: the code's own footprint refuses it ------------------------------

def _gather_plan():
    from tests.fuzz.harness import base_model
    return plan_to_bytes(ptxc.compile(base_model(), target="cpu"))


def nbytes(slot):
    return slot["span"] * np.dtype(slot["dtype"]).itemsize


def _shrink_input(h, name):
    """Shrink input ``name``'s first dimension in both its binding and its kernel-table slot,
    consistently (what a crafter who knows the format would do)."""
    for s in h["kernel_table"]["slots"]:
        if s["name"] == name:
            s["shape"] = [max(1, s["shape"][0] // 2)] + s["shape"][1:]
            s["span"] = int(np.prod(s["shape"]))
    for b in h["bindings"]["inputs"]:
        if b["name"] == name:
            b["shape"] = [max(1, b["shape"][0] // 2)] + b["shape"][1:]


@pytest.mark.parametrize("which", ["good", "gather"])
def test_a_shrunken_binding_with_a_recomputed_checksum_is_refused(good, which):
    data = good if which == "good" else _gather_plan()
    header, _ = split(data)
    name = next(s["name"] for s in header["kernel_table"]["slots"]
                if s["kind"] == "arg" and s["shape"] and s["shape"][0] > 1)
    bad = edited(data, lambda h: _shrink_input(h, name))
    refused(bad, "code", "was compiled for", f"slot {name!r}")


def test_a_trip_count_grown_within_its_buffers_is_refused():
    """Past the bound on any buffer's size (test_an_oversized_trip_count_is_refused), a trip
    count grown by one still fits the buffers' element counts; the kernel's range says no."""
    data = _gather_plan()
    header, _ = split(data)
    k = header["kernel_table"]["kernels"][0]
    most = max(header["kernel_table"]["slots"][i]["span"] for i in k["buffers"])
    assert k["trip_count"] + 1 <= most  # the old check alone let this through
    bad = edited(data, lambda h: h["kernel_table"]["kernels"][0].update(
        trip_count=k["trip_count"] + 1))
    refused(bad, "code", "trip count of", str(k["trip_count"]))


def test_swapped_buffers_of_one_kernel_are_refused():
    good = _gather_plan()
    header, _ = split(good)
    ks = header["kernel_table"]["kernels"]
    slots = header["kernel_table"]["slots"]
    k, (a, b) = next((i, (x, y)) for i, kk in enumerate(ks)
                     for x in range(len(kk["buffers"])) for y in range(x + 1, len(kk["buffers"]))
                     if nbytes(slots[kk["buffers"][x]]) != nbytes(slots[kk["buffers"][y]]))

    def swap(h):
        bufs = h["kernel_table"]["kernels"][k]["buffers"]
        bufs[a], bufs[b] = bufs[b], bufs[a]
    refused(edited(good, swap), "code", "was compiled for")


def test_the_kernels_state_their_footprint(engine):
    e, _ = engine
    text = e.program.program.text
    for k in e.kernels.kernels:
        line = next(x for x in text.splitlines() if x.startswith("define")
                    and f'@"{k.name}"' in x or f"@{k.name}(" in x)
        assert f"range(i64 0, {k.trip_count + 1})" in line, line
        for i in k.buffers:
            s = e.kernels.slots[i]
            assert f"dereferenceable({s.span * np.dtype(s.dtype).itemsize})" in line, line


# ---- every way a signature can be fooled -------------------------------------------------------
# A signature check is only as strong as its weakest comparison: each way of editing the trailer
# of a signed plan is refused with the right key, with a PlanError of cause ``signature``.

@pytest.fixture(scope="module")
def signed_plan(engine, tmp_path_factory):
    p = tmp_path_factory.mktemp("signed") / "s.plan"
    engine[0].save(p, key="sesame")
    data = p.read_bytes()
    assert data[-40:-32] == b"PTXCSIG1"
    return data


def _flip(data: bytes, at: int, bit: int = 0x01) -> bytes:
    b = bytearray(data)
    b[at] ^= bit
    return bytes(b)


def _with_mac(data: bytes, mac: bytes) -> bytes:
    return data[:-32] + mac


def _hmac(key: bytes, body: bytes) -> bytes:
    import hashlib
    import hmac
    return hmac.new(key, body, hashlib.sha256).digest()


MAC_EDITS = {
    "first MAC byte flipped": lambda d: _flip(d, len(d) - 32),
    "a byte inside the first half flipped": lambda d: _flip(d, len(d) - 25, 0x80),
    "last byte of the first half flipped": lambda d: _flip(d, len(d) - 17),
    "first byte of the second half flipped": lambda d: _flip(d, len(d) - 16),
    "a byte inside the second half flipped": lambda d: _flip(d, len(d) - 7, 0x10),
    "last MAC byte flipped": lambda d: _flip(d, len(d) - 1),
    "MAC halves swapped": lambda d: _with_mac(d, d[-16:] + d[-32:-16]),
    "MAC truncated by one byte": lambda d: d[:-1],
    "MAC truncated to its first half": lambda d: d[:-16],
    "MAC empty (the magic tag alone)": lambda d: d[:-32],
    "right length, all zeros": lambda d: _with_mac(d, bytes(32)),
    "right length, another key's MAC": lambda d: _with_mac(d, _hmac(b"other", d[:-40])),
    "right length, a keyless SHA-256 of the plan": lambda d: _with_mac(
        d, __import__("hashlib").sha256(d[:-40]).digest()),
    "right length, the MAC of the plan with its tag": lambda d: _with_mac(
        d, _hmac(b"sesame", d[:-32])),
    "a second trailer appended": lambda d: d + d[-40:],
}


@pytest.mark.parametrize("edit", list(MAC_EDITS))
def test_every_edit_of_the_signature_is_refused(signed_plan, tmp_path, edit):
    bad = MAC_EDITS[edit](signed_plan)
    assert bad != signed_plan
    p = tmp_path / "bad.plan"
    p.write_bytes(bad)
    load_refused(p, "signature", key="sesame")
    load_refused(p, "signature", key=b"sesame")


def test_the_signature_compares_the_whole_mac_in_constant_time(signed_plan, tmp_path,
                                                                 monkeypatch):
    """One ``hmac.compare_digest`` of the stored 32-byte MAC against the 32-byte expected one:
    not ``==`` (its time tells an attacker how many leading bytes were right), not a prefix."""
    import hmac
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((bytes(a), bytes(b)))
        return real(a, b)
    monkeypatch.setattr(hmac, "compare_digest", spy)
    p = tmp_path / "s.plan"
    p.write_bytes(signed_plan)
    ptxc.load(p, key="sesame")
    assert calls == [(signed_plan[-32:], _hmac(b"sesame", signed_plan[:-40]))]


def test_a_signed_plan_loads_only_whole(signed_plan, tmp_path):
    """The refusals above are not of a plan that never loads: the same bytes, unedited, load
    with the key; stripped of their trailer they load only without one (an unsigned plan)."""
    p = tmp_path / "s.plan"
    p.write_bytes(signed_plan)
    ptxc.load(p, key="sesame")
    p.write_bytes(signed_plan[:-40])
    load_refused(p, "signature", "not signed", key="sesame")


def test_an_empty_key_is_refused(engine, tmp_path, monkeypatch):
    """An HMAC under the empty key is one anybody can compute: neither signing nor loading
    takes it (an empty PTXC_PLAN_KEY counts as no key)."""
    e, _ = engine
    p = tmp_path / "s.plan"
    for key in ("", b""):
        with pytest.raises(PlanError, match="non-empty"):
            e.save(p, key=key)
    e.save(p, key="sesame")
    for key in ("", b""):
        with pytest.raises(PlanError, match="non-empty"):
            ptxc.load(p, key=key)
    monkeypatch.setenv("PTXC_PLAN_KEY", "")
    load_refused(p, "signature", "give its key")


def test_an_output_binding_edited_alone_is_refused(good):
    """The bindings are checked against the kernel table's argument slots, outputs as well as
    inputs: an output's shape or dtype edited in the header alone would have the runtime hand
    back an array the kernels never wrote."""
    def out(h, **kv):
        h["bindings"]["outputs"][0].update(kv)
    refused(edited(good, lambda h: out(h, shape=[3, 4])), "header", "bindings outputs")
    refused(edited(good, lambda h: out(h, dtype="float64")), "header", "bindings outputs")
    refused(edited(good, lambda h: h["bindings"]["inputs"][0].update(shape=[1])), "header",
            "bindings inputs")


def test_ir_that_lacks_a_kernel_of_the_table_is_refused():
    """The stored IR defines every kernel the table launches: one cut out (its calls would find
    nothing, or an older function of that name) is refused."""
    from test_plan import _with_text, cpu_engine
    m, _, _ = PROGRAMS["softmax"]()
    good = plan_to_bytes(cpu_engine(m))

    def cut(text, name="kernel_1"):
        lines = text.splitlines(keepends=True)
        start = next(i for i, x in enumerate(lines) if x.startswith(f'define void @"{name}"('))
        end = next(i for i in range(start, len(lines)) if lines[i].rstrip() == "}")
        return "".join(lines[:start] + lines[end + 1:])
    refused(_with_text(good, cut), "code", "lacks kernels", "kernel_1")
