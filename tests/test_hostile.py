"""Issue 43: the new faces under hostile input (threads sharing a Model, files swapped after the check)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent

# fds 1 and 2 checked at the end of each child: both must still reach the parent's pipes
FDS_REACH = """
os.write(1, b"fd1-reaches-stdout\\n")
os.write(2, b"fd2-reaches-stderr\\n")
"""


def _child(code: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code) + FDS_REACH, *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "fd1-reaches-stdout" in proc.stdout, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert "fd2-reaches-stderr" in proc.stderr, proc.stderr[-2000:]
    return proc


def test_overlapping_silencers_on_two_threads_restore_fds():
    """A enters, B enters, A leaves, B leaves (forced by events): the process's fds 1 and 2 are
    the terminal's again, not the /dev/null the second one saw while the first held them (under
    the command line, the one owner that may move them)."""
    _child("""
        import os, threading
        from arrcoc_edge.frontends import redirect
        from arrcoc_edge.frontends.predict import third_party_quiet
        owner = redirect.command_line(); owner.__enter__()  # as cli.guarded, for the rest of this process
        a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
        def first():
            with third_party_quiet(False):
                a_in.set(); b_in.wait(10)
            a_out.set()
        def second():
            a_in.wait(10)
            with third_party_quiet(False):
                b_in.set(); a_out.wait(10)
        threads = [threading.Thread(target=first), threading.Thread(target=second)]
        for t in threads: t.start()
        for t in threads: t.join()
    """, timeout=60)


@pytest.mark.parametrize("order", ["quiet first, leaves first", "log first, leaves first"])
def test_a_build_log_and_a_quiet_predict_on_two_threads_restore_fds(tmp_path, order):
    """Issue 43: the build's whole-run log (console.build_console) and predict's silencer used to save
    and restore fds 1 and 2 each on its own: quiet in, log in, quiet out, log out left the process
    writing to /dev/null for good. Both orders, forced by events; while the log is open what fd 2
    gets lands in it, and afterwards fds 1 and 2 reach the terminal again."""
    _child("""
        import os, sys, threading
        from pathlib import Path
        from arrcoc_edge.frontends import redirect
        from arrcoc_edge.frontends.console import build_console
        from arrcoc_edge.frontends.predict import third_party_quiet
        owner = redirect.command_line(); owner.__enter__()  # as cli.guarded, for the rest of this process
        out, log_first = Path(sys.argv[1]), sys.argv[2] == "log first, leaves first"
        first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
        def quiet():
            with third_party_quiet(False):
                (second_in if log_first else first_in).set()
                (first_out if log_first else second_in).wait(10)
            (first_out.set() if not log_first else None)
        def build():
            with build_console(out, verbose=False, show=False):
                (first_in if log_first else second_in).set()
                os.write(2, b"written-while-the-log-is-open\\n")
                (second_in if log_first else first_out).wait(10)
            (first_out.set() if log_first else None)
        a, b = (build, quiet) if log_first else (quiet, build)
        ta = threading.Thread(target=a); ta.start(); first_in.wait(10)
        tb = threading.Thread(target=b); tb.start()
        ta.join(); tb.join()
        assert "written-while-the-log-is-open" in (out / "build.log").read_text()
    """, str(tmp_path), order, timeout=60)


@pytest.fixture(scope="module")
def onnx_out(onnx_build) -> Path:
    """The session's shared `--target onnx` publish (read only: tests that change it copy it)."""
    return onnx_build.out


