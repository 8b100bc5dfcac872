"""Nothing left behind after `kill -9`: the temporary folders of a killed run (in $TMPDIR, in the
cache) are removed by the next run that makes one, never a live run's and never a folder this tool
did not make (arrcoc_edge.scratch)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import REPO

HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from arrcoc_edge import scratch
    from arrcoc_edge.stages import private_cache
    place, how = Path(sys.argv[1]), sys.argv[2]
    if how == "cache":  # a conversion stored into the cache, killed halfway (87 MB for MiniLM)
        with private_cache.building(place, "minilm-onnx-0123456789abcdef") as work:
            (work / "text_encoder.onnx").write_bytes(b"half a model")
            print(work, flush=True)
            time.sleep(600)
    folder = scratch.make(how, place, family="arrcoc-")
    (folder / "inputs.npz").write_bytes(b"x" * 1000)
    print(folder, flush=True)
    time.sleep(600)
""")


def _holder(place: Path, how: str) -> tuple[subprocess.Popen, Path]:
    """A process that made a folder (as a run does) and is still using it: (process, folder)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(place), how], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    folder = Path(proc.stdout.readline().strip())
    assert folder.is_dir(), folder
    return proc, folder


def test_the_next_run_removes_a_killed_runs_temporary_folders_and_no_others(tmp_path):
    killed = [_holder(tmp_path, prefix) for prefix in ("arrcoc-arm64-", "arrcoc-page-")]
    live, live_folder = _holder(tmp_path, "arrcoc-arm64-emu-")
    users = tmp_path / "arrcoc-users-own"  # the user's folder of a like name: not ours
    users.mkdir()
    try:
        for proc, _ in killed:
            proc.kill()
            proc.wait()
        from arrcoc_edge import scratch

        with scratch.folder("arrcoc-arm64-", tmp_path, family="arrcoc-") as mine:
            left = sorted(p.name for p in tmp_path.iterdir())
            assert left == sorted([live_folder.name, live_folder.name + scratch.OWNER, mine.name,
                                   mine.name + scratch.OWNER, users.name]), left
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            [live_folder.name, live_folder.name + scratch.OWNER, users.name])
    finally:
        live.kill()
        live.wait()


def test_a_killed_cache_store_is_removed_by_the_next_store_of_any_key(tmp_path):
    """The cache's half-stored entry `.minilm-onnx-KEY.*` of a killed build matched no cleanup
    pattern and stayed; the next build that stores anything in that cache removes it, and a
    concurrent build's half-stored entry stays."""
    cache = tmp_path / "conversions"
    cache.mkdir(mode=0o700)
    proc, dead = _holder(cache, "cache")
    proc.kill()
    proc.wait()
    live, live_folder = _holder(cache, "cache")
    try:
        from arrcoc_edge.stages import private_cache

        with private_cache.building(cache, "export-fedcba9876543210") as work:
            (work / "program.pt2").write_bytes(b"p")
            work.rename(cache / "export-fedcba9876543210")
        assert not dead.exists()
        assert live_folder.is_dir()
        assert sorted(p.name for p in cache.iterdir()) == sorted(
            ["export-fedcba9876543210", live_folder.name, live_folder.name + ".arrcoc-owner"])
        assert sorted(p.name for p in (cache / "export-fedcba9876543210").iterdir()) == ["program.pt2"]
    finally:
        live.kill()
        live.wait()


def test_another_user_cannot_make_scratch_fail_by_planting_names(tmp_path):
    """In a shared sticky TMPDIR, another user who planted `<folder>.arrcoc-owner.new` (or the lock's
    own name) as soon as a folder appeared made 216 of 300 make() calls raise FileExistsError, and
    builds end in "internal error". The lock comes first now, under an unpredictable name; a name
    whose folder is taken is retried, and a planted name blocks nothing."""
    import threading

    from arrcoc_edge import scratch

    stop = threading.Event()

    def plant():  # as fast as a watcher can: every name that looks like ours gets its neighbours
        while not stop.is_set():
            for name in os.listdir(tmp_path):
                base = name[:-len(scratch.OWNER)] if name.endswith(scratch.OWNER) else name
                for planted in (base + scratch.OWNER + ".new", base + scratch.OWNER, base):
                    try:
                        os.symlink("/nonexistent", tmp_path / planted)
                    except OSError:
                        pass

    planter = threading.Thread(target=plant, daemon=True)
    planter.start()
    made, failed = 0, 0
    try:
        for _ in range(200):
            try:
                path = scratch.make("arrcoc-page-", dir=tmp_path, family="arrcoc-")
            except FileExistsError:
                failed += 1
                continue
            assert path.is_dir() and not path.is_symlink() and (path.stat().st_mode & 0o777) == 0o700
            scratch.remove(path)
            made += 1
    finally:
        stop.set()
        planter.join()
    assert failed == 0 and made == 200


def test_scratch_gives_up_with_one_typed_line_when_every_name_is_taken(tmp_path, monkeypatch):
    import tempfile as tf

    import pytest

    from arrcoc_edge import scratch
    from arrcoc_edge.errors import HostCapabilityError

    real = tf.mkstemp

    def taken(prefix, suffix, dir):  # the folder's name always planted right after the lock appears
        fd, name = real(prefix=prefix, suffix=suffix, dir=dir)
        os.mkdir(name[:-len(scratch.OWNER)])
        return fd, name

    monkeypatch.setattr(scratch.tempfile, "mkstemp", taken)
    with pytest.raises(HostCapabilityError) as info:
        scratch.make("arrcoc-x-", dir=tmp_path)
    assert "TMPDIR" in info.value.fix and "another user" in info.value.problem
    assert not [n for n in os.listdir(tmp_path) if n.endswith(scratch.OWNER)]
