"""build()'s child (frontends/child_build.py) and the ExecuTorch pool worker trust nothing of the
caller's: isolated from its working folder's modules, their own fds whatever the caller closed,
their end named as what it was (an interrupt, a native crash, SIGKILL), paths of any type."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from arrcoc_edge import subproc
from arrcoc_edge.errors import BuildCrashed, BuildInterrupted, HostCapabilityError, InputError

REPO = Path(__file__).resolve().parent.parent

CALL = """
import sys, arrcoc_edge
try:
    arrcoc_edge.build(targets=sys.argv[1], out=sys.argv[2])
    print("result")
except arrcoc_edge.ArrcocError as e:
    print("typed", type(e).__name__, e.problem[:300])
except BaseException as e:
    print("UNTYPED", type(e).__name__, str(e)[:300])
"""


def _call(tmp_path: Path, cwd: Path, targets: str = "no-such-target", **kw) -> str:
    script = tmp_path / "app.py"
    script.write_text(CALL)
    proc = subprocess.run([sys.executable, str(script), targets, str(tmp_path / "o")], cwd=cwd, capture_output=True,
                          text=True, timeout=300, **kw)
    return (proc.stdout.strip().splitlines() or [proc.stderr[-500:]])[-1]


def test_the_child_never_imports_the_callers_working_folder(tmp_path):
    """A json.py in the caller's working folder ran inside build()'s child (python -c puts the
    working folder first on sys.path); a user's own onnx.py broke the onnx target."""
    cwd = tmp_path / "plant"
    cwd.mkdir()
    (cwd / "json.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('ran')\nraise SystemExit(9)\n")
    (cwd / "onnx.py").write_text("raise SystemExit(9)\n")
    line = _call(tmp_path, cwd)
    assert line.startswith("typed InputError") and "no-such-target" in line, line
    assert not (tmp_path / "ran").exists()


def test_python_command_finds_this_process_modules_not_the_working_folders(tmp_path):
    (tmp_path / "json.py").write_text("raise SystemExit('planted')\n")
    cmd = subproc.python_command(subproc.interpreter(), "import json, arrcoc_edge; print(json.__file__)")
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert str(tmp_path) not in out.stdout


@pytest.mark.parametrize("closed", ["0 and 1", "0, 1 and 2"])
def test_build_with_the_callers_fds_closed_still_gets_its_outcome(tmp_path, closed):
    """With fds 0 and 1 closed os.pipe() got fd 1, the child's stdout was dup2'd onto it, and a
    build that published raised RuntimeError "no result"."""
    result = tmp_path / "result.txt"
    code = textwrap.dedent(f"""
        import sys, arrcoc_edge
        try:
            arrcoc_edge.build(targets="no-such-target", out={str(tmp_path / 'o')!r}); msg = "result"
        except arrcoc_edge.ArrcocError as e: msg = "typed " + type(e).__name__
        except BaseException as e: msg = "UNTYPED " + type(e).__name__ + " " + str(e)[:200]
        open({str(result)!r}, "w").write(msg)
    """)
    shell = f'exec {sys.executable} -c "$0" <&- >&-' + (" 2>&-" if "2" in closed else "")
    subprocess.run(["bash", "-c", shell, code], cwd=tmp_path, timeout=300)
    assert result.read_text() == "typed InputError"


@pytest.mark.parametrize("code, kind, named", [
    (-signal.SIGSEGV, BuildCrashed, "SIGSEGV"), (-signal.SIGABRT, BuildCrashed, "SIGABRT"),
    (-signal.SIGBUS, BuildCrashed, "SIGBUS"), (-signal.SIGKILL, BuildCrashed, "out-of-memory"),
    (-signal.SIGINT, BuildInterrupted, "interrupted"), (-signal.SIGTERM, BuildInterrupted, "interrupted"),
    (130, BuildInterrupted, "interrupted"), (1, BuildCrashed, "exit 1"), (-signal.SIGUSR1, BuildCrashed, "SIGUSR1")])
def test_a_child_that_ended_without_an_outcome_is_named(code, kind, named):
    from arrcoc_edge.frontends.child_build import _outcome

    with pytest.raises(kind) as info:
        _outcome(b"", code, ["Fatal Python error: Segmentation fault"])
    assert type(info.value) is kind and named in info.value.problem


