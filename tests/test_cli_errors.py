"""Every bad input to every task ends with one line `kind: problem -> fix: ...`, exit 2, no traceback.

The tasks run in-process through Invoke's own Program (the same parser and task functions as the
`invoke` command), so many cases stay fast; an exception escaping a task fails the test.
"""
from __future__ import annotations

import contextlib
import io
import json
import shutil
import socket
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from conftest import REPO


def invoke(*argv: str) -> tuple[int, str, str]:
    """`invoke ARGV` in this process: (exit code, stdout, stderr)."""
    from invoke import Collection, Program

    import tasks

    program = Program(namespace=Collection.from_module(tasks))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            program.run(["invoke", *argv])
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
    return code, out.getvalue(), err.getvalue()


def one_line_error(code: int, err: str, kind: str = "input error") -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith(f"{kind}: ") and " -> fix: " in lines[0], err
    assert "Traceback" not in err
    return lines[0]


# ------------------------------------------------------------------ options, before any work


@pytest.mark.parametrize("value", ["", ",", " , ,"])
def test_empty_target_list_is_an_error(value, tmp_path):
    line = one_line_error(*invoke("build", f"--target={value}", "--out", str(tmp_path / "out"))[::2])
    assert "no target named" in line
    assert not (tmp_path / "out").exists()  # refused before the output folder was touched


@pytest.mark.parametrize("runs", ["0", "-5", "abc", "1e3", "100001"])
def test_bench_runs_must_be_a_positive_whole_number(runs, tmp_path):
    line = one_line_error(*invoke("bench", f"--runs={runs}", "--out", str(tmp_path))[::2])
    assert "--runs" in line


@pytest.mark.parametrize("argv", [["--steps=0"], ["--steps=x"], ["--seed=-1"], ["--seed=4294967296"], ["--out=/"],
                                  ["--out=/etc/hostname/checkpoint.safetensors"]])
def test_train_options_are_checked_before_training(argv):
    one_line_error(*invoke("train", *argv)[::2])  # training takes minutes: these return at once


@pytest.mark.parametrize("port", ["0", "-1", "65536", "http"])
def test_serve_refuses_an_invalid_port(port, tmp_path):
    line = one_line_error(*invoke("serve", "--out", str(tmp_path), f"--port={port}")[::2])
    assert "--port" in line


def test_serve_on_a_port_in_use_is_one_line(tmp_path):
    (tmp_path / "web").mkdir()
    (tmp_path / "web" / "index.html").write_text("<!doctype html>")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = one_line_error(*invoke("serve", "--out", str(tmp_path), "--port", str(port))[::2])
    assert f"cannot listen on 127.0.0.1:{port}" in line and "--port" in line


@pytest.mark.parametrize("content,why", [
    ("[1, 2]", "a JSON list"),
    ('{"targets": []}', "must be objects"),
    ('{"targets": {"onnx": {"files": "model.onnx"}}}', "list of files"),
    ('{"targets": {"onnx": {"files": [{"path": "../../etc/passwd", "bytes": 1, "sha256": "x"}]}}}', "not inside onnx/"),
    ('{"targets": {"../x": {"files": []}}}', "not a plain name"),
    ('{"checkpoint": "x.pt", "targets": {}}', "must be objects"),
])
def test_manifest_of_the_wrong_shape_is_one_line_for_every_reader(content, why, tmp_path):
    (tmp_path / "manifest.json").write_text(content)
    (tmp_path / "keep").mkdir()
    for argv in (["verify"], ["bench", "--runs", "1"], ["clean"]):
        code, _, err = invoke(*argv, "--out", str(tmp_path))
        if argv == ["clean"]:
            assert code == 0 and "Traceback" not in err  # cleans by layout, never by the manifest's names
            (tmp_path / "manifest.json").write_text(content)
            continue
        line = one_line_error(code, err, kind="output error")
        assert "not an arrcoc-edge manifest" in line and why in line
    assert (tmp_path / "keep").is_dir()


