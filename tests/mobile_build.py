"""One `invoke build --target ios` (which builds coreml first) per test session, shared by
tests/test_coreml.py and tests/test_ios.py: the conversion and MIL check take about a minute.
Also `source_function`, for the static checks of what only a device runs (the apps' decoders)."""
from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path


from conftest import run_cli

ANDROID = Path(__file__).resolve().parent.parent / "mobile" / "android"


@functools.lru_cache(maxsize=1)
def built_ios() -> tuple[Path, Path]:
    """(out dir, app resources dir); the app copy goes to a temp folder, never the repo's app."""
    root = Path(tempfile.mkdtemp(prefix="arrcoc-ios-test-"))
    atexit.register(shutil.rmtree, root, True)
    out, app = root / "out", root / "app" / "Resources"
    proc = run_cli("build", "--target", "ios", "--out", str(out), env={"ARRCOC_IOS_APP_DIR": str(app)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, app


def source_function(text: str, keyword: str, name: str) -> str:
    """The body of `keyword name(...)` ("fun" in Kotlin, "func" in Swift) in a source file, braces
    matched: the apps' static tests look inside one function at a time."""
    start = text.index(f"{keyword} {name}(")
    depth, i = 0, text.index("{", start)
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[start:j + 1]
    raise AssertionError(f"unbalanced braces in {keyword} {name}")
