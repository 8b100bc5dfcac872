"""Conversions run ahead (pipeline/building/ahead.py): the background processes make exactly the
conversions the stages later ask for (the same key), a stage that reaches a conversion in progress
waits for it and reuses it, and nothing is converted twice in one build."""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from arrcoc_edge.building import ahead as ahead_mod
from arrcoc_edge.building.ahead import BACKGROUND_PHASE, jobs_ahead
from arrcoc_edge.building.build import plan
from arrcoc_edge.stages import conversion_cache as cc
from arrcoc_edge.targets import TARGETS


@pytest.fixture
def cache_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(cc.OFF_VARIABLE, raising=False)
    return tmp_path / "xdg"


HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from arrcoc_edge.stages import conversion_cache as cc

    def convert(folder):
        print("converting", flush=True)
        time.sleep(3)
        (folder / "model.bin").write_bytes(b"made by the other process")
        return {"by": "other"}

    dest = Path(sys.argv[1])
    cc.convert_cached("demo", {"x": "1"}, ("numpy",), convert, dest, lambda line: None)
""")


def test_a_conversion_another_process_is_making_is_waited_for_and_reused(cache_home, tmp_path):
    (tmp_path / "theirs").mkdir()
    (tmp_path / "mine").mkdir()
    other = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "theirs")], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "converting"  # it holds the key's lock now

        def convert(folder):
            raise AssertionError("converted a second time beside the process making it")

        lines = []
        record = cc.convert_cached("demo", {"x": "1"}, ("numpy",), convert, tmp_path / "mine", lines.append)
    finally:
        assert other.wait(timeout=60) == 0
    assert record == {"by": "other"}
    assert (tmp_path / "mine" / "model.bin").read_bytes() == b"made by the other process"
    assert any("another process of yours is making the same conversion" in line for line in lines)
    assert any("reused the files" in line for line in lines)


def test_a_process_filling_the_cache_skips_a_stored_entry_without_copying_it(cache_home, tmp_path):
    dest = tmp_path / "a"
    dest.mkdir()
    convert = lambda folder: (folder / "m.bin").write_bytes(b"x") and {}  # noqa: E731
    cc.convert_cached("demo", {"x": "1"}, ("numpy",), convert, dest, lambda line: None)
    (tmp_path / "b").mkdir()
    with cc.filling_only(), pytest.raises(cc.AlreadyStored):
        cc.convert_cached("demo", {"x": "1"}, ("numpy",), convert, tmp_path / "b", lambda line: None)
    assert list((tmp_path / "b").iterdir()) == []


def ahead_jobs(ctx) -> dict[str, list]:
    """Each target's AheadJobs in a build of every target (`--target all`)."""
    return {t.name: t.ahead(ctx) for t in plan(list(TARGETS.values()), TARGETS) if not t.missing_modules()}


def test_a_full_build_makes_the_slow_conversions_ahead_and_a_reference_checkpoint_none_of_minilm(make_ctx):
    from arrcoc_edge.targets.android import app

    kotlin = [] if app.missing_reason() else ["kotlin-classes"]  # listed where the toolchain is
    jobs = ahead_jobs(make_ctx())
    kinds = {name: [j.kind for j in found] for name, found in jobs.items() if found}
    assert kinds == {"text-encoder": ["minilm-onnx"], "ios": ["minilm-coreml-fp16"],
                     "executorch": ["executorch-relevance"],
                     "android": ["minilm-pte-int8", "minilm-pte-fp32", *kotlin]}
    reference = make_ctx(options={"base_model": Path("/nonexistent")}, name="reference")
    assert {n: [j.kind for j in f] for n, f in ahead_jobs(reference).items() if f} == \
        {"executorch": ["executorch-relevance"], **({"android": kotlin} if kotlin else {})}


def test_a_build_makes_ahead_only_what_pays_for_the_children(make_ctx):
    """Longest first; never the first stage's (it needs them at once); none for a few seconds' worth."""
    ctx = make_ctx()
    order = lambda names: plan([TARGETS[n] for n in names], TARGETS)  # noqa: E731
    everything = [j.kind for j in jobs_ahead(order(list(TARGETS)), ctx)]
    assert everything[:3] == ["executorch-relevance", "minilm-pte-int8", "minilm-pte-fp32"]
    assert set(everything) >= {"minilm-onnx", "minilm-coreml-fp16"}
    assert "executorch-relevance" not in [j.kind for j in jobs_ahead(order(["android"]), ctx)]  # executorch first
    assert jobs_ahead(order(["web"]), ctx) == []  # the MiniLM ONNX alone: 7 s
    assert jobs_ahead(order(["executorch"]), ctx) == []


class Reached(Exception):
    pass


def test_each_job_reaches_the_very_conversion_its_stage_makes(make_ctx, monkeypatch, tmp_path):
    """Every job's function, called as the background process calls it, asks the conversion cache
    for its kind; the executorch job with the stage's own inputs (the key's)."""
    asked = []

    def reached(kind, inputs, tools, convert, dest, log, keep=3):
        asked.append((kind, inputs, tools))
        raise Reached

    monkeypatch.setattr(cc, "convert_cached", reached)
    ctx = make_ctx()
    for name, jobs in ahead_jobs(ctx).items():
        for job in (j for j in jobs if j.kind != "kotlin-classes"):  # the class cache: the next test
            module, function = job.function.split(":")
            call = getattr(__import__(module, fromlist=[function]), function)
            with pytest.raises(Reached):
                call(dest=tmp_path, log=lambda line: None, **job.arguments)
            assert asked[-1][0] == job.kind
    ahead_key = next(a for a in asked if a[0] == "executorch-relevance")
    with pytest.raises(Reached):
        TARGETS["executorch"].build(make_ctx(name="executorch"))
    assert asked[-1] == ahead_key