def test_verify_reports_files_the_manifest_does_not_list(tmp_path):
    from arrcoc_edge.publishing import locking, publish

    files = tmp_path / "staged" / "t"
    files.mkdir(parents=True)
    (files / "a.bin").write_bytes(b"a")
    import hashlib

    manifest = {"targets": {"t": {"status": "published", "files": [
        {"path": "t/a.bin", "bytes": 1, "sha256": hashlib.sha256(b"a").hexdigest()}]}}}
    out = tmp_path / "out"
    out.mkdir()
    with locking.build_lock(out):
        publish.publish(out, {"t": files}, manifest, log=lambda m: None)
    assert invoke("verify", "--out", str(out))[0] == 0
    (out / "t" / "extra.txt").write_text("not in the manifest")
    code, stdout, err = invoke("verify", "--out", str(out))
    assert code == 3 and "UNLISTED t/extra.txt" in stdout and "Traceback" not in err


# ------------------------------------------------------------------ library errors at their source


def bomb_png(path: Path, side: int = 30_000) -> None:
    """A valid 1x1 PNG whose header claims side x side pixels: PIL's decompression-bomb guard
    refuses it at open, before decoding anything."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buf, "PNG")
    data = bytearray(buf.getvalue())
    ihdr = 8 + 8  # signature, then length + "IHDR"
    data[ihdr:ihdr + 8] = struct.pack(">II", side, side)
    data[ihdr + 13:ihdr + 17] = struct.pack(">I", zlib.crc32(bytes(data[ihdr - 4:ihdr + 13])))
    path.write_bytes(bytes(data))


def test_decompression_bomb_in_calibration_folder_is_one_line(tmp_path, golden):
    from PIL import Image

    folder = tmp_path / "cal"
    folder.mkdir()
    bomb_png(folder / "a-bomb.png")
    for i in range(8):
        Image.fromarray(golden.calibration.images[i]).save(folder / f"photo{i}.png")
    out = tmp_path / "out"
    line = one_line_error(*invoke("build", "--target", "onnx-int8", "--out", str(out),
                                  "--calibration", str(folder))[::2])
    assert "a-bomb.png" in line and "DecompressionBomb" in line
    assert not (out / "manifest.json").exists()


def _chattr(flag: str, path: Path) -> bool:
    return shutil.which("chattr") is not None and subprocess.run(
        ["chattr", "-R", flag, str(path)], capture_output=True).returncode == 0


def listing(name: str, folder: Path) -> dict:
    """A manifest listing every file of a staged target folder."""
    import hashlib

    files = [{"path": f"{name}/{p.relative_to(folder).as_posix()}", "bytes": p.stat().st_size,
              "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in sorted(folder.rglob("*")) if p.is_file()]
    return {"targets": {name: {"status": "published", "files": files}}}


def test_folder_that_cannot_be_written_at_publish_time_is_one_line(tmp_path):
    """An immutable generations folder (chattr +i: even root cannot write it): the build fails
    with one line and the published state is unchanged."""
    from arrcoc_edge.frontends import cli
    from arrcoc_edge.publishing import folder_state, locking, publish

    staged = tmp_path / "staged" / "t"
    staged.mkdir(parents=True)
    (staged / "a.bin").write_bytes(b"a")
    out = tmp_path / "out"
    out.mkdir()
    with locking.build_lock(out):
        publish.publish(out, {"t": staged}, listing("t", staged), log=lambda m: None)
    gens = folder_state.state_dir(out) / folder_state.GENERATIONS
    if not _chattr("+i", gens):
        pytest.skip("chattr +i is not available on this filesystem")
    try:
        before = sorted(p.name for p in gens.iterdir())
        staged2 = tmp_path / "staged2" / "t"
        staged2.mkdir(parents=True)
        with pytest.raises(Exception) as info, locking.build_lock(out):
            publish.publish(out, {"t": staged2}, {"targets": {"t": {"files": []}}}, log=lambda m: None)
        from arrcoc_edge.errors import OutputDirError

        assert isinstance(info.value, OutputDirError)
        assert "\n" not in info.value.one_line() and "chattr -i" in info.value.fix
        assert sorted(p.name for p in gens.iterdir()) == before
        assert cli.verify(str(out)) == 0
    finally:
        _chattr("-i", gens)


def test_published_target_folder_that_cannot_be_removed_does_not_block_publishing(tmp_path):
    """A published target folder made immutable: the new generation never modifies it, so the
    build publishes; the old generation it cannot remove is named in a note, not a traceback."""
    from arrcoc_edge.frontends import cli
    from arrcoc_edge.publishing import folder_state, locking, publish

    out = tmp_path / "out"
    out.mkdir()
    for i in range(2):
        staged = tmp_path / f"staged{i}" / "t"
        staged.mkdir(parents=True)
        (staged / "a.bin").write_bytes(b"%d" % i)
        notes = []
        with locking.build_lock(out):
            publish.publish(out, {"t": staged}, {**listing("t", staged), "n": i}, log=notes.append)
        if i == 0 and not _chattr("+i", (out / "t").resolve()):
            pytest.skip("chattr +i is not available on this filesystem")
        old = folder_state.current_generation(out) if i == 0 else old
    try:
        assert (out / "t" / "a.bin").read_bytes() == b"1" and json.loads((out / "manifest.json").read_text())["n"] == 1
        assert old.is_dir() and any("could not remove" in n for n in notes)
        assert cli.verify(str(out)) == 0
    finally:
        _chattr("-i", old / "t")


# ------------------------------------------------------------------ any value: exit 0, or one line and exit 2

TEXT = st.one_of(st.text(max_size=30), st.integers(-10**12, 10**12).map(str),
                 st.sampled_from(["", ",", "onnx", "all", "onnx,,", "0", "-1", "65535", "1e3", " 7 ", "\x00"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(task=st.sampled_from(["build", "build-settings", "verify", "serve", "bench", "train", "clean"]),
       value=TEXT, other=TEXT)
def test_any_option_value_ends_in_exit_0_or_one_line(task, value, other, tmp_path_factory):
    """Random values for each task's options. Where a value is valid the task still stops early
    and cheaply (a missing checkpoint, an empty output folder, a port in use), so every example
    ends in exit 0 or exit 2 with one line, and never a traceback."""
    out = tmp_path_factory.mktemp("prop")
    missing = str(out / "no-checkpoint.safetensors")
    blocker = out / "a-file"
    blocker.write_text("a file where train's output folder would be")
    argv = {
        "build": ["build", f"--target={value}", f"--checkpoint={missing}", f"--out={out / 'o'}"],
        "build-settings": ["build", "--target=onnx", f"--grid={value}", f"--top-k={other}",
                           f"--checkpoint={missing}", f"--out={out / 'o'}"],
        "verify": ["verify", f"--out={out / value.replace('/', '_')}"],
        "serve": ["serve", f"--port={value}", f"--out={out}"],  # no web/ here: stops after the port check
        "bench": ["bench", f"--runs={value}", f"--out={out}"],
        "train": ["train", f"--steps={value}", f"--seed={other}", f"--out={blocker / 'x.safetensors'}"],
        "clean": ["clean", f"--out={out / 'c' / value.replace('/', '_')}"],
    }[task]
    code, _, err = invoke(*argv)
    assert "Traceback" not in err
    if code != 0:
        one_line = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(one_line) == 1 and " -> fix: " in one_line[0], (argv, err)


def test_the_commands_help_shows_the_commands_and_only_the_options_they_use():
    """`arrcoc-edge --help` used to list Invoke's shell-runner options (--pty, --hide, --echo, --dry,
    --warn-only, ...), which no task of this tool reads."""
    import sys

    proc = subprocess.run([sys.executable, "-c", "import sys; sys.argv = ['arrcoc-edge', '--help']\n"
                           "from arrcoc_edge.frontends.commands import main; main()"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name in ("build", "predict", "verify", "merge", "clean", "serve", "bench", "train", "app-tokenize",
                 "--help", "--version", "--list"):
        assert name in proc.stdout, name
    for shell_option in ("--pty", "--hide", "--echo", "--dry", "--warn-only", "--command-timeout", "--write-pyc",
                         "sudo", "--config"):
        assert shell_option not in proc.stdout, shell_option


def test_a_ctrl_c_during_a_module_import_waits_for_the_import_then_is_exit_130(tmp_path):
    """A KeyboardInterrupt raised inside an import that a C++ extension drives (pybind11: torch,
    executorch) aborts the process ("terminate called after throwing ... error_already_set", exit -6:
    seen in a full test run on a Ctrl-C one second into a build). The handler records it, lets the
    import finish and raises right after: a slow pure-Python module shows the order without C++."""
    import signal
    import sys
    import textwrap
    import time

    (tmp_path / "slowmod.py").write_text("import time\nfor _ in range(20):\n    time.sleep(0.05)\n"
                                         "open(__file__ + '.done', 'w').close()\n")
    child = textwrap.dedent(f"""
        import sys, time
        sys.path[:0] = [{str(tmp_path)!r}, {str(REPO)!r}]
        from arrcoc_edge.frontends import cli
        def task():
            import slowmod  # noqa: F401
            time.sleep(30)
        print("ready", flush=True)
        sys.exit(cli.guarded(task, False, "build"))
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.4)  # inside the 1 s import
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.startswith("interrupted: build stopped (SIGINT)"), (proc.returncode, err)
    assert (tmp_path / "slowmod.py.done").exists(), "the import was cut in the middle"


