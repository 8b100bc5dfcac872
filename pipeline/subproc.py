"""Child processes that never outlive the build, optionally with a fixed memory layout.

A converter run with plain subprocess.run survives `kill -9` of the build and keeps writing into
its temporary folder. `run` starts it in the build's process group (so Ctrl-C in a terminal and
`kill -- -PGID` reach it) and asks the kernel to SIGKILL it when the build process dies
(Linux PR_SET_PDEATHSIG), which also covers a `kill -9` of the build's pid alone.

fixed_layout: some converters serialise containers in an order that depends on where the heap
lands (onnxruntime's ORT-format writer: a different .ort on every run). Without address space
randomisation (personality ADDR_NO_RANDOMIZE, what `setarch -R` does), the same environment and
working folder give the same bytes. It only affects that child.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys

_PR_SET_PDEATHSIG = 1
_ADDR_NO_RANDOMIZE = 0x0040000
_QUERY_PERSONALITY = 0xFFFFFFFF


def _child_setup(parent: int, fixed_layout: bool) -> None:
    """Runs in the child between fork and exec."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if fixed_layout:
            libc.personality(libc.personality(_QUERY_PERSONALITY) | _ADDR_NO_RANDOMIZE)
    except (OSError, AttributeError):
        return  # not Linux: the process group still carries terminal signals
    if os.getppid() != parent:  # the build died before prctl took effect
        os._exit(1)


def _setup(fixed_layout: bool):
    parent = os.getpid()
    return (lambda: _child_setup(parent, fixed_layout)) if sys.platform.startswith("linux") else None


def run(cmd: list[str], fixed_layout: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run, tied to this process's life (see the module docstring)."""
    return subprocess.run(cmd, preexec_fn=_setup(fixed_layout), start_new_session=False, **kwargs)


def popen(cmd: list[str], own_session: bool = False, **kwargs) -> subprocess.Popen:
    """subprocess.Popen, tied to this process's life: for a child that serves several requests.
    PR_SET_PDEATHSIG follows the thread that starts it, so start it from the thread that uses it.
    own_session: the terminal's Ctrl-C reaches only this process, which passes it on itself."""
    return subprocess.Popen(cmd, preexec_fn=_setup(False), start_new_session=own_session, **kwargs)


def stop(proc: subprocess.Popen, kill: bool = False, grace: float = 10) -> int:
    """End a worker popen() started that reads requests on stdin: the end of its stdin lets it exit
    (killed after `grace` seconds, or at once with kill); its pipes closed. Returns its exit status."""
    if not kill:
        with contextlib.suppress(OSError):
            proc.stdin.close()  # a worker that already died: a broken pipe
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            kill = True
    if kill:
        proc.kill()
        proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        with contextlib.suppress(OSError):
            pipe.close()
    return proc.returncode


# ---------------------------------------------------------------- a Python child of our own


def interpreter() -> str | None:
    """This Python's interpreter, to start a child with: sys.executable when it is one (an
    embedding program's is empty, or its own binary), else the one of this prefix, else None."""
    import re

    for exe in (sys.executable, os.path.join(sys.prefix, "bin", "python3"), os.path.join(sys.prefix, "bin", "python"),
                getattr(sys, "_base_executable", "")):
        if exe and re.fullmatch(r"python[0-9.]*", os.path.basename(exe)) and os.path.isfile(exe) \
                and os.access(exe, os.X_OK):
            return exe
    return None


def python_command(exe: str, code: str, *args: str) -> list[str]:
    """argv for `code` in an isolated child (-I: neither the working folder nor a script's folder
    first on sys.path, no PYTHON* variables, no user site; a user's json.py or onnx.py is never
    imported), which gets this process's own import path explicitly, less the caller's working
    folder and script folder: it finds exactly the modules this process finds."""
    try:
        cwd = os.getcwd()
    except OSError:  # a deleted working folder: nothing is found there anyway
        cwd = None
    script = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-m") else None
    theirs = {cwd, os.path.dirname(os.path.abspath(script)) if script and os.path.isfile(script) else None}
    path = [p for p in sys.path if p and os.path.isabs(p) and p not in theirs]
    return [exe, "-I", "-c", f"import sys; sys.path[:] = {path!r}\n{code}", *args]


def high_fd(fd: int) -> int:
    """`fd` moved to 3 or above (the old one closed): a pipe made while the caller had closed
    its fd 0, 1 or 2 lands there, and a child's stdin/stdout/stderr would be dup2'd over it."""
    import fcntl

    if fd > 2:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return moved
