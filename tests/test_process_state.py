"""The library owns no process-wide state; the command line owns its process.

A program that imports arrcoc_edge keeps its file descriptors 1 and 2, its signal handlers and its
threads' prints; the commands `arrcoc-edge` and `invoke` stop quietly when their reader leaves.
Each case runs in a child process, as a user's program or a shell runs it.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

VENV_BIN = Path(sys.executable).parent


def _with_stdout_closed(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run cmd with stdout a pipe whose reader has already gone (`cmd | head` after head exited)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(cmd, stdout=write, stderr=subprocess.PIPE, text=True, timeout=120, cwd=REPO)
    finally:
        os.close(write)


@pytest.mark.parametrize("argv", [["arrcoc-edge", "--list"], ["invoke", "-r", str(REPO), "--list"]], ids=" ".join)
def test_a_command_whose_reader_left_exits_quietly(argv):
    """`arrcoc-edge --list | head`: no BrokenPipeError traceback, exit 141 (as SIGPIPE) or 0."""
    tool = VENV_BIN / argv[0]
    if not tool.exists():
        pytest.skip(f"{tool} is not installed in this venv")
    proc = _with_stdout_closed([str(tool), *argv[1:]])
    assert proc.returncode in (0, 141), (proc.returncode, proc.stderr[-2000:])
    assert proc.stderr == "", proc.stderr[-2000:]


# ---------------------------------------------------------------- a program's own prints, while the library works

PRINTS_WHILE_PREDICTING = r'''
import os, signal, sys, threading, time
import numpy as np
import arrcoc_edge
handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
fds = [os.fstat(fd)[:2] for fd in (1, 2)]
m = arrcoc_edge.load(sys.argv[1], sentences=True)  # the sentence encoder loads on a thread meanwhile
img = np.full((224, 224, 3), 90, np.uint8)
stop, calls = threading.Event(), [0]
def worker():
    while not stop.is_set():
        m.predict(img, f"a cat {calls[0] % 7}"); calls[0] += 1
t = threading.Thread(target=worker); t.start()
for k in range(200):
    print(f"app line {k}", flush=True)
    os.write(2, f"app error {k}\n".encode())
    time.sleep(0.005)
stop.set(); t.join(); m.close()
assert calls[0] > 0
assert handlers == [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)], "signal handlers changed"
assert fds == [os.fstat(fd)[:2] for fd in (1, 2)], "fds 1 and 2 point elsewhere"
print("done", flush=True)
'''


def test_a_programs_prints_from_any_thread_arrive_while_the_library_predicts(onnx_build, tmp_path):
    """A program's main thread prints 200 lines (stdout and fd 2) while another thread loads the
    sentence encoder and predicts sentences: every line arrives (98 of 200 did, 0 while the encoder
    loaded: the library pointed the process's fds 1 and 2 at /dev/null), and nothing else is printed
    on stdout."""
    script = tmp_path / "app.py"
    script.write_text(PRINTS_WHILE_PREDICTING)
    proc = subprocess.run([sys.executable, str(script), str(onnx_build.out)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [f"app line {k}" for k in range(200)] + ["done"], proc.stdout[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("app error")]
    assert errors == [f"app error {k}" for k in range(200)], proc.stderr[-2000:]


PRINTS_WHILE_BUILDING = r'''
import os, signal, sys, threading, time
import arrcoc_edge
handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
fds = [os.fstat(fd)[:2] for fd in (1, 2)]
found = {}
def run():
    try:
        found["result"] = arrcoc_edge.build(targets="onnx", out=sys.argv[1])
    except BaseException as exc:
        found["error"] = exc
t = threading.Thread(target=run); t.start()
k = 0
while t.is_alive() or k < 200:
    print(f"app line {k}", flush=True)
    os.write(2, f"app error {k}\n".encode())
    k += 1
    time.sleep(0.01)
t.join()
assert "error" not in found, repr(found.get("error"))
result = found["result"]
assert result.ok and result.targets["onnx"].status == "published", result
assert handlers == [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)], "signal handlers changed"
assert fds == [os.fstat(fd)[:2] for fd in (1, 2)], "fds 1 and 2 point elsewhere"
print(f"lines {k}", flush=True)
'''


@pytest.mark.slow
def test_build_from_a_thread_publishes_and_a_programs_prints_all_arrive(onnx_build, tmp_path):
    """arrcoc_edge.build() called from a thread other than the main one publishes (it was
    `ValueError: signal only works in main thread`, after build.log was made), while the main
    thread's lines on stdout and fd 2 all arrive (they went to build.log or nowhere) and the
    program's signal handlers and fds are as it set them. An onnx build from the session's
    conversion cache (onnx_build made it): about 40 s, most of it the golden set and the gate."""
    script = tmp_path / "app.py"
    script.write_text(PRINTS_WHILE_BUILDING)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "out")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    count = int(lines[-1].split()[1])
    assert count >= 200 and lines == [f"app line {k}" for k in range(count)] + [f"lines {count}"], proc.stdout[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("app error")]
    assert errors == [f"app error {k}" for k in range(count)], proc.stderr[-2000:]
    assert (tmp_path / "out" / "manifest.json").is_file()


BAD_BUILD_FROM_A_THREAD = r'''
import os, signal, sys, threading, time
import arrcoc_edge
handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
found, done = {}, threading.Event()
def run():
    try:
        arrcoc_edge.build(targets="onnx", out=sys.argv[1], checkpoint=sys.argv[2])
    except arrcoc_edge.ArrcocError as exc:
        found["error"] = exc
    except BaseException as exc:
        found["untyped"] = f"{type(exc).__name__}: {exc}"
    done.set()
t = threading.Thread(target=run); t.start()
k = 0
while not done.is_set() or k < 50:
    print(f"app line {k}", flush=True); k += 1
    time.sleep(0.01)
t.join()
assert "untyped" not in found, found["untyped"]
print(type(found["error"]).__name__, found["error"].one_line(), flush=True)
assert handlers == [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)], "signal handlers changed"
print(f"lines {k}", flush=True)
'''


def test_a_failing_build_from_a_thread_is_its_typed_error_and_the_programs_prints_arrive(tmp_path):
    """build() from a thread other than the main one (a web server's worker, a notebook's
    executor), with a checkpoint that is not one: the CheckpointError it always was, as that class
    (it was `ValueError: signal only works in main thread`, after build.log was made), while the
    main thread's prints all arrive (they went to build.log while the build held fds 1 and 2)."""
    bad = tmp_path / "not-a-checkpoint.safetensors"
    bad.write_bytes(b"these bytes are no safetensors file" * 10)
    script = tmp_path / "app.py"
    script.write_text(BAD_BUILD_FROM_A_THREAD)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "out"), str(bad)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    count = int(lines[-1].split()[1])
    assert lines[:count] == [f"app line {k}" for k in range(count)], proc.stdout[-2000:]
    kind, line = lines[count].split(" ", 1)
    assert kind == "CheckpointError" and line.startswith("checkpoint error: ") and str(bad) in line, lines[count]
    assert lines[count + 1:] == [f"lines {count}"]
    assert "build.log" not in proc.stdout + proc.stderr


def test_a_command_in_a_deleted_working_folder_is_one_line_or_works(tmp_path):
    """A shell still in a folder that was deleted: a relative path is one line naming the fix (it
    was `internal error: FileNotFoundError`, and an installed package's import itself raised);
    absolute paths work there."""
    gone = tmp_path / "gone"
    gone.mkdir()
    tool = str(VENV_BIN / "arrcoc-edge")
    script = (f'cd "{gone}" && rmdir "{gone}" && "{tool}" verify --out relative/out; echo "rc=$?" >&2; '
              f'"{tool}" verify --out "{tmp_path / "none"}"; echo "rc=$?" >&2')
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300)
    relative, absolute = proc.stderr.split("rc=")[0], proc.stderr.split("\n", 2)[-1]
    assert proc.stderr.splitlines()[:2] == [
        "input error: the working folder no longer exists (it was deleted after the shell entered it) -> fix: "
        "cd into an existing folder, or pass absolute paths, and run the command again", "rc=2"], proc.stderr
    assert proc.stderr.splitlines()[2].startswith(f"input error: no manifest in {tmp_path / 'none'}"), absolute
    assert proc.stderr.splitlines()[3] == "rc=2" and "Traceback" not in proc.stderr, relative
