"""Slow conversions made ahead, in background processes, so that each stage finds them cached.

A build's stages run one after another, and most of a stage's conversion (an ExecuTorch lowering,
all-MiniLM-L6-v2 to a phone's encoder, the Kotlin app's classes) is one busy core while the other
waits. A conversion that depends only on what the build holds before its stages run (the
checkpoint, its export, the golden set's calibration rows, the MiniLM snapshot, the app's sources)
can be made earlier, beside them: each target names such conversions (Target.ahead: AheadJob),
and the core hands the build's list, the longest first, to child processes (one per core, at most
MAX_WORKERS) that take the jobs in that order, each job once (a lock file per job), and make them
into the user's cache, niced (NICENESS) so the stages keep the cores they use. They start only
when the host has a core to spare: other processes kept at most the core count less one and a
half cores busy since the build began (HostUse: the host's busy time from /proc/stat less this
process's own; the 1-minute load average where there is no reading). On a host whose cores are
busy already (a test run's concurrent builds) children add their start-up and take nothing idle,
and a stage waiting for a niced child there would wait for a tenth of a core; the load average
alone lags by a minute, so two builds started together both saw an idle host. The stage then
calls the very same conversion function: it reuses the entry a child stored, or waits for the one
a child is making (conversion_cache's one-conversion-per-key lock); a job no child has reached yet
is converted by the stage itself, and the children skip it later. Every check of a stage runs as
before: the children only save time. A job that fails in a child is one log line; the stage meets
the same failure, if it is one, and reports it as always.

The children are tied to the build (subproc.popen: they die with it) and ended when its stages
have run; none when the conversion cache is off or unusable (they would convert for nothing), or
when no planned target names a job. Only the command line's builds (and arrcoc_edge.build, which
runs one) start them: a build run in-process by a program or a test converts in its stages.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from arrcoc_edge import subproc
from arrcoc_edge.errors import ArrcocError

if TYPE_CHECKING:  # the children import this module: they need none of the build's types
    from arrcoc_edge.stages.target import AheadJob, BuildContext, Target

MAX_WORKERS = 4  # each holds torch and a model being converted (1-2 GB)
NICENESS = 10
_ENTRY = "from arrcoc_edge.building.ahead import main; main()"
MIN_WINDOW_SECONDS = 1.0  # a shorter HostUse window says too little: the load average decides
BACKGROUND_PHASE = "background conversions"  # the manifest's build_timings phase of the children


@dataclass(frozen=True)
class HostUse:
    """One reading of the host's busy CPU seconds (all cores, /proc/stat) and this process's own
    (its threads and the children it reaped): two readings say what other processes used between."""

    wall: float
    host_busy: float
    own: float

    @classmethod
    def now(cls) -> HostUse | None:
        try:
            fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        except (OSError, ValueError):
            return None  # not Linux: busy_host falls back to the load average
        if len(fields) < 5:
            return None
        busy = sum(fields) - fields[3] - fields[4]  # all but idle and iowait (guest time is in user)
        t = os.times()
        return cls(time.monotonic(), busy / os.sysconf("SC_CLK_TCK"),
                   t.user + t.system + t.children_user + t.children_system)

    def others_since(self, before: HostUse) -> float | None:
        """The cores other processes kept busy on average from `before` to this reading; None for
        a window under MIN_WINDOW_SECONDS."""
        wall = self.wall - before.wall
        if wall < MIN_WINDOW_SECONDS:
            return None
        return max(0.0, (self.host_busy - before.host_busy) - (self.own - before.own)) / wall


def busy_host(since: HostUse | None = None) -> str | None:
    """Why the host has no core to spare for children beside this build's own, or None: other
    processes kept more than cores - 1.5 busy since `since` (the 1-minute load average, which
    counts this build too, above cores - 0.5, where there is no such reading)."""
    cores = os.cpu_count() or 1
    now = HostUse.now() if since is not None else None
    others = now.others_since(since) if now is not None else None
    if others is not None:
        return f"other processes kept {others:.1f} of the host's {cores} cores busy" if others > cores - 1.5 else None
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    return f"the host's cores are busy (load {load:.1f} on {cores} cores)" if load > cores - 0.5 else None


# Less than this in all (AheadJob.seconds) is not worth the children: each spends seconds of CPU
# importing torch before it converts (a web build's one 7 s job, measured: 161 -> 167 s with it).
AHEAD_MIN_SECONDS = 30


def start_ahead(order: list[Target], ckpt, program, golden, run_dir: Path, log, options: dict,
                since: HostUse | None = None) -> Ahead:
    """The planned targets' AheadJobs started in background processes, the longest first (stage
    order among equals). Not the first stage's: it needs them a few seconds after a child could
    start (the stage would wait for the child). A target that cannot say (its extra missing, a bad
    option) names none: its stage reports that itself. since: the HostUse reading taken as the
    build began, which says whether other processes left a core to spare (busy_host)."""
    from arrcoc_edge.stages.target import BuildContext

    folder = run_dir / ".ahead"  # not a stage's folder: nothing in it is published
    folder.mkdir()
    return Ahead(jobs_ahead(order, BuildContext(ckpt, program, golden, folder, {}, log, options)), folder, log, since)


def jobs_ahead(order: list[Target], ctx: BuildContext) -> list[AheadJob]:
    """start_ahead's jobs, in the order the children take them."""
    jobs = []
    for target in order[1:]:
        try:
            target.require()
            jobs += target.ahead(ctx)
        except ArrcocError:
            continue
    if sum(job.seconds for job in jobs) < AHEAD_MIN_SECONDS:
        return []
    return sorted(jobs, key=lambda job: -job.seconds)


