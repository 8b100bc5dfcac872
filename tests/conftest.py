"""Shared fixtures: the shipped checkpoint, its golden set and exported program, a CLI runner, and
end-to-end builds made once per test session (issue 44).

In-process (session-scoped, per xdist worker): `checkpoint_path`, `loaded`, `golden` (the golden
set, computed once per worker), `exported` (one torch.export per run: the export cache is shared
by the workers), `make_ctx` (a BuildContext with its own staging folder),
`reference_checkpoint_path` (a 2048-wide reference-layout .pt).

Shared builds (`shared_build`, session-scoped): `shared_build("onnx-int8")` runs `invoke build
--target onnx-int8` once per test session, whichever test asks first, and hands every later caller
(in any xdist worker) the same `SharedBuild(out, android_app, ios_app)`. Builds are keyed by what
they read (target list, extra arguments, a file argument by path and content) and kept
in the session's temp root under a file lock, so two workers asking for one build wait for one
build. The apps' folders (ARRCOC_ANDROID_APP_DIR / ARRCOC_IOS_APP_DIR) are inside the entry and
hold the user's seeded files (mobile_build.seed_user_files) before the build, as a user's would.
READ-ONLY: a test that changes a publish takes `build.copy(tmp_path)` (the generation as plain
files, its .cache included, so a rebuild there is an export cache hit) and changes the copy. A test
about building itself (interrupts, locks, bad input) still builds in its own tmp_path.

Named shared builds: `onnx_build` (`--target onnx`), `android_build` and `ios_build` (one build,
`--target android,ios`, which builds executorch, text-encoder and coreml), `reference_typed_query_build` (`--target onnx,text-encoder,web,android,ios`
from a 64-wide reference-layout checkpoint and its --base-model snapshot in a Hugging Face cache,
tests/qwen_fixtures.py; its onnx-int8 may fail, SharedBuild.failed says so).

Markers (pyproject.toml; `bash scripts/test.sh --fast` deselects all three): `slow` (an end-to-end
build or a run over many photos), `browser` (drives Chromium), `compiler` (runs kotlinc, the JVM
or Swift). A test over 60 s says why in its docstring.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from arrcoc_edge.relevance.checkpoint import load_checkpoint
from arrcoc_edge.frontends.options import DEFAULT_CHECKPOINT


@pytest.fixture(scope="session")
def checkpoint_path() -> Path:
    return DEFAULT_CHECKPOINT


@pytest.fixture(scope="session")
def loaded(checkpoint_path):
    return load_checkpoint(checkpoint_path)


@pytest.fixture(scope="session")
def golden(loaded):
    from arrcoc_edge.stages.golden import build_golden_set

    return build_golden_set(loaded.model, loaded.config, loaded.path)  # the build's own: sentences and vectors


@pytest.fixture(scope="session")
def exported(loaded, tmp_path_factory):
    """One torch.export per test run: the export cache sits in the folder all xdist workers share,
    and the lock lets the second worker find the first one's .pt2 (a cache hit)."""
    from filelock import FileLock

    from arrcoc_edge.stages.export import export_cached

    cache = session_root(tmp_path_factory) / "export-cache"
    with FileLock(str(cache) + ".lock"):
        return export_cached(loaded, cache)


@pytest.fixture
def make_ctx(loaded, exported, golden, tmp_path):
    """make_ctx(upstream={}, options={}) -> a BuildContext with its own staging folder."""
    from arrcoc_edge.stages.target import BuildContext

    def make(upstream=None, options=None, name="stage"):
        staging = tmp_path / name
        staging.mkdir()
        return BuildContext(loaded, exported, golden, staging, upstream or {}, lambda m: None, options or {})

    return make


_signals_after_last_test: list = []  # [(test id, state)] of this worker's previous test


def _signal_state():
    import signal

    return ({s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)},
            signal.pthread_sigmask(signal.SIG_BLOCK, []))


@pytest.fixture(autouse=True)
def signals_left_as_found(request):
    """A test that changes the process's SIGINT/SIGTERM handlers or blocked signals must put them
    back: a later test in the same worker would see Ctrl-C do something else (a test-order failure
    that names the wrong test). Fails the test that left them changed, and restores them; a change
    made between two tests (a module or session fixture) fails the next test, naming the previous."""
    import signal

    before = _signal_state()
    if _signals_after_last_test and _signals_after_last_test[-1][1] != before:
        previous = _signals_after_last_test[-1][0]
        pytest.fail(f"SIGINT/SIGTERM handlers or mask changed between {previous} and this test (a fixture's "
                    f"setup or teardown): {_signals_after_last_test[-1][1]} -> {before}", pytrace=False)
    yield
    after = _signal_state()
    _signals_after_last_test[:] = [(request.node.nodeid, before)]
    if after != before:
        for sig, handler in before[0].items():
            signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, before[1])
        pytest.fail(f"the test left the signal handlers or mask changed: {before} -> {after}", pytrace=False)


