"""One guard for every place a build writes: besides --out, the app folders, the cache and the
temporary folder may not lie inside a publish or a kept release (a copied or renamed output folder):
one line, exit 2, before anything is written (outputs_guard.check_places)."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest



def _kept_release(root: Path) -> Path:
    """A copied publish as `cp -a OUT OUT-v1` leaves it: its manifest, a target folder, a bundle file."""
    release = root / "out-v1"
    (release / "android").mkdir(parents=True)
    (release / "android" / "model_fp32.pte").write_bytes(b"the release's bundle")
    (release / "manifest.json").write_text(json.dumps({"checkpoint": {"path": "c", "sha256": "0"}, "targets": {}}))
    return release


def _tree(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("setting,target", [("ARRCOC_ANDROID_APP_DIR", "android"), ("ARRCOC_IOS_APP_DIR", "ios"),
                                            ("XDG_CACHE_HOME", "onnx"), ("TMPDIR", "onnx")])
def test_a_write_place_inside_a_kept_release_is_refused_before_anything_is_written(setting, target, tmp_path,
                                                                                   monkeypatch, capsys):
    """ARRCOC_ANDROID_APP_DIR=OUT-v1/android used to swap the release's 8 bundle files in place (rc 0,
    `verify --out OUT-v1` failing after); XDG_CACHE_HOME=OUT/onnx wrote the cache into a publish."""
    from arrcoc_edge.frontends import cli

    release = _kept_release(tmp_path)
    before = _tree(release)
    place = release / "cache" if setting == "XDG_CACHE_HOME" else release / "android"  # TMPDIR: an existing folder
    monkeypatch.setenv(setting, str(place))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    out = tmp_path / "out"
    code = cli.build(target, None, str(out), False, {})
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("output error: ") and f"({setting}) {place} lies inside the output folder {release}" in err
    assert _tree(release) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out-v1"]  # no --out, no state, no build.log


def test_a_write_place_inside_the_output_folder_itself_is_refused(tmp_path, monkeypatch, capsys):
    """--out not built yet: an app folder under it would be taken over by the first publish."""
    from arrcoc_edge.frontends import cli

    out = tmp_path / "out"
    monkeypatch.setenv("ARRCOC_ANDROID_APP_DIR", str(out / "app"))
    code = cli.build("android", None, str(out), False, {})
    err = capsys.readouterr().err.strip()
    assert code == 2 and f"{out / 'app'} lies inside the output folder {out}" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("setting,target", [("ARRCOC_ANDROID_APP_DIR", "android"), ("ARRCOC_IOS_APP_DIR", "ios"),
                                            ("XDG_CACHE_HOME", "onnx"), ("TMPDIR", "onnx")])
@pytest.mark.parametrize("spelling", ["LINK/..", "LINK/../android/.."])
def test_a_write_place_spelled_through_a_link_and_dotdot_is_judged_where_the_kernel_goes(
        setting, target, spelling, tmp_path, monkeypatch, capsys):
    """XDG_CACHE_HOME=LINK/.. with LINK inside a kept release passed the guard (it judged the
    lexical path, one folder; the kernel went to LINK's target's parent, the release) and the build
    wrote its caches into the release; the same for the app folders."""
    from arrcoc_edge.frontends import cli

    release = _kept_release(tmp_path)
    (tmp_path / "s").symlink_to(release / "android")
    before = _tree(release)
    place = str(tmp_path / "s") + "/" + spelling[len("LINK/"):]
    monkeypatch.setenv(setting, place)
    monkeypatch.setattr(tempfile, "tempdir", None)
    code = cli.build(target, None, str(tmp_path / "out"), False, {})
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("output error: ") and f"lies inside the output folder {release}" in err, err
    assert _tree(release) == before


def test_the_app_folder_is_judged_again_on_the_folder_the_kernel_opened(tmp_path):
    """copy_to_app runs minutes after the build's check: a link on the way moved into a release
    meanwhile is refused on the opened folder, with nothing written."""
    from arrcoc_edge.errors import OutputDirError
    from arrcoc_edge.targets.shared.app_folder import copy_to_app

    release = _kept_release(tmp_path)
    (tmp_path / "staging").mkdir()
    (tmp_path / "staging" / "model.bin").write_bytes(b"new")
    (tmp_path / "app").symlink_to(release / "android")
    before = _tree(release)
    with pytest.raises(OutputDirError):
        copy_to_app(tmp_path / "staging", tmp_path / "app")
    assert _tree(release) == before