def test_two_threads_on_one_model(onnx_out):
    """Two threads predicting on one Model (the first calls silenced, overlapping): every output
    equals the one-thread output, and fds 1 and 2 still reach their targets afterwards."""
    proc = _child("""
        import os, sys, threading
        import numpy as np
        from arrcoc_edge import load
        rng = np.random.default_rng(0)
        photo = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
        with load(sys.argv[1], "onnx") as model:
            query = rng.standard_normal(model.query_dim).astype(np.float32)
            results, start = [[], []], threading.Barrier(2)
            def work(k):
                start.wait()
                for _ in range(40):
                    results[k].append(model.predict(photo, query).relevance)
            threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
            for t in threads: t.start()
            for t in threads: t.join()
            alone = model.predict(photo, query).relevance
        same = all(np.array_equal(r, alone) for rs in results for r in rs) and len(results[0]) == len(results[1]) == 40
        print("same-outputs", same)
    """, str(onnx_out))
    assert "same-outputs True" in proc.stdout


def test_load_runs_the_bytes_it_checked(onnx_out, tmp_path, monkeypatch):
    """The model file is swapped right after its sha256 check (a hook between the check and the
    session): load() still runs the checked bytes, so its outputs are the verified model's."""
    import shutil

    from arrcoc_edge import load
    from arrcoc_edge.frontends import predict as pr

    folder = tmp_path / "out"
    shutil.copytree(onnx_out, folder, symlinks=True)
    rng = np.random.default_rng(1)
    photo = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    with load(folder, "onnx") as model:
        query = rng.standard_normal(model.query_dim).astype(np.float32)
        verified = model.predict(photo, query).relevance

    real, swapped = pr.check_variant_files, []

    def check_then_swap(out, entry, variant):
        found = real(out, entry, variant)
        for rel in entry["variants"][variant]["files"]:
            target = Path(out) / rel
            fresh = target.with_name(target.name + ".swap")
            fresh.write_bytes(b"not the checked model")
            os.replace(fresh, target)
            swapped.append(rel)
        return found

    monkeypatch.setattr(pr, "check_variant_files", check_then_swap)
    with load(folder, "onnx") as model:
        assert swapped == ["onnx/model.onnx"]
        assert np.array_equal(model.predict(photo, query).relevance, verified)


def _edited_copy(onnx_out: Path, tmp_path: Path, edit) -> Path:
    """A copy of the built folder whose (pinned generation's) manifest.json went through edit(dict)."""
    import json
    import shutil

    folder = tmp_path / "out"
    shutil.copytree(onnx_out, folder, symlinks=True)
    path = Path(os.path.realpath(folder / "manifest.json"))
    data = json.loads(path.read_text())
    edit(data)
    path.chmod(0o644)
    path.write_text(json.dumps(data))
    return folder


BAD_MANIFESTS = {
    "variants-a-string": lambda m: m["targets"]["onnx"].__setitem__("variants", "fp32"),
    "empty-files": lambda m: m["targets"]["onnx"]["variants"]["fp32"].__setitem__("files", []),
    "no-checkpoint-model": lambda m: m["checkpoint"].pop("model"),
    "grid-0": lambda m: m["checkpoint"]["model"].__setitem__("grid", 0),
    "grid-a-string": lambda m: m["checkpoint"]["model"].__setitem__("grid", "14"),
}


@pytest.mark.parametrize("case", sorted(BAD_MANIFESTS))
def test_bad_manifest_shape_is_one_typed_line(onnx_out, tmp_path, case):
    """load() and `invoke verify`'s reader refuse each with an ArrcocError, never AttributeError,
    IndexError, KeyError, ZeroDivisionError or TypeError."""
    from arrcoc_edge import load
    from arrcoc_edge.errors import ArrcocError
    from arrcoc_edge.publishing.reading import read_manifest

    folder = _edited_copy(onnx_out, tmp_path, BAD_MANIFESTS[case])
    with pytest.raises(ArrcocError):
        with load(folder, "onnx") as model:
            model.predict(np.zeros((64, 64, 3), np.uint8), np.zeros(model.query_dim, np.float32))
    if case != "no-checkpoint-model":  # a manifest may carry no model settings; load needs them
        with pytest.raises(ArrcocError):
            read_manifest(folder)


