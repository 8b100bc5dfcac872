"""`invoke bench --build TARGETS`: where a build spends its time, with an empty user cache and again warm.

Two builds of the same targets, each in a child process as a user runs them: the first with
XDG_CACHE_HOME an empty folder (nothing exported, converted or emulated before: a new user's
first build), the second into another output folder with that cache kept (the same build again).
Each build's manifest records wall and CPU seconds per phase (building/timing.py); this adds the
child's own totals (os.wait4: CPU of the child and everything it reaped) and writes both runs to
DIR/build_bench.json, which scripts/speed_table.py turns into docs/speed.md's table. A benchmark,
not a test: nothing here passes or fails on speed.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from arrcoc_edge import subproc
from arrcoc_edge.errors import InputError

RUNS = ("cold", "warm")


def run_build_bench(targets: str, folder: Path | None, log=print) -> dict:
    """Build `targets` cold then warm under `folder` (a new temporary folder when None); the record."""
    folder = _fresh_folder(folder)
    cache = folder / "cache"
    cache.mkdir()
    record = {"kind": "build", "targets": targets, "host": _host(), "commit": _commit(),
              "timestamp": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "folder": str(folder), "runs": {}}
    for name in RUNS:
        log(f"== {name} build of --target {targets} into {folder / name} (user cache {cache})")
        record["runs"][name] = _one_build(targets, folder / name, cache)
        run = record["runs"][name]
        log(f"== {name}: {run['seconds']:.1f} s wall, {run['cpu_seconds']:.1f} s CPU, exit {run['exit']}")
    (folder / "build_bench.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def _fresh_folder(folder: Path | None) -> Path:
    if folder is None:
        return Path(tempfile.mkdtemp(prefix="arrcoc-build-bench-"))
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise InputError(f"{folder} is not an empty folder: the build bench writes its builds and caches there",
                         "give --out a new or empty folder (or leave it out for a temporary one)")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _one_build(targets: str, out: Path, cache: Path) -> dict:
    """One `arrcoc-edge build` child: its wall and CPU seconds, exit status and the manifest's phases."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    started = time.monotonic()
    child = subproc.popen([sys.executable, "-m", "arrcoc_edge", "build", "--target", targets, "--out", str(out)],
                          env=env)  # dies with this process: a stopped bench leaves no build running
    try:
        _, status, usage = os.wait4(child.pid, 0)
    except BaseException:  # Ctrl-C or SIGTERM of the bench: its build stops too, and is reaped
        child.terminate()
        child.wait()
        raise
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - started
    try:
        manifest = json.loads((out / "manifest.json").read_text())
    except (OSError, ValueError):
        manifest = {}
    timings = manifest.get("build_timings") or {}
    return {"exit": child.returncode, "seconds": round(seconds, 1),
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1), "phases": timings.get("phases", {}),
            "build_seconds": timings.get("seconds"), "build_cpu_seconds": timings.get("cpu_seconds")}


def phase_order(runs) -> list[str]:
    """Phase names in the order they started (the manifest keeps its keys sorted by name)."""
    starts: dict[str, float] = {}
    for run in runs:
        for name, phase in run["phases"].items():
            starts.setdefault(name, phase.get("start", 0.0))
    return sorted(starts, key=lambda name: starts[name])


def format_build_bench(record: dict) -> str:
    """Phases as rows, wall and CPU seconds of each run as columns; the rest of each child's time
    (imports, publishing, the report) as its own row. Phases that overlap (a stage's emulated
    checks beside the next stage) each show their own span, so a column can add up to more than
    its total."""
    runs = record["runs"]
    names = phase_order(runs.values())
    header = ["phase", *(f"{r} {kind}" for r in runs for kind in ("wall s", "CPU s"))]
    rows = []
    for name in names:
        row = [name]
        for run in runs.values():
            phase = run["phases"].get(name)
            row += [f"{phase['seconds']:.1f}", f"{phase['cpu_seconds']:.1f}"] if phase else ["-", "-"]
        rows.append(row)
    other = ["start-up, publish, report"]
    for run in runs.values():
        known = run["build_seconds"] is not None and run["build_cpu_seconds"] is not None
        other += ([f"{run['seconds'] - run['build_seconds']:.1f}", f"{run['cpu_seconds'] - run['build_cpu_seconds']:.1f}"]
                  if known else ["-", "-"])
    rows.append(other)
    rows.append(["total", *(v for run in runs.values() for v in (f"{run['seconds']:.1f}", f"{run['cpu_seconds']:.1f}"))])
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def _host() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at start"


def _commit() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None
