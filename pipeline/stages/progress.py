"""Progress of a step that takes more than a few seconds, told through the build's log.

A stage's log is a plain callable taking a line (BuildContext.log). A Progress is such a line
that also carries done/total and the seconds since the step began, so the console can show it as
one line updated in place on a terminal, and print it now and then in a log or CI
(frontends/console.py); any other log callable prints it as the line it is.
"""
from __future__ import annotations

import threading
import time


class Progress(str):
    """`[target] what: done/total (elapsed s)`, with the numbers as attributes."""

    key: str  # the step: the line without its numbers
    done: int
    total: int
    seconds: float

    def __new__(cls, key: str, done: int, total: int, seconds: float) -> Progress:
        line = super().__new__(cls, f"{key}: {done}/{total} ({seconds:.0f} s)")
        line.key, line.done, line.total, line.seconds = key, done, total, seconds
        return line


class Counter:
    """done/total of one step, each advance() told to `log` as a Progress; safe from several threads."""

    def __init__(self, log, key: str, total: int):
        self.log, self.key, self.total = log, key, total
        self.done, self.started = 0, time.monotonic()
        self._lock = threading.Lock()
        log(Progress(key, 0, total, 0.0))

    def advance(self, count: int = 1) -> None:
        with self._lock:
            self.done += count
            line = Progress(self.key, self.done, self.total, time.monotonic() - self.started)
        self.log(line)
