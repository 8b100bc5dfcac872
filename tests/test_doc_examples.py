"""Every fenced command and Python block of the user pages (README.md, docs/*.md, mobile/README.md) runs as written (docs/python.md's
blocks run, in order and as one program, in tests/test_api.py::test_every_example_of_docs_python_md_runs).

Each page's ```bash and ```python blocks run in order, in folders set up as a user's would be:
`HOME/arrcoc-edge/` is a clone (the files git tracks, committed in a repository of its own, with this
checkout's `.venv`), where
`artifacts/` is a folder published by `.venv/bin/invoke build --target onnx,onnx-int8,text-encoder --out
artifacts` (the conversions come from the session's cache; a page's `clean` removes it, so README
runs before docs/cli.md), `photo.jpg` a real photo and `photos/` three photos; a block runs there.
A block marked as outside the checkout runs in HOME, which holds the clone and `photo.jpg` only (the
README's package route: a venv, the wheel `.venv/bin/invoke package` made, a copy of the publish);
its python blocks run with the venv that route makes, `arrcoc-env/bin/python`. A block that cannot
run here says so on the line before it, with its reason:

    <!-- docs-test: skip (the whole set-up and build: CI runs exactly this) -->
    <!-- docs-test: outside the checkout -->

A bash block runs under `bash -euo pipefail`; a python block as a script. Output blocks (```text,
plain ```) are not run.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, photo_file

pytestmark = pytest.mark.slow  # a build and real predicts

# README first (its checkout route), docs/cli.md before the pages that use its files; docs/python.md's
# python blocks run as one program in tests/test_api.py, its bash blocks here.
USER_PAGES = ("README.md", "docs/cli.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md")
                                                  if p.name != "cli.md"), "mobile/README.md")
PYTHON_RUN_ELSEWHERE = {"docs/python.md"}
FENCE = re.compile(r"(?:^<!-- docs-test: (?:skip \((?P<why>.+?)\)|(?P<outside>outside the checkout)) -->\n)?"
                   r"^```(?P<lang>bash|python)\n(?P<code>.*?)^```", re.M | re.S)
CLONE = "arrcoc-edge"       # the folder a `git clone` of the project makes, inside HOME
OUTSIDE_VENV = "arrcoc-env"  # the venv the README's package route makes in HOME


def blocks(page: str) -> list[tuple[int, str, str, str | None, bool]]:
    """(line, language, code, skip reason or None, runs outside the checkout) of each runnable
    fenced block, in page order."""
    text = (REPO / page).read_text()
    return [(text.count("\n", 0, m.start("code")), m["lang"], m["code"], m["why"], bool(m["outside"]))
            for m in FENCE.finditer(text)]


def test_the_parser_sees_blocks_and_skip_marks():
    found = blocks("README.md")
    assert any(lang == "bash" and why is None for _, lang, _, why, _ in found)
    assert any(lang == "python" and outside for _, lang, _, _, outside in found)
    skipped = [why for *_, why, _ in found if why]
    assert skipped and all(len(why) > 10 for why in skipped)  # a reason, not a bare mark
    assert any(outside and lang == "bash" and f"python3 -m venv {OUTSIDE_VENV}" in code
               for _, lang, code, _, outside in found), "the README's package route makes its venv"


# A fence without bash/python is output; one whose lines read as commands would hide them from this test.
COMMANDS = re.compile(r"^\s*(?:\$ )?(?:\.venv/bin/|invoke |pip |python|arrcoc-edge |bash |cd |npm |\./gradlew)", re.M)


def test_every_command_block_of_a_user_page_is_marked_bash():
    """mobile/README.md's `pip install -e '.[mobile]'` sat in a plain fence, out of this test's sight
    (and installed into the global Python)."""
    hidden = [f"{page}:{text.count(chr(10), 0, m.start()) + 1}" for page in USER_PAGES
              for text in [(REPO / page).read_text()]
              for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.M | re.S)
              if m[1] not in ("bash", "python") and COMMANDS.search(m[2])]
    assert not hidden, f"commands in a fence that is not ```bash: {hidden}"


PAGES = [page for page in USER_PAGES if blocks(page)]
BUILT = "onnx,onnx-int8,text-encoder"


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """HOME holding a clone (the tracked files and this checkout's .venv) with a published
    `artifacts/` and the user's photos; HOME itself holds the clone and a photo, nothing else."""
    root = tmp_path_factory.mktemp("home")
    clone = root / CLONE
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():  # a file deleted in the work tree is not in the clone either
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, clone / name)
    # a clone is a git checkout (`invoke package` releases its HEAD), committed before the user's own files
    git = ["git", "-c", "user.email=user@example.com", "-c", "user.name=user", "-c", "core.hooksPath=/dev/null"]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "the clone"]):
        subprocess.run([*git, *step], cwd=clone, capture_output=True, check=True)
    (clone / ".venv").symlink_to(REPO / ".venv")
    built = _run(clone, "bash", f".venv/bin/invoke build --target {BUILT} --out artifacts")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    reprs = re.findall(r".*[{\[]'.*", built.stdout + built.stderr)  # `held-out {'sentences': 38, ...}`
    assert not reprs, f"a Python repr in the build's output: {reprs[:3]}"
    photo_file(clone)
    photo_file(root)
    (clone / "photos").mkdir()
    for seed in (1, 2, 3):
        photo_file(clone / "photos", f"p{seed}.jpg", seed=seed * 40)
    for name, seed in (("a.jpg", 200), ("b.jpg", 300)):  # docs/python.md's own photos
        photo_file(clone, name, seed=seed)
    return root


def _run(folder: Path, lang: str, code: str, python: Path | None = None) -> subprocess.CompletedProcess:
    """In the clone the checkout's .venv is on PATH (docs/cli.md's `arrcoc-edge` lines); outside
    it (`python`: the route's own venv) PATH is the user's own, without it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    venv_bin = str(REPO / ".venv" / "bin")
    paths = [entry for entry in env.get("PATH", "").split(os.pathsep) if entry and entry != venv_bin]
    env["PATH"] = os.pathsep.join(paths if python else [venv_bin, *paths])
    cmd = ["bash", "-euo", "pipefail", "-c", code] if lang == "bash" else [str(python or REPO / ".venv" / "bin" / "python"), "-c", code]
    return subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=900, env=env)


@pytest.mark.parametrize("page", PAGES)
def test_every_block_of_the_page_runs_as_written(page, home):
    found = blocks(page)
    for line, lang, code, why, outside in found:
        if why or (lang == "python" and page in PYTHON_RUN_ELSEWHERE):
            continue
        folder = home if outside else home / CLONE
        python = home / OUTSIDE_VENV / "bin" / "python" if outside else None
        done = _run(folder, lang, code, python)
        assert done.returncode == 0, f"{page}:{line} ({lang}) exit {done.returncode}:\n{code}\n{done.stdout[-1500:]}{done.stderr[-2500:]}"