def run_cli(*args: str, timeout: int = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `invoke ARGS` in the repo with the venv's interpreter; returns the finished process."""
    cmd = [sys.executable, "-m", "invoke", *args]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=full_env)


@pytest.fixture
def cli():
    return run_cli


def write_reference_checkpoint(path: Path, query_dim: int = 2048, seed: int = 7) -> Path:
    """A reference-layout .pt as arr-coc-0-1 saves it (ARRCOCQwen state dict, Qwen3-VL-2B width):
    seeded weights of our own, plus a frozen base_model key that the loader must ignore."""
    import torch

    from arrcoc_edge.relevance.model import ModelConfig, build_model

    state = dict(build_model(ModelConfig(query_dim=query_dim), seed=seed).state_dict())
    state["base_model.lm_head.weight"] = torch.zeros(2, 2)
    torch.save(state, path)
    return path


@pytest.fixture(scope="session")
def reference_checkpoint_path(tmp_path_factory) -> Path:
    return write_reference_checkpoint(tmp_path_factory.mktemp("ref-ckpt") / "arrcoc-qwen3vl-2b.pt")


# ------------------------------------------------------------------ shared end-to-end builds


@dataclass(frozen=True)
class SharedBuild:
    """One finished `invoke build` shared by the session: read it, never change it (copy() first)."""

    out: Path
    android_app: Path
    ios_app: Path
    stdout: str
    stderr: str = ""
    failed: tuple[str, ...] = ()  # targets whose failure the build was allowed (make_shared_build may_fail)

    def copy(self, dest: Path) -> Path:
        """The published folder as plain files at `dest` (a new path), for a test that changes it."""
        shutil.copytree(self.out, dest)
        return dest


