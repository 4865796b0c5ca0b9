"""The structural check of a cpu plan's object code (ptxc/plan/object_code.py): a damaged ELF
table is a PlanError (cause "code") before LLVM's object loader sees it.

Before the check, each damage below, in a plan with a recomputed checksum, killed the process
inside ``add_object_file`` (SIGSEGV or SIGABRT; the plan fuzzer's 4 open crashes, and 11 more
found by object-table flips: a changed ELF magic byte, a section header table offset of
0x1800000258, a symbol outside its section). The fuzz worker replays a seeded set of such
damages in a child process (slow test), so a crash there fails the test instead of pytest."""

import hashlib
import random
import struct

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

import ptxc
from ptxc.codegen.host import LIBGCC as _LIBGCC, LIBM as _LIBM
from ptxc.plan.object_code import check_object
from ptxc.plan.save import plan_to_bytes
from ptxc.lower.loop_to_llvm import host_target
from test_plan import refused, split


def _model():
    """Softmax, Tanh, Erf: kernels whose object has relocations against libm symbols."""
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=1),
             helper.make_node("Tanh", ["s"], ["t"]), helper.make_node("Erf", ["t"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [3, 37])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [3, 37])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def engine():
    return ptxc.compile(_model(), target="cpu")


@pytest.fixture(scope="module")
def obj(engine):
    return engine.program.object_code


@pytest.fixture(scope="module")
def good(engine):
    return plan_to_bytes(engine)


def check(blob, engine):
    check_object(blob, host_target()[0], [k.name for k in engine.kernels.kernels],
                 set(_LIBM) | set(_LIBGCC))


def sections(obj):
    shoff, = struct.unpack_from("<Q", obj, 40)
    shnum, = struct.unpack_from("<H", obj, 60)
    return shoff, [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + 64 * i) for i in range(shnum)]


def index_of(obj, typ):
    return next(i for i, s in enumerate(sections(obj)[1]) if s[1] == typ)


def put(obj, at, fmt, value):
    b = bytearray(obj)
    struct.pack_into(fmt, b, at, value)
    return bytes(b)


def sh_field(obj, i, field):
    """The file offset of field ``field`` (0..9) of section header ``i``."""
    offsets = [0, 4, 8, 16, 24, 32, 40, 44, 48, 56]
    return sections(obj)[0] + 64 * i + offsets[field]


def with_object(plan: bytes, obj: bytes) -> bytes:
    header, section = split(plan)
    row = next(b for b in header["blobs"] if b["kind"] == "object")
    assert row["nbytes"] == len(obj)
    section = section[:row["offset"]] + obj + section[row["offset"] + len(obj):]
    from test_plan import repack
    return repack(header, section)


def test_the_objects_ptxc_emits_pass(engine, obj):
    check(obj, engine)
    _, secs = sections(obj)
    assert any(s[1] == 4 for s in secs), "the test object should have relocations"
    small = ptxc.compile(__import__("tests.fuzz.harness", fromlist=["x"]).base_model(),
                         target="cpu")
    check(small.program.object_code, small)


DAMAGE = {
    "magic": (lambda o: put(o, 0, "<B", 0x00), "not a little-endian ELF64"),
    "class": (lambda o: put(o, 4, "<B", 1), "not a little-endian ELF64"),
    "type": (lambda o: put(o, 16, "<H", 2), "ELF type 2"),
    "machine": (lambda o: put(o, 18, "<H", 318), "machine 318"),
    "program headers": (lambda o: put(o, 56, "<H", 3), "program headers"),
    "shoff": (lambda o: put(o, 40, "<Q", 0x1800000258), "section header table"),
    "shnum": (lambda o: put(o, 60, "<H", 900), "section header table"),
    "shstrndx": (lambda o: put(o, 62, "<H", 77), "section-name table index"),
    "section type": (lambda o: put(o, sh_field(o, 2, 1), "<I", 0x70000001), "type 0x70000001"),
    "section offset": (lambda o: put(o, sh_field(o, 3, 4), "<Q", 0x4141414141), "outside"),
    "section size": (lambda o: put(o, sh_field(o, 3, 5), "<Q", 1 << 40), "outside"),
    "alignment": (lambda o: put(o, sh_field(o, 3, 8), "<Q", 3), "alignment 3"),
    "compressed": (lambda o: put(o, sh_field(o, 3, 2), "<Q", 0x806), "compressed"),
    "section name": (lambda o: put(o, sh_field(o, 3, 0), "<I", 10**6), "name offset"),
    "symtab entsize": (lambda o: put(o, sh_field(o, index_of(o, 2), 9), "<Q", 16),
                       "entry size"),
    "symtab link": (lambda o: put(o, sh_field(o, index_of(o, 2), 6), "<I", 0), "string table"),
    "symtab info": (lambda o: put(o, sh_field(o, index_of(o, 2), 7), "<I", 999),
                    "first global"),
    "rela symbol": (None, "past the"),
    "rela offset": (None, "outside its"),
    "rela type": (None, "relocation type 37"),
    "rela link": (lambda o: put(o, sh_field(o, index_of(o, 4), 6), "<I", 1), "links"),
    "symbol outside its section": (None, "lies outside its section"),
    "undefined symbol": (None, "not a function the CPU runtime provides"),
}


