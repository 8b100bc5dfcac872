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

from arrcoc_edge.errors import ArrcocError, BuildInterrupted

_ENTRY = "from arrcoc_edge.frontends.child_build_main import child_main; child_main()"
TAIL_LINES = 20  # of the child's stderr, kept for the error of a child that ended without an outcome


def run(request: dict, progress: bool, verbose: bool) -> dict:
    """The child's outcome for `request` (build_stages' arguments): {"result": ...}, or the typed
    error it raised, raised here as the same class."""
    from arrcoc_edge import subproc

    read_end, write_end = os.pipe()
    inherit = (progress or verbose) and _stdout_is_fd1_terminal()  # rich's live table needs the terminal itself
    try:
        proc = subproc.popen([sys.executable, "-c", _ENTRY, str(write_end)], own_session=True,
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
        last = next((line for line in reversed(tail) if line.strip()), "")
        if returncode in (BuildInterrupted.exit_code, -signal.SIGINT, -signal.SIGTERM, -signal.SIGKILL):
            raise BuildInterrupted("build interrupted; nothing was published",
                                   "the previously published artifacts are intact: run the build again")
        raise RuntimeError(f"the build process ended with exit {returncode} and no result: {last or 'no message'} "
                           "(build(..., verbose=True) shows its traceback)")
    if "error" in outcome:
        raise _typed(outcome["error"])
    return outcome


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
