"""Markdown speed table from a bench.json (`invoke bench` writes OUT/bench.json) or a build_bench.json
(`invoke bench --build TARGETS --out DIR` writes DIR/build_bench.json).

    python scripts/speed_table.py [OUT/bench.json] > table.md
    python scripts/speed_table.py AFTER/bench.json --before BEFORE/bench.json   # side by side
    python scripts/speed_table.py DIR/build_bench.json [--before EARLIER/build_bench.json]  # a build's phases

Prints the host, the commit the bench ran on, one table of 1-thread medians (runtime x case, ms),
the default-thread rows with their spread (p10-p90), and the speed goals with their ratios, so a
page such as docs/speed.md quotes numbers taken from one named run, not typed in by hand.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def _ms(value: float) -> str:
    """Three significant digits, 0.001 ms at least: 0.214, 1.22, 9.00, 48.1, 507."""
    return f"{value:.0f}" if value >= 100 else f"{value:#.3g}" if value >= 1 else f"{value:.3f}"


def _short(case: str) -> str:
    return case.split(" (")[0]


def table(bench: dict) -> str:
    rows = bench["rows"]
    cases = list(dict.fromkeys(_short(r["case"]) for r in rows))
    lines = [f"`invoke bench --runs {bench['runs']}` on {bench['host']}, {bench['timestamp']}, "
             f"commit {bench.get('commit') or 'not recorded'}; medians in ms, one thread"
             + (f" (G={bench['settings']['grid']}, K={bench['settings']['top_k']}, D={bench['settings']['query_dim']})"
                if bench.get("settings") else "") + ":", ""]

    def grid(selected, cell):
        runtimes = list(dict.fromkeys(r["runtime"] for r in selected))
        out = ["| runtime | " + " | ".join(cases) + " |", "|---" * (len(cases) + 1) + "|"]
        for runtime in runtimes:
            by_case = {_short(r["case"]): r for r in selected if r["runtime"] == runtime}
            out.append(f"| {runtime} | " + " | ".join(cell(by_case[c]) if c in by_case else "" for c in cases) + " |")
        return out

    lines += grid([r for r in rows if r["threads"] == 1], lambda r: _ms(r["median_ms"]))
    default = [r for r in rows if r["threads"] != 1]
    if default:
        lines += ["", "Default thread pools (median, p10-p90 in brackets; shared cores: no ratios):", ""]
        lines += grid(default, lambda r: f"{_ms(r['median_ms'])} ({_ms(r.get('p10_ms', r['median_ms']))}-{_ms(r['p90_ms'])})")
    if bench.get("goals"):
        lines += ["", "| goal | ratio | met |", "|---|---|---|"]
        lines += [f"| {g['goal']} | {g['ratio']:.2f}x | {'yes' if g['met'] else '**no**'} |" for g in bench["goals"]]
    return "\n".join(lines) + "\n"


def before_after(before: dict, after: dict) -> str:
    """1-thread medians of two runs side by side, per runtime and case: before -> after (after/before)."""
    key = lambda r: (r["runtime"], _short(r["case"]))  # noqa: E731
    old = {key(r): r for r in before["rows"] if r["threads"] == 1}
    new = [r for r in after["rows"] if r["threads"] == 1]
    cases = list(dict.fromkeys(_short(r["case"]) for r in new))
    lines = [f"before: {before['host']}, {before['timestamp']}; after: {after['host']}, {after['timestamp']}", "",
             "| runtime (1 thread) | " + " | ".join(cases) + " |", "|---" * (len(cases) + 1) + "|"]
    for runtime in dict.fromkeys(r["runtime"] for r in new):
        cells = []
        for case in cases:
            a, b = next((r for r in new if key(r) == (runtime, case)), None), old.get((runtime, case))
            cells.append("" if a is None else _ms(a["median_ms"]) if b is None else
                         f"{_ms(b['median_ms'])} → {_ms(a['median_ms'])} ({a['median_ms'] / b['median_ms']:.2f}x)")
        lines.append(f"| {runtime} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _seconds(phase: dict | None) -> str:
    return "" if not phase else f"{phase['seconds']:.0f} / {phase['cpu_seconds']:.0f}"


def _other(run: dict) -> dict | None:
    """A child's time outside the build's phases (imports, publishing, the report)."""
    if run.get("build_seconds") is None or run.get("build_cpu_seconds") is None:
        return None
    return {"seconds": run["seconds"] - run["build_seconds"], "cpu_seconds": run["cpu_seconds"] - run["build_cpu_seconds"]}


def build_table(record: dict, before: dict | None = None) -> str:
    """Each phase's wall / CPU seconds, cold and warm (and the same of an earlier record beside them)."""
    records = ([("before", before)] if before else []) + [("after" if before else "", record)]
    lines = [f"{label + ': ' if label else ''}`invoke bench --build {r['targets']}` on {r['host']}, {r['timestamp']}, "
             f"commit {r.get('commit') or 'not recorded'}" for label, r in records]
    columns = [(label, run) for label, r in records for run in r["runs"]]
    starts: dict[str, float] = {}  # phases in the order they started (the manifest sorts its keys)
    for _, r in records:
        for run in r["runs"].values():
            for name, phase in run["phases"].items():
                starts.setdefault(name, phase.get("start", 0.0))
    names = sorted(starts, key=lambda name: starts[name])
    head = [f"{label} {run}".strip() for label, run in columns]
    lines += ["", "Seconds, wall / CPU (this process and its children):", "",
              "| phase | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    runs = lambda: [r["runs"][run] for label, r in records for run in r["runs"]]  # noqa: E731
    for name in names:
        lines.append(f"| {name} | " + " | ".join(_seconds(run["phases"].get(name)) for run in runs()) + " |")
    lines.append("| start-up, publish, report | " + " | ".join(_seconds(_other(run)) for run in runs()) + " |")
    lines.append("| **total** | " + " | ".join(f"**{_seconds(run)}**" for run in runs()) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    """speed_table.py [BENCH.json] [--before OLD_BENCH.json]"""
    args = list(argv[1:])
    before = None
    if "--before" in args:
        i = args.index("--before")
        before = json.loads(Path(args[i + 1]).read_text())
        del args[i : i + 2]
    bench = json.loads(Path(args[0] if args else "artifacts/bench.json").read_text())
    if bench.get("kind") == "build":
        sys.stdout.write(build_table(bench, before))
    else:
        sys.stdout.write(before_after(before, bench) if before else table(bench))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
