"""Atomic publishing into the output folder, under a lock.

Layout of an output folder DIR:
  DIR/manifest.json          what is published (written last, atomically, via os.replace)
  DIR/<target>/...           published artifacts, swapped in whole
  DIR/.staging/<run>/<target> where a build writes before verification (removed afterwards)
  DIR/.cache/                exported programs (.pt2) keyed by content
  DIR/.lock                  held for the whole build: concurrent builds queue, never interleave

A target folder is replaced with renameat2(RENAME_EXCHANGE) where the kernel has it (one atomic
step), otherwise with two renames. Signals are held back during the publish step so an
interrupted build leaves either the old or the new state, never a mix.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import shutil
import signal
import tempfile
import time
import uuid
from pathlib import Path

from .errors import OutputDirError

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def prepare_out_dir(out: Path) -> None:
    """Create DIR if needed and prove it is writable, before any work is done."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise OutputDirError(
            f"cannot write to output folder {out} ({exc.strerror or exc})",
            "pass a writable folder with --out, or fix its permissions",
        ) from exc


@contextlib.contextmanager
def build_lock(out: Path, log=print):
    """Exclusive lock on DIR for one build; a second build waits for the first."""
    fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another build is publishing to {out}; waiting for it to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def new_staging(out: Path) -> Path:
    run = out / ".staging" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    run.mkdir(parents=True)
    return run


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def signals_deferred():
    """Hold SIGINT/SIGTERM until the block ends, so publishing is never cut in half."""
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths; False where the kernel or filesystem cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    res = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if res == 0:
        return True
    if ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), str(b))


def swap_in(staged: Path, dest: Path) -> None:
    """Make `staged` the content of `dest`; the old content is deleted afterwards."""
    if dest.exists() and _exchange(staged, dest):
        remove_tree(staged)  # staged now holds the old version
        return
    old = dest.with_name(f".{dest.name}.old-{uuid.uuid4().hex[:6]}")
    if dest.exists():
        os.rename(dest, old)
    os.rename(staged, dest)
    remove_tree(old)


def write_json_atomic(path: Path, data: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; the manifest is read by other tools and users
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_manifest(out: Path) -> dict:
    path = out / "manifest.json"
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise OutputDirError(
            f"{path} is not valid JSON ({exc})",
            "restore it from version control or delete it (it is rebuilt by the next build)",
        ) from exc


def publish(out: Path, staged_targets: dict[str, Path], manifest: dict) -> None:
    """Swap every staged target folder into DIR, then write the manifest; uninterruptible."""
    with signals_deferred():
        for name, staged in staged_targets.items():
            swap_in(staged, out / name)
        write_json_atomic(out / "manifest.json", manifest)
