"""What runs side by side and what a person sees while it runs (fast tier: no build, no emulator).

BuildContext.side_by_side runs each emulated ISA's work on that ISA's own thread; the console shows
progress.Counter lines in place on a terminal and now and then in a log. Structure only: no
timings are asserted here (the build bench measures them)."""
from __future__ import annotations

import io
import threading

import pytest

from arrcoc_edge.frontends import console as console_mod
from arrcoc_edge.stages.progress import Counter, Progress
from arrcoc_edge.stages.target import BuildContext


def context(log=lambda line: None) -> BuildContext:
    return BuildContext(None, None, None, None, {}, log, target="android")


def test_isas_run_at_the_same_time_each_on_a_thread_of_its_own_for_the_stage():
    ctx = context()
    both = threading.Barrier(3, timeout=30)  # reached only when all three run at once
    seen = {}

    def work(isa):
        seen.setdefault(isa, set()).add(threading.get_ident())
        both.wait()
        return isa.upper()

    with ctx.resources:
        isas = ("a76", "a53", "haswell")  # any number of ISAs, not two named ones
        assert ctx.side_by_side({isa: lambda isa=isa: work(isa) for isa in isas}) == {i: i.upper() for i in isas}
        assert ctx.side_by_side({isa: lambda isa=isa: work(isa) for isa in isas}) == {i: i.upper() for i in isas}
    # one thread per ISA for the whole stage (an emulator stays tied to the thread that started it)
    assert all(len(threads) == 1 for threads in seen.values())
    assert len({next(iter(t)) for t in seen.values()}) == 3 and threading.get_ident() not in seen["a76"]


def test_one_isas_failure_is_raised_after_the_others_have_ended():
    ctx = context()
    ended = []

    def slow():
        threading.Event().wait(0.3)
        ended.append("slow")
        return 1

    def broken():
        raise RuntimeError("the emulator died")

    with ctx.resources, pytest.raises(RuntimeError, match="emulator died"):
        ctx.side_by_side({"broken": broken, "slow": slow})
    assert ended == ["slow"]


def test_a_counter_logs_done_of_total_under_the_stages_name():
    lines = []
    counter = context(lines.append).counter("query encoder on cortex-a53: token sequences", 3)
    for _ in range(3):
        counter.advance()
    assert [(l.done, l.total) for l in lines] == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert all(isinstance(l, Progress) and l.startswith("[android] query encoder on cortex-a53") for l in lines)
    assert lines[-1].key == "[android] query encoder on cortex-a53: token sequences"


def test_a_log_gets_a_steps_first_and_last_progress_line_not_every_one(monkeypatch):
    out = io.StringIO()
    plain = console_mod.Console(out, live=False)
    counter = Counter(plain.log, "[android] sequences", 20)
    for _ in range(20):
        counter.advance()
    plain.log("[android] done")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[android] sequences: 0/20") and lines[1].startswith("[android] sequences: 20/20")
    assert lines[2:] == ["[android] done"]
    monkeypatch.setattr(console_mod, "PLAIN_PROGRESS_S", 0)  # past the interval: the next line shows
    plain.log(Progress("[android] sequences", 5, 20, 1.0))
    assert out.getvalue().splitlines()[-1] == "[android] sequences: 5/20 (1 s)"
