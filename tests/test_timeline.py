"""scripts/timeline.py: the whole-run summary and the comparison of two runs on a shared host (issue 44)."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import timeline  # noqa: E402


def events(seconds: dict[str, float], worker: str = "gw0") -> list[dict]:
    """A timeline as tests/conftest.py writes it: each test's start and end, one after another."""
    out, t = [], 100.0
    for test, took in seconds.items():
        out += [{"ev": "start", "w": worker, "t": t, "id": test}, {"ev": "end", "w": worker, "t": t + took, "id": test}]
        t += took + 0.5
    return out


def test_test_seconds_pairs_each_start_with_its_end():
    got = timeline.test_seconds(events({"tests/a.py::x": 4.0, "tests/b.py::y": 10.0}))
    assert got == {"tests/a.py::x": 4.0, "tests/b.py::y": 10.0}


def test_compare_reports_the_host_factor_and_the_file_that_moved_beyond_it():
    before = {f"tests/a.py::t{i}": 10.0 for i in range(5)} | {"tests/b.py::build": 100.0, "tests/c.py::quick": 1.0}
    # the host 1.5x slower for every test, and b.py's build 60 s slower than that on top
    now = {t: s * 1.5 for t, s in before.items()} | {"tests/b.py::build": 210.0}
    lines = timeline.compare(now, before)
    assert lines[0].startswith("host factor 1.50 (median of 6 tests'")  # c.py's 1 s test is left out
    assert lines[1] == "  tests/b.py: 210 s, expected 150 s (+60)"
    assert "tests/a.py: 75 s, expected 75 s (+0)" in lines[2]


def test_compare_with_nothing_in_common_says_so():
    assert timeline.compare({"tests/a.py::x": 5.0}, {"tests/b.py::y": 5.0}) == [
        "no test over 3 s in both runs: nothing to compare"]


def test_the_command_prints_both_parts(tmp_path):
    files = []
    for name, factor in (("now", 2.0), ("before", 1.0)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in events({"tests/a.py::x": 5.0 * factor})))
        files.append(str(path))
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "timeline.py"), files[0], "--against", files[1]],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "gw0: 10 s in tests" in proc.stdout and "host factor 2.00 (median of 1 tests'" in proc.stdout


def test_the_command_refuses_a_misspelt_option(tmp_path):
    """`--againts EARLIER` is a usage error, not a summary that silently leaves the comparison out."""
    path = tmp_path / "now.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events({"tests/a.py::x": 5.0})))
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "timeline.py"), str(path), "--againts", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.startswith("usage: scripts/timeline.py FILE"), proc.stderr


def test_host_factor_is_the_median_ratio_over_the_files_both_runs_timed():
    from conftest import FACTOR_MIN_FILES, host_factor

    recorded = {f"tests/t{i}.py": 20.0 + i for i in range(12)} | {"tests/quick.py": 2.0, "tests/gone.py": 50.0}
    # this host 1.5x slower for every file, one file 4x (its code moved), a quick file and a new one
    # that say nothing about the host, a file this run did not run
    measured = {f: 1.5 * s for f, s in recorded.items() if f != "tests/gone.py"}
    measured |= {"tests/t0.py": 4 * recorded["tests/t0.py"], "tests/quick.py": 30.0, "tests/new.py": 99.0}
    factor, files = host_factor(measured, recorded)
    assert files == 12 and factor == 1.5
    # too few files in common: no factor rather than a noisy one
    few = dict(list(recorded.items())[:FACTOR_MIN_FILES - 1])
    assert host_factor(measured, few) is None and host_factor({}, recorded) is None
