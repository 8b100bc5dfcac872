"""Markdown speed table from a bench.json (`invoke bench` writes OUT/bench.json).

    python scripts/speed_table.py [OUT/bench.json] > table.md
    python scripts/speed_table.py AFTER/bench.json --before BEFORE/bench.json   # side by side

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


def main(argv: list[str]) -> int:
    """speed_table.py [BENCH.json] [--before OLD_BENCH.json]"""
    args = list(argv[1:])
    before = None
    if "--before" in args:
        i = args.index("--before")
        before = json.loads(Path(args[i + 1]).read_text())
        del args[i : i + 2]
    bench = json.loads(Path(args[0] if args else "artifacts/bench.json").read_text())
    sys.stdout.write(before_after(before, bench) if before else table(bench))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