def session_root(tmp_path_factory) -> Path:
    """A folder every xdist worker of this run shares (the workers' basetemps are its children)."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-builds"
    root.mkdir(exist_ok=True)
    return root


def _digest(path: Path) -> str:
    if path.is_dir():
        return hashlib.sha256("".join(f"{p.relative_to(path)}:{_digest(p)}" for p in sorted(path.rglob("*"))
                                      if p.is_file()).encode()).hexdigest()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_key(targets: str, extra: tuple[str, ...]) -> str:
    """What the build reads: its targets and arguments, a file argument by path (the manifest records
    it) and content. Inputs a module fixture writes per worker differ by path: under --dist loadfile
    (scripts/test.sh) a file's tests share one worker, so one build."""
    parts = [targets, *(f"{a}={_digest(Path(a))}" if os.path.isabs(a) and os.path.exists(a) else a for a in extra)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


# A hang guard, not a speed check: the apps build (ExecuTorch lowering, its arm64 runs, both apps'
# compilers) ran past 15 min on a shared 2-core host under a load average of 10.
SHARED_BUILD_TIMEOUT = 2700


def _text(output) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")


def make_shared_build(root: Path, targets: str, *extra: str, may_fail: tuple[str, ...] = ()) -> SharedBuild:
    """`invoke build --target TARGETS EXTRA...` once per key under `root`; a failed build fails
    every test that asks for it, with its output, and is not retried. `may_fail`: targets whose
    failed gate (exit 3, "X failed") the callers expect; any other failure still fails them."""
    from filelock import FileLock

    from mobile_build import seed_user_files

    entry = root / f"{targets.replace(',', '+')}-{build_key(targets, extra)}"
    timeline("build-wait", build=entry.name)
    with FileLock(str(entry) + ".lock"):
        record = entry / "build.json"
        timeline("build-lock", build=entry.name, reused=record.is_file())
        if not record.is_file():
            entry.mkdir()
            android, ios = entry / "android-app" / "assets", entry / "ios-app" / "Resources"
            seed_user_files(android)
            seed_user_files(ios)
            try:
                proc = run_cli("build", "--target", targets, *extra, "--out", str(entry / "out"),
                               env={"ARRCOC_ANDROID_APP_DIR": str(android), "ARRCOC_IOS_APP_DIR": str(ios)},
                               timeout=SHARED_BUILD_TIMEOUT)
                done = {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
            except subprocess.TimeoutExpired as late:  # recorded: every reader fails with it, none builds again
                done = {"returncode": -1, "stdout": _text(late.stdout),
                        "stderr": _text(late.stderr) + f"\nthe build ran over {SHARED_BUILD_TIMEOUT} s"}
            record.write_text(json.dumps(done))
        done = json.loads(record.read_text())
    timeline("build-done", build=entry.name)
    failed = _failed_targets(entry / "out") if done["returncode"] == 3 else ()
    assert done["returncode"] == 0 or (failed and set(failed) <= set(may_fail)), \
        done["stdout"][-3000:] + done["stderr"][-3000:]
    return SharedBuild(entry / "out", entry / "android-app" / "assets", entry / "ios-app" / "Resources", done["stdout"],
                       done["stderr"], failed)


def _failed_targets(out: Path) -> tuple[str, ...]:
    try:
        targets = json.loads((out / "manifest.json").read_text())["targets"]
    except (OSError, ValueError, KeyError):
        return ()
    return tuple(sorted(name for name, entry in targets.items() if entry.get("status") == "failed"))


@pytest.fixture(scope="session", autouse=True)
def session_user_cache(tmp_path_factory):
    """The user's cache (Kotlin classes, conversions: pipeline/stages/private_cache.py) is this test
    session's own, shared by its workers and builds: the first build converts and later ones reuse,
    as on a user's machine, and nothing of an earlier run or of the developer's ~/.cache is used, so
    the suite does and times what CI's clean machine does. A test that needs another cache sets
    XDG_CACHE_HOME itself (monkeypatch restores this one)."""
    folder = session_root(tmp_path_factory) / "user-cache"
    folder.mkdir(mode=0o700, exist_ok=True)
    os.environ["XDG_CACHE_HOME"] = str(folder)
    return folder


@pytest.fixture(scope="session")
def shared_build(tmp_path_factory):
    """shared_build(targets, *extra_args) -> SharedBuild, made once per session (see the module doc)."""
    root = session_root(tmp_path_factory)
    return lambda targets, *extra, **kw: make_shared_build(root, targets, *extra, **kw)


@pytest.fixture(scope="session")
def onnx_build(shared_build) -> SharedBuild:
    return shared_build("onnx")


# Both apps of the shipped checkpoint in one build, as `invoke build --target all` makes them: one
# golden set, export, text-encoder stage and report instead of two (separate builds cost ~35 s more).
APPS_TARGETS = "android,ios"


@pytest.fixture(scope="session")
def android_build(shared_build) -> SharedBuild:
    """`invoke build --target android,ios`, read for android (executorch first, the MiniLM encoder,
    kotlinc and the JVM tests)."""
    return shared_build(APPS_TARGETS)


@pytest.fixture(scope="session")
def ios_build(shared_build) -> SharedBuild:
    """The same `invoke build --target android,ios`, read for ios (coreml first, the Swift core
    compiled and tested)."""
    return shared_build(APPS_TARGETS)


# Every face of a reference checkpoint's typed-query path in one build: both apps, the web page and
# the ONNX model with its token-mean encoder. web takes onnx-int8 along where its extra is installed;
# on this small seeded model the QDQ overhead outweighs the tiny weights (83-100 KB against the
# 40%-of-FP32 rule's 74 KB; 65 KB at 35%, measured), so that stage fails its gate and the build exits 3 with the
# rest published: the one failure allowed.
REFERENCE_TARGETS = "onnx,text-encoder,web,android,ios"
REFERENCE_DIM = 64


@pytest.fixture(scope="session")
def reference_typed_query_build(shared_build, tmp_path_factory) -> SharedBuild:
    """`--target onnx,text-encoder,web,android,ios` from a 64-wide reference-layout checkpoint
    (seed 7, conftest.write_reference_checkpoint) with its Qwen3-VL snapshot (table seed 0) in a
    Hugging Face cache layout, sharded, files linked into ../../blobs/ (--base-model;
    tests/qwen_fixtures.py), where a user's Qwen3-VL usually lives. One build for
    test_app_typed_query, test_ios_typed_query, test_web_qwen and test_qwen_query (~5 min cold)."""
    from filelock import FileLock

    from qwen_fixtures import HUB_REVISION, write_hf_cache

    inputs = session_root(tmp_path_factory) / "reference-64"
    snapshot = inputs / "hub" / "models--Qwen--Qwen3-VL-2B-Instruct" / "snapshots" / HUB_REVISION
    with FileLock(str(inputs) + ".lock"):
        if not (inputs / "ref.pt").is_file():
            assert write_hf_cache(inputs / "hub", REFERENCE_DIM) == snapshot
            write_reference_checkpoint(inputs / "ref.tmp", REFERENCE_DIM).rename(inputs / "ref.pt")
    return shared_build(REFERENCE_TARGETS, "--checkpoint", str(inputs / "ref.pt"), "--base-model", str(snapshot),
                        may_fail=("onnx-int8",))


# What makes a test slow without a marker of its own: asking for a shared build.
BUILD_FIXTURES = frozenset({"shared_build", "onnx_build", "android_build", "ios_build", "reference_typed_query_build",
                            "published_with_encoder"})


# Seconds each test file took in a whole run (setup included), written by
# `ARRCOC_RECORD_DURATIONS=1 bash scripts/test.sh` (a run of some files updates only theirs). The heaviest files start first: with one file per
# worker at a time (--dist loadfile), a long file started last is a tail one worker runs alone.
DURATIONS = Path(__file__).with_name("durations.json")
UNKNOWN_FILE_SECONDS = 30.0  # a file not in DURATIONS yet (a new one)


def file_seconds() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


# The files that make the session's three long builds start first, in this order, whatever their
# recorded seconds: xdist hands the first to one worker and the next two to the other (a file of
# one test takes a second file at once). Worker 1 makes both apps' build (`android,ios`, ~6.5 min
# cold) while worker 2 makes the reference checkpoint's (~4 min) and then the shipped one with the
# encoder (~2.5 min, test_wheel.py's first reader), so test_wheel's installed-package test, which
# compares its bundles with the apps' build, finds that build made instead of waiting for it.
# test_app_safety.py (no shared build) comes next: the worker done with the apps' build took
# test_web.py there, whose build the other worker was still making (r16-r19: 25-53 s of waiting).
STARTS_FIRST = ("tests/test_android.py", "tests/test_app_typed_query.py", "tests/test_wheel.py",
                "tests/test_app_safety.py")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if BUILD_FIXTURES.intersection(item.fixturenames):
            item.add_marker(pytest.mark.slow)
    seconds = file_seconds()

    def order(item) -> tuple[int, float]:
        name = item.nodeid.split("::")[0]
        first = STARTS_FIRST.index(name) if name in STARTS_FIRST else len(STARTS_FIRST)
        return first, -seconds.get(name, UNKNOWN_FILE_SECONDS)

    # a stable sort: each file's tests stay together and in their order (scripts/test.sh passes
    # --no-loadscope-reorder so xdist keeps this order rather than its own, by test count)
    items.sort(key=order)


_measured: dict[str, float] = {}

# ARRCOC_TIMELINE=FILE: one JSON line per event (a test's start and end per worker, a shared build's
# wait, lock and end, the host's CPU busy fraction every 2 s), for seeing where a whole run's wall
# time goes (scripts/timeline.py reads it). Lines are appended with one write each (O_APPEND).
TIMELINE = os.environ.get("ARRCOC_TIMELINE")


def timeline(event: str, **fields) -> None:
    if TIMELINE:
        line = json.dumps({"t": round(time.time(), 3), "w": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                           "ev": event, **fields}) + "\n"
        fd = os.open(TIMELINE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


_relays_only: list[bool] = []  # this process is xdist's controller, which relays its workers' reports


def pytest_configure(config):
    _relays_only[:] = [not os.environ.get("PYTEST_XDIST_WORKER") and bool(getattr(config.option, "numprocesses", None))]


def pytest_runtest_logstart(nodeid, location):
    if not any(_relays_only):
        timeline("start", id=nodeid)


def pytest_runtest_logfinish(nodeid, location):
    if not any(_relays_only):
        timeline("end", id=nodeid)


def _sample_cpu(stop) -> None:
    """The share of all cores busy since the last sample (from /proc/stat), every 2 s until `stop`."""
    def read():
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]  # total, idle + iowait

    last = read()
    while not stop.wait(2.0):
        now = read()
        total, idle = now[0] - last[0], now[1] - last[1]
        timeline("cpu", busy=round(1 - idle / total, 3) if total else 0.0, cores=os.cpu_count())
        last = now


def pytest_sessionstart(session):
    session.config._started_at = time.monotonic()  # for the host factor's line (pytest_terminal_summary)
    if TIMELINE and not os.environ.get("PYTEST_XDIST_WORKER"):
        import threading

        stop = threading.Event()
        threading.Thread(target=_sample_cpu, args=(stop,), daemon=True).start()
        session.config._timeline_stop = stop


def pytest_runtest_logreport(report):
    """Per file: setup, call and teardown seconds of every test (in the xdist controller: all workers')."""
    file = report.nodeid.split("::")[0]
    _measured[file] = _measured.get(file, 0.0) + report.duration


# The host factor the run prints: these 2-core hosts differ by half from day to day (docs/speed.md,
# "the host yardstick"), so a wall time alone does not say whether the code or the host moved.
# Files under FACTOR_MIN_SECONDS in DURATIONS are left out (their seconds are mostly noise).
FACTOR_MIN_SECONDS, FACTOR_MIN_FILES = 10.0, 10


def host_factor(measured: dict[str, float], recorded: dict[str, float]) -> tuple[float, int] | None:
    """(median of measured / recorded seconds over the files both have, how many files), or None
    when fewer than FACTOR_MIN_FILES files of at least FACTOR_MIN_SECONDS are in both."""
    import statistics

    ratios = [measured[f] / s for f, s in recorded.items() if s >= FACTOR_MIN_SECONDS and measured.get(f, 0) > 0]
    return (statistics.median(ratios), len(ratios)) if len(ratios) >= FACTOR_MIN_FILES else None


@pytest.hookimpl(trylast=True)  # after the 15 slowest
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """After the 15 slowest: this run's files against DURATIONS' run (`git log tests/durations.json`
    names it), the same reading scripts/timeline.py --against gives from two timelines."""
    opt = config.option
    if os.environ.get("PYTEST_XDIST_WORKER") or any("::" in arg for arg in config.args) or \
            opt.markexpr or opt.keyword or getattr(opt, "deselect", None) or getattr(opt, "lf", False):
        return  # a worker, or a selection within files (--fast's -m, -k, single tests): no file ran whole
    found = host_factor(_measured, file_seconds())
    if found is None:
        return
    factor, files = found
    took = time.monotonic() - getattr(config, "_started_at", time.monotonic())
    terminalreporter.write_line(
        f"host factor {factor:.2f} against tests/durations.json's run (median over {files} files of >= "
        f"{FACTOR_MIN_SECONDS:.0f} s there): these {took / 60:.1f} min would be about {took / factor / 60:.1f} min "
        "on that run's host, if the factor is the host's (docs/speed.md)")


def pytest_sessionfinish(session, exitstatus):
    if getattr(session.config, "_timeline_stop", None):
        session.config._timeline_stop.set()
    if os.environ.get("ARRCOC_RECORD_DURATIONS") and not os.environ.get("PYTEST_XDIST_WORKER") and _measured:
        # merged: a run of some files updates theirs and keeps the others' figures
        merged = {**file_seconds(), **{k: round(v, 1) for k, v in _measured.items()}}
        DURATIONS.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")


# The shipped checkpoint's shared build with its text encoder (published_with_encoder).
WITH_ENCODER_TARGETS = "onnx,onnx-int8,text-encoder,tensorrt,web"


@pytest.fixture(scope="session")
def published_with_encoder(shared_build) -> Path:
    """A folder published by `invoke build --target onnx,onnx-int8,text-encoder,tensorrt,web` (the
    shipped checkpoint), shared by the tests of the torch-free inference path (issue 42),
    tests/test_tensorrt.py and tests/test_web.py: tensorrt and web read onnx and onnx-int8's models
    (web the text encoder too), so they ride along instead of builds of their own that would make
    those three stages again (predict never picks either: PREFERRED). Read only."""
    return shared_build(WITH_ENCODER_TARGETS).out



def photo_file(folder: Path, name: str = "photo.jpg", size: tuple[int, int] = (1024, 768), seed: int = 0) -> Path:
    """A real JPEG of a natural scene (skimage's astronaut, resized) at `size` (width, height)."""
    from PIL import Image
    from skimage import data

    image = Image.fromarray(data.astronaut()).resize(size, Image.BILINEAR)
    if seed:
        image = image.rotate(seed % 360)
    path = folder / name
    image.save(path, quality=90)
    return path