def test_a_tasks_last_line_reaches_the_terminal_while_another_thread_silences_fds(tmp_path):
    """predict loads its sentence encoder on a thread with fds 1 and 2 on /dev/null
    (pipeline/frontends/redirect.py); a Ctrl-C in that window was exit 130 with nothing on stderr
    (seen in test_outputs' early Ctrl-C case). The line goes to the terminal's saved fd 2."""
    import subprocess
    import sys

    from conftest import REPO

    script = (
        "import threading\n"
        "from arrcoc_edge.frontends import cli, redirect\n"
        "owner = redirect.command_line(); owner.__enter__()\n"  # a command's process, as under cli.guarded
        "held, done = threading.Event(), threading.Event()\n"
        "def hold():\n"
        "    with redirect.fds_to(None):\n"
        "        held.set()\n"
        "        done.wait(10)\n"
        "thread = threading.Thread(target=hold)\n"
        "thread.start()\n"
        "held.wait(10)\n"
        "def task():\n"
        "    raise KeyboardInterrupt('SIGINT')\n"
        "code = cli.guarded(task, False, 'predict')\n"
        "done.set()\n"
        "thread.join()\n"
        "print('after', flush=True)\n"
        "raise SystemExit(code)\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, proc
    assert proc.stderr.splitlines() == [
        "interrupted: predict stopped (SIGINT) -> fix: nothing was changed by the interrupted step: "
        "run `invoke predict` again"], proc.stderr
    assert proc.stdout == "after\n"  # the thread left: fds 1 and 2 are the terminal's again


def test_an_error_after_a_swallowed_ctrl_c_is_still_exit_130_and_one_line(capsys):
    """A library that catches the KeyboardInterrupt and then fails with an error of its own, not
    chained to it (r11: `internal error: TypeError ... BufferedReader`, exit 1, on a Ctrl-C 3 s into
    `invoke build`): the task still ends as interrupted, since the signal was recorded."""
    import os
    import signal
    import time

    from arrcoc_edge.frontends.cli import guarded

    def body():
        try:
            os.kill(os.getpid(), signal.SIGINT)  # guarded's handler records it and raises here
            time.sleep(5)
        except KeyboardInterrupt:
            pass  # swallowed, as some libraries do
        raise TypeError("expected str, bytes or os.PathLike object, not BufferedReader")

    assert guarded(body, False, "build") == 130
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("interrupted: ") and "TypeError" not in err, err
    assert guarded(lambda: _raise(TypeError("a bug")), False, "build") == 1  # without a signal: still a bug
    assert capsys.readouterr().err.startswith("internal error: TypeError: a bug")


def _raise(exc):
    raise exc


# ------------------------------------------------------------------ --out that is not a publish, misspellings, set-up


def _publish(folder: Path) -> Path:
    """A published folder as `cp -r artifacts/ DEST` leaves it: manifest.json and a target folder."""
    (folder / "onnx").mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"targets": {"onnx": {}}}))
    return folder


