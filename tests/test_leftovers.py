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
