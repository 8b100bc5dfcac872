"""The app folder's record is a claim, never an order (issue 43, finding 1;
targets/shared/app_folder.py): a file it names, pending ones too, is removed only while its content
is a sha256 the record lists; a subfolder swapped for a link never leads outside the app folder;
names with NUL, over-long components or deep nesting are refused in one typed line before anything
is written. On real files in a temporary folder."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from arrcoc_edge.errors import OutputDirError
from arrcoc_edge.targets.shared.app_folder import RECORD, copy_to_app

FIRST = {"contract.json": b'{"v": 1}\n', "shared/model.pte": b"pte one", "golden.json": b"{}"}
SECOND = {"contract.json": b'{"v": 2}\n', "model.int8.pte": b"pte two", "golden.json": b"{}"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def bundle(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def edit_record(app: Path, **fields) -> None:
    record = json.loads((app / RECORD).read_text())
    record.update(fields)
    (app / RECORD).write_text(json.dumps(record))


@pytest.fixture
def app(tmp_path):
    app = tmp_path / "app" / "assets"
    copy_to_app(bundle(tmp_path / "s1", FIRST), app)
    (app / "notes.txt").write_bytes(b"the user's notes")
    return app


@pytest.mark.parametrize("pending", [["notes.txt"], [["notes.txt", sha(b"something else")]]])
def test_a_pending_entry_never_removes_a_file_whose_content_it_does_not_list(tmp_path, app, pending):
    edit_record(app, pending=pending)
    copy_to_app(bundle(tmp_path / "s2", SECOND), app)
    assert (app / "notes.txt").read_bytes() == b"the user's notes"


def test_a_complete_pending_temporary_file_goes_and_a_partial_one_is_kept_and_named(tmp_path, app):
    whole, part = "shared/.arrcoc-edge-0123456789abcdef.tmp", ".arrcoc-edge-fedcba9876543210.tmp"
    (app / whole).write_bytes(b"pte one")
    (app / part).write_bytes(b"half")
    edit_record(app, pending=[[whole, sha(b"pte one")], [part, sha(b"half and the rest")]])
    kept = copy_to_app(bundle(tmp_path / "s2", SECOND), app)
    assert not (app / whole).exists() and (app / part).read_bytes() == b"half" and part in kept


def test_a_recorded_subfolder_swapped_for_a_link_never_leads_outside(tmp_path, app):
    """`shared -> ../../outside` holding files with the very sha256 the record lists: the build
    removes nothing there (it used to delete them and the folder, exit 0)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model.pte").write_bytes(b"pte one")
    (outside / "sub").mkdir()
    (app / "shared" / "model.pte").unlink()
    (app / "shared").rmdir()
    (app / "shared").symlink_to(Path("..", "..", "outside"))
    edit_record(app, dirs=["shared", "shared/sub"], files={**json.loads((app / RECORD).read_text())["files"],
                                                          "shared/sub/x": [sha(b"x")]})
    (outside / "sub" / "x").write_bytes(b"x")
    copy_to_app(bundle(tmp_path / "s2", SECOND), app)
    assert tree(outside) == {"model.pte": b"pte one", "sub/x": b"x"}
    assert (app / "shared").is_symlink()


@pytest.mark.parametrize("bad", ["a\0b", "x" * 300, "/".join(["d"] * 200) + "/f", "../../escape", "/etc/passwd",
                                 "a/./b", ""])
@pytest.mark.parametrize("field", ["files", "pending", "dirs"])
def test_a_bad_name_in_the_record_is_one_typed_line_and_nothing_changes(tmp_path, app, bad, field):
    value = {"files": {bad: [sha(b"x")]}, "pending": [[bad, sha(b"x")]], "dirs": [bad]}[field]
    if field == "files":
        value = {**json.loads((app / RECORD).read_text())["files"], **value}
    edit_record(app, **{field: value})
    before = tree(app)
    with pytest.raises(OutputDirError) as err:
        copy_to_app(bundle(tmp_path / "s2", SECOND), app)
    line = err.value.one_line()
    assert "\n" not in line and "move" in line and RECORD in line
    assert tree(app) == before


def test_a_deeply_nested_record_is_one_typed_line(tmp_path, app):
    (app / RECORD).write_text("[" * 100000 + "]" * 100000)
    before = tree(app)
    with pytest.raises(OutputDirError):
        copy_to_app(bundle(tmp_path / "s2", SECOND), app)
    assert tree(app) == before


def test_a_bundle_name_too_long_for_the_folder_is_refused_before_anything_is_written(tmp_path, app):
    before = tree(app)
    staging = bundle(tmp_path / "s2", SECOND)
    deep = staging.joinpath(*["d"] * 40)
    deep.mkdir(parents=True)
    (deep / "f").write_bytes(b"deep")
    with pytest.raises(OutputDirError):
        copy_to_app(staging, app)
    assert tree(app) == before
