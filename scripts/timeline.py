"""Where a whole test run's wall time went, from the file ARRCOC_TIMELINE=FILE made (tests/conftest.py).

    .venv/bin/python scripts/timeline.py FILE

Prints the run's length, the cores' mean busy share and idle core-seconds, each worker's time in
tests and between them, the seconds each worker waited on a shared build another was making, and
each shared build's maker and length.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict


def main(path: str) -> None:
    events = [json.loads(line) for line in open(path) if line.strip()]
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


if __name__ == "__main__":
    main(sys.argv[1])