class Ahead:
    """The background processes making `jobs`, or nothing (no jobs, no usable cache)."""

    def __init__(self, jobs: list, folder: Path, log: Callable[[str], None], since: HostUse | None = None):
        self.procs: list[subprocess.Popen] = []
        self._readers: list[threading.Thread] = []
        self.kinds = [j.kind for j in jobs]
        self.started, self.ended = None, []  # monotonic seconds: the start, and each child's end of output
        if not jobs or not _cache_usable():
            return
        busy = busy_host(since)
        if busy:
            log(f"conversions not made ahead: {busy}; each stage converts its own")
            return
        exe = subproc.interpreter()
        if exe is None:
            return  # an embedding program without a Python to start: the stages convert as before
        listing = folder / "ahead-jobs.json"
        listing.write_text(json.dumps([{"kind": j.kind, "function": j.function, "arguments": j.arguments}
                                       for j in jobs]))
        workers = min(len(jobs), os.cpu_count() or 1, MAX_WORKERS)
        log(f"converting ahead in the background ({workers} process{'es' if workers > 1 else ''}): "
            f"{', '.join(self.kinds)}")
        self.started = time.monotonic()
        for _ in range(workers):  # started from this thread: they die with it (subproc.popen)
            proc = subproc.popen(subproc.python_command(exe, _ENTRY, str(listing)), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE)
            reader = threading.Thread(target=self._forward, args=(proc.stdout, log), daemon=True, name="ahead-log")
            reader.start()
            self.procs.append(proc)
            self._readers.append(reader)

    def _forward(self, stream, log) -> None:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip()
            if line:
                log(f"[background] {line}")
        self.ended.append(time.monotonic())

    def record(self) -> dict:
        """What the manifest's build_timings keeps of the children: the jobs and how long they ran."""
        if self.started is None:
            return {"jobs": self.kinds, "processes": 0}
        finished = len(self.ended) == len(self.procs)
        ended = max(self.ended) if finished else time.monotonic()
        return {"jobs": self.kinds, "processes": len(self.procs), "ran_seconds": round(ended - self.started, 2),
                "finished": finished}

    def close(self) -> None:
        """End the children (an unfinished conversion is dropped: what they stored stays); a
        second call finds them ended."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for reader in self._readers:
            reader.join(timeout=5)
        for proc in self.procs:
            with contextlib.suppress(OSError):
                proc.stdout.close()

    def __enter__(self) -> Ahead:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _cache_usable() -> bool:
    from arrcoc_edge.stages import conversion_cache, private_cache

    if os.environ.get(conversion_cache.OFF_VARIABLE) == "off":
        return False
    try:
        private_cache.user_cache_dir(conversion_cache.CACHE_NAME)
    except private_cache.CacheUnusable:
        return False
    return True


# ---------------------------------------------------------------- in the child


def main() -> None:
    """A child: each job of the listing (argv[1]) that no other child has taken, in order,
    `function(dest=<a scratch folder>, log=<nothing>, **arguments)`, with the conversion cache filled
    only (conversion_cache.filling_only: an entry there already is skipped, not copied out)."""
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    listing = Path(sys.argv[1])
    for number, job in enumerate(json.loads(listing.read_text())):
        with _taken(listing.with_name(f"ahead-job-{number}.lock")) as mine:
            if mine:
                _run(job)


@contextlib.contextmanager
def _taken(lock: Path):
    """True when this child took the job (its lock file, held while the job runs), False when
    another child has it."""
    import fcntl

    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        if os.fstat(fd).st_size:  # done already by a child that took it before
            yield False
            return
        yield True
        os.write(fd, b"done\n")
    finally:
        os.close(fd)


def _run(job: dict) -> None:
    """One job; its outcome is one line on stdout, which the build logs."""
    from arrcoc_edge import scratch
    from arrcoc_edge.stages.conversion_cache import AlreadyStored, filling_only

    say = lambda line: print(line, flush=True)  # noqa: E731
    module, name = job["function"].split(":")
    started = time.monotonic()
    try:
        function = getattr(importlib.import_module(module), name)
        with scratch.folder("arrcoc-ahead-", family="arrcoc-") as dest, filling_only():
            function(dest=Path(dest), log=lambda line: None, **job["arguments"])
    except AlreadyStored:
        return
    except Exception as exc:  # noqa: BLE001 - the stage meets it again and reports it properly
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        say(f"{job['kind']}: not converted ahead ({type(exc).__name__}: {first}); its stage converts it")
        return
    say(f"{job['kind']}: converted in {time.monotonic() - started:.0f} s")
