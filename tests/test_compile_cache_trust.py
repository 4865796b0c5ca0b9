"""The compile cache cannot be poisoned: entries are signed with a per-user key kept beside the
folder, and a foreign or writable folder, entry or key is refused (ptxc/plan/cache_trust.py).

Each attack plants, under the key of model A's compile, a plan of model B (other weights):
a cache that loaded it would answer A's inputs with B's outputs. Every test checks that the
compile still succeeds, that A's engine answers (compared with a cache-free compile), that the
planted file never reached the plan loader (a spy on ``load_plan``), and that a warning was
logged on ``ptxc.cache``."""

import logging
import os
import stat

import numpy as np
import pytest

import ptxc
import ptxc.compiler as compiler
import ptxc.driver.load as driver_load
from ptxc.plan import cache, cache_trust
from ptxc.plan.trust import SIG_MAGIC

from support.tool_models import cbr_model, save

X = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
OTHER_UID = 54321


@pytest.fixture
def env(tmp_path, monkeypatch, caplog):
    """The cache on in tmp_path/cache; model A and B; A's reference output; spies on compiles
    and on the plan loader."""
    monkeypatch.setenv("PTXC_CACHE", "1")
    monkeypatch.setenv("PTXC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PTXC_PLAN_KEY", raising=False)
    caplog.set_level(logging.INFO, logger="ptxc.cache")
    e = type("Env", (), {})()
    e.dir, e.keyfile = tmp_path / "cache", tmp_path / cache_trust.KEY_NAME
    e.a = save(cbr_model(seed=0), tmp_path / "a.onnx")
    e.b = save(cbr_model(seed=1), tmp_path / "b.onnx")
    e.want = ptxc.compile(e.a, target="cpu", cache=False).run({"x": X})["y"]
    e.b_engine = ptxc.compile(e.b, target="cpu", cache=False)
    e.b_out = e.b_engine.run({"x": X})["y"]
    assert not np.allclose(e.want, e.b_out)   # the planted plan would show
    e.compiles, e.loaded = [], []
    real_stages, real_load = compiler.run_stages, driver_load.load_plan

    def stages(*a, **k):
        e.compiles.append(1)
        return real_stages(*a, **k)

    def load(path, **k):
        e.loaded.append(os.fspath(path))
        return real_load(path, **k)
    monkeypatch.setattr(compiler, "run_stages", stages)
    monkeypatch.setattr(driver_load, "load_plan", load)
    e.caplog = caplog
    return e


def _entry(e):
    (p,) = [p for p in e.dir.iterdir() if p.suffix == ".plan"]
    return p


def _plant_b(e, path, key):
    """Model B's plan at ``path`` (A's entry), signed with ``key`` (None: unsigned)."""
    e.b_engine.save(str(path), key=key)


def _compile_a(e):
    return ptxc.compile(e.a, target="cpu").run({"x": X})["y"]


def _warned(e, text):
    return [r.getMessage() for r in e.caplog.records
            if r.levelno == logging.WARNING and r.name == "ptxc.cache" and text in r.getMessage()]


def _pose_as_owner(monkeypatch, path, uid):
    """Make ``path`` belong to ``uid``: chown as root, else a stat that reports it."""
    if os.geteuid() == 0:
        os.chown(path, uid, -1)
        return
    real = os.lstat

    def lstat(p, *a, **k):
        st = real(p, *a, **k)
        if os.path.abspath(os.fspath(p)) == os.path.abspath(path):
            fields = list(st)
            fields[stat.ST_UID] = uid
            return os.stat_result(fields)
        return st
    monkeypatch.setattr(cache_trust.os, "lstat", lstat)


def test_entries_are_signed_with_a_private_key_beside_the_cache(env):
    np.testing.assert_allclose(_compile_a(env), env.want, rtol=1e-5, atol=1e-6)
    st = os.stat(env.keyfile)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == 32
    assert not (env.dir / cache_trust.KEY_NAME).exists()        # beside the folder, not in it
    key = env.keyfile.read_bytes()
    data = _entry(env).read_bytes()
    assert data[-40:-32] == SIG_MAGIC
    np.testing.assert_array_equal(_compile_a(env), env.want)   # the second one loads
    assert len(env.compiles) == 1 and env.loaded == [str(_entry(env))]
    assert env.keyfile.read_bytes() == key                      # the key is kept
    assert not _warned(env, "")