@pytest.mark.parametrize("sig", ["SIGSEGV", "SIGKILL"])
def test_a_real_child_killed_by_a_signal_is_a_typed_error(tmp_path, sig):
    """A native crash was `RuntimeError ... exit -11`, the OOM killer's SIGKILL `BuildInterrupted`."""
    script = tmp_path / "app.py"
    script.write_text(CALL)
    proc = subprocess.Popen([sys.executable, str(script), "onnx", str(tmp_path / "o")], cwd=tmp_path,
                            stdout=subprocess.PIPE, text=True)
    child = None
    for _ in range(600):
        found = subprocess.run(["pgrep", "-P", str(proc.pid), "-f", "child_build_main"], capture_output=True, text=True)
        if found.stdout.strip():
            child = int(found.stdout.split()[0])
            break
        time.sleep(0.1)
    assert child is not None
    time.sleep(2)
    os.kill(child, getattr(signal, sig))
    line = proc.communicate(timeout=300)[0].strip().splitlines()[-1]
    assert line.startswith("typed BuildCrashed") and ("SIGSEGV" in line if sig == "SIGSEGV" else "SIGKILL" in line), line


def test_build_from_a_deleted_working_folder_is_one_typed_line(tmp_path):
    """torch's MKL exits from C in a deleted working folder ("Intel oneMKL FATAL ERROR"); build()
    raised an untyped RuntimeError, `invoke build` ended with MKL's line and exit 2."""
    gone = tmp_path / "gone"
    gone.mkdir()
    script = tmp_path / "app.py"
    script.write_text(CALL)
    line = subprocess.run(["bash", "-c", f'cd {gone} && rmdir {gone} && exec "$@"', "-", sys.executable, str(script),
                           "onnx", str(tmp_path / "o")], capture_output=True, text=True, timeout=300).stdout
    assert line.strip().startswith("typed InputError the working folder no longer exists"), line
    for task in (["build", "--target", "onnx", "--out", str(tmp_path / "o")], ["train", "--steps", "1", "--out",
                 str(tmp_path / "t.safetensors")], ["bench", "--out", str(tmp_path / "o")]):
        gone.mkdir()
        proc = subprocess.run(["bash", "-c", f'cd {gone} && rmdir {gone} && exec "$@"', "-", sys.executable, "-m",
                               "arrcoc_edge", *task], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2 and "MKL" not in proc.stderr + proc.stdout, (task, proc.stderr[-500:])
        assert "working folder no longer exists" in proc.stderr + proc.stdout, task


def test_torch_is_never_imported_in_a_deleted_working_folder(tmp_path):
    """predict and verify load the ExecuTorch and Lite Interpreter runtimes (torch) after their paths
    are checked: errors.check_torch_loadable is the one line before MKL's exit from C."""
    gone = tmp_path / "gone"
    gone.mkdir()
    code = ("from arrcoc_edge.errors import InputError\nfrom arrcoc_edge.targets.executorch.runtime import _program\n"
            "try:\n    _program(b'x')\nexcept InputError as e:\n    print('typed', e.problem)\n")
    proc = subprocess.run(["bash", "-c", f'cd {gone} && rmdir {gone} && exec "$@"', "-", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=300)
    assert proc.stdout.startswith("typed the working folder no longer exists"), proc.stdout + proc.stderr[-500:]


def test_path_arguments_of_every_type():
    """build(out=b"/abs/path") published into ./b'/abs/path' under the working folder."""
    from arrcoc_edge.frontends.api import _path_argument

    assert _path_argument(b"/abs/path") == "/abs/path"
    assert _path_argument(Path("/abs/path")) == "/abs/path"
    assert _path_argument(None) is None
    with pytest.raises(InputError):
        _path_argument(42)


def test_load_takes_a_bytes_path(tmp_path):
    """load(b"/path") raised TypeError from inside the path check; now the path is read as the
    file system would (a missing folder is the usual typed line)."""
    import arrcoc_edge

    with pytest.raises(InputError) as info:
        arrcoc_edge.load(os.fsencode(tmp_path / "nothing-here"))
    assert "nothing-here" in info.value.problem


@pytest.mark.parametrize("exe", ["", "/usr/bin/true", "/nonexistent/python3"])
def test_an_embedding_programs_sys_executable_still_finds_this_python(exe, monkeypatch):
    monkeypatch.setattr(sys, "executable", exe)
    found = subproc.interpreter()
    assert found and os.path.basename(found).startswith("python") and os.access(found, os.X_OK)
    monkeypatch.setattr(sys, "prefix", "/nonexistent")
    monkeypatch.setattr(sys, "_base_executable", "", raising=False)
    from arrcoc_edge.frontends import child_build

    with pytest.raises(HostCapabilityError):
        child_build._start_checks()
