"""arrcoc_edge.build() as a library call: the build runs in a child process of its own.

A build is a command's work: converters and compilers write to file descriptors 1 and 2 from C++
(the exporter, XNNPACK, onnxruntime's quantiser), so `invoke build` points them at OUT/build.log,
and it catches SIGINT/SIGTERM to stop between stages. Both belong to the whole process. A program
that calls build() keeps them: its own prints from any thread, its signal handlers, the thread it
calls from (signal handlers can only be set on the main thread). So build() starts this module in
a child (the same interpreter: child_build_main.py), which runs the very function `invoke build` runs (api.build_stages)
under the command line's rules (cli.guarded): its fds, its handlers, its log. The parent passes the
request on the child's stdin and reads the outcome from a pipe of its own; the child's progress
lines (progress=True) and, with verbose=True, its stderr are relayed to the caller's sys.stdout
and sys.stderr. A Ctrl-C in the parent is passed to the child once, which stops as `invoke build`
stops; the child dies with the parent (subproc.popen).
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections import deque

from arrcoc_edge.errors import ArrcocError, BuildCrashed, BuildInterrupted

_ENTRY = "from arrcoc_edge.frontends.child_build_main import child_main; child_main()"
TAIL_LINES = 20  # of the child's stderr, kept for the error of a child that ended without an outcome


def run(request: dict, progress: bool, verbose: bool) -> dict:
    """The child's outcome for `request` (build_stages' arguments): {"result": ...}, or the typed
    error it raised, raised here as the same class."""
    from arrcoc_edge import subproc

    exe = _start_checks()
    read_end, write_end = os.pipe()
    read_end, write_end = subproc.high_fd(read_end), subproc.high_fd(write_end)  # fds 0-2 closed by the caller
    inherit = (progress or verbose) and _stdout_is_fd1_terminal()  # rich's live table needs the terminal itself
    try:
        proc = subproc.popen(subproc.python_command(exe, _ENTRY, str(write_end)), own_session=True,
                             stdin=subprocess.PIPE, stdout=None if inherit else subprocess.PIPE,
                             stderr=subprocess.PIPE, pass_fds=(write_end,))
    finally:
        os.close(write_end)
    outcome, tail = [b""], deque(maxlen=TAIL_LINES)
    pumps = [threading.Thread(target=_read_all, args=(read_end, outcome), daemon=True),
             threading.Thread(target=_relay, args=(proc.stderr, sys.stderr if verbose else None, tail), daemon=True)]
    if not inherit:
        shown = sys.stdout if progress or verbose else None  # verbose: the build's lines and everything else
        pumps.append(threading.Thread(target=_relay, args=(proc.stdout, shown, None), daemon=True))
    for pump in pumps:
        pump.start()
    with contextlib.suppress(BrokenPipeError):  # a child that died at once says so by its exit below
        proc.stdin.write(json.dumps(request, default=str).encode())
        proc.stdin.close()
    _wait(proc)
    for pump in pumps:
        pump.join()
    return _outcome(outcome[0], proc.returncode, tail)


def _start_checks() -> str:
    """The interpreter to start the child with, once the working folder is known to exist (a
    deleted one makes the child's MKL exit from C before any line of ours)."""
    from arrcoc_edge import subproc
    from arrcoc_edge.errors import HostCapabilityError, InputError

    try:
        os.getcwd()
    except OSError:
        raise InputError("the working folder no longer exists (it was deleted after the program entered it)",
                         "os.chdir() into an existing folder, then call build() again") from None
    exe = subproc.interpreter()
    if exe is None:
        raise HostCapabilityError(f"no Python interpreter to run the build in (sys.executable is {sys.executable!r}, "
                                  f"and {sys.prefix}/bin holds no python3)",
                                  "set sys.executable to the path of this Python's interpreter")
    return exe


def _stdout_is_fd1_terminal() -> bool:
    try:
        return sys.stdout.fileno() == 1 and os.isatty(1)
    except (AttributeError, OSError, ValueError):  # a notebook's stream has no descriptor
        return False


def _wait(proc) -> None:
    """Wait for the child; a Ctrl-C (KeyboardInterrupt) here is passed on to it once, then the
    wait goes on until it has stopped cleanly (its one line is the outcome)."""
    forwarded = False
    while True:
        try:
            proc.wait()
            return
        except KeyboardInterrupt:
            if not forwarded:
                forwarded = True
                proc.send_signal(signal.SIGINT)


def _read_all(fd: int, into: list) -> None:
    with open(fd, "rb") as f:
        into[0] = f.read()


def _relay(stream, sink, tail) -> None:
    """Copy the child's lines to sink (or drop them), keeping the last ones in tail."""
    for raw in stream:
        line = raw.decode(errors="replace")
        if tail is not None:
            tail.append(line.rstrip("\n"))
        if sink is not None:
            sink.write(line)
            sink.flush()
    stream.close()


def _outcome(data: bytes, returncode: int, tail) -> dict:
    try:
        outcome = json.loads(data) if data else None
    except ValueError:
        outcome = None
    if outcome is None:
        raise _died(returncode, next((line for line in reversed(tail) if line.strip()), ""))
    if "error" in outcome:
        raise _typed(outcome["error"])
    return outcome


INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
CRASHES = (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE)


def _died(returncode: int, last: str) -> ArrcocError:
    """The typed error of a child that ended without its outcome, named by how it ended: an
    interrupt, a native crash, a SIGKILL (the OOM killer, or another process), or an exit."""
    if returncode == BuildInterrupted.exit_code or -returncode in INTERRUPTS:
        return BuildInterrupted("build interrupted; nothing was published",
                                "the previously published artifacts are intact: run the build again")
    said = f" (its last line: {last[:200]})" if last else ""
    again = "the previously published artifacts are intact: build again"
    if returncode == -signal.SIGKILL:
        return BuildCrashed("the build process was killed by SIGKILL (the kernel's out-of-memory killer, or "
                            f"another process){said}", f"{again}, with more free memory or fewer targets at once "
                            "(`dmesg` names the out-of-memory killer)")
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else str(-returncode)
        what = "crashed in native code" if -returncode in CRASHES else "was ended"
        return BuildCrashed(f"the build process {what} ({name}){said}",
                            f"{again}; if it recurs, build(..., verbose=True) shows where, and its build.log the "
                            "converter's own lines")
    return BuildCrashed(f"the build process ended with exit {returncode} and no result{said}",
                        "build(..., verbose=True) shows its traceback")


def _typed(error: dict) -> ArrcocError:
    """The child's typed error as the same class here (a caller catches it by type)."""
    import importlib

    cls = ArrcocError
    try:
        found = getattr(importlib.import_module(error["module"]), error["name"])
        if isinstance(found, type) and issubclass(found, ArrcocError):
            cls = found
    except (ImportError, AttributeError, KeyError, TypeError):
        pass
    exc = cls.__new__(cls)
    ArrcocError.__init__(exc, error["problem"], error["fix"])
    return exc
