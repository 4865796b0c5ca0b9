"""The timing cache (ptxc/tune/cache.py).

Saved and loaded back equal; merged by the documented rules whatever the order of the inputs;
two devices that differ in any keyed field never share an entry; every kind of damaged file is a
TimingCacheError naming the file (and the entry), or with on_error="skip" a warning and the good
entries; random damage to a valid file gives a cache or a TimingCacheError, nothing else.
"""

import hashlib
import itertools
import json
import logging
import os

import attrs
import llvmlite.binding as llvm
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptxc
from ptxc.errors import TimingCacheError, TuningError
from ptxc.target import Target
from ptxc.tune import cache as tc
from ptxc.tune.cache import Entry, TimingCache, device_key
from ptxc.tactic.tactic import DEFAULT, Tactic

H200 = Target.preset("h200")
PCIE = Target.preset("h100-pcie")
K1, K2, K3 = "0123456789abcdef", "fedcba9876543210", "00000000000000ff"
MMA = Tactic("mma", {"mma_stages": 4, "mma_tiles": ("128x128x2x2",)})
PW = Tactic("pointwise", {"block_size": 128})


def entry(tactic=PW, time_s=1e-5, default=2e-5, candidates=5, rejected=(), level="full"):
    return Entry(tactic, time_s, default, candidates, rejected, level)


def sample_cache() -> TimingCache:
    c = TimingCache()
    c.put(H200, K1, entry(MMA, 1.25e-5, 3e-5, 9, ("mma{mma-stages=2}: output differs by 3e-2",)))
    c.put(H200, K2, entry(DEFAULT, 4e-6, 4e-6, 1, level="fast"))
    c.put(PCIE, K1, entry(PW, 2e-5, 2.5e-5, 3))
    c.put(Target.host(), K3, entry(Tactic("tiled", {"tile": 32}), 0.5, 0.75, 4))
    return c


# ---- keys and round trip ------------------------------------------------------------------------

def test_device_key_fields():
    assert device_key(H200) == {"kind": "cuda", "device": "h200", "arch": "sm_90", "sms": 132,
                                "ptxc": ptxc.__version__}
    host = device_key(Target.host())
    features = hashlib.sha256(llvm.get_host_cpu_features().flatten().encode()).hexdigest()[:16]
    assert host == {"kind": "cpu", "device": "host", "arch": llvm.get_host_cpu_name(), "sms": 0,
                    "ptxc": ptxc.__version__, "cpu_features": features}


