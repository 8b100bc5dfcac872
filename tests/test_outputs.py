"""Every task that writes checks its outputs against its own inputs and every published or state
folder by file-system identity (arrcoc_edge.publishing.outputs_guard), not by spelling: bind mounts, hard links,
links, `..`, doubled slashes. A refused output writes nothing, not even the state's build.log.
(issue 35, findings 4, 6 and 11)
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
from pathlib import Path

import pytest
from test_escapes import assert_one_line, publish_files, tree


@contextlib.contextmanager
def bind_mounted(source: Path, where: Path):
    """`source` also reachable at `where` through a real bind mount (root only), unmounted after."""
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "--bind", str(source), str(where)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"no bind mounts here ({proc.stderr.strip()})")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def entries(root: Path) -> dict[str, str]:
    """tree(root), with every folder too (an empty state folder left behind counts)."""
    found = tree(root)
    for folder, dirs, _ in os.walk(root):
        found.update({os.path.relpath(os.path.join(folder, d), root) + "/": "folder" for d in dirs})
    return found


def published_out(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    publish_files(out, {"model.bin": b"model bytes"})
    return out


def photo(tmp_path: Path) -> Path:
    from PIL import Image

    path = tmp_path / "p.png"
    Image.new("RGB", (32, 32), (200, 30, 30)).save(path)
    return path


def cli_call(fn, *args) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = fn(*args)
    return code, err.getvalue()


def generation(out: Path) -> Path:
    from arrcoc_edge.publishing import folder_state

    return folder_state.current_generation(out)


# ------------------------------------------------------------------ predict (finding 6)


def _aliases(how: str, out: Path, tmp_path: Path, stack: contextlib.ExitStack, suffix: str = ".json") -> str:
    """A spelling of a file inside OUT's publish or state that no path comparison sees."""
    from arrcoc_edge.publishing import folder_state

    if how == "bind-generation":
        return str(stack.enter_context(bind_mounted(generation(out), tmp_path / "mnt")) / "manifest.json")
    if how == "bind-generation-spelled":  # a doubled slash, a '..' and a trailing dot through the mount
        mnt = stack.enter_context(bind_mounted(generation(out), tmp_path / "mnt"))
        return f"{tmp_path}//mnt/t/.././/manifest.json"
    if how == "bind-state":
        return str(stack.enter_context(bind_mounted(folder_state.state_dir(out), tmp_path / "mnt")) / "ledger.json")
    if how == "bind-target-folder":
        return str(stack.enter_context(bind_mounted(generation(out) / "t", tmp_path / "mnt")) / "model.bin")
    if how == "hard-link":
        os.link(generation(out) / "manifest.json", tmp_path / f"hard{suffix}")
        return str(tmp_path / f"hard{suffix}")
    if how == "symlink":
        os.symlink(out / "manifest.json", tmp_path / f"soft{suffix}")
        return str(tmp_path / f"soft{suffix}")
    raise AssertionError(how)


ALIASES = ["bind-generation", "bind-generation-spelled", "bind-state", "bind-target-folder", "hard-link", "symlink"]


@pytest.mark.parametrize("option", ["--json", "--heatmap"])
@pytest.mark.parametrize("how", ALIASES)
def test_predict_never_writes_into_a_publish_however_it_is_reached(how, option, tmp_path):
    from arrcoc_edge.frontends import cli

    out = published_out(tmp_path)
    image = photo(tmp_path)
    before = tree(generation(out).parent.parent)
    with contextlib.ExitStack() as stack:
        target = _aliases(how, out, tmp_path, stack, ".json" if option == "--json" else ".png")
        if option == "--heatmap":
            target = target.rsplit(".", 1)[0] + ".png"
        args = dict(image=str(image), query="where is the cat?", query_embedding=None, out=str(out), runtime=None, json_path=None,
                    heatmap=None)
        args["json_path" if option == "--json" else "heatmap"] = target
        code, err = cli_call(cli.predict, *args.values())
        line = assert_one_line(code, err)
        assert "inside the output folder" in line, line
    assert tree(generation(out).parent.parent) == before


@pytest.mark.parametrize("how", ["bind-generation", "bind-target-folder"])
def test_predict_never_writes_into_another_publish_mounted_elsewhere(how, tmp_path):
    """The publish written into is not the one predict reads: its generation still shows what it
    is (it holds this tool's manifest) wherever it is mounted."""
    from arrcoc_edge.frontends import cli

    other = published_out(tmp_path / "other")
    read = published_out(tmp_path / "read")
    before = tree(generation(other).parent.parent)
    with contextlib.ExitStack() as stack:
        target = _aliases(how, other, tmp_path, stack).replace("model.bin", "x.json")
        code, err = cli_call(cli.predict, str(photo(tmp_path)), "where is the cat?", None, str(read), None, target, None)
        assert "inside the output folder" in assert_one_line(code, err)
    assert tree(generation(other).parent.parent) == before


