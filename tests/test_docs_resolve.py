"""Names in the pages that stay true (issue 42): every file path and every dotted `pipeline.` /
`targets.` name in README.md, docs/*.md and mobile/README.md resolves in this checkout, and the
source paths the code writes into what it publishes (the apps' contract.json, notes, errors) exist.

Fast and build-free: paths are looked up on disk, dotted names imported down to the attribute
(importlib + getattr). A page that names a module that moved (`arrcoc_edge.golden.load_photo`,
`pipeline/target.py`) fails here, with the page and line.
"""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "mobile" / "README.md"]

# Where a page's relative paths are read from, besides the repository root and the page's own
# folder: mobile/README.md describes each app in its own section, with paths relative to that app.
BASES = {"mobile/README.md": ("mobile/android", "mobile/ios")}

# Not paths of this checkout, each for the reason given; matched as a prefix of the path as written.
NOT_IN_CHECKOUT = {
    # an output folder: made by a build, git-ignored (`artifacts/` is the default --out, OUT any --out)
    "artifacts/": "the published folder a build writes (git-ignored)",
    "OUT/": "placeholder for any --out folder: a build's published files",
    ".OUT.arrcoc-edge/": "the state folder beside OUT (docs/guarantees.md)",
    ".artifacts.arrcoc-edge/": "the state folder beside artifacts/",
    # folders the build or set-up fills inside the checkout (each git-ignored by the repo)
    "mobile/android/app/src/main/assets/": "written by `invoke build --target android` (git-ignored)",
    "app/src/main/assets/": "the same folder, relative to mobile/android",
    "mobile/ios/ArrcocDemo/Resources/": "written by `invoke build --target ios` (git-ignored)",
    "ArrcocDemo/Resources/": "the same folder, relative to mobile/ios",
    "tools/android-23/": "made by scripts/setup.d/40-android-jvm.sh (git-ignored)",
    "tools/kotlin/node_modules/": "installed by scripts/setup.d/40-android-jvm.sh (git-ignored)",
    "web/node_modules/": "installed by scripts/setup.d/20-web-npm.sh (git-ignored)",
    ".venv/": "the virtual environment scripts/setup.sh makes (git-ignored)",
    "dist/": "where `.venv/bin/invoke package` writes the wheel (README.md)",
    "./artifacts": "the default --out of the installed command: artifacts/ in the folder it runs in",
    # inside an installed wheel only: setup.py maps checkpoints/, web/ and mobile/ there
    "pipeline/bundled/": "the wheel's copy of checkpoints/ (setup.py)",
    "targets/bundled/": "the wheel's copy of web/ and mobile/ (setup.py)",
    # files the user makes outside the repository's tracked files, as the page says
    "./gradlew": "the Gradle wrapper, which the repo does not carry (mobile/README.md: `gradle wrapper` makes it)",
    "app/build/": "Gradle's output folder under mobile/android (made by `./gradlew`)",
}
NOT_IN_CHECKOUT_TOPS = {prefix.split("/", 1)[0] for prefix in NOT_IN_CHECKOUT}

# A token is a path candidate when its first part is a top-level entry of the checkout (or of a
# page's base folder): prose such as "W/G" or "and/or" is not, and is never looked up.
PATH = re.compile(r"(?<![\w.$/-])((?:\.\.?/)*[\w.<>*{}-]+(?:/(?:[\w.<>*-]|\{[\w.,*-]*\})*)+(?:::\w+)?)")
# A file name such as targets.md (docs/targets.md, linked from another page) is not a dotted name.
DOTTED = re.compile(r"(?<![\w./-])((?:arrcoc_edge|pipeline|targets)(?:\.[A-Za-z_]\w*)+)(?<!\.md)(?![\w/-])")


def _page_lines(page: Path):
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        yield number, line


def _tops(base: Path) -> set[str]:
    """The top-level entries git tracks in `base`: a user's own `photos/`, `q.npy` or `artifacts/`
    in the checkout (docs/cli.md leads to them) must not make prose such as `photos/s` a path."""
    import subprocess

    if not base.is_dir():
        return set()
    listed = subprocess.run(["git", "ls-files", "-z", "."], cwd=base, capture_output=True, check=True).stdout.decode()
    return {name.split("/", 1)[0] for name in listed.split("\0") if name}


def _bases(page: Path) -> list[Path]:
    rel = page.relative_to(REPO).as_posix()
    return [REPO, page.parent, *(REPO / b for b in BASES.get(rel, ()))]


def path_candidates(page: Path) -> list[tuple[int, str]]:
    """(line, path as written) for every token of the page that names a file or folder of the
    checkout: its first part is a top-level entry of one of the page's bases (or `..`/`.`)."""
    bases = _bases(page)
    tops = set().union(*(_tops(b) for b in bases)) | set(NOT_IN_CHECKOUT_TOPS)
    found = []
    for number, line in _page_lines(page):
        if "://" in line:
            line = re.sub(r"\w+://\S+", " ", line)
        for match in PATH.finditer(line):
            token = match.group(1).rstrip(".,:;")
            first = token.split("/", 1)[0]
            if first in (".", "..") or first in tops:
                found.append((number, token))
    return found