def test_the_kotlin_job_reaches_the_class_cache_the_stage_filled(android_build, tmp_path):
    """After the apps' build, the Kotlin job finds the very classes the stage compiled (or reused)."""
    from arrcoc_edge.targets.android import app

    if app.missing_reason():
        pytest.skip(f"no Kotlin toolchain: {app.missing_reason()}")
    with pytest.raises(cc.AlreadyStored):
        app.compile_ahead(dest=tmp_path, log=lambda line: None)


def test_the_apps_build_converts_nothing_twice(android_build):
    """The background processes' conversions and the stages' own: no kind in both (a stage reached
    a job in progress and waited for it, or made it before the background reached it)."""
    import json

    timings = json.loads((android_build.out / "manifest.json").read_text())["build_timings"]["phases"]
    if BACKGROUND_PHASE in timings:
        record = timings[BACKGROUND_PHASE]
        assert record["processes"] >= 1 and "minilm-pte-int8" in record["jobs"]
        assert "executorch-relevance" not in record["jobs"]  # the first stage of android,ios: made in the stage
    else:  # a busy host (this test run's other worker building too): said, and the stages convert
        assert re.search(r"^conversions not made ahead: .*busy.*; each stage converts its own$", android_build.stdout,
                         re.M), android_build.stdout[:2000]
    lines = android_build.stdout.splitlines()
    background = {m.group(1) for m in (re.match(r"\[background\] (\S+): converted in", l) for l in lines) if m}
    foreground = {m.group(1) for m in (re.match(r"(\S+): converted in", l) for l in lines) if m}
    assert not background & foreground, lines


def sleep_long(dest: Path, log) -> None:
    """A job still running when the build ends (the children import it from this file)."""
    print("started", flush=True)
    time.sleep(300)


def test_the_children_end_with_the_build(tmp_path, monkeypatch):
    """close() ends children still converting: nothing of theirs outlives the build."""
    from arrcoc_edge.stages.target import AheadJob

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(cc.OFF_VARIABLE, raising=False)
    monkeypatch.setattr(ahead_mod, "busy_host", lambda *since: None)  # the test run's other worker may load the host
    lines = []
    with ahead_mod.Ahead([AheadJob("slow", f"{__name__}:sleep_long")] * 2, tmp_path, lines.append) as running:
        procs = list(running.procs)
        deadline = time.monotonic() + 60
        while lines.count("[background] started") < len(procs) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert lines.count("[background] started") == len(procs) >= 1  # each took a job of its own
        ended = time.monotonic()
    assert all(p.poll() is not None for p in procs)
    assert time.monotonic() - ended < 15
    assert running.record()["finished"]


def test_no_children_on_a_host_whose_cores_are_busy(tmp_path, monkeypatch):
    """Children there would add their start-up and take nothing idle: none start, and the log says why."""
    from arrcoc_edge.stages.target import AheadJob

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(cc.OFF_VARIABLE, raising=False)
    monkeypatch.setattr(ahead_mod.os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    assert "busy" in ahead_mod.busy_host()
    lines = []
    with ahead_mod.Ahead([AheadJob("slow", f"{__name__}:sleep_long")], tmp_path, lines.append) as running:
        assert running.procs == [] and running.started is None
    assert lines == [f"conversions not made ahead: {ahead_mod.busy_host()}; each stage converts its own"]


def test_a_reading_tells_other_processes_use_from_the_build_s_own():
    """Two builds started together both saw an idle host by the load average (it lags a minute);
    the cores others kept busy since the build began do not lag, and the build's own work is not
    counted as another's."""
    HostUse = ahead_mod.HostUse
    assert HostUse(10.0, 25.0, 10.0).others_since(HostUse(0.0, 0.0, 0.0)) == 1.5
    assert HostUse(0.5, 25.0, 0.0).others_since(HostUse(0.0, 0.0, 0.0)) is None  # too short to say
    before = HostUse.now()
    spin = "while True: pass"  # until ended below, after the reading: theirs is others' time
    burners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
    try:
        # this process works too, for 0.6 s of its own CPU however busy the host (a wall-clock
        # spin got 0.4 s of CPU beside a test run's build): its own, not another's
        used, began = time.process_time(), time.monotonic()
        while time.monotonic() - began < 60 and (time.process_time() - used < 0.6
                                                  or time.monotonic() - began < 1.5):  # a window reading says
            pass
        after = HostUse.now()  # before the burners are reaped
    finally:
        for proc in burners:
            proc.kill()
            proc.wait()
    assert after.own - before.own >= 0.5
    assert after.others_since(before) > 0.5  # two spinning processes on however busy a host


def test_no_children_when_others_kept_the_cores_busy_since_the_build_began(tmp_path, monkeypatch):
    from arrcoc_edge.stages.target import AheadJob

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(cc.OFF_VARIABLE, raising=False)
    monkeypatch.setattr(ahead_mod.os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # lagging: says idle
    start = ahead_mod.HostUse(0.0, 0.0, 0.0)
    cores = ahead_mod.os.cpu_count()
    monkeypatch.setattr(ahead_mod.HostUse, "now", classmethod(lambda cls: cls(10.0, 10.0 * cores, 5.0)))
    lines = []
    with ahead_mod.Ahead([AheadJob("slow", f"{__name__}:sleep_long")], tmp_path, lines.append, start) as running:
        assert running.procs == []
    assert lines == [f"conversions not made ahead: other processes kept {cores - 0.5:.1f} of the host's {cores} cores "
                     "busy; each stage converts its own"]
