"""The import contracts (.importlinter), checked on the package as it installs.

The repository keeps the package's two halves in two folders, `pipeline/` (the package `arrcoc_edge`)
and `targets/` (`arrcoc_edge.targets`), which setup.py maps into one package. grimp, which
lint-imports uses, reads one folder per top-level package, so this lays the tree out as the wheel
does (a copy of the Python files in a temporary folder) and runs lint-imports there.

    .venv/bin/python scripts/lint_imports.py            the checkout
    .venv/bin/python scripts/lint_imports.py --tree T   another tree holding pipeline/, targets/ and .importlinter
Exit code and output are lint-imports'.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYOUT = {"pipeline": "arrcoc_edge", "targets": "arrcoc_edge/targets"}  # folder -> where it installs (setup.py)


def stage(tree: Path, dest: Path) -> Path:
    """Copy `tree`'s Python packages into `dest` as they install; returns `dest`."""
    for folder, installed in LAYOUT.items():
        shutil.copytree(tree / folder, dest / installed, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "bundled"))
    return dest


def lint(tree: Path) -> subprocess.CompletedProcess:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    with tempfile.TemporaryDirectory(prefix="arrcoc-lint-") as tmp:
        staged = stage(tree, Path(tmp))
        # the staged copy first on the path: grimp reads it, not the checkout's editable install
        return subprocess.run([str(lint_imports), "--no-cache", "--config", str(tree / ".importlinter")],
                              cwd=staged, capture_output=True, text=True, timeout=300,
                              env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(staged)})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=REPO)
    done = lint(parser.parse_args().tree.resolve())
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
