"""What a build shows a person: its own lines and live progress; third-party noise goes to a log.

Converters and runtimes talk on their own: torch's pytree FutureWarnings and `W... _pytree.py`
logging lines, torchao's "Failed to load ... .so" and no-triton warnings, XNNPACK's
`[cpuinfo_utils.cpp:...]` lines written from C++ straight to file descriptor 2, onnxruntime's
quantisation hint. `warnings`/`logging` filters cannot reach C++ writes, so while the build runs
file descriptors 1 and 2 point at OUT/build.log, and the build's own lines are written to copies
of the terminal's descriptors taken before the switch. `--verbose` leaves every descriptor alone.

build.log sits beside the generations, not inside one: it is written while the build runs,
before there is a generation, and the log of a failed build (which publishes nothing) is the one
a person needs. It is not a published file: no manifest lists it and `invoke verify` ignores it.
"""
from __future__ import annotations

import contextlib
import os
import stat
import sys
import time
from pathlib import Path

from arrcoc_edge.frontends.redirect import fds_to
from arrcoc_edge.stages.progress import Progress

LOG_NAME = "build.log"
PLAIN_PROGRESS_S = 30  # a log or CI gets a step's progress line this often (a terminal: 4 times a second)
_MAX_LOG_BYTES = 20 * 1024 * 1024  # start afresh past this: a log of every build ever is noise too


class Console:
    """The build's own output: plain lines, or (on a terminal) a live progress table by rich."""

    def __init__(self, out, live: bool):
        self.out = out
        self.started = time.monotonic()
        self.stages: dict[str, list] = {}  # target -> [stage text, started, finished or None]
        self.printed: dict[str, float] = {}  # progress step -> when its line was last printed (plain output)
        self.live = None
        if live:
            from rich.console import Console as RichConsole
            from rich.live import Live

            self.live = Live(self._table(), console=RichConsole(file=out), refresh_per_second=4,
                             redirect_stdout=False, redirect_stderr=False, transient=False, get_renderable=self._table)
            self.live.start()

    def log(self, message: str) -> None:
        target = message[1:message.index("]")] if message.startswith("[") and "]" in message else None
        if target is None and isinstance(message, Progress):
            target = message.key  # a step outside any stage: its own row
        if target is not None:
            now = time.monotonic()
            for name, state in self.stages.items():
                if name != target and state[2] is None:
                    state[2] = now  # a build runs one stage at a time: the previous one is done
            state = self.stages.setdefault(target, [None, now, None])
            state[0] = message[len(target) + 2:].strip()
        if isinstance(message, Progress) and not self._plain_progress_due(message):
            return  # on a terminal the table shows it in place; in a log, now and then
        if self.live is None or target is None:
            self._print(message)

    def _plain_progress_due(self, line: Progress) -> bool:
        """A progress line for a log or CI: the first, the last, and one every PLAIN_PROGRESS_S between."""
        if self.live is not None:
            return False
        now = time.monotonic()
        last = self.printed.get(line.key)
        if last is None or line.done >= line.total or now - last >= PLAIN_PROGRESS_S:
            self.printed[line.key] = now
            return True
        return False

    def _print(self, message: str) -> None:
        if self.live is not None:
            self.live.console.print(message, markup=False, highlight=False)
        else:
            self.out.write(message + "\n")
            self.out.flush()

    def _table(self):
        from rich.table import Table

        table = Table(box=None, show_header=True, header_style="bold")
        for column in ("target", "stage", "elapsed"):
            table.add_column(column)
        now = time.monotonic()
        for name, (stage, started, finished) in self.stages.items():
            table.add_row(name, (stage or "")[:70] if finished is None else "done", f"{(finished or now) - started:.1f}s")
        table.add_row("", "", f"total {now - self.started:.1f}s")
        return table

    def close(self) -> None:
        if self.live is not None:
            for state in self.stages.values():
                state[2] = state[2] or time.monotonic()
            self.live.stop()


@contextlib.contextmanager
def build_console(out_dir: Path, verbose: bool, show: bool = True):
    """Yield a Console for the build's lines; unless verbose, fds 1 and 2 go to OUT/build.log.
    show=False (arrcoc_edge.building.build without progress): the build's own lines are not shown either."""
    sys.stdout.flush()
    sys.stderr.flush()
    log = None if verbose else _open_log(out_dir)
    if log is None:  # verbose, or the folder is not writable (the build will say so in one line)
        console = Console(sys.stdout, live=False)
        try:
            yield console
        finally:
            console.close()
        return
    live = show and os.isatty(1) and os.environ.get("TERM") != "dumb"
    # fds 1 and 2 to the log, shared with other threads' users through pipeline/frontends/redirect.py
    with log, fds_to(log.fileno(), terminal=show) as term_fd:
        terminal = os.fdopen(term_fd, "w", buffering=1) if show else open(os.devnull, "w")
        console = Console(terminal, live=live)
        try:
            yield console
        finally:
            console.close()
            terminal.close()


def _open_log(out_dir: Path):
    path = out_dir / LOG_NAME
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        if path.is_file() and path.stat().st_size > _MAX_LOG_BYTES:
            path.unlink()
        # a regular file only, never through a link: a FIFO named build.log would block every build
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW, 0o644)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        os.set_blocking(fd, True)
        log = open(fd, "a", buffering=1)  # append: two builds queued on one folder both keep theirs
    except (OSError, ValueError):
        return None
    log.write(f"\n=== build pid {os.getpid()} at {time.strftime('%Y-%m-%d %H:%M:%S')}: "
              f"third-party output (shown in the terminal with --verbose)\n")
    return log