# ------------------------------------------------------------------ train --out (finding 4)


@pytest.fixture
def starting_checkpoint(tmp_path, monkeypatch) -> Path:
    """train's starting checkpoint, a private copy (a regression overwrites nothing shipped)."""
    import shutil

    from arrcoc_edge.training import train

    copy = tmp_path / "ckpts" / "start.safetensors"
    copy.parent.mkdir()
    shutil.copy(train.UNTRAINED_CHECKPOINT, copy)
    monkeypatch.setattr(train, "UNTRAINED_CHECKPOINT", copy)
    return copy


def _train_out(how: str, start: Path, tmp_path: Path, stack: contextlib.ExitStack) -> str:
    if how == "start-spelled":  # a '..', a doubled slash and a './'
        return f"{start.parent}/../{start.parent.name}//./{start.name}"
    if how == "start-hard-link":
        os.link(start, tmp_path / "hard.safetensors")
        return str(tmp_path / "hard.safetensors")
    if how == "start-symlink":
        os.symlink(start, tmp_path / "soft.safetensors")
        return str(tmp_path / "soft.safetensors")
    if how == "start-proc-fd":
        fd = os.open(start.parent, os.O_RDONLY)
        stack.callback(os.close, fd)
        return f"/proc/self/fd/{fd}/{start.name}"
    if how == "start-bind-mounted":
        return str(stack.enter_context(bind_mounted(start.parent, tmp_path / "mnt")) / start.name)
    out = published_out(tmp_path)
    if how == "published-manifest":
        return str(out / "manifest.json")
    if how == "published-generation-bind-mounted":
        return str(stack.enter_context(bind_mounted(generation(out), tmp_path / "mnt")) / "manifest.json")
    if how == "state":
        from arrcoc_edge.publishing import folder_state

        return str(stack.enter_context(bind_mounted(folder_state.state_dir(out), tmp_path / "mnt")) / "ledger.json")
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["start-spelled", "start-hard-link", "start-symlink", "start-proc-fd",
                                 "start-bind-mounted", "published-manifest", "published-generation-bind-mounted",
                                 "state"])
def test_train_out_is_never_its_input_nor_inside_a_publish(how, starting_checkpoint, tmp_path):
    """Refused at once (one line, exit 2), before training: the starting checkpoint and every
    published file stay as they were. (On 43f3c5d: trained, replaced the file, exit 0.)"""
    import time

    from arrcoc_edge.frontends import cli

    before = tree(tmp_path)
    with contextlib.ExitStack() as stack:
        out = _train_out(how, starting_checkpoint, tmp_path, stack)
        before = tree(tmp_path)
        started = time.monotonic()
        code, err = cli_call(cli.train, out, "1", None)
        line = assert_one_line(code, err)
        assert time.monotonic() - started < 60, "refused only after training"
        assert ("starting checkpoint" if how.startswith("start") else "inside the output folder") in line, line
        after = tree(tmp_path)
    assert after == before


# ------------------------------------------------------------------ a refused --out writes nothing (finding 11)


def _refused_out(how: str, tmp_path: Path, stack: contextlib.ExitStack) -> tuple[str, dict]:
    """(--out, extra options) that build and merge must refuse."""
    if how == "user-files":
        (tmp_path / "mine").mkdir()
        (tmp_path / "mine" / "notes.txt").write_text("mine")
        return str(tmp_path / "mine"), {}
    if how == "a-file":
        (tmp_path / "file").write_text("mine")
        return str(tmp_path / "file") + "/", {}
    if how == "inside-bind-mounted-generation":
        out = published_out(tmp_path / "pub")
        return str(stack.enter_context(bind_mounted(generation(out), tmp_path / "mnt")) / "new"), {}
    if how == "bind-mounted-generation":
        out = published_out(tmp_path / "pub")
        return str(stack.enter_context(bind_mounted(generation(out), tmp_path / "mnt"))), {}
    if how == "inside-an-input-folder":
        (tmp_path / "cal").mkdir()
        return f"{tmp_path}//cal/../cal/new", {"calibration_dir": str(tmp_path / "cal")}
    raise AssertionError(how)


REFUSED = ["user-files", "a-file", "inside-bind-mounted-generation", "bind-mounted-generation", "inside-an-input-folder"]


