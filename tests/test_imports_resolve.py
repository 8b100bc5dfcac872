"""Every `from arrcoc_edge... import X` in the project's own code names
something that exists, including the imports inside functions (which only run deep in a build).

Why: a rename left `from arrcoc_edge.targets.shared.mobile_contract import _sha256` inside a function that runs
only in the android and ios stages; the fast tier never reached it and CI found it after 36 minutes
(38 errors). This reads the source (ast) and imports each named module, so it costs seconds.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("arrcoc_edge",)
FOLDERS = ("pipeline", "targets")  # the folders that hold it (setup.py)


def project_sources() -> list[Path]:
    files = [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))]
    return files + [ROOT / "tasks.py"]


def our_from_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) of every absolute `from arrcoc_edge... import name` in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] in OURS:
            found += [(node.lineno, node.module, alias.name) for alias in node.names if alias.name != "*"]
    return found


def resolves(module: str, name: str) -> bool:
    mod = importlib.import_module(module)
    if hasattr(mod, name):
        return True
    return hasattr(mod, "__path__") and importlib.util.find_spec(f"{module}.{name}") is not None


def test_every_from_import_of_ours_names_something_that_exists():
    missing = []
    for path in project_sources():
        for line, module, name in our_from_imports(path):
            try:
                ok = resolves(module, name)
            except ImportError as exc:  # an optional extra missing in this venv is not our fault
                if exc.name and exc.name.split(".")[0] in OURS:
                    ok = False
                else:
                    continue
            if not ok:
                missing.append(f"{path.relative_to(ROOT)}:{line}: from {module} import {name}")
    assert not missing, "imports of names that do not exist:\n" + "\n".join(missing)


def test_the_check_sees_imports_inside_functions(tmp_path):
    """The check reads function bodies, and a missing name is reported (the bug it was written for)."""
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from arrcoc_edge.targets.shared.mobile_contract import _sha256\n")
    assert our_from_imports(src) == [(2, "arrcoc_edge.targets.shared.mobile_contract", "_sha256")]
    assert not resolves("arrcoc_edge.targets.shared.mobile_contract", "_sha256")
    assert resolves("arrcoc_edge.relevance.digest", "sha256_file")


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(pytest.main([__file__, "-q"]))
