"""Does every inference dependency's pin have a wheel for each supported Python and platform?

Asks the registry (pip download --only-binary, one pin at a time, no dependencies) for the pins of
pyproject.toml's `dependencies` at constraints.txt's versions, for CPython 3.11, 3.12 and 3.13 on
manylinux x86-64 and aarch64, and prints a table; exit 1 if one is missing. Run it before widening
requires-python or moving a pin:   .venv/bin/python scripts/check_wheels.py
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHONS = ("3.11", "3.12", "3.13")
PLATFORMS = {"x86_64": ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"],
             "aarch64": ["manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64"]}


def pins() -> list[str]:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return [re.split(r"[;\s]", d)[0] for d in deps]


def has_wheel(pin: str, python: str, platforms: list[str]) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", tmp,
               "--python-version", python, "--implementation", "cp", "--disable-pip-version-check"]
        for platform in [*platforms, "any"]:
            cmd += ["--platform", platform]
        return subprocess.run([*cmd, pin], capture_output=True).returncode == 0


def main() -> int:
    missing = []
    print(f"{'pin':24}" + "".join(f"{p + ' ' + a:>16}" for p in PYTHONS for a in PLATFORMS))
    for pin in pins():
        row = [has_wheel(pin, p, plats) for p in PYTHONS for plats in PLATFORMS.values()]
        missing += [pin] if not all(row) else []
        print(f"{pin:24}" + "".join(f"{'wheel' if ok else 'MISSING':>16}" for ok in row))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
