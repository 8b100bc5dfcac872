"""The one rule for files a user names as outputs (publishing/user_files.py): a new or regular file,
written through a link, keeping its mode and owner; never a device, FIFO, socket or a descriptor;
a killed writer's temporary files and a killed folder predict's heatmaps swept by the next run."""
from __future__ import annotations

import fcntl
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from arrcoc_edge.errors import InputError
from arrcoc_edge.publishing import user_files


def _write(text: bytes):
    return lambda f: f.write(text)


@pytest.mark.parametrize("kind", ["char device", "fifo", "socket", "folder", "link to a device",
                                  "descriptor link", "link loop"])
def test_what_is_no_regular_file_is_refused_and_left_as_it_was(kind, tmp_path):
    """`train --out /dev/null` as root replaced the device node with a regular file; `--json
    /dev/stdout > file` replaced the /dev/stdout link (through /proc/self/fd/1) with a file."""
    path = tmp_path / "x"
    if kind == "char device":
        path = Path("/dev/null")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    elif kind == "folder":
        path.mkdir()
    elif kind == "link to a device":
        path.symlink_to("/dev/zero")
    elif kind == "descriptor link":  # what /dev/stdout is
        path.symlink_to("/proc/self/fd/1")
    else:
        path.symlink_to(tmp_path / "y")
        (tmp_path / "y").symlink_to(path)
    before = os.lstat(path)
    with pytest.raises(InputError) as info:
        user_files.write_user_file(path, _write(b"{}\n"), "json")
    assert "--json" in info.value.problem
    after = os.lstat(path)
    assert (after.st_ino, stat.S_IFMT(after.st_mode)) == (before.st_ino, stat.S_IFMT(before.st_mode))
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []


def test_an_existing_file_keeps_its_mode_and_a_link_is_written_through(tmp_path):
    private = tmp_path / "private.json"
    private.write_text("old")
    private.chmod(0o600)
    user_files.write_user_file(private, _write(b"new"), "json")
    assert private.read_text() == "new" and stat.S_IMODE(private.stat().st_mode) == 0o600

    (tmp_path / "results").mkdir()
    run = tmp_path / "results" / "run.json"
    run.write_text("old")
    run.chmod(0o640)
    latest = tmp_path / "latest.json"
    latest.symlink_to("results/run.json")
    written = user_files.write_user_file(latest, _write(b"newer"), "json")
    assert latest.is_symlink() and os.readlink(latest) == "results/run.json"
    assert written == run and run.read_text() == "newer" and stat.S_IMODE(run.stat().st_mode) == 0o640


def test_a_new_file_gets_the_umask_mode(tmp_path):
    old = os.umask(0o077)
    try:
        user_files.write_user_file(tmp_path / "new.json", _write(b"x"))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o600


def _writer_at_work(code: str, path, says: bytes) -> subprocess.Popen:
    """A writer in its own process (`code`, given `path`), once it has said `says`: mid-write,
    ready to be killed as the OOM killer would."""
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == says
    return proc


def test_a_killed_writers_temporary_file_is_swept_by_the_next_write(tmp_path, monkeypatch):
    """SIGKILL (the OOM killer, a power cut) left `.k.jsonl.XXXXXXXX.tmp` for good; a live
    writer's (locked) is left alone."""
    target = tmp_path / "k.jsonl"
    code = ("import os, sys, time\nfrom pathlib import Path\nfrom arrcoc_edge.publishing import user_files\n"
            "def w(f):\n    f.write(b'x' * 100000); f.flush(); print('writing', flush=True); time.sleep(60)\n"
            "user_files.write_user_file(Path(sys.argv[1]), w)\n")
    proc = _writer_at_work(code, target, b"writing")
    live = tmp_path / ".live.jsonl.abcdefgh.tmp"  # a live writer's: locked
    live.write_bytes(b"live")
    holder = os.open(live, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    monkeypatch.setattr(user_files, "FRESH_S", 0.0)
    assert user_files.sweep_temps(target) == 0  # its writer is alive
    proc.kill()
    proc.wait()
    left = [n for n in os.listdir(tmp_path) if n.startswith(".k.jsonl.")]
    assert len(left) == 1 and user_files.temp_pattern("k.jsonl").fullmatch(left[0])
    user_files.write_user_file(target, _write(b"{}\n"))
    assert sorted(os.listdir(tmp_path)) == [".live.jsonl.abcdefgh.tmp", "k.jsonl"]
    assert user_files.sweep_temps(tmp_path / "live.jsonl") == 0
    os.close(holder)
    assert user_files.sweep_temps(tmp_path / "live.jsonl") == 1


def test_a_killed_folder_predicts_heatmaps_do_not_block_a_rerun(tmp_path):
    """A folder predict killed with SIGKILL left the heatmaps it had saved, and the rerun was
    refused ("holds p0000.png.heatmap.png already"): they wait in the run's staging folder now,
    which the next run removes."""
    from arrcoc_edge.frontends import batch

    folder = tmp_path / "heatmaps"
    code = ("import sys, time\nfrom pathlib import Path\nfrom arrcoc_edge.frontends import batch\n"
            "w = batch.HeatmapWriter(Path(sys.argv[1]))\n(w.staging / 'p0.png.heatmap.png').write_bytes(b'png')\n"
            "print('saved', flush=True); time.sleep(60)\n")
    proc = _writer_at_work(code, folder, b"saved")
    assert batch.sweep_staging(folder) == 0  # alive: left alone
    proc.kill()
    proc.wait()
    assert [n for n in os.listdir(folder) if not n.startswith(".")] == []  # nothing under a photo's name
    photos = [tmp_path / "p0.png"]
    batch.heatmap_folder(str(folder), photos, [], tmp_path / "out", 1, [])
    assert os.listdir(folder) == []


def test_train_out_is_judged_by_the_same_rule(tmp_path):
    from arrcoc_edge.training.train import check_out

    with pytest.raises(InputError, match="device"):
        check_out(Path("/dev/null"))
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(InputError, match="FIFO"):
        check_out(tmp_path / "fifo")


def test_predict_json_refuses_dev_stdout_and_devices(tmp_path):
    from arrcoc_edge.frontends import predict as pr

    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    for value in (str(link), "/dev/null"):
        with pytest.raises(InputError):
            pr.output_file("json", value, [], tmp_path / "out")
    assert pr.output_file("json", str(tmp_path / "r.json"), [], tmp_path / "out") == tmp_path / "r.json"

