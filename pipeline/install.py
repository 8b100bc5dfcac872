"""Where this copy of arrcoc-edge runs from: a source checkout or an installed package.

A checkout has pyproject.toml and constraints.txt beside `pipeline/`; an installed package has
`pipeline/` and `targets/` in site-packages and the files they read from outside them (the
checkpoints, web/ and mobile/) bundled inside them by setup.py. Everything that must answer "where
is X" or "how does this user install Y" asks here, so the answer is decided once.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout, or site-packages
CHECKOUT = (ROOT / "pyproject.toml").is_file() and (ROOT / "constraints.txt").is_file()
PACKAGES = ("pipeline", "targets")  # this project's own Python packages, beside each other under ROOT


def project_folder(name: str, bundled_in: Path) -> Path:
    """`name` at the checkout's root, or its copy under `bundled_in/bundled/` in an installed package."""
    return ROOT / name if CHECKOUT else Path(bundled_in) / "bundled" / name