@pytest.mark.parametrize("threads", [0, -1, True, 1.5, "2", 10**6])
def test_load_threads_bounded(onnx_out, threads):
    from arrcoc_edge import load
    from arrcoc_edge.errors import InputError

    with pytest.raises(InputError, match="threads="):
        load(onnx_out, "onnx", threads=threads)


def _photo_file(path: Path) -> Path:
    from PIL import Image

    Image.fromarray(np.random.default_rng(2).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(path)
    return path


def test_folder_with_link_loop_skips_and_counts_it(onnx_out, tmp_path):
    """A photo folder holding a link loop named like a photo: the good photo is predicted, the loop
    is one skipped, counted line (exit 2), not a traceback."""
    from conftest import run_cli

    photos = tmp_path / "photos"
    photos.mkdir()
    _photo_file(photos / "good.png")
    os.symlink("loop.jpg", photos / "loop.jpg")
    proc = run_cli("predict", "--image", str(photos), "--query-embedding", str(_query_file(onnx_out, tmp_path)),
                   "--out", str(onnx_out), "--runtime", "onnx")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "good.png" in proc.stdout and "1 of 2 photos could not be read" in proc.stderr


def _query_file(onnx_out: Path, tmp_path: Path) -> Path:
    import json

    dim = json.loads((onnx_out / "manifest.json").read_text())["checkpoint"]["model"]["query_dim"]
    np.save(tmp_path / "q.npy", np.full(dim, 0.05, np.float32))
    return tmp_path / "q.npy"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc: a folder nobody (root included) can write into")
def test_heatmap_new_folder_in_unwritable_parent_refused_before_the_model_runs(onnx_out, tmp_path):
    """--heatmap NEWFOLDER whose parent takes no new entry (/proc, even for root): refused in one
    line before the model runs, not after the predictions, when the folder is made."""
    from conftest import run_cli

    photos = tmp_path / "photos"
    photos.mkdir()
    _photo_file(photos / "a.png")
    _photo_file(photos / "b.png")
    proc = run_cli("predict", "--image", str(photos), "--query-embedding", str(_query_file(onnx_out, tmp_path)),
                   "--out", str(onnx_out), "--runtime", "onnx", "--heatmap", "/proc/arrcoc-heatmaps-new")
    assert proc.returncode == 2 and "cannot write into /proc" in proc.stderr, proc.stderr[-2000:]
    assert "a.png:" not in proc.stdout  # refused before any prediction


def test_truncated_photo_says_truncated_not_use_a_png(tmp_path):
    """A JPEG cut in half is a JPEG: its fix says it is truncated or corrupt, not "use a PNG, JPEG
    or WebP file"; a file that is no image still gets that advice."""
    from PIL import Image

    from arrcoc_edge.errors import InputError
    from arrcoc_edge.stages.golden import load_photo

    full = tmp_path / "full.jpg"
    Image.fromarray(np.random.default_rng(3).integers(0, 256, (256, 256, 3), dtype=np.uint8)).save(full, quality=95)
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    with pytest.raises(InputError) as caught:
        load_photo(cut)
    assert "truncated or corrupt" in caught.value.one_line() and "use a PNG" not in caught.value.one_line()
    text = tmp_path / "notes.jpg"
    text.write_text("not a photo")
    with pytest.raises(InputError, match="not an image file"):
        load_photo(text)


def test_a_kept_release_is_read_by_load_predict_and_serve_and_bench_refuses_it(onnx_out, tmp_path):
    """Issue 43 finding 7: `mv OUT OUT-v1` keeps a release; reading it (arrcoc_edge.load, predict,
    serve) works where it lives, pinned to its generation; bench, which writes bench.json into the
    folder, refuses it with one line like build, merge and clean (docs/guarantees.md)."""
    import shutil

    from conftest import run_cli
    from arrcoc_edge import load
    from arrcoc_edge.publishing.folder_state import state_dir

    out = tmp_path / "out"
    shutil.copytree(state_dir(onnx_out), state_dir(out), symlinks=True)
    os.symlink(os.readlink(onnx_out).replace(state_dir(onnx_out).name, state_dir(out).name, 1), out)
    release = out.rename(tmp_path / "out-v1")
    rng = np.random.default_rng(3)
    photo = rng.integers(0, 256, (80, 96, 3), dtype=np.uint8)
    query = rng.standard_normal(384).astype(np.float32)
    with load(onnx_out, "onnx") as model:
        want = model.predict(photo, query).relevance
    with load(release, "onnx") as model:
        assert np.array_equal(model.predict(photo, query).relevance, want)
    np.save(tmp_path / "q.npy", query)
    from PIL import Image

    Image.fromarray(photo).save(tmp_path / "p.png")
    proc = run_cli("predict", "--out", str(release), "--image", str(tmp_path / "p.png"),
                   "--query-embedding", str(tmp_path / "q.npy"), "--runtime", "onnx")
    assert proc.returncode == 0, proc.stderr
    had = (release / "bench.json").read_bytes() if (release / "bench.json").exists() else None
    bench = run_cli("bench", "--out", str(release), "--runs", "1", "--photos", "0")
    assert bench.returncode == 2 and "kept release" in bench.stderr and len(bench.stderr.strip().splitlines()) == 1, bench.stderr
    assert ((release / "bench.json").read_bytes() if (release / "bench.json").exists() else None) == had


def test_a_pte_that_does_not_load_names_its_file_folder_and_the_whole_fix(tmp_path):
    """The runtime's line said "the checked .pte does not load" (neither file nor folder) and its fix
    `invoke build --target executorch`, without --out and with `invoke` when installed."""
    import hashlib
    import json as js

    from arrcoc_edge import targets as target_table
    from arrcoc_edge.errors import InputError as Refused
    from arrcoc_edge.frontends import predict as pr
    from arrcoc_edge.install import COMMAND

    pytest.importorskip("executorch.runtime")
    out = tmp_path / "rel"
    (out / "executorch").mkdir(parents=True)
    data = b"PTE!" * 1000  # not a program
    (out / "executorch" / "model_fp32.pte").write_bytes(data)
    entry = {"variants": {"fp32": {"files": ["executorch/model_fp32.pte"], "info": {"max_batch": 8}}},
             "files": [{"path": "executorch/model_fp32.pte", "sha256": hashlib.sha256(data).hexdigest(),
                        "bytes": len(data)}]}
    manifest = {"checkpoint": {"model": {"grid": 14, "top_k": 8, "query_dim": 384}}, "targets": {"executorch": entry}}
    (out / "manifest.json").write_text(js.dumps(manifest))
    with pytest.raises(Refused) as info:
        pr.checked_runner(out, manifest, target_table.TARGETS["executorch"], "fp32", out)
    assert f"executorch/model_fp32.pte in {out}" in info.value.problem, info.value.problem
    assert "the checked .pte" not in info.value.problem
    assert f"`{COMMAND} build --target executorch --out {out}`" in info.value.fix


def test_serve_closes_idle_connections(tmp_path, monkeypatch):
    """`invoke serve` kept one thread per idle connection for good."""
    import socket
    import threading
    import time as clock

    from arrcoc_edge import serve

    (tmp_path / "index.html").write_text("<html></html>")
    monkeypatch.setattr(serve.IsolatedHandler, "timeout", 1)
    server = serve.make_server(tmp_path)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        idle = [socket.create_connection(server.server_address[:2]) for _ in range(20)]
        clock.sleep(0.5)
        assert threading.active_count() >= 20
        started = clock.monotonic()
        for conn in idle:
            conn.settimeout(10)
            assert conn.recv(1) == b""  # closed by the server, not by this side
            conn.close()
        assert clock.monotonic() - started < 10
        live = socket.create_connection(server.server_address[:2])  # a request still gets its answer
        live.sendall(b"GET /index.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        live.settimeout(10)
        assert b" 200 " in live.recv(100).split(b"\r\n")[0] + b" "
        live.close()
    finally:
        server.shutdown()
        server.server_close()