@pytest.mark.parametrize("how", REFUSED)
def test_a_refused_build_out_writes_nothing(how, tmp_path):
    """No state folder and no build.log beside a refused --out (on 43f3c5d the console made
    `.NAME.arrcoc-edge/build.log` before the check, and clean then would not remove it)."""
    from arrcoc_edge.frontends import cli

    with contextlib.ExitStack() as stack:
        out, options = _refused_out(how, tmp_path, stack)
        before = entries(tmp_path)
        code, err = cli_call(cli.build, "onnx", None, out, False, options)
        assert_one_line(code, err)
        assert entries(tmp_path) == before
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".arrcoc-edge") and "pub" not in p.parts]


@pytest.mark.parametrize("how", ["user-files", "a-file", "inside-bind-mounted-generation", "bind-mounted-generation",
                                 "bind-mounted-part"])
def test_a_refused_merge_out_writes_nothing(how, tmp_path):
    from test_escapes import part

    from arrcoc_edge.frontends import cli

    a = part(tmp_path / "partA")
    with contextlib.ExitStack() as stack:
        if how == "bind-mounted-part":  # the part itself, reached through a mount
            out = str(stack.enter_context(bind_mounted(a, tmp_path / "mnt")))
        else:
            out = _refused_out(how, tmp_path, stack)[0]
        before = entries(tmp_path)
        code, err = cli_call(cli.merge, str(a), out)
        assert_one_line(code, err)
        assert entries(tmp_path) == before


# ------------------------------------------------------------------ Ctrl-C in the first seconds (finding 11)


EARLY = [("tasks.py", 0.0), ("tasks.py", 0.2), ("start", 0.5), ("start", 1.0), ("start", 1.5), ("start", 2.0)]


# predict on a folder with nothing runnable ends about 3 s after its start: 3.0 would interrupt its exit
@pytest.mark.parametrize("task,since,delay", [("build", *d) for d in [*EARLY, ("start", 3.0)]] +
                         [("predict", *d) for d in EARLY])
def test_an_early_ctrl_c_is_exit_130_and_one_line(task, since, delay, tmp_path):
    """SIGINT while Invoke loads tasks.py and the task imports its modules (seconds: --runtime's
    help imports torch), before arrcoc_edge.frontends.cli.guarded sets its handlers: on 43f3c5d Invoke's own
    `except KeyboardInterrupt` made it exit 1 with no output. `since`: the delay counts from the
    process's start, or from the moment tasks.py starts running (tasks.LOADING_ENV)."""
    import signal
    import sys
    import time

    from conftest import REPO

    argv = {"build": ["build", "--target", "onnx", "--out", str(tmp_path / "b")],
            "predict": ["predict", "--image", str(photo(tmp_path)), "--query", "cat",
                        "--out", str(published_out(tmp_path))]}[task]
    loading = tmp_path / "tasks-loading"
    proc = subprocess.Popen([sys.executable, "-m", "invoke", *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "ARRCOC_TEST_LOADING_FILE": str(loading)})
    deadline = time.monotonic() + 60
    while since == "tasks.py" and not loading.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "tasks.py never started"
        time.sleep(0.005)
    time.sleep(delay)
    # Under load Python and Invoke can take longer than `delay` to import themselves, a window no
    # file of this project runs in (docs/cli.md): then the signal goes as soon as tasks.py starts
    # (or 2 s later: a tasks.py that never says so, as on 43f3c5d, is interrupted all the same,
    # still within its seconds of imports).
    later = time.monotonic() + 2
    while not loading.exists() and proc.poll() is None and time.monotonic() < later:
        time.sleep(0.005)
    if proc.poll() is not None:
        proc.communicate()
        pytest.skip(f"{task} ended within {delay} s on this host: nothing to interrupt")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.strip()]
    finished = len(lines) == 1 and (
        (proc.returncode == -signal.SIGINT and not lines[0].startswith("interrupted: "))
        or (proc.returncode == 2 and lines[0].startswith("input error: nothing published")))
    if finished:
        # its task had ended (its own one line) and Python was exiting: a Ctrl-C then is CPython's
        # (docs/cli.md), not an early one; a fast host gets here with predict's refusal of `out`,
        # and exits 2 when the signal lands during finalisation, where Python runs no handler
        # (measured on a slow host: the refusal, exit 2, with the signal sent 1 s after start)
        pytest.skip(f"{task} had finished ({lines[0][:50]}...) when the signal came after {delay} s")
    assert proc.returncode == 130 and len(lines) == 1 and lines[0].startswith("interrupted: "), (proc.returncode, err)
    assert "Traceback" not in err and " -> fix: " in lines[0]
    assert not (tmp_path / "b").exists()
