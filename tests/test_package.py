"""`invoke package` (scripts/package.py) releases a commit: a tree with uncommitted changes and a
tracked link that leaves the tree are refused; the release is built from HEAD's content."""
from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def package(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("package_script", REPO / "scripts" / "package.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "serve.py").write_text("print('committed')\n")
    git = lambda *a: subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *a], cwd=repo,  # noqa: E731
                                    check=True, capture_output=True)
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "one")
    monkeypatch.setattr(module, "REPO", repo)
    return module, repo, git


def test_a_dirty_tree_is_refused(package, tmp_path):
    """Uncommitted edits went into the wheel ("the sdist builds the same wheel as the tree")."""
    module, repo, _ = package
    (repo / "pkg" / "serve.py").write_text("# UNCOMMITTED EDIT\n")
    with pytest.raises(module.PackageError, match="uncommitted changes.*pkg/serve.py"):
        module.committed_tree(tmp_path / "tree")


@pytest.mark.parametrize("target", ["/etc/hostname", "../../outside.txt", "../.."])
def test_a_tracked_link_that_leaves_the_tree_is_refused(package, tmp_path, target):
    """A committed link to /etc/hostname carried this host's name into the wheel."""
    module, repo, git = package
    os.symlink(target, repo / "pkg" / "host-link.txt")
    git("add", ".")
    git("commit", "-qm", "link")
    with pytest.raises(module.PackageError, match="leaves the tree"):
        module.committed_tree(tmp_path / "tree")


def test_the_release_is_heads_content_untracked_files_left_out(package, tmp_path):
    module, repo, git = package
    os.symlink("serve.py", repo / "pkg" / "alias.py")  # a link inside the tree is fine
    git("add", ".")
    git("commit", "-qm", "alias")
    (repo / "pkg" / "stray.py").write_text("not committed\n")
    tree = module.committed_tree(tmp_path / "tree")
    assert sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*")) == ["pkg", "pkg/alias.py", "pkg/serve.py"]
    assert (tree / "pkg" / "serve.py").read_text() == "print('committed')\n"


def test_the_build_extra_can_train_and_the_docs_table_names_every_extra():
    """`pip install '...[build]'` could not `train` (it needs MiniLM, the text extra) while
    docs/python.md said `[build]` is for build, train and bench. The build extra holds the text
    extra now, and the docs' table says what each extra of pyproject.toml enables."""
    import re
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "arrcoc-edge[text]" in extras["build"]
    page = (REPO / "docs" / "python.md").read_text()
    rows = set(re.findall(r"^\| `([a-z0-9]+)` \|", page, re.M))
    assert rows == set(extras), sorted(rows ^ set(extras))
    assert re.search(r"^\| `build` \|.*`train`", page, re.M)
