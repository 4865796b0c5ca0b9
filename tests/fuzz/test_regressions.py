"""Every case the fuzzer ever saved (tests/fuzz/crashes/) replays to a typed outcome: it runs,
or it is refused with a PtxcError; never a crash, a hang or an untyped error. And the harness
itself tells those apart (a self-test target of the worker aborts, sleeps, raises KeyError)."""

import glob
import json
import os

import pytest

from tests.fuzz.harness import CRASHES, Worker

SAVED = sorted(glob.glob(os.path.join(CRASHES, "*.bin")))


@pytest.fixture(scope="module")
def worker():
    w = Worker(timeout=300)
    yield w
    w.stop()


@pytest.mark.slow
@pytest.mark.parametrize("path", SAVED, ids=[os.path.basename(p) for p in SAVED])
def test_saved_case_gives_a_typed_outcome(worker, path):
    with open(path[:-4] + ".json") as f:
        target = json.load(f)["target"]
    with open(path, "rb") as f:
        payload = f.read()
    r = worker.run(target, payload)
    assert r["outcome"] in ("ok", "typed"), r


@pytest.mark.slow
def test_the_harness_counts_crashes_hangs_and_untyped_errors():
    w = Worker(timeout=120)
    try:
        assert w.run("selftest", b"fine")["outcome"] == "ok"
        assert w.run("selftest", b"untyped")["outcome"] == "untyped"
        assert w.run("selftest", b"crash")["outcome"] == "crash"
        assert w.run("selftest", b"fine")["outcome"] == "ok"  # a fresh worker after the crash
        w.timeout = 5
        assert w.run("selftest", b"hang")["outcome"] == "hang"
        w.timeout = 120
        assert w.run("selftest", b"fine")["outcome"] == "ok"  # restarted after the hang
    finally:
        w.stop()