def _predict_out(out: str, tmp_path: Path, kind: str = "input error") -> str:
    from conftest import photo_file

    photo = photo_file(tmp_path)
    return one_line_error(*invoke("predict", "--out", out, "--image", str(photo), "--query", "x")[::2], kind=kind)


def test_out_at_a_target_folder_inside_a_publish_names_the_publish(tmp_path):
    """`--out artifacts/onnx` said "nothing is published ... run build"."""
    copy = _publish(tmp_path / "copy")
    line = _predict_out(str(copy / "onnx"), tmp_path)
    assert "is the 'onnx' folder inside a published folder" in line and f"pass --out {copy} " in line, line
    generation = tmp_path / ".out.arrcoc-edge" / ".generations" / "20261129-075818-18086-20683b"
    _publish(generation)
    (tmp_path / "out").symlink_to(generation.relative_to(tmp_path))  # the tool's own link, as a build makes it
    line = _predict_out(str(tmp_path / "out" / "onnx"), tmp_path, kind="output error")
    assert "is the 'onnx' folder inside a published folder" in line and f"pass --out {tmp_path / 'out'} " in line, line


def test_out_at_a_file_says_it_is_a_file(tmp_path):
    line = _predict_out(str(tmp_path / "photo.jpg"), tmp_path)
    assert "is a file, not a published folder" in line and "--image" in line, line


