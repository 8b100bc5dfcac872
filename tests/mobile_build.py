"""One `invoke build --target ios` (which builds coreml first) per test session, shared by
tests/test_coreml.py and tests/test_ios.py: the conversion and MIL check take about a minute.
Also the EXIF helpers tests/test_android.py and tests/test_ios.py hold both apps' orientation
tables to (PIL's exif_transpose, as pipeline.golden.load_photo applies it)."""
from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import numpy as np

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


def exif_upright_reference(orientation: int, stored: np.ndarray) -> np.ndarray:
    """PIL's ImageOps.exif_transpose of `stored` tagged with an EXIF orientation (what load_photo does)."""
    import io

    from PIL import Image, ImageOps

    im = Image.fromarray(stored)
    exif = im.getexif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    im.save(buf, "PNG", exif=exif)
    buf.seek(0)
    return np.asarray(ImageOps.exif_transpose(Image.open(buf)).convert("RGB"))


def reindex(stored: np.ndarray, transpose: bool, flip_rows: bool, flip_cols: bool) -> np.ndarray:
    """The apps' upright re-indexing, statement for statement (Kotlin Preprocess.upright, Swift uprightRGB)."""
    sh, sw = stored.shape[:2]
    h, w = (sw, sh) if transpose else (sh, sw)
    r, c = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    a, b = (c, r) if transpose else (r, c)
    if flip_rows:
        a = sh - 1 - a
    if flip_cols:
        b = sw - 1 - b
    return stored[a, b]


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
