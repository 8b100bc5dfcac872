"""What the mobile tests share: the user's files seeded in and beside an app folder (the shared
builds in conftest.py seed them before building), the bundle a build wrote into an app folder, and
`source_function`, for the static checks of what only a device runs (the apps' decoders)."""
from __future__ import annotations

import json
from pathlib import Path

ANDROID = Path(__file__).resolve().parent.parent / "mobile" / "android"


# What a user keeps in and beside an app folder before a build copies into it: the build must leave
# every one of these byte for byte (targets/shared/app_folder.py; tests/test_android.py and test_ios.py).
USER_FILES = {"fonts/brand.ttf": b"the user's font", "images/nested/deeper/logo.png": b"the user's logo"}
USER_SIBLINGS = ("{name}.old", "{name}.new", "{name}-backup")


def seed_user_files(app: Path) -> dict[str, bytes]:
    """The user's files in `app` and backup folders beside it; returns {path relative to app's parent: bytes}."""
    seeded = {}
    for rel, data in USER_FILES.items():
        seeded[f"{app.name}/{rel}"] = data
    for sibling in USER_SIBLINGS:
        seeded[f"{sibling.format(name=app.name)}/contract.json"] = b"the user's backup"
    for rel, data in seeded.items():
        (app.parent / rel).parent.mkdir(parents=True, exist_ok=True)
        (app.parent / rel).write_bytes(data)
    return seeded


def user_files_left(app: Path, seeded: dict[str, bytes]) -> dict[str, bytes | None]:
    return {rel: (app.parent / rel).read_bytes() if (app.parent / rel).is_file() else None for rel in seeded}


def bundle_in_app(app: Path) -> dict[str, bytes]:
    """The files the build wrote into `app` ({relative path: bytes}): everything there but the
    user's seeded files and the build's record, which must list exactly these, by sha256."""
    import hashlib

    from arrcoc_edge.targets.shared.app_folder import RECORD

    files = {p.relative_to(app).as_posix(): p.read_bytes() for p in app.rglob("*") if p.is_file()}
    ours = {rel: data for rel, data in files.items() if rel not in USER_FILES and rel != RECORD}
    record = json.loads((app / RECORD).read_text())
    assert record["files"] == {rel: [hashlib.sha256(data).hexdigest()] for rel, data in ours.items()}
    assert record["pending"] == []
    return ours


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