def _symbol_entry(obj, name: bytes):
    _, secs = sections(obj)
    st = secs[index_of(obj, 2)]
    strs = secs[st[6]]
    table = obj[strs[4]:strs[4] + strs[5]]
    for k in range(st[5] // 24):
        at = st[4] + 24 * k
        n, = struct.unpack_from("<I", obj, at)
        if table[n:table.index(b"\0", n)] == name:
            return at, table, strs[4]
    raise KeyError(name)


def damaged(obj, what):
    fn, _ = DAMAGE[what]
    if fn is not None:
        return fn(obj)
    _, secs = sections(obj)
    rela = secs[index_of(obj, 4)]
    if what == "rela symbol":
        return put(obj, rela[4] + 8, "<Q", (5000 << 32) | 1)
    if what == "rela offset":
        return put(obj, rela[4], "<Q", 1 << 40)
    if what == "rela type":
        r_info, = struct.unpack_from("<Q", obj, rela[4] + 8)
        return put(obj, rela[4] + 8, "<Q", (r_info & ~0xFFFFFFFF) | 37)
    if what == "symbol outside its section":
        at, _, _ = _symbol_entry(obj, b"kernel_0")
        return put(obj, at + 16, "<Q", 1 << 40)
    if what == "undefined symbol":  # 'tanh' becomes 'sanh': a name the runtime does not give
        at, table, strs_at = _symbol_entry(obj, b"tanh")
        n, = struct.unpack_from("<I", obj, at)
        return put(obj, strs_at + n, "<B", ord("s"))
    raise KeyError(what)


@pytest.mark.parametrize("what", sorted(DAMAGE))
def test_damaged_tables_are_value_errors_naming_the_field(engine, obj, what):
    with pytest.raises(ValueError) as e:
        check(damaged(obj, what), engine)
    assert DAMAGE[what][1] in str(e.value), str(e.value)


@pytest.mark.parametrize("what", ["magic", "shoff", "symbol outside its section",
                                  "rela symbol", "undefined symbol"])
def test_a_plan_with_a_damaged_object_and_a_recomputed_checksum_is_a_plan_error(
        engine, obj, good, what):
    refused(with_object(good, damaged(obj, what)), "code", "object code is malformed",
            DAMAGE[what][1])


def test_a_relocation_symbol_index_is_bounded_at_the_table_end(engine, obj, good):
    """A relocation's symbol index must be below the symbol table's count: the index equal to
    the count (one past the last symbol) is refused as any larger one, a ValueError naming it
    (a PlanError in a plan), never an IndexError or a symbol read past the table."""
    _, secs = sections(obj)
    nsyms = secs[index_of(obj, 2)][5] // 24
    rela = secs[index_of(obj, 4)]
    r_info, = struct.unpack_from("<Q", obj, rela[4] + 8)
    for sym in (nsyms, nsyms + 1):
        bad = put(obj, rela[4] + 8, "<Q", (sym << 32) | (r_info & 0xFFFFFFFF))
        with pytest.raises(ValueError, match=f"symbol index {sym} is past the {nsyms}-entry"):
            check(bad, engine)
        refused(with_object(good, bad), "code", "object code is malformed", "past the")


def test_a_global_symbol_that_is_no_kernel_is_refused(engine, obj, good):
    at, table, strs_at = _symbol_entry(obj, b"kernel_0")
    n, = struct.unpack_from("<I", obj, at)
    bad = put(obj, strs_at + n, "<B", ord("K"))  # Kernel_0: defined, global, not in the table
    refused(with_object(good, bad), "code", "not a kernel")


@pytest.mark.slow
def test_seeded_object_table_damage_never_crashes_the_loader(good):
    """60 seeded flips of the ELF header and tables (checksum recomputed), each loaded in the
    fuzz worker's child process: every one loads or is refused with a PtxcError, never a crash
    of the loader."""
    from tests.fuzz.cases import object_blob
    from tests.fuzz.harness import Worker
    at, n = object_blob(good)
    obj = good[at:at + n]
    code = [(s[4], s[4] + s[5]) for s in sections(obj)[1] if s[2] & 0x4]
    rng = random.Random(13)
    worker = Worker(timeout=120)
    outcomes = []
    try:
        for _ in range(60):
            data = bytearray(good)
            for _ in range(rng.randint(1, 3)):
                k = rng.randrange(n)
                while any(a <= k < b for a, b in code):
                    k = rng.randrange(n)
                data[at + k] ^= rng.randint(1, 255)
            data[-32:] = hashlib.sha256(bytes(data[:-32])).digest()
            outcomes.append(worker.run("plan", bytes(data)))
    finally:
        worker.stop()
    # a relocation moved to another place inside the code (its offset's low byte flipped)
    # loads, and its run may fault: that is edited code, trusted as a shared library is
    bad = [o for o in outcomes if o["outcome"] not in ("ok", "typed") and o["stage"] != "run"]
    assert not bad, bad
    assert sum(o["outcome"] not in ("ok", "typed") for o in outcomes) <= 3
    assert sum(o["outcome"] == "typed" for o in outcomes) > 30


def test_an_undamaged_plan_still_runs(good, engine):
    from ptxc.driver.load import engine_from_plan
    x = np.random.default_rng(0).standard_normal((3, 37)).astype(np.float32)
    np.testing.assert_array_equal(engine_from_plan(good).run({"x": x})["y"],
                                  engine.run({"x": x})["y"])