def test_save_load_round_trip(tmp_path):
    c = sample_cache()
    path = tmp_path / "model.timing"
    c.save(path)
    d = TimingCache.load(path)
    assert d == c and len(d) == 4
    assert d.get(H200, K1) == c.get(H200, K1)
    assert d.get(H200, K1).rejected == ("mma{mma-stages=2}: output differs by 3e-2",)
    assert d.get(H200, K1).tactic == MMA and d.get(H200, K1).speedup == pytest.approx(2.4)
    assert d.get(Target.host(), K3).time_s == 0.5
    doc = json.loads(path.read_text())
    assert (doc["format"], doc["version"]) == ("ptxc-timing-cache", 1)
    assert [(e["device"]["device"], e["kernel"]) for e in doc["entries"]] == \
        [(x[0]["device"], x[1]) for x in c.entries()]
    # sorted keys and a stable text: saving the loaded cache writes the same bytes
    path2 = tmp_path / "again.timing"
    d.save(path2)
    assert path2.read_bytes() == path.read_bytes()
    assert tc.load(path) == c
    assert sorted(os.listdir(tmp_path)) == ["again.timing", "model.timing"]  # no temp files


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "t.timing"
    sample_cache().save(path)
    before = path.read_bytes()
    bigger = sample_cache()
    bigger.put(H200, K3, entry())

    def fail(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        bigger.save(path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["t.timing"]


def test_devices_with_different_keys_never_share(tmp_path):
    c = TimingCache()
    c.put(H200, K1, entry(MMA))
    assert c.get(H200, K1).tactic == MMA
    assert c.get(H200, K2) is None
    for other in (attrs.evolve(H200, sms=114), attrs.evolve(H200, name="h100-sxm"),
                  H200.with_arch("sm_90a"), PCIE, Target.host()):
        assert c.get(other, K1) is None, other
    # a foreign cache (another machine's device) loads and simply has nothing for this one
    foreign = TimingCache()
    foreign.put(attrs.evolve(H200, sms=114), K1, entry(PW))
    foreign.save(tmp_path / "f.timing")
    loaded = TimingCache.load(tmp_path / "f.timing")
    assert len(loaded) == 1 and loaded.get(H200, K1) is None
    assert loaded.get(attrs.evolve(H200, sms=114), K1).tactic == PW
    # another ptxc version is another device
    doc = json.loads((tmp_path / "f.timing").read_text())
    doc["entries"][0]["device"].update(sms=132, ptxc="0.0.1")
    (tmp_path / "g.timing").write_text(json.dumps(doc))
    assert TimingCache.load(tmp_path / "g.timing").get(H200, K1) is None
    doc["entries"][0]["device"]["ptxc"] = ptxc.__version__
    (tmp_path / "g.timing").write_text(json.dumps(doc))
    assert TimingCache.load(tmp_path / "g.timing").get(H200, K1).tactic == PW


# ---- merge --------------------------------------------------------------------------------------

def _merge_both_ways(a_entry, b_entry):
    a, b = TimingCache(), TimingCache()
    a.put(H200, K1, a_entry)
    b.put(H200, K1, b_entry)
    ab, ba = a.merge(b), b.merge(a)
    assert ab == ba
    assert a.get(H200, K1) == a_entry and b.get(H200, K1) == b_entry   # inputs unchanged
    return ab.get(H200, K1)


def test_merge_conflict_rules_in_either_order():
    full = entry(MMA, time_s=9e-5, candidates=2, level="full")
    fast = entry(PW, time_s=1e-6, candidates=20, level="fast")
    assert _merge_both_ways(full, fast) == full                    # level first
    many = entry(MMA, time_s=9e-5, candidates=12)
    few = entry(PW, time_s=1e-6, candidates=3)
    assert _merge_both_ways(many, few) == many                     # then candidates
    slow = entry(MMA, time_s=3e-5, candidates=5)
    quick = entry(PW, time_s=2e-5, candidates=5)
    assert _merge_both_ways(slow, quick) == quick                  # then time
    tie_a = entry(MMA, time_s=2e-5, candidates=5)
    tie_b = entry(PW, time_s=2e-5, candidates=5)
    assert _merge_both_ways(tie_a, tie_b) in (tie_a, tie_b)        # a tie: one fixed answer


def test_merge_is_a_union_and_order_free():
    a, b, c = TimingCache(), TimingCache(), TimingCache()
    a.put(H200, K1, entry(MMA, 3e-5, candidates=4))
    a.put(H200, K2, entry(PW, level="fast"))
    b.put(H200, K1, entry(PW, 2e-5, candidates=4))        # faster than a's: kept
    b.put(PCIE, K1, entry(DEFAULT))
    c.put(H200, K2, entry(MMA, 5e-5, candidates=2))       # full beats a's fast
    c.put(H200, K3, entry(DEFAULT, level="fast"))
    results = [TimingCache.merge_all(*p) for p in itertools.permutations((a, b, c))]
    results.append(TimingCache.merge_all([c, a, b]))
    results.append(a.merge(b).merge(c))
    results.append(c.merge(b.merge(a)))
    for r in results:
        assert r == results[0]
    m = results[0]
    assert len(m) == 4
    assert m.get(H200, K1).tactic == PW and m.get(H200, K2).tactic == MMA
    assert m.get(PCIE, K1).tactic == DEFAULT and m.get(H200, K3).level == "fast"
    assert len(TimingCache().merge(TimingCache())) == 0
    with pytest.raises(TuningError, match="not a TimingCache"):
        a.merge({"x": 1})


def test_entry_and_put_refuse_bad_values():
    with pytest.raises(TuningError, match="time_s -1"):
        entry(time_s=-1)
    with pytest.raises(TuningError, match="default_time_s nan"):
        entry(default=float("nan"))
    with pytest.raises(TuningError, match="candidates 0"):
        entry(candidates=0)
    with pytest.raises(TuningError, match="level 'medium'"):
        entry(level="medium")
    with pytest.raises(TuningError, match="rejected"):
        entry(rejected=(3,))
    with pytest.raises(TuningError, match="not a Tactic"):
        entry(tactic="mma")
    with pytest.raises(TuningError, match="16 hex"):
        TimingCache().put(H200, "ABC", entry())
    with pytest.raises(TuningError, match="an Entry"):
        TimingCache().put(H200, K1, {"tactic": "auto"})


# ---- damaged files ------------------------------------------------------------------------------

def _valid_doc() -> dict:
    return sample_cache().to_json()


def _write(tmp_path, doc_or_text, name="bad.timing"):
    p = tmp_path / name
    if isinstance(doc_or_text, bytes):
        p.write_bytes(doc_or_text)
    else:
        p.write_text(doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text))
    return p


def _edit_entry(i, **changes):
    doc = _valid_doc()
    for k, v in changes.items():
        if v is _DROP:
            del doc["entries"][i][k]
        else:
            doc["entries"][i][k] = v
    return doc


_DROP = object()
FILE_DAMAGE = {
    "not JSON": ('{"format": "ptxc-timing-cache", "version": 1, "entries": [', "not JSON"),
    "not UTF-8": (b'{"format": "\xff\xfe"}', "not JSON"),
    "other format": ({"format": "ptxc-calibration", "version": 1, "entries": []},
                     "not a ptxc timing cache"),
    "a list": ([1, 2], "not a ptxc timing cache"),
    "newer version": ({"format": "ptxc-timing-cache", "version": 2, "entries": []},
                      "version 2"),
    "version as text": ({"format": "ptxc-timing-cache", "version": "1", "entries": []},
                        "version '1'"),
    "version as bool": ({"format": "ptxc-timing-cache", "version": True, "entries": []},
                        "version True"),
    "entries not a list": ({"format": "ptxc-timing-cache", "version": 1, "entries": {}},
                           "'entries' is dict"),
    "unknown field": ({"format": "ptxc-timing-cache", "version": 1, "entries": [], "x": 1},
                      "unknown fields"),
    "infinity": ('{"format": "ptxc-timing-cache", "version": 1, "entries": [], "t": Infinity}',
                 "not JSON"),
}


@pytest.mark.parametrize("kind", sorted(FILE_DAMAGE))
def test_damaged_file_names_the_file(tmp_path, kind, caplog):
    content, message = FILE_DAMAGE[kind]
    p = _write(tmp_path, content)
    with pytest.raises(TimingCacheError, match=message) as e:
        TimingCache.load(p)
    assert str(p) in str(e.value)
    with caplog.at_level(logging.WARNING, logger="ptxc.tune"):
        assert len(TimingCache.load(p, on_error="skip")) == 0
    assert [r.name for r in caplog.records] == ["ptxc.tune"]
    assert str(p) in caplog.records[0].getMessage()


def test_unreadable_file(tmp_path, caplog):
    for p in (tmp_path / "missing.timing", tmp_path):
        with pytest.raises(TimingCacheError, match="cannot read") as e:
            TimingCache.load(p)
        assert str(p) in str(e.value)
    with caplog.at_level(logging.WARNING, logger="ptxc.tune"):
        assert len(tc.load(tmp_path / "missing.timing", on_error="skip")) == 0
    assert "missing.timing" in caplog.text


ENTRY_DAMAGE = {
    "missing field": (dict(time_s=_DROP), "missing time_s"),
    "unknown field": (dict(note="x"), "unknown fields"),
    "time as text": (dict(time_s="1e-5"), "time_s '1e-5'"),
    "negative time": (dict(time_s=-1e-5), "time_s -1e-05"),
    "negative default time": (dict(default_time_s=-2.0), "default_time_s -2.0"),
    "overflowing time": (dict(time_s=123.456), "not JSON"),   # written as 1e999 below
    "candidates as float": (dict(candidates=2.0), "candidates 2.0"),
    "candidates as bool": (dict(candidates=True), "candidates True"),
    "zero candidates": (dict(candidates=0), "candidates 0"),
    "rejected not a list": (dict(rejected="all"), "rejected 'all'"),
    "rejected not text": (dict(rejected=[1]), r"rejected \(1,\)"),
    "bad level": (dict(level="max"), "level 'max'"),
    "tactic refused": (dict(tactic={"schedule": "Bad Name"}), "tactic .* refused"),
    "tactic with a bad option": (dict(tactic={"schedule": "mma", "params": {"a-b": 1}}),
                                 "refused"),
    "tactic not an object": (dict(tactic="mma"), "refused"),
    "kernel key": (dict(kernel="xyz"), "kernel key 'xyz'"),
    "device not an object": (dict(device="h200"), "device 'h200'"),
    "device missing sms": (dict(device={"kind": "cuda", "device": "h200", "arch": "sm_90",
                                        "ptxc": "0.1.0"}), "device has no 'sms'"),
    "device sms as text": (dict(device={"kind": "cuda", "device": "h200", "arch": "sm_90",
                                        "sms": "132", "ptxc": "0.1.0"}), "sms '132'"),
}


@pytest.mark.parametrize("kind", sorted(ENTRY_DAMAGE))
def test_damaged_entry_names_file_index_and_kernel(tmp_path, kind):
    changes, message = ENTRY_DAMAGE[kind]
    doc = _edit_entry(1, **changes)
    text = json.dumps(doc)
    if kind == "overflowing time":   # a number JSON's float() makes infinity
        assert text.count("123.456") == 1
        text = text.replace("123.456", "1e999")
    p = _write(tmp_path, text)
    with pytest.raises(TimingCacheError, match=message) as e:
        TimingCache.load(p)
    text = str(e.value)
    assert str(p) in text
    if message != "not JSON":
        kernel = doc["entries"][1]["kernel"]
        assert f"entry 1 (kernel {kernel!r})" in text


def test_entry_that_is_not_an_object(tmp_path):
    doc = _valid_doc()
    doc["entries"][2] = [1, 2]
    p = _write(tmp_path, doc)
    with pytest.raises(TimingCacheError, match=r"entry 2 \(kernel None\): is list") as e:
        TimingCache.load(p)
    assert str(p) in str(e.value)


def test_skip_keeps_the_good_entries_and_warns(tmp_path, caplog):
    doc = _valid_doc()
    good = sample_cache()
    bad = [1, 3]
    bad_kernels = [doc["entries"][i]["kernel"] for i in bad]
    doc["entries"][1]["time_s"] = -3.0
    doc["entries"][3]["tactic"] = {"schedule": "no such!"}
    p = _write(tmp_path, doc)
    with caplog.at_level(logging.WARNING, logger="ptxc.tune"):
        c = TimingCache.load(p, on_error="skip")
    expected = TimingCache()
    for i, (dev, k, e) in enumerate(good.entries()):
        if i not in bad:
            expected._entries[(tc._device_json(dev), k)] = e
    assert c == expected and len(c) == 2
    assert len(caplog.records) == 2
    for rec, i, kernel in zip(caplog.records, bad, bad_kernels):
        msg = rec.getMessage()
        assert rec.levelno == logging.WARNING and rec.name == "ptxc.tune"
        assert str(p) in msg and f"entry {i} (kernel {kernel!r})" in msg
    with pytest.raises(TuningError, match="on_error"):
        TimingCache.load(p, on_error="ignore")


def test_duplicate_entries_in_one_file_resolve_as_merge(tmp_path):
    a, b = TimingCache(), TimingCache()
    a.put(H200, K1, entry(MMA, candidates=3))
    b.put(H200, K1, entry(PW, candidates=7))
    for first, second in ((a, b), (b, a)):
        doc = first.to_json()
        doc["entries"] += second.to_json()["entries"]
        p = _write(tmp_path, doc)
        assert TimingCache.load(p).get(H200, K1).tactic == PW


# ---- fuzz ---------------------------------------------------------------------------------------

_VALID = json.dumps(_valid_doc(), indent=1, sort_keys=True).encode()


_JSONISH = st.sampled_from(b'0123456789-+."{}[],:eEntfa')   # flips that often stay JSON


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, len(_VALID) - 1),
                                st.one_of(st.integers(0, 255), _JSONISH)), max_size=4),
       cut=st.one_of(st.none(), st.integers(0, len(_VALID))))
