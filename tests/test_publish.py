"""Publishing survives SIGKILL anywhere: the old publish or the new one, never a mix.

publish() marks each of its steps with a numbered kill point (ARRCOC_TEST_KILL_AT=N makes the
process SIGKILL itself there, as `kill -9` would). A small driver publishes two staged targets
(one replaced, one new) onto a copy of a real ONNX build, once per point; after every kill the
public paths must show exactly the old or exactly the new publish, `invoke verify` must pass and
the manifest must list exactly the files on disk. A real CLI build killed the same way shows the
next build cleans up what the killed one left.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import REPO, run_cli
from test_build import generations, previous, published, snapshot, staging_left  # noqa: F401

pytestmark = pytest.mark.slow
KILL_POINTS = range(1, 8)  # every _kill_point in arrcoc_edge.publishing.publish.publish

DRIVER = r"""
import hashlib, json, shutil, sys
from pathlib import Path
from arrcoc_edge.publishing import locking, publish, reading

out = Path(sys.argv[1])
new = reading.read_manifest(out)
run = locking.new_staging(out)
staged = {}
for name in ("onnx", "second"):
    folder = run / name
    shutil.copytree(out / "onnx", folder)
    (folder / "note.txt").write_text(f"new publish of {name}\n")
    staged[name] = folder
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    new["targets"][name] = {"status": "published", "files": [
        {"path": f"{name}/{p.relative_to(folder).as_posix()}", "bytes": p.stat().st_size,
         "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in files]}
new["publish_test"] = "new"
with locking.build_lock(out):
    publish.publish(out, staged, new, write_extras=lambda gen: (gen / "report.html").write_text("new report\n"))
"""


def publish_killed_at(out, point: int | None) -> int:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if point is not None:
        env["ARRCOC_TEST_KILL_AT"] = str(point)
    return subprocess.run([sys.executable, "-c", DRIVER, str(out)], cwd=REPO, env=env, timeout=120).returncode


def assert_consistent(out) -> str:
    """The public paths hold one whole publish: verify passes, the manifest lists exactly the files
    in its target folders. Returns "old" or "new"."""
    from arrcoc_edge.frontends import cli

    assert cli.verify(str(out)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    listed = {f["path"] for e in manifest["targets"].values() for f in e["files"]}
    on_disk = {p for p in snapshot(out) if p.split("/")[0] in manifest["targets"]}
    assert on_disk == listed
    return "new" if manifest.get("publish_test") == "new" else "old"


@pytest.mark.parametrize("point", KILL_POINTS)
def test_sigkill_at_every_point_of_publish_leaves_old_or_new(point, previous):
    before = snapshot(previous)
    code = publish_killed_at(previous, point)
    assert code == -signal.SIGKILL, f"the kill point {point} was never reached"
    state = assert_consistent(previous)
    after = snapshot(previous)
    if state == "old":
        assert after == before  # byte for byte, report included
    else:
        assert after["report.html"] != before["report.html"] and "second/note.txt" in after
    assert state == ("new" if point >= 6 else "old")  # 6: right after the one switching rename
    # the next publish tidies what the killed one left and succeeds
    assert publish_killed_at(previous, None) == 0
    assert assert_consistent(previous) == "new"
    assert staging_left(previous) == [] and len(generations(previous)) == 1


def test_publish_without_kill_switches_both_targets_at_once(previous):
    assert publish_killed_at(previous, None) == 0
    assert assert_consistent(previous) == "new"
    assert (previous / "second" / "note.txt").read_text() == "new publish of second\n"
    # the output folder is the one link; everything inside it is a real folder or file
    assert os.readlink(previous).startswith(".out.arrcoc-edge/.generations/")
    assert not [p for p in snapshot_paths(previous) if os.path.islink(p)]


def test_killed_cli_build_is_cleaned_up_by_the_next_build(previous):
    """A real build killed just before its switch: nothing changed; its staging and half-made
    generation are gone after the next build, which publishes normally."""
    before = snapshot(previous)
    proc = run_cli("build", "--target", "onnx", "--out", str(previous), env={"ARRCOC_TEST_KILL_AT": "5"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert snapshot(previous) == before and assert_consistent(previous) == "old"
    assert staging_left(previous) and len(generations(previous)) == 2  # left behind
    proc = run_cli("build", "--target", "onnx", "--out", str(previous))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert_consistent(previous)
    assert staging_left(previous) == [] and len(generations(previous)) == 1


def snapshot_paths(out) -> list[str]:
    return [os.path.join(folder, n) for folder, dirs, names in os.walk(out) for n in names + dirs]


def test_a_plain_copy_of_a_published_folder_is_taken_over_whole(published, tmp_path):
    """A copy that followed the link (a CI part, `cp -rL`) is a plain folder holding a publish:
    the next build or merge moves it, whole, to be the current generation and links OUT to it."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(published, out)
    assert not out.is_symlink()
    before = snapshot(out)
    from arrcoc_edge.publishing import folder_state, locking, publish, reading

    with locking.build_lock(out):
        publish.recover(out, reading.read_manifest(out), log=lambda m: None)
    assert out.is_symlink() and folder_state.is_output_folder(out)
    assert snapshot(out) == before
    assert_consistent(out)


def test_a_renamed_output_folder_keeps_its_release_through_a_real_build(previous):
    """Issue 35, finding 1, as reported: `mv OUT OUT-v1`, then `invoke build --out OUT`. The
    release stays whole, the build says so once, and `invoke verify --out OUT-v1` passes there."""
    from arrcoc_edge.publishing import locking, publish, reading

    with locking.build_lock(previous):
        publish.recover(previous, reading.read_manifest(previous), log=lambda m: None)  # OUT is the link now
    release = previous.rename(previous.parent / "out-v1")
    before = snapshot(release)
    proc = run_cli("build", "--target", "onnx", "--out", str(previous))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("note: kept generation") == 1 and "out-v1 links to it" in proc.stdout, proc.stdout
    assert snapshot(release) == before and len(generations(previous)) == 2
    proc = run_cli("verify", "--out", str(release))
    assert proc.returncode == 0 and f"match the manifest in {release}" in proc.stdout, proc.stdout + proc.stderr
    assert_consistent(previous)