def test_a_plan_key_in_the_environment_does_not_change_the_caches_signing(env, monkeypatch):
    monkeypatch.setenv("PTXC_PLAN_KEY", "a deployment's key")
    _compile_a(env)
    np.testing.assert_array_equal(_compile_a(env), env.want)
    assert len(env.compiles) == 1 and not _warned(env, "")


def test_another_users_entry_is_not_loaded(env, monkeypatch):
    _compile_a(env)
    entry = _entry(env)
    _plant_b(env, entry, env.keyfile.read_bytes())   # even correctly signed
    _pose_as_owner(monkeypatch, str(entry), OTHER_UID)
    env.loaded.clear()
    np.testing.assert_allclose(_compile_a(env), env.want, rtol=1e-5, atol=1e-6)
    assert env.loaded == [] and len(env.compiles) == 2
    assert _warned(env, f"belongs to uid {OTHER_UID}")
    if os.geteuid() == 0:   # the compile replaced it with this user's entry, which loads
        assert os.stat(entry).st_uid == 0
        np.testing.assert_array_equal(_compile_a(env), env.want)
        assert len(env.compiles) == 2 and env.loaded == [str(entry)]


@pytest.mark.parametrize("mode,word", [(0o777, "world-writable"), (0o770, "group-writable")])
def test_a_writable_cache_folder_is_not_used(env, mode, word):
    _compile_a(env)
    entry = _entry(env)
    _plant_b(env, entry, env.keyfile.read_bytes())
    os.chmod(env.dir, mode)
    env.loaded.clear()
    before = entry.read_bytes()
    for n in (2, 3):                                          # off: compiled every time
        np.testing.assert_allclose(_compile_a(env), env.want, rtol=1e-5, atol=1e-6)
        assert env.loaded == [] and len(env.compiles) == n
    assert _warned(env, word) and entry.read_bytes() == before   # nor written to


def test_a_writable_entry_is_not_loaded(env):
    _compile_a(env)
    entry = _entry(env)
    _plant_b(env, entry, env.keyfile.read_bytes())
    os.chmod(entry, 0o666)
    env.loaded.clear()
    np.testing.assert_allclose(_compile_a(env), env.want, rtol=1e-5, atol=1e-6)
    assert env.loaded == [] and _warned(env, "world-writable")


