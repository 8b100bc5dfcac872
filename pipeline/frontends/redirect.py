"""Where the process's file descriptors 1 and 2 point, decided in one place.

Runtimes and compilers write to fds 1 and 2 themselves (XNNPACK's `[cpuinfo_utils.cpp:..]` from C++,
torch's warnings), so the command line sends them elsewhere: the build and bench to their log
files for the whole run (console.py, bench.py), predict to /dev/null while a runtime loads and runs
(predict.third_party_quiet). fds belong to the process, not to the thread: two users that each
save, redirect and restore on their own interleave badly (A saves the terminal, B saves A's
/dev/null, A restores, B "restores" /dev/null: every later message is lost). Here one lock and a
count decide: the first user in saves the terminal's fds, a log wins over /dev/null while it is
open, and the last user out restores the terminal.

Only the command line may do this: fds 1 and 2 are the host program's when arrcoc_edge is a
library (a web server's logs, a notebook's prints, another thread's lines). So fds_to moves them
only inside command_line() (cli.guarded, around every task); elsewhere it leaves them alone, and
the library keeps the runtimes' chatter down with their own log settings (predict.open_runtime) or
runs the work in a child process of its own (api.build).
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading

_LOCK = threading.Lock()
_state: dict = {"users": 0, "saved": (), "logs": [], "owners": 0}  # saved: fds 1, 2 before the first user


@contextlib.contextmanager
def command_line():
    """While inside, this process is a command's (`arrcoc-edge`, `invoke`): fds_to may move fds 1
    and 2. Counted, so nested tasks (a task calling another's body) keep it until the outer ends."""
    with _LOCK:
        _state["owners"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _state["owners"] -= 1


def terminal_is_ours() -> bool:
    """Whether a command line owns this process's fds 1 and 2 now (command_line above)."""
    return _state["owners"] > 0


@contextlib.contextmanager
def fds_to(log_fd: int | None, terminal: bool = False):
    """fds 1 and 2 go to `log_fd` (a log file's descriptor) or, for None, /dev/null (unless a log
    is open: then the log takes them) while inside. terminal=True yields a new descriptor of the
    terminal's fd 1 (the caller closes it) for the caller's own lines; else None. Outside
    command_line() nothing moves: the fds are the host program's."""
    if not terminal_is_ours():
        with _loggers_quiet():
            yield os.dup(1) if terminal else None
        return
    term = _enter(log_fd, terminal)
    try:
        yield term
    finally:
        _exit(log_fd)


# What the runtimes say through Python's logging while they load (torchao's "Failed to load ... .so",
# torch's pytree notice on importing ExecuTorch): outside a command, these loggers' own levels keep
# it down, counted like the fds so that overlapping users restore them once. A level the library
# set itself meanwhile (torch configures its loggers on import) is its own and stays.
LIBRARY_LOGGERS = ("torch", "torch.utils._pytree", "torchao", "executorch")
_loggers: dict = {"users": 0, "saved": {}}


@contextlib.contextmanager
def _loggers_quiet():
    import logging

    with _LOCK:
        if _loggers["users"] == 0:
            _loggers["saved"] = {name: logging.getLogger(name).level for name in LIBRARY_LOGGERS}
            for name in LIBRARY_LOGGERS:
                logging.getLogger(name).setLevel(logging.ERROR)
        _loggers["users"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _loggers["users"] -= 1
            if _loggers["users"] == 0:
                for name, level in _loggers["saved"].items():
                    if logging.getLogger(name).level == logging.ERROR:
                        logging.getLogger(name).setLevel(level)


def _enter(log_fd: int | None, terminal: bool) -> int | None:
    with _LOCK:
        sys.stdout.flush()
        sys.stderr.flush()
        if _state["users"] == 0:
            _state["saved"] = os.dup(1), os.dup(2)
        if log_fd is not None:
            _state["logs"].append(log_fd)
            _point(log_fd)
        elif _state["users"] == 0:
            _point(None)
        _state["users"] += 1
        return os.dup(_state["saved"][0]) if terminal else None


def _exit(log_fd: int | None) -> None:
    with _LOCK:
        sys.stdout.flush()
        sys.stderr.flush()
        _state["users"] -= 1
        if log_fd is not None:
            _state["logs"].remove(log_fd)
        if _state["users"] == 0:
            saved, _state["saved"] = _state["saved"], ()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
        elif log_fd is not None:  # this log closes: another open log, else /dev/null, takes fds 1 and 2
            _point(_state["logs"][-1] if _state["logs"] else None)


def _point(fd: int | None) -> None:
    if fd is not None:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
    finally:
        os.close(null)


def to_terminal(line: str) -> None:
    """`line` on stderr as the user sees it. Usually that is sys.stderr; while another thread is
    inside fds_to (predict's sentence encoder loads on its own thread with fds 1 and 2 on
    /dev/null), fd 2 is not the terminal's and a task's last line went nowhere: a Ctrl-C then was
    exit 130 and silent. Then the line goes to the terminal's saved descriptor, under the lock so
    that descriptor cannot be closed meanwhile (a lock held too long falls back to sys.stderr)."""
    sys.stderr.flush()
    locked = _LOCK.acquire(timeout=1)
    try:
        saved = _state["saved"] if locked else ()
        if saved:
            with contextlib.suppress(OSError):  # unwritable: sys.stderr below, as without a redirect
                os.write(saved[1], (line + "\n").encode())
                return
    finally:
        if locked:
            _LOCK.release()
    print(line, file=sys.stderr)
