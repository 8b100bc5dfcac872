"""Where a build spends its time: wall and CPU seconds of each phase, kept in the manifest.

CPU seconds are this process's (every thread) plus its reaped child processes' (converters,
emulators, browsers), from resource.getrusage: unlike wall time they barely move when other work
shares the cores, so two builds on a busy host compare by them. Phases that run side by side
(a stage's emulated checks beside the next stage) each count the whole process's CPU over their
own span; the build's total counts it once.
"""
from __future__ import annotations

import contextlib
import os
import resource
import time


def cpu_seconds() -> float:
    """User + system seconds of this process and of its children that have ended."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class Timings:
    """Phases in the order they started: name -> {"start" (s after the build began), "seconds", "cpu_seconds"}."""

    def __init__(self):
        self.wall0, self.cpu0 = time.monotonic(), cpu_seconds()
        self.phases: dict[str, dict] = {}

    @contextlib.contextmanager
    def phase(self, name: str, **facts):
        started, cpu = time.monotonic(), cpu_seconds()
        try:
            yield self.phases.setdefault(name, dict(facts))
        finally:
            self.phases[name].update(start=round(started - self.wall0, 2), seconds=round(time.monotonic() - started, 2),
                                     cpu_seconds=round(cpu_seconds() - cpu, 2))

    def record(self) -> dict:
        """The manifest's `build_timings`: the phases, and the build's totals up to now (before publishing)."""
        return {"phases": self.phases, "seconds": round(time.monotonic() - self.wall0, 2),
                "cpu_seconds": round(cpu_seconds() - self.cpu0, 2), "cores": os.cpu_count()}