@pytest.mark.parametrize("damage", ["flip", "truncate", "unsigned", "other-key"])
def test_a_tampered_entry_is_dropped_and_rebuilt(env, damage):
    _compile_a(env)
    entry = _entry(env)
    if damage in ("unsigned", "other-key"):
        _plant_b(env, entry, None if damage == "unsigned" else b"someone else's key")
    else:
        _plant_b(env, entry, env.keyfile.read_bytes())
        data = bytearray(entry.read_bytes())
        if damage == "flip":
            data[len(data) // 2] ^= 0x10    # in the body: the HMAC no longer matches
        else:
            del data[-100:]
        entry.write_bytes(bytes(data))
    os.chmod(entry, 0o600)
    np.testing.assert_allclose(_compile_a(env), env.want, rtol=1e-5, atol=1e-6)
    assert len(env.compiles) == 2 and _warned(env, "dropping")
    # rebuilt: the entry is A's again, and loads
    np.testing.assert_array_equal(_compile_a(env), env.want)
    assert len(env.compiles) == 2


def test_a_tampered_entry_is_refused_by_its_signature(env, monkeypatch):
    """The signature, not the later checks, refuses it: with the plan checks made to accept
    anything, a planted plan of B signed with another key still never becomes an engine."""
    import ptxc.plan.load as plan_load
    _compile_a(env)
    _plant_b(env, _entry(env), b"someone else's key")
    made = []
    real = plan_load.plan_from_bytes
    monkeypatch.setattr(plan_load, "plan_from_bytes",
                        lambda *a, **k: made.append(1) or real(*a, **k))
    np.testing.assert_allclose(_compile_a(env), env.want, rtol=1e-5, atol=1e-6)
    assert made == [] and _warned(env, "signature")


@pytest.mark.parametrize("fault", ["mode-0644", "other-owner", "short", "symlink"])
def test_a_bad_key_file_turns_the_cache_off(env, monkeypatch, tmp_path, fault):
    _compile_a(env)
    entry = _entry(env)
    assert env.loaded == []
    if fault == "mode-0644":
        os.chmod(env.keyfile, 0o644)
        word = "mode 0644"
    elif fault == "other-owner":
        if os.geteuid() != 0:
            real = os.fstat

            def fstat(fd):
                st = real(fd)
                fields = list(st)
                fields[stat.ST_UID] = OTHER_UID
                return os.stat_result(fields) if stat.S_ISREG(st.st_mode) and \
                    st.st_size == 32 else st
            monkeypatch.setattr(cache_trust.os, "fstat", fstat)
        else:
            os.chown(env.keyfile, OTHER_UID, -1)
        word = f"belongs to uid {OTHER_UID}"
    elif fault == "short":
        env.keyfile.write_bytes(b"0123456789")
        word = "holds 10 bytes"
    else:
        real_key = tmp_path / "elsewhere.key"
        os.replace(env.keyfile, real_key)
        os.symlink(real_key, env.keyfile)
        word = "symbolic link"
    before = entry.read_bytes()
    for n in (2, 3):
        np.testing.assert_allclose(_compile_a(env), env.want, rtol=1e-5, atol=1e-6)
        assert len(env.compiles) == n and env.loaded == []      # off: nothing loaded
    assert entry.read_bytes() == before                          # nor stored
    assert _warned(env, word)


def test_the_key_is_created_once_by_racing_processes(tmp_path):
    """Two creators: the hard link lets the first key win, and both read the same one."""
    folder = str(tmp_path / "c")
    path = cache_trust.key_path(folder)
    cache_trust._create_key(path)
    first = open(path, "rb").read()
    cache_trust._create_key(path)                   # a second creator, too late: no change
    assert open(path, "rb").read() == first
    assert cache_trust.cache_key_bytes(folder) == first
    assert [f for f in os.listdir(tmp_path) if f.startswith(".ptxc")] == []   # no leftovers


def _st(mode, uid=None):
    uid = os.geteuid() if uid is None else uid
    return os.stat_result((mode, 0, 0, 1, uid, 0, 32, 0, 0, 0))


def test_refusal_names_each_unsafe_case():
    r = cache_trust.refusal
    assert r(_st(stat.S_IFDIR | 0o700), "d", "/c", directory=True) is None
    assert r(_st(stat.S_IFDIR | 0o755), "d", "/c", directory=True) is None
    assert r(_st(stat.S_IFREG | 0o644), "e", "/c/e") is None
    assert r(_st(stat.S_IFREG | 0o600), "k", "/k", private=True) is None
    assert "world-writable" in r(_st(stat.S_IFDIR | 0o777), "d", "/c", directory=True)
    assert "world-writable" in r(_st(stat.S_IFDIR | 0o1777), "d", "/c", directory=True)
    assert "group-writable" in r(_st(stat.S_IFREG | 0o664), "e", "/c/e")
    assert "belongs to uid" in r(_st(stat.S_IFREG | 0o600, OTHER_UID), "e", "/c/e")
    assert "mode 0640" in r(_st(stat.S_IFREG | 0o640), "k", "/k", private=True)
    assert "mode 0604" in r(_st(stat.S_IFREG | 0o604), "k", "/k", private=True)
    assert "not a folder" in r(_st(stat.S_IFREG | 0o700), "d", "/c", directory=True)
    assert "not a regular file" in r(_st(stat.S_IFIFO | 0o600), "e", "/c/e")


def test_a_symlinked_entry_is_not_followed(env, tmp_path):
    _compile_a(env)
    entry = _entry(env)
    elsewhere = tmp_path / "b.plan"
    _plant_b(env, elsewhere, env.keyfile.read_bytes())
    entry.unlink()
    os.symlink(elsewhere, entry)
    np.testing.assert_allclose(_compile_a(env), env.want, rtol=1e-5, atol=1e-6)
    assert env.loaded == [] and _warned(env, "symbolic link")


def test_the_folder_is_created_private(env):
    _compile_a(env)
    assert stat.S_IMODE(os.stat(env.dir).st_mode) & 0o077 == 0
    assert cache.cache_dir() == str(env.dir)
