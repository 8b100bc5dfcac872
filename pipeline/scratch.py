"""Temporary folders that a killed run cannot leave behind for good.

A folder removed in a `finally` stays when its process is killed outright (`kill -9`, the OOM
killer, a power cut): the arm64 emulator's inputs in $TMPDIR (50 MB), the page's copy (42 MB), a
MiniLM conversion half-stored in the cache (87 MB), on every kill, forever. So each such folder
this tool makes, `<prefix><random>`, has a lock file beside it, `<that name>.arrcoc-owner`, which
its process keeps locked (flock) for as long as the folder is in use: the kernel drops the lock
when the process ends, however it ends. Beside, not inside: a cache entry is built in such a
folder and renamed into place whole, with nothing of ours in it. Making a new folder first sweeps
its place for leftovers: lock files of the family's prefix whose lock nobody holds, with their
folders. A live run's folder keeps its lock (another process's or this one's), so it is never
taken; a folder without a lock file is not this tool's, so it is never taken either. The lock file
appears already locked (made under another name, locked, then renamed), so no sweep can find it
unlocked in between.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import threading
import time
import weakref
from pathlib import Path

OWNER = ".arrcoc-owner"  # suffix of the lock file beside each folder
_held: dict[str, int] = {}  # folder -> the descriptor holding its lock
_LOCK = threading.Lock()


ATTEMPTS = 50  # names tried before make() gives up (each taken one was planted by someone else)
FRESH_S = 10.0  # an empty lock file younger than this may be between its creation and its lock


def make(prefix: str, dir: str | os.PathLike | None = None, family: str | None = None) -> Path:
    """A new 0700 folder `dir/<prefix><random>` (dir: $TMPDIR), locked as this process's, after
    removing the abandoned folders of `family` (default: prefix) in dir. Free it with remove().

    The lock file comes first, under an unpredictable name made with O_EXCL (mkstemp), then the
    folder its name gives: another user of a shared sticky TMPDIR cannot plant the lock's name
    before it exists; one who plants the folder's name once the lock appears makes this name
    taken, and the next is tried (ATTEMPTS, then one line naming the folder)."""
    base = Path(dir) if dir is not None else Path(tempfile.gettempdir())
    sweep(base, family or prefix)
    for _ in range(ATTEMPTS):
        fd, name = tempfile.mkstemp(prefix=prefix, suffix=OWNER, dir=base)
        path = Path(name[:-len(OWNER)])
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, f"{os.getpid()}\n".encode())
            os.mkdir(path, 0o700)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(name)
            os.close(fd)
            if isinstance(exc, FileExistsError):
                continue  # someone else's folder took the name after the lock appeared: another name
            raise
        with _LOCK:
            _held[str(path)] = fd
        return path
    from arrcoc_edge.errors import HostCapabilityError

    raise HostCapabilityError(f"{ATTEMPTS} temporary folder names in {base} were each taken by another's folder as "
                              "soon as this tool's lock file appeared (another user of a shared folder)",
                              "set TMPDIR to a folder only you can write (e.g. mkdir -m 700 ~/tmp)")


def _lock_file(path: Path) -> Path:
    return path.with_name(path.name + OWNER)


def remove(path: str | os.PathLike) -> None:
    """Remove a folder make() made (if still there: it may have been renamed away) and its lock."""
    path = Path(path)
    shutil.rmtree(path, ignore_errors=True)
    with _LOCK:
        fd = _held.pop(str(path), None)
    with contextlib.suppress(OSError):
        os.unlink(_lock_file(path))
    if fd is not None:
        os.close(fd)


@contextlib.contextmanager
def folder(prefix: str, dir: str | os.PathLike | None = None, family: str | None = None):
    """make() for the block's length (tempfile.TemporaryDirectory, as a Path)."""
    path = make(prefix, dir, family)
    try:
        yield path
    finally:
        remove(path)


class TemporaryFolder:
    """tempfile.TemporaryDirectory's shape (.name, .cleanup(), a context giving the name) for a
    folder make() made: for a folder that outlives one block (a runner's, a server's)."""

    def __init__(self, prefix: str, dir: str | os.PathLike | None = None, family: str | None = None):
        self.name = str(make(prefix, dir, family))
        self._finalizer = weakref.finalize(self, remove, self.name)

    def cleanup(self) -> None:
        self._finalizer()

    def __enter__(self) -> str:
        return self.name

    def __exit__(self, *exc) -> None:
        self.cleanup()


def sweep(base: Path, family: str) -> list[Path]:
    """Remove the folders `base/family*` that dead runs of this tool left, with their lock files:
    the folders removed."""
    try:
        locks = [name for name in os.listdir(base) if name.startswith(family) and name.endswith(OWNER)]
    except OSError:
        return []
    removed = []
    for name in locks:
        lock = base / name
        fd = _abandoned(lock)
        if fd is None:
            continue
        try:  # under the dead owner's lock, now ours: no other sweep removes it meanwhile
            path = base / name[:-len(OWNER)]
            if _own_folder(path):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
            with contextlib.suppress(OSError):
                os.unlink(lock)
        finally:
            os.close(fd)
    return removed


def _abandoned(lock: Path) -> int | None:
    """A descriptor holding `lock` when it is this user's regular file and its owner is gone, else None."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise OSError("not a lock file of ours")
        if st.st_size == 0 and time.time() - st.st_mtime < FRESH_S:
            raise OSError("just made: its maker may not hold its lock yet")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by a live run (this one included): refused
    except OSError:
        os.close(fd)
        return None
    return fd


def _own_folder(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
