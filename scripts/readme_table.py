"""Put the table a real `invoke build --target all` printed into README.md, with where it came from.

    .venv/bin/invoke build --target all > build.log      # on a clean clone, after scripts/setup.sh
    .venv/bin/python scripts/readme_table.py build.log   # rewrites the block between the markers

The block names the commit the build ran on, the host (CPU model, cores) and the date, so a reader
can tell a stale table from a current one; what may differ on another host is said beside it.
"""
from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
BEGIN = "<!-- build table: scripts/readme_table.py pastes it from a real build's output -->"
END = "<!-- end of build table -->"


def table_lines(log: str) -> list[str]:
    """The summary table and the reasons under it, as the build printed them."""
    lines = log.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("target ") and "status" in line)
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(tuple("0123456789")) and "target(s)" in lines[i]),
               len(lines))
    return [line.rstrip() for line in lines[start:end] if line.strip()]


def total_time(log: str) -> str:
    """The build's own last line, "10 target(s) in 612.3s (fresh export); ...", as minutes and seconds."""
    found = re.search(r"^\d+ target\(s\) in ([\d.]+)s \(([^)]*)\)", log, re.M)
    if not found:
        raise SystemExit("no 'N target(s) in T s' line in the log: pass the whole output of the build")
    minutes, seconds = divmod(round(float(found.group(1))), 60)
    return f"{minutes} min {seconds} s" + (f" ({found.group(2)})" if found.group(2) else "")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def block(log: str) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    source = (f"Printed by `invoke build --target all` on commit {commit}, {cpu_model()} ({os.cpu_count()} cores), "
              f"{datetime.date.today().isoformat()}; the whole command took {total_time(log)} there (the build's "
              "last line).")
    return "\n".join([BEGIN, source, "", "```", *table_lines(log), "```", END])


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    text = README.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    README.write_text(head + block(Path(argv[0]).read_text(encoding="utf-8")) + rest.split(END, 1)[1], encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
