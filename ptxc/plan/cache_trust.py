"""Why the compile cache may believe what it reads: a per-user signing key, and ownership and
mode checks on the folder, the key and every entry.

A cache entry is a plan, and a plan is code (:mod:`ptxc.plan.trust`): a cpu plan holds object
code and LLVM IR the runtime runs, a cuda plan PTX. An unsigned cache in a folder another user
can write to (a shared ``/tmp`` folder, a group-writable home, a network file system) would run
whatever that user put there. So:

- **Signing.** Every entry is signed (HMAC-SHA256, :func:`ptxc.plan.trust.sign`) with a key of
  this user's kept beside the cache, ``<cache parent>/ptxc-cache.key``: 32 random bytes, created
  on first use with mode 0600 and atomically (written to a private temporary file, then
  hard-linked to its name, so a reader never sees a half-written key and two processes racing
  agree on one key). A lookup verifies the signature (:func:`ptxc.plan.trust.verify`) before
  anything in the entry is used. The key is beside the folder rather than in it, so a shared
  cache folder can hold entries without holding what forges them.
- **Ownership.** The folder, the key and each entry must belong to the current user (the
  effective uid) and be writable by nobody else: a folder or entry that is group- or
  world-writable, or owned by another user, is refused (:func:`refusal` says why); a key that
  anyone else may read or write (any group or other permission bit, e.g. 0644), owned by another
  user, not a regular file or not 32 bytes is refused too, and the cache then works as off.

Each refusal is a warning on the ``ptxc.cache`` logger, never an error: the compile goes on and
compiles. Signing is what makes a planted or edited entry useless; the ownership checks refuse
a setup where the key or the entries could be replaced.

    d = cache_dir()                      # ptxc.plan.cache
    k = cache_key_bytes(d)               # the key, created if missing; None: the cache is off
    why = refusal(os.stat(d), "the cache folder", d, directory=True)   # None: acceptable
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import stat
import tempfile

log = logging.getLogger("ptxc.cache")

__all__ = ["KEY_NAME", "KEY_BYTES", "key_path", "cache_key_bytes", "refusal", "check_folder",
           "prepare_folder"]

KEY_NAME = "ptxc-cache.key"
KEY_BYTES = 32


def current_uid() -> int:
    """The user the cache belongs to: the effective uid (a function so tests can pose as
    another user where they cannot chown)."""
    return os.geteuid()


def refusal(st: os.stat_result, what: str, path: str, *, directory: bool = False,
            private: bool = False) -> str | None:
    """Why a file (or with ``directory``, a folder) of the cache with status ``st`` is not to be
    trusted, or None. Refused: the wrong kind of file, another owner, group or world write
    permission; with ``private`` (the key), any group or other permission at all."""
    kind_ok = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    if not kind_ok:
        return f"{what} {path} is not a {'folder' if directory else 'regular file'}"
    uid = current_uid()
    if st.st_uid != uid:
        return f"{what} {path} belongs to uid {st.st_uid}, not to this user (uid {uid})"
    mode = stat.S_IMODE(st.st_mode)
    if private and mode & 0o077:
        return (f"{what} {path} has mode {mode:04o}: others may read or change it "
                "(it must be 0600)")
    if mode & 0o022:
        return (f"{what} {path} has mode {mode:04o}: it is "
                f"{'world' if mode & 0o002 else 'group'}-writable")
    return None


def key_path(folder: str) -> str:
    """The key file of the cache in ``folder``: in the folder's parent."""
    return os.path.join(os.path.dirname(os.path.abspath(folder)), KEY_NAME)


def _read_key(path: str) -> bytes | None:
    """The key at ``path`` after its checks; None (with a warning) when refused; FileNotFoundError
    when there is none."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        why = refusal(os.fstat(fd), "the compile cache's key", path, private=True)
        if why is None:
            with os.fdopen(os.dup(fd), "rb") as f:
                key = f.read(KEY_BYTES + 1)
            if len(key) == KEY_BYTES:
                return key
            why = f"the compile cache's key {path} holds {len(key)} bytes, not {KEY_BYTES}"
    finally:
        os.close(fd)
    log.warning("compile cache off: %s", why)
    return None


def _create_key(path: str) -> None:
    """Write a fresh key to ``path`` unless one appears there first (another process)."""
    parent = os.path.dirname(path)
    os.makedirs(parent, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=".ptxc-cache-key-")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(KEY_BYTES))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)   # atomic, and fails if a key is there: the first one wins
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)


def cache_key_bytes(folder: str) -> bytes | None:
    """The signing key of the cache in ``folder`` (created on first use), or None: refused or
    not creatable, with a warning; the cache is then off."""
    path = key_path(folder)
    try:
        try:
            return _read_key(path)
        except FileNotFoundError:
            _create_key(path)
            return _read_key(path)
    except OSError as e:
        why = "is a symbolic link" if e.errno == errno.ELOOP else \
            f"cannot be read or created ({e.strerror or e})"
        log.warning("compile cache off: the compile cache's key %s %s", path, why)
        return None


def check_folder(folder: str) -> bool:
    """Whether the cache folder is acceptable (see :func:`refusal`); False with a warning."""
    try:
        st = os.stat(folder)
    except OSError as e:
        log.warning("compile cache: cannot read the folder %s (%s)", folder, e.strerror or e)
        return False
    why = refusal(st, "the compile cache folder", folder, directory=True)
    if why is not None:
        log.warning("compile cache not used: %s", why)
        return False
    return True


def prepare_folder(folder: str) -> bool:
    """Create the cache folder (mode 0700) if missing; then :func:`check_folder`."""
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError as e:
        log.warning("compile cache: cannot create the folder %s (%s)", folder, e.strerror or e)
        return False
    return check_folder(folder)


def entry_refusal(path: str) -> str | None:
    """Why the entry at ``path`` is not to be loaded (a symbolic link, another owner, writable
    by others), or None. A missing entry raises FileNotFoundError."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return f"the cache entry {path} is a symbolic link"
    return refusal(st, "the cache entry", path)