def test_out_at_a_copied_link_names_the_copy_with_the_trailing_slash(tmp_path):
    """`cp -r artifacts dest` copies the link, which resolves nowhere beside dest: the fix was `ln -sfn`."""
    (tmp_path / "dest").symlink_to(".artifacts.arrcoc-edge/.generations/20261129-075818-18086-20683b")
    line = _predict_out(str(tmp_path / "dest"), tmp_path, kind="output error")
    assert "copied or moved link" in line and f"cp -r PATH/artifacts/ {tmp_path / 'dest'}" in line, line


def test_a_missing_publish_without_the_build_extra_points_at_out(tmp_path, monkeypatch):
    """Installed without torch, "nothing is published: run build" led into a torch install."""
    import importlib.util

    find_spec = importlib.util.find_spec
    line = _predict_out(str(tmp_path / "artifacts"), tmp_path)
    assert "does not exist" in line and "build --target onnx,text-encoder" in line, line
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else find_spec(name, *a))
    line = _predict_out(str(tmp_path / "artifacts"), tmp_path)
    assert "pass --out a folder a build published" in line and "cp -r artifacts/ DEST" in line, line
    assert "build --target" not in line and "pip install" not in line, line


@pytest.mark.parametrize("argv,nearest", [(["prdict"], "`invoke predict`"), (["buidl", "--target", "onnx"], "`invoke build`"),
                                          (["predict", "--imgae", "x"], "--image"), (["--lisst"], "--list"),
                                          (["predict", "--query", "x", "--heatmpa", "h.png"], "--heatmap")])
def test_a_misspelt_command_or_option_names_the_nearest(argv, nearest):
    from invoke import Collection, Program

    import tasks
    from arrcoc_edge.frontends.commands import suggest_the_nearest

    program = Program(namespace=Collection.from_module(tasks), binary="invoke")
    suggest_the_nearest(program)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as stopped:
        program.run(["invoke", *argv])
    assert stopped.value.code == 1 and f"Did you mean {nearest}?" in err.getvalue(), err.getvalue()
    assert len(err.getvalue().strip().splitlines()) == 1


def test_the_commands_suggest_the_nearest_as_typed():
    """The console command and `invoke` in a checkout (tasks.py installs it under Invoke's Program)."""
    command = shutil.which("arrcoc-edge", path=str(REPO / ".venv" / "bin"))
    done = subprocess.run([command, "prdict"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Did you mean `arrcoc-edge predict`?" in done.stderr, done.stderr
    done = subprocess.run([str(REPO / ".venv" / "bin" / "invoke"), "clen"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and "Did you mean `invoke clean`?" in done.stderr, done.stderr
    done = subprocess.run([command, "zzzz"], capture_output=True, text=True, timeout=120)
    assert "Did you mean" not in done.stderr and "`arrcoc-edge --list` lists every command" in done.stderr


def test_set_up_on_another_python_says_how_to_choose_3_11(tmp_path):
    """`PYTHON=python3.12 bash scripts/setup.sh` ended in `AssertionError: Python 3.11 is required`.
    A copy of the script (it stops before touching anything, but not in the checkout all the same)."""
    import glob
    import sys

    (tmp_path / "scripts").mkdir()
    shutil.copy2(REPO / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")

    def setup(python: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(tmp_path / "scripts" / "setup.sh")], capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", "PYTHON": python}, timeout=60)

    missing = setup("python3.99")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "PYTHON=python3.11 bash scripts/setup.sh" in missing.stderr
    others = [p for p in (shutil.which(f"python3.{v}") for v in (12, 13, 10)) if p] + glob.glob("/root/.pyenv/versions/3.1[023].*/bin/python3")
    other = next((p for p in others if subprocess.run([p, "-c", "import sys; sys.exit(sys.version_info[:2] == (3, 11))"],
                                                        capture_output=True).returncode == 0), None)
    if other is None:
        pytest.skip("no Python other than 3.11 on this host to try")
    done = setup(other)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert " is Python 3.1" in done.stderr and "PYTHON=python3.11 bash scripts/setup.sh" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scripts"] and sys.version_info[:2] == (3, 11)