def resolves(page: Path, token: str) -> bool:
    """The path exists under one of the page's bases; `<name>`, `*` and `{a,b}` parts are
    templates that must match at least one entry; `FILE.py:NAME` / `FILE.py::test` must name a
    definition in that file; a `module.attr` tail on a .py path is not accepted (write the file)."""
    if any(token.startswith(prefix) or token == prefix.rstrip("/") for prefix in NOT_IN_CHECKOUT):
        return True
    path, _, member = token.partition("::")
    path = path.rstrip("/")
    pattern = re.sub(r"<[^>]*>|\{[^}]*\}", "*", path)
    for base in _bases(page):
        hits = sorted(base.glob(pattern)) if "*" in pattern else [base / pattern] if (base / pattern).exists() else []
        if hits:
            return not member or any(_defines(hit, member) for hit in hits if hit.is_file())
    return False


def _defines(path: Path, name: str) -> bool:
    """The file defines `name`: a function, class or assigned name anywhere in it."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def dotted_resolves(name: str) -> bool:
    """`pipeline.a.b.c`: the longest importable module prefix, then getattr down the rest."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_path_a_page_names_exists(page):
    missing = [f"{page.relative_to(REPO)}:{n}: {token}" for n, token in path_candidates(page)
               if not resolves(page, token)]
    assert not missing, "paths that do not exist in the checkout:\n" + "\n".join(missing)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_dotted_name_a_page_names_imports(page):
    missing = [f"{page.relative_to(REPO)}:{n}: {m.group(1)}" for n, line in _page_lines(page)
               for m in DOTTED.finditer(line) if not dotted_resolves(m.group(1))]
    assert not missing, "dotted names that do not import down to the attribute:\n" + "\n".join(missing)


SOURCE_PATH = re.compile(r"(?<![\w./-])((?:pipeline|targets|mobile|web|scripts|tests|docs)/[\w./-]*\.(?:py|md|kt|swift|js|html|sh))\b")


def _code_strings(path: Path):
    """(line, text) of every string constant in a module (f-strings' literal parts included)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def _line(first: int, text: str, match: re.Match) -> int:
    """The line of a match inside a string constant that starts on line `first` (a docstring's
    own lines counted; exact for one literal, approximate for implicitly joined ones)."""
    return first + text.count("\n", 0, match.start())


def test_source_paths_the_code_records_exist():
    """The contract writers record source paths in what they publish (targets/ios/encoder.py wrote
    `targets/coreml_mil.py` into the iOS contract.json after the file moved); every such path in a
    string of pipeline/ or targets/ (errors, notes, docstrings) must exist."""
    missing = []
    for module in sorted([*(REPO / "pipeline").rglob("*.py"), *(REPO / "targets").rglob("*.py")]):
        for number, text in _code_strings(module):
            for match in SOURCE_PATH.finditer(text):
                if not (REPO / match.group(1)).exists():
                    missing.append(f"{module.relative_to(REPO)}:{_line(number, text, match)}: {match.group(1)}")
    assert not missing, "source paths recorded in code that do not exist:\n" + "\n".join(missing)


def test_dotted_names_the_code_records_import():
    """The same for `pipeline.` / `targets.` names in those strings (mobile_contract's docstring
    named `arrcoc_edge.text_encoder`, which moved to arrcoc_edge.relevance.text_encoder); this imports
    the modules named, torch among them."""
    missing, seen = [], {}
    for module in sorted([*(REPO / "pipeline").rglob("*.py"), *(REPO / "targets").rglob("*.py")]):
        for number, text in _code_strings(module):
            for match in DOTTED.finditer(text):
                name = match.group(1)
                if not seen.setdefault(name, dotted_resolves(name)):
                    missing.append(f"{module.relative_to(REPO)}:{_line(number, text, match)}: {name}")
    assert not missing, "dotted names recorded in code that do not import:\n" + "\n".join(missing)


def test_dotted_names_are_read_under_the_import_name():
    """The package is imported as arrcoc_edge (pipeline/ is its folder): the pages name modules that
    way, and those names are the ones checked above."""
    names = [m.group(1) for m in DOTTED.finditer("see `arrcoc_edge.relevance.qwen_query.exact_query` and docs/targets.md")]
    assert names == ["arrcoc_edge.relevance.qwen_query.exact_query"]
    assert dotted_resolves(names[0]) and not dotted_resolves("arrcoc_edge.relevance.qwen_query.no_such_name")


def test_a_users_own_files_in_the_checkout_are_not_read_as_paths(tmp_path):
    """With a `photos/` folder in the checkout (docs/cli.md leads a user to make one), docs/speed.md's
    `photos/s` (photos per second) was read as a path and failed: only tracked names count."""
    import subprocess

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("x\n")
    subprocess.run(["git", "add", "docs/a.md"], cwd=tmp_path, check=True)
    for name in ("photos", "artifacts"):
        (tmp_path / name).mkdir()
    (tmp_path / "q.npy").write_bytes(b"")
    assert _tops(tmp_path) == {"docs"}
