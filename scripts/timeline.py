"""Where a whole test run's wall time went, from the file ARRCOC_TIMELINE=FILE made (tests/conftest.py).

    .venv/bin/python scripts/timeline.py FILE [--against EARLIER_FILE]

Prints the run's length, the cores' mean busy share and idle core-seconds, each worker's time in
tests and between them, the seconds each worker waited on a shared build another was making, and
each shared build's maker and length.

--against compares two runs on this shared host, whose speed drifts by 1.5x within a day: the
median over the tests both ran (over 3 s in each) of this run's time / the earlier run's says how
much slower the host (not the code) was, since most tests' code did not change; then the files whose
time changed most beyond that factor.
"""
from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict


def test_seconds(events: list[dict]) -> dict[str, float]:
    """Each test's seconds (its start to its end on its worker), by test id."""
    started, took = {}, {}
    for e in sorted(events, key=lambda e: e["t"]):
        if e["ev"] == "start":
            started[e["w"]] = (e["t"], e["id"])
        elif e["ev"] == "end" and e["w"] in started:
            t, test = started.pop(e["w"])
            took[test] = e["t"] - t
    return took


def compare(now: dict[str, float], before: dict[str, float], top: int = 8) -> list[str]:
    """Lines: the host factor (median ratio over tests over 3 s in both runs) and the files whose
    time moved most against what that factor predicts."""
    common = [t for t in now if t in before and now[t] > 3 and before[t] > 3]
    if not common:
        return ["no test over 3 s in both runs: nothing to compare"]
    factor = statistics.median(now[t] / before[t] for t in common)
    lines = [f"host factor {factor:.2f} (median of {len(common)} tests' time / the earlier run's); "
             f"tests {sum(now.values()):.0f} s against {sum(before.values()):.0f} s "
             f"({sum(before.values()) * factor:.0f} s expected at that factor)"]
    by_file = defaultdict(lambda: [0.0, 0.0])
    for runs, i in ((now, 0), (before, 1)):
        for test, seconds in runs.items():
            by_file[test.split("::")[0]][i] += seconds
    moved = sorted(by_file.items(), key=lambda kv: -abs(kv[1][0] - kv[1][1] * factor))[:top]
    lines += [f"  {f}: {a:.0f} s, expected {b * factor:.0f} s ({a - b * factor:+.0f})" for f, (a, b) in moved]
    return lines


def main(path: str) -> None:
    events = load(path)
    t0, t1 = min(e["t"] for e in events), max(e["t"] for e in events)
    cpu = [e for e in events if e["ev"] == "cpu"]
    if cpu:
        busy = sum(e["busy"] for e in cpu) / len(cpu)
        cores = cpu[-1]["cores"]
        print(f"run {t1 - t0:.0f} s; cores busy {busy:.0%} on average; idle {(1 - busy) * cores * (t1 - t0):.0f} core-s")
    in_tests, started = defaultdict(float), {}
    waits, builds, pending = defaultdict(float), {}, {}
    for e in sorted(events, key=lambda e: e["t"]):
        w = e["w"]
        if e["ev"] == "start":
            started[w] = e["t"]
        elif e["ev"] == "end" and w in started:
            in_tests[w] += e["t"] - started.pop(w)
        elif e["ev"] == "build-wait":
            pending[w, e["build"]] = e["t"]
        elif e["ev"] == "build-lock":
            asked = pending.pop((w, e["build"]), e["t"])
            if e["reused"]:
                waits[w] += e["t"] - asked
                if e["t"] - asked > 5:
                    print(f"  {w} waited {e['t'] - asked:.0f} s for {e['build']} (at {asked - t0:.0f} s)")
            else:
                builds[e["build"]] = (w, e["t"])
        elif e["ev"] == "build-done" and e["build"] in builds and len(builds[e["build"]]) == 2:
            maker, since = builds[e["build"]]
            builds[e["build"]] = (maker, since, e["t"])
    for w in sorted(in_tests):
        print(f"{w}: {in_tests[w]:.0f} s in tests, {t1 - t0 - in_tests[w]:.0f} s outside, {waits[w]:.0f} s waiting on others' builds")
    for name, (maker, since, *end) in sorted(builds.items(), key=lambda kv: kv[1][1]):
        took = f"{end[0] - since:.0f} s" if end else "unfinished"
        print(f"  build {name}: by {maker} at {since - t0:.0f} s, {took}")


def load(path: str) -> list[dict]:
    return [json.loads(line) for line in open(path) if line.strip()]


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) not in (1, 3) or (len(args) == 3 and args[1] != "--against"):
        sys.exit("usage: scripts/timeline.py FILE [--against EARLIER_FILE]")
    main(args[0])
    if len(args) == 3:
        print("\n".join(compare(test_seconds(load(args[0])), test_seconds(load(args[2])))))
