"""Every fenced command and Python block of README.md and docs/cli.md runs as written (docs/python.md's
blocks run, in order and as one program, in tests/test_api.py::test_every_example_of_docs_python_md_runs).

Each page's ```bash and ```python blocks run in order, in a folder set up as a user's would be after
the page's own set-up steps: `.venv` and `tasks.py` of this checkout (so `.venv/bin/invoke`,
`arrcoc-edge` and `python` are the project's), `artifacts/` a folder published there by
`.venv/bin/invoke build --target onnx,onnx-int8,text-encoder --out artifacts` (the conversions come
from the session's cache; a page's `clean` removes it, so README runs before docs/cli.md), `photo.jpg` a real photo, `photos/` three photos, `q.npy` a query embedding of the model's width. A block that cannot
run here says so on the line before it, with its reason:

    <!-- docs-test: skip (the whole set-up and build: CI runs exactly this) -->

A bash block runs under `bash -euo pipefail`; a python block as a script. Output blocks (```text,
plain ```) are not run.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, photo_file

pytestmark = pytest.mark.slow  # a build and real predicts

PAGES = ("README.md", "docs/cli.md")
FENCE = re.compile(r"(?:^<!-- docs-test: skip \((?P<why>.+?)\) -->\n)?^```(?P<lang>bash|python)\n(?P<code>.*?)^```",
                   re.M | re.S)


def blocks(page: str) -> list[tuple[int, str, str, str | None]]:
    """(line, language, code, skip reason or None) of each runnable fenced block, in page order."""
    text = (REPO / page).read_text()
    return [(text.count("\n", 0, m.start("code")), m["lang"], m["code"], m["why"]) for m in FENCE.finditer(text)]


def test_the_parser_sees_blocks_and_skip_marks():
    found = blocks("README.md")
    assert any(lang == "bash" and why is None for _, lang, _, why in found)
    assert any(lang == "python" for _, lang, _, _ in found)
    skipped = [why for *_, why in found if why]
    assert skipped and all(len(why) > 10 for why in skipped)  # a reason, not a bare mark


BUILT = "onnx,onnx-int8,text-encoder"


@pytest.fixture(scope="module")
def user_folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("user")
    (root / ".venv").symlink_to(REPO / ".venv")
    (root / "tasks.py").symlink_to(REPO / "tasks.py")
    built = _run(root, "bash", f".venv/bin/invoke build --target {BUILT} --out artifacts")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    photo_file(root)
    (root / "photos").mkdir()
    for seed in (1, 2, 3):
        photo_file(root / "photos", f"p{seed}.jpg", seed=seed * 40)
    width = json.loads((root / "artifacts" / "manifest.json").read_text())["checkpoint"]["model"]["query_dim"]
    np.save(root / "q.npy", np.full(width, width ** -0.5, np.float32))
    return root


def _run(folder: Path, lang: str, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{folder / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    cmd = ["bash", "-euo", "pipefail", "-c", code] if lang == "bash" else [str(folder / ".venv" / "bin" / "python"), "-c", code]
    return subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.parametrize("page", PAGES)
def test_every_block_of_the_page_runs_as_written(page, user_folder):
    found = blocks(page)
    assert found, f"{page} has no ```bash or ```python block"
    for line, lang, code, why in found:
        if why:
            continue
        done = _run(user_folder, lang, code)
        assert done.returncode == 0, f"{page}:{line} ({lang}) exit {done.returncode}:\n{code}\n{done.stdout[-1500:]}{done.stderr[-2500:]}"