def test_fuzzed_file_gives_a_cache_or_a_timing_cache_error(tmp_path, flips, cut):
    data = bytearray(_VALID)
    for pos, byte in flips:
        data[pos] = byte
    if cut is not None:
        data = data[:cut]
    p = tmp_path / "fuzz.timing"
    p.write_bytes(bytes(data))
    try:
        c = TimingCache.load(p)
    except TimingCacheError as e:
        assert str(p) in str(e)
        c = None
    if c is not None:   # whatever loads is well formed: it saves and loads back equal
        c.save(tmp_path / "resaved.timing")
        assert TimingCache.load(tmp_path / "resaved.timing") == c
    skipped = TimingCache.load(p, on_error="skip")
    assert c is None or skipped == c


@pytest.mark.parametrize("driver_name, preset", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H200", "h200"),
    ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA GeForce RTX 4090", "rtx4090")])
def test_a_gpu_read_from_the_driver_shares_entries_with_its_preset(driver_name, preset):
    """A cache tuned on the GPU (its driver's name) serves a build for the preset without one;
    another chip of the same arch and SM count (GH200) does not."""
    from ptxc.target import chip_name
    p = Target.preset(preset)
    here = attrs.evolve(p, name=driver_name)
    assert chip_name(here) == preset
    c = TimingCache()
    c.put(here, "0123456789abcdef", Entry(Tactic("pointwise", {"block_size": 128}), 1.0, 2.0, 3))
    assert c.get(p, "0123456789abcdef") is not None
    other = attrs.evolve(p, name="NVIDIA GH200 480GB")
    assert chip_name(other) == "NVIDIA GH200 480GB" and c.get(other, "0123456789abcdef") is None
