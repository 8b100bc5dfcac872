"""The import contracts (.importlinter) cover modules nobody has written yet: a module added under
targets/ and imported by the command line breaks `lint-imports` without anyone editing the contract.
Runs scripts/lint_imports.py on a copy of the tree in tmp_path; the repository is not touched."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from lint_imports import lint  # noqa: E402 - scripts/ is not a package


def _copy_tree(dest: Path) -> Path:
    for package in ("pipeline", "targets"):
        shutil.copytree(REPO / package, dest / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / ".importlinter", dest / ".importlinter")
    return dest


def _lint(tree: Path) -> subprocess.CompletedProcess:
    return lint(tree)  # laid out as the wheel installs it, in its own temporary folder


def test_a_new_target_module_imported_by_the_command_line_breaks_the_contract(tmp_path):
    tree = _copy_tree(tmp_path / "tree")
    clean = _lint(tree)
    assert clean.returncode == 0, clean.stdout[-3000:] + clean.stderr[-3000:]
    assert "0 broken" in clean.stdout

    (tree / "targets" / "brand_new_target.py").write_text('"""A target module written after the contract."""\nVALUE = 1\n')
    cli = tree / "pipeline" / "frontends" / "cli.py"
    cli.write_text(cli.read_text() + "\n\ndef _uses_new():\n    from arrcoc_edge.targets import brand_new_target\n    return brand_new_target.VALUE\n")
    broken = _lint(tree)
    assert broken.returncode != 0, broken.stdout[-3000:]
    assert "the command line reaches targets through the table" in broken.stdout
    assert "arrcoc_edge.frontends.cli -> arrcoc_edge.targets.brand_new_target" in broken.stdout


def test_a_new_package_under_targets_is_covered_too(tmp_path):
    """targets.** reaches any depth: a sub-package's module imported directly breaks the contract."""
    tree = _copy_tree(tmp_path / "tree")
    (tree / "targets" / "newroom").mkdir()
    (tree / "targets" / "newroom" / "__init__.py").write_text("")
    (tree / "targets" / "newroom" / "deep.py").write_text("VALUE = 2\n")
    (tree / "pipeline" / "frontends" / "extra_face.py").write_text('"""A new face."""\nfrom arrcoc_edge.targets.newroom import deep\n')
    broken = _lint(tree)
    assert broken.returncode != 0, broken.stdout[-3000:]
    assert "arrcoc_edge.frontends.extra_face -> arrcoc_edge.targets.newroom.deep" in broken.stdout
