"""One build, merge or clean at a time per output folder, and interrupts that never land between the
switch and the tidy-up.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import time
import uuid
from pathlib import Path

from pipeline.errors import OutputDirError
from pipeline.publishing.folder_state import (
    KILL_AT_ENV,
    LEDGER,
    LOCK,
    STAGING,
    _record,
    _write_ledger,
    read_ledger,
    state_dir,
)


@contextlib.contextmanager
def build_lock(out: Path, log=print):
    """Exclusive lock on OUT for one build, merge or clean; a second one waits for the first."""
    state = state_dir(out)
    try:
        state.mkdir(parents=True, exist_ok=True)
        fd = os.open(state / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except (OSError, ValueError) as exc:
        raise OutputDirError(f"cannot lock output folder {out} ({getattr(exc, 'strerror', None) or exc})",
                             f"make {state} writable, or pass another --out") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another build is publishing to {out}; waiting for it to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        if not (state / LEDGER).exists():
            _write_ledger(out, read_ledger(out))
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def new_staging(out: Path) -> Path:
    run = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    _record(out, staging_add=run)  # recorded before it exists: a killed build's run is tidied
    path = state_dir(out) / STAGING / run
    path.mkdir(parents=True)
    return path


def remove_tree(path: Path) -> bool:
    """Remove a folder or file this tool made; False (not an exception) when some of it stays."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return True
    shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)


@contextlib.contextmanager
def signals_deferred():
    """Hold SIGINT/SIGTERM until the block ends, so a build never stops between switch and tidy-up."""
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# An interrupt is recorded here by the task's signal handler before it is raised: Python drops a
# KeyboardInterrupt raised inside a weakref callback or a __del__ ("Exception ignored in
# WeakIdKeyDictionary"), and then a build would go on to publish and exit 0. The record survives;
# check_interrupted() raises it again where a build must not go on (stage boundaries, publishing).
_interrupts: list[str] = []


def record_interrupt(signum, frame) -> None:
    """Signal handler for SIGINT/SIGTERM: note the signal, then raise as Python's own handler does."""
    name = signal.Signals(signum).name
    _interrupts.append(name)
    raise KeyboardInterrupt(name)


def interrupted() -> str | None:
    """The first interrupt recorded since reset_interrupts(), or None."""
    return _interrupts[0] if _interrupts else None


def reset_interrupts() -> None:
    _interrupts.clear()


def check_interrupted() -> None:
    """Raise KeyboardInterrupt when an interrupt was recorded, even one whose exception was lost."""
    if _interrupts:
        raise KeyboardInterrupt(_interrupts[0])


def _kill_point(n: int) -> None:
    """Test hook: die here, as `kill -9` would, when ARRCOC_TEST_KILL_AT names this point."""
    if os.environ.get(KILL_AT_ENV) == str(n):
        os.kill(os.getpid(), signal.SIGKILL)
