"""Where this copy of arrcoc-edge runs from: a source checkout or an installed package.

The project installs one import name, `arrcoc_edge`. In a checkout its two halves are the folders
`pipeline/` (the package `arrcoc_edge` itself: the core) and `targets/` (`arrcoc_edge.targets`), at
the repository's root beside pyproject.toml; setup.py maps them into the one package, and an
installed copy has `arrcoc_edge/` in site-packages with `targets/` inside it and the files they read
from outside Python (the checkpoints, web/ and mobile/) bundled under `bundled/` folders. Everything
that must answer "where is X" or "how does this user install Y" asks here, so the answer is decided once.
"""
from __future__ import annotations

from pathlib import Path

CORE = Path(__file__).resolve().parent  # the package `arrcoc_edge`: pipeline/ in a checkout
ROOT = CORE.parent                      # the checkout, or site-packages
CHECKOUT = (ROOT / "pyproject.toml").is_file() and (ROOT / "constraints.txt").is_file()
# the command a person types with this copy, as fixes name it: Invoke's tasks in a checkout, the
# console script once installed (a fix naming `invoke` or a checkout path helps no pip user)
COMMAND = "invoke" if CHECKOUT else "arrcoc-edge"
TARGETS = ROOT / "targets" if CHECKOUT else CORE / "targets"  # the package `arrcoc_edge.targets`
# this project's own Python code, folder -> the module prefix it holds (the same in both layouts)
CODE = {CORE: "arrcoc_edge", TARGETS: "arrcoc_edge.targets"}
# Building (export, training, bench) runs torch, whose pinned CPU wheel exists for this Python only;
# the extras that pull torch install nothing on another Python (pyproject.toml's markers).
BUILD_PYTHON = (3, 11)
BUILD_EXTRAS = ("build", "mobile", "tensorrt", "text", "reference")


def project_folder(name: str, bundled_in: Path) -> Path:
    """`name` at the checkout's root, or its copy under `bundled_in/bundled/` in an installed package."""
    return ROOT / name if CHECKOUT else Path(bundled_in) / "bundled" / name
