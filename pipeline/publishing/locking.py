"""One build, merge or clean at a time per output folder, and interrupts that never land between the
switch and the tidy-up.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import threading
import time
import uuid
from pathlib import Path

from arrcoc_edge.errors import OutputDirError
from arrcoc_edge.publishing.folder_state import (
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


RETRY_SECONDS = 0.05  # how soon an interrupt that landed inside an import is raised again


def record_interrupt(signum, frame) -> None:
    """Signal handler for SIGINT/SIGTERM: note the signal, then raise as Python's own handler does,
    except inside a module import. A KeyboardInterrupt raised in Python code that a C++ extension's
    init calls (pybind11: torch, executorch, onnxruntime) cannot pass through the C++ frames: the
    process aborts ("terminate called after throwing an instance of 'pybind11::error_already_set'",
    exit -6), seen on a Ctrl-C a second into a build. There the interrupt is recorded and the signal
    sent to the main thread again every RETRY_SECONDS until it lands outside any import (a real
    signal, so a blocking call after the import is woken as by the first one)."""
    name = signal.Signals(signum).name
    if name not in _interrupts:
        _interrupts.append(name)
    if _inside_import(frame):
        retry = threading.Timer(RETRY_SECONDS, _send_again, args=(threading.main_thread().ident, signum))
        retry.daemon = True
        retry.start()
        return
    raise KeyboardInterrupt(name)


def _send_again(thread: int, signum: int) -> None:
    """The deferred interrupt, sent again while it is still pending (the task that recorded it has
    not ended: guarded's reset_interrupts clears it)."""
    if _interrupts:
        signal.pthread_kill(thread, signum)


def _inside_import(frame) -> bool:
    """Whether `frame` runs inside a module import (importlib's bootstrap is on the stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


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
