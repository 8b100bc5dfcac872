"""Issue 29, losses and escapes: the tool's own state read like user input, interrupts that are
never swallowed, files written whole, verify's verdict, the heatmap's colours and legend.

Each case runs the real functions on small hand-made publishes (publish.publish, as a build
calls it), so the file stays fast; predict's cases, which need a real build, are in test_predict.py.
"""
from __future__ import annotations

import colorsys
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_build import previous, published  # noqa: F401  (fixtures: a real onnx build, copied per test)
from test_cli_errors import invoke
from test_escapes import assert_one_line, part, publish_files, tree


def ledger_path(out: Path) -> Path:
    from arrcoc_edge.publishing import folder_state

    return folder_state.state_dir(out) / folder_state.LEDGER


def victims(tmp_path: Path) -> tuple[Path, Path]:
    """A file and a folder of the user's, next to the output folder's state (where '../..' lands)."""
    (tmp_path / "victim.txt").write_text("the user's file")
    (tmp_path / "victim-dir" / "sub").mkdir(parents=True)
    (tmp_path / "victim-dir" / "sub" / "keep.txt").write_text("the user's folder")
    return tmp_path / "victim.txt", tmp_path / "victim-dir"


# ------------------------------------------------------------------ 2. ledger entries, checked


def _poison(kind: str, victim_file: Path, victim_dir: Path):
    """An edit of the ledger: names that escape the state folder, and entries of the wrong type."""
    def edit(ledger: dict) -> None:
        if kind == "generation ../../victim.txt":
            ledger["generations"]["../../victim.txt"] = {"published": False}
        elif kind == "generation absolute folder":
            ledger["generations"][str(victim_dir)] = {"published": False}
        elif kind == "published generation ../../victim-dir":
            ledger["generations"]["../../victim-dir"] = {"published": True}
        elif kind == "staging absolute folder":
            ledger["staging"].append(str(victim_dir))
        elif kind == "generation info of the wrong type":
            ledger["generations"]["20250101-000000-1-abcdef"] = 5
        elif kind == "published flag of the wrong type":
            ledger["generations"]["20250101-000000-1-abcdef"] = {"published": "yes"}
        elif kind == "staging entry of the wrong type":
            ledger["staging"].append({"run": "x"})
        elif kind == "generations of the wrong type":
            ledger["generations"] = list(ledger["generations"])
    return edit


POISON = ["generation ../../victim.txt", "generation absolute folder", "published generation ../../victim-dir",
          "staging absolute folder", "generation info of the wrong type", "published flag of the wrong type",
          "staging entry of the wrong type", "generations of the wrong type"]


@pytest.mark.parametrize("task", ["build", "merge", "clean", "verify"])
@pytest.mark.parametrize("kind", POISON)
def test_a_ledger_entry_out_of_the_state_or_of_the_wrong_type_is_refused_and_nothing_is_deleted(kind, task, tmp_path):
    out = tmp_path / "out"
    publish_files(out, {"a.bin": b"a"})
    victim_file, victim_dir = victims(tmp_path)
    ledger = json.loads(ledger_path(out).read_text())
    _poison(kind, victim_file, victim_dir)(ledger)
    ledger_path(out).write_text(json.dumps(ledger))
    argv = {"build": ["build", "--target", "onnx", "--out", str(out)],
            "merge": ["merge", "--parts", str(part(tmp_path / "part")), "--out", str(out)],
            "clean": ["clean", "--out", str(out)], "verify": ["verify", "--out", str(out)]}[task]
    before = outside_the_log(tree(tmp_path))  # the part is the user's too
    code, _, err = invoke(*argv)
    line = assert_one_line(code, err)
    assert "ledger" in line and "nothing was removed" in line, line
    assert victim_file.read_text() == "the user's file" and (victim_dir / "sub" / "keep.txt").exists()
    assert outside_the_log(tree(tmp_path)) == before  # nothing removed, nothing written, anywhere


def outside_the_log(found: dict) -> dict:
    """A tree without the build's log, which a build opens before it reads the output folder."""
    return {k: v for k, v in found.items() if not k.endswith("build.log")}


def test_the_ledger_still_accepts_what_the_tool_itself_writes(tmp_path):
    """The check refuses edits, not the tool's own entries: two publishes and a clean go through."""
    from arrcoc_edge.frontends import cli

    out = tmp_path / "out"
    publish_files(out, {"a.bin": b"a"})
    publish_files(out, {"a.bin": b"b"})
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.verify(str(out)) == 0 and cli.clean(str(out)) == 0
    assert not os.path.lexists(out)


# ------------------------------------------------------------------ 5. state files that are not files


def _replace_ledger(out: Path, kind: str) -> None:
    path = ledger_path(out)
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link to /dev/zero":
        os.symlink("/dev/zero", path)
    elif kind == "huge file":
        with open(path, "wb") as f:  # sparse: 64 MB that would be read whole
            f.truncate(64 * 1024 * 1024)
    elif kind == "folder":
        path.mkdir()
    elif kind == "not JSON":
        path.write_bytes(b"\xff\xfe{")


@contextlib.contextmanager
def memory_cap(extra: int = 4 << 30):
    """A regression that reads /dev/zero whole ends in MemoryError, not in a machine out of memory."""
    import resource

    used = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    old = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (used + extra, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


class Blocked(BaseException):
    """Raised by no_hang's alarm: not an OSError (TimeoutError is one, and readers catch those)."""


@contextlib.contextmanager
def no_hang(seconds: int = 30):
    """Fail (instead of hanging the test run) when the body blocks, as a FIFO read would."""
    def expire(signum, frame):
        raise Blocked(f"blocked for {seconds}s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("task", ["verify", "build", "predict", "clean"])
@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "huge file", "folder", "not JSON"])
def test_a_ledger_that_is_not_a_regular_small_file_is_one_line_without_hanging(kind, task, tmp_path):
    out = tmp_path / "out"
    publish_files(out, {"a.bin": b"a"})
    _replace_ledger(out, kind)
    (tmp_path / "p.png").write_bytes(b"never decoded")
    argv = {"verify": ["verify", "--out", str(out)], "build": ["build", "--target", "onnx", "--out", str(out)],
            "predict": ["predict", "--image", str(tmp_path / "p.png"), "--query", "a cat", "--out", str(out)],
            "clean": ["clean", "--out", str(out)]}[task]
    with no_hang(), memory_cap():
        code, _, err = invoke(*argv)
    line = assert_one_line(code, err)
    assert "ledger" in line, line
    assert (out / "t" / "a.bin").read_bytes() == b"a"  # the publish is untouched


# ------------------------------------------------------------------ 3. an interrupt is never swallowed


class SwallowedInterrupt:
    """Delivers SIGINT from inside __del__: the handler's KeyboardInterrupt is raised there and
    Python drops it ("Exception ignored in ..."), as it did in torch's WeakIdKeyDictionary callback."""

    def __del__(self):
        signal.raise_signal(signal.SIGINT)  # to this thread (os.kill may land on another one)
        for _ in range(1000):  # the handler runs at the next bytecode boundary, still inside __del__
            pass


def _publish_with_swallowed_interrupt(out: Path, where: str):
    """A publish like a build's, with a Ctrl-C swallowed `where`: while the report is written
    (write_extras), or in the body before publishing starts (between stages)."""
    from test_escapes import entry_for, manifest_for

    from arrcoc_edge.publishing import locking, publish, reading

    def body():
        with locking.build_lock(out, log=lambda m: None):
            publish.recover(out, reading.read_manifest(out), log=lambda m: None)
            run = locking.new_staging(out)
            (run / "t").mkdir()
            (run / "t" / "a.bin").write_bytes(b"new")
            data = manifest_for({"t": entry_for("t", run / "t")}, note="new")
            if where == "between stages":
                SwallowedInterrupt()  # made and dropped: __del__ runs here
                locking.check_interrupted()  # what run_build does at each stage boundary
            extras = (lambda gen: SwallowedInterrupt()) if where == "while writing the report" else None
            publish.publish(out, {"t": run / "t"}, data, write_extras=extras, log=lambda m: None)
        return 0

    return body


@pytest.mark.parametrize("where", ["while writing the report", "between stages"])
def test_a_ctrl_c_swallowed_by_a_callback_stops_the_build_before_it_publishes(where, tmp_path, capsys, monkeypatch):
    from arrcoc_edge.frontends import cli
    from arrcoc_edge.publishing import folder_state, locking

    out = tmp_path / "out"
    publish_files(out, {"a.bin": b"old"}, note="old")
    ignored = []  # what Python reports as "Exception ignored in ..."
    monkeypatch.setattr(sys, "unraisablehook", ignored.append)
    code = cli.guarded(_publish_with_swallowed_interrupt(out, where), False, "build")
    err = capsys.readouterr().err
    assert [type(u.exc_value) for u in ignored] == [KeyboardInterrupt]  # it really was swallowed
    assert code == 130 and err.strip().splitlines()[-1].startswith("interrupted: "), (code, err)
    assert json.loads((out / "manifest.json").read_text())["note"] == "old"
    assert (out / "t" / "a.bin").read_bytes() == b"old"
    locking.reset_interrupts()
    publish_files(out, {"a.bin": b"next"})  # the next build tidies the half-made generation
    assert (out / "t" / "a.bin").read_bytes() == b"next"
    assert len(os.listdir(folder_state.state_dir(out) / folder_state.GENERATIONS)) == 1


def test_a_ctrl_c_swallowed_after_a_task_finished_is_still_exit_130(capsys, monkeypatch):
    from arrcoc_edge.frontends import cli

    monkeypatch.setattr(sys, "unraisablehook", lambda u: None)

    def body():
        SwallowedInterrupt()
        return 0

    assert cli.guarded(body, False, "verify") == 130
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("interrupted: ")
    assert cli.guarded(lambda: 0, False, "verify") == 0  # the record is per task


# ------------------------------------------------------------------ 4. files written whole


@pytest.mark.parametrize("earlier", [b"the previous heatmap", None])
def test_a_ctrl_c_while_writing_leaves_the_previous_file_or_none(earlier, tmp_path):
    from arrcoc_edge.publishing import folder_state

    path = tmp_path / "heat.png"
    if earlier is not None:
        path.write_bytes(earlier)

    def write(f):
        f.write(b"half of a new file")
        f.flush()
        # what Python's own SIGINT handler raises, raised here directly: delivered as a signal
        # (os.kill, then signal.raise_signal) it arrived too late in whole xdist runs, with the
        # handlers and mask unchanged (conftest's signals_left_as_found), passing alone
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        folder_state.write_atomic(path, write)
    if earlier is None:
        assert not path.exists()
    else:
        assert path.read_bytes() == earlier
    assert os.listdir(tmp_path) == (["heat.png"] if earlier else [])  # no temporary file left


# ------------------------------------------------------------------ 1. verify: an emptied manifest, the verdict


@pytest.mark.parametrize("content", [{"targets": {}}, {}, {"checkpoint": {"sha256": "0" * 64}, "targets": {}}])
def test_verify_refuses_a_manifest_that_lists_no_targets(content, tmp_path):
    """`predict --json OUT/manifest.json` (refused now) used to replace the publish this way."""
    out = tmp_path / "out"
    publish_files(out, {"a.bin": b"a"})
    real = out.resolve() / "manifest.json"
    real.write_text(json.dumps(content))
    code, _, err = invoke("verify", "--out", str(out))
    assert "no targets" in assert_one_line(code, err) or "no manifest" in err


def test_verify_ends_with_a_verdict_line(tmp_path):
    out = tmp_path / "out"
    publish_files(out, {"a.bin": b"a", "sub/b.bin": b"b"})
    code, stdout, _ = invoke("verify", "--out", str(out))
    assert code == 0 and stdout.strip().splitlines()[-1] == f"verify: OK, 2 files of 1 target(s) match the manifest in {out}"
    (out / "t" / "a.bin").unlink()
    (out / "t" / "extra.txt").write_text("mine")
    code, stdout, err = invoke("verify", "--out", str(out))
    assert code == 3 and stdout.strip().splitlines()[-1] == f"verify: 2 problems in {out}", stdout


# ------------------------------------------------------------------ the build's closing line names an action


def test_the_build_s_closing_line_names_an_action(tmp_path):
    from arrcoc_edge import targets as table
    from arrcoc_edge.building.build import StageResult
    from arrcoc_edge.frontends.cli import next_step

    own = StageResult(table.TARGETS["onnx"], "failed",
                      "missing dependency: target 'onnx' needs onnx -> fix: pip install -e '.[onnx]'")
    assert next_step(own, tmp_path / "out", False) == "onnx: pip install -e '.[onnx]'"
    gate = StageResult(table.TARGETS["onnx-int8"], "failed", "int8: topk_overlap_mean=0.5 < 0.98")
    step = next_step(gate, tmp_path / "out", False)
    assert f"invoke build --target onnx-int8 --out {tmp_path / 'out'} --verbose" in step and "build.log" in step


# ------------------------------------------------------------------ the heatmap: the page's colours, a legend, a size


def page_colour(v: float) -> tuple[np.ndarray, float]:
    """web/app.js heatColour, hsla(240*(1-v), 100%, 50%, 0.12 + 0.43 v), through colorsys."""
    hue = round(240 * (1 - v))  # the page rounds the hue to whole degrees
    return np.array(colorsys.hls_to_rgb(hue / 360, 0.5, 1.0)), 0.12 + 0.43 * v


def test_the_heatmap_uses_the_page_s_colour_scale():
    from arrcoc_edge.publishing.overlay import heat_colour

    app = (Path(__file__).resolve().parent.parent / "web" / "app.js").read_text()
    assert "hsla(${Math.round(240 * (1 - v))}, 100%, 50%, ${0.12 + 0.43 * v})" in app  # the stops compared below
    for v in (0.0, 0.25, 0.5, 0.75, 1.0):
        rgb, alpha = heat_colour(np.array(v))
        want_rgb, want_alpha = page_colour(v)
        np.testing.assert_allclose(rgb, want_rgb, atol=1e-9)
        assert abs(float(alpha) - want_alpha) < 1e-9


@pytest.mark.parametrize("size,drawn", [((20, 20), (512, 512)), ((16, 40), (205, 512)), ((451, 300), (512, 341)),
                                        ((4000, 3000), (2048, 1536)), ((1024, 768), (1024, 768))])
def test_the_heatmap_is_drawn_at_a_readable_size_with_a_legend(size, drawn):
    from arrcoc_edge.publishing.overlay import LEGEND_HEIGHT, heatmap

    w, h = size
    photo = np.full((h, w, 3), 128, np.uint8)
    relevance = np.linspace(0, 1, 196, dtype=np.float32)
    picture = heatmap(photo, relevance, np.arange(190, 196), 14, 6)
    assert picture.size == (max(drawn[0], 320), drawn[1] + LEGEND_HEIGHT)
    pixels = np.asarray(picture)
    # the last cell (relevance 1) is red over the grey photo, the first (relevance 0) bluish grey
    dw, dh = drawn
    top_left = pixels[dh // 28, dw // 28].astype(int)
    assert top_left[2] > top_left[0] and top_left[2] > top_left[1]
    legend = pixels[drawn[1]:, :].astype(int)
    assert (np.abs(legend[..., 0] - legend[..., 2]) > 60).any()  # the colour bar is there


class SwallowsCtrlCOnnx:
    """The real ONNX target, whose build receives a Ctrl-C that a library swallows (delivered
    inside a __del__, as torch's weakref callback did) and then finishes normally."""

    def __new__(cls):
        from arrcoc_edge.targets.onnx import OnnxTarget

        class Swallowing(OnnxTarget):
            def build(self, ctx):
                variants = super().build(ctx)
                SwallowedInterrupt()
                return variants

        return Swallowing()


@pytest.mark.slow
def test_a_real_build_whose_ctrl_c_was_swallowed_publishes_nothing_and_exits_130(previous, checkpoint_path,
                                                                                   monkeypatch, capsys):
    from test_build import snapshot, staging_left

    from arrcoc_edge import targets as table
    from arrcoc_edge.frontends import cli

    before = snapshot(previous)
    ignored = []
    monkeypatch.setattr(sys, "unraisablehook", ignored.append)
    monkeypatch.setitem(table.TARGETS, "onnx", SwallowsCtrlCOnnx())
    code = cli.build("onnx", str(checkpoint_path), str(previous), verbose=False)
    err = capsys.readouterr().err
    assert [type(u.exc_value) for u in ignored] == [KeyboardInterrupt]
    assert code == 130 and "build interrupted (SIGINT); nothing was published" in err.strip().splitlines()[-1], err
    assert snapshot(previous) == before and staging_left(previous) == []


def test_predict_dash_h_is_the_help():
    code, stdout, err = invoke("predict", "-h")
    assert code == 0 and "--heatmap" in stdout and "-e STRING, --heatmap" in stdout, err


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_build_log_that_is_not_a_regular_file_never_blocks_the_build(kind, tmp_path):
    """Finding 5's class, for build.log: `open(path, "a")` on a FIFO blocks forever, and a link
    would append the build's third-party output to whatever it names. Now the log is opened only
    as a regular file; otherwise third-party output stays on the terminal."""
    from arrcoc_edge.frontends.console import build_console

    out = tmp_path / "out"
    state = tmp_path / ".out.arrcoc-edge"
    state.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    if kind == "fifo":
        os.mkfifo(state / "build.log")
    else:
        (state / "build.log").symlink_to(victim)
    import time

    class Blocked(BaseException):  # not an OSError: the code under test catches those
        pass

    def blocked(*_):
        raise Blocked("build.log blocked the build")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(10)
    started = time.monotonic()
    try:
        with build_console(state, verbose=False) as console:
            console.log("a line of the build's own")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - started < 5
    assert victim.read_text() == "keep\n" and not out.exists()


# ------------------------------------------------------------------ issue 35.1: a renamed or copied OUT keeps its release


def publish_noted(out: Path, data: bytes) -> list[str]:
    """publish_files, as a build publishes, returning the notes it logged."""
    from test_escapes import entry_for, manifest_for

    from arrcoc_edge.publishing import locking, publish, reading, takeover

    notes = []
    takeover.prepare_out_dir(out)
    with locking.build_lock(out, log=notes.append):
        publish.recover(out, reading.read_manifest(out), log=notes.append)
        run = locking.new_staging(out)
        (run / "t").mkdir()
        (run / "t" / "a.bin").write_bytes(data)
        publish.publish(out, {"t": run / "t"}, manifest_for({"t": entry_for("t", run / "t")}), log=notes.append)
    return notes


def keep_release(out: Path, how: str) -> Path:
    """Keep OUT's release the ways a user would; returns the path the release is read from."""
    root = out.parent
    if how == "mv":
        return out.rename(root / "out-v1")
    if how == "mv into a subfolder":  # the relative link resolves nowhere there: the note says how to repair it
        (root / "releases").mkdir()
        return out.rename(root / "releases" / "v1")
    if how == "cp -a (copies the link)":
        os.symlink(os.readlink(out), root / "out-keep")
        return root / "out-keep"
    if how == "ln -s to the generation":
        os.symlink(os.path.realpath(out), root / "v1")
        return root / "v1"
    if how == "link in a subfolder":
        (root / "releases").mkdir()
        os.symlink(os.path.relpath(os.path.realpath(out), root / "releases"), root / "releases" / "v1")
        return root / "releases" / "v1"
    raise AssertionError(how)


def verify_ok(folder: Path) -> str:
    code, stdout, err = invoke("verify", "--out", str(folder))
    assert code == 0 and stdout.strip().splitlines()[-1].startswith("verify: OK, 1 file of 1 target(s)"), stdout + err
    return stdout


RELEASES = ["mv", "mv into a subfolder", "cp -a (copies the link)", "ln -s to the generation", "link in a subfolder"]


@pytest.mark.parametrize("how", RELEASES)
def test_a_renamed_or_copied_output_folder_keeps_its_release_until_no_link_leads_to_it(how, tmp_path):
    from arrcoc_edge.publishing import folder_state

    out = tmp_path / "out"
    publish_noted(out, b"v1")
    release = keep_release(out, how)
    notes = publish_noted(out, b"v2")
    kept = [n for n in notes if "kept generation" in n]
    assert len(kept) == 1 and str(release.relative_to(tmp_path)) in kept[0], notes
    if how == "mv into a subfolder":  # the note names the command that makes the moved link resolve
        code, _, err = invoke("verify", "--out", str(release))
        assert "ln -sfn" in assert_one_line(code, err)
        command = kept[0].split("`")[1]
        assert command.startswith("ln -sfn ")
        subprocess.run(command, shell=True, check=True)
    assert (release / "t" / "a.bin").read_bytes() == b"v1" and (out / "t" / "a.bin").read_bytes() == b"v2"
    assert f"in {release}" in verify_ok(release)
    verify_ok(out)
    # named once: later publishes keep it without saying so again
    assert not [n for n in publish_noted(out, b"v3") if "kept generation" in n]
    assert (release / "t" / "a.bin").read_bytes() == b"v1"
    # the user deletes the release: the next publish collects its generation, and the ledger forgets it
    os.unlink(release)
    gens_before = set(os.listdir(folder_state.state_dir(out) / folder_state.GENERATIONS))
    notes = publish_noted(out, b"v4")
    assert any("removed kept generation" in n for n in notes), notes
    assert len(os.listdir(folder_state.state_dir(out) / folder_state.GENERATIONS)) == 1 < len(gens_before)
    assert len(folder_state.read_ledger(out)["generations"]) == 1


def test_two_kept_releases_both_verify_and_clean_keeps_them_and_says_so(tmp_path):
    from arrcoc_edge.publishing import folder_state

    out = tmp_path / "out"
    publish_noted(out, b"v1")
    v1 = out.rename(tmp_path / "v1")
    publish_noted(out, b"v2")
    v2 = out.rename(tmp_path / "v2")
    publish_noted(out, b"v3")
    for release, data in ((v1, b"v1"), (v2, b"v2"), (out, b"v3")):
        assert (release / "t" / "a.bin").read_bytes() == data
        verify_ok(release)
    code, stdout, err = invoke("clean", "--out", str(out))
    assert code == 0, stdout + err
    assert not os.path.lexists(out)
    for release, data in ((v1, b"v1"), (v2, b"v2")):
        assert (release / "t" / "a.bin").read_bytes() == data
        named = [line for line in stdout.splitlines() if line.startswith("kept ") and f"{release.name} links to it" in line]
        assert len(named) == 1, stdout
        verify_ok(release)
    os.unlink(v1)  # one link gone: clean collects that one, keeps the other
    code, stdout, _ = invoke("clean", "--out", str(out))
    assert code == 0 and "v2 links to it" in stdout and "v1 links to it" not in stdout, stdout
    assert len(os.listdir(folder_state.state_dir(out) / folder_state.GENERATIONS)) == 1
    os.unlink(v2)
    code, stdout, _ = invoke("clean", "--out", str(out))
    assert code == 0 and not [line for line in stdout.splitlines() if line.startswith("kept ")], stdout
    assert os.listdir(tmp_path) == []  # everything the tool wrote is gone, and nothing else was there


@pytest.mark.parametrize("how", RELEASES[2:])
def test_clean_keeps_a_generation_a_link_leads_to(how, tmp_path):
    out = tmp_path / "out"
    publish_noted(out, b"v1")
    release = keep_release(out, how)
    code, stdout, err = invoke("clean", "--out", str(out))
    assert code == 0 and f"{release.relative_to(tmp_path)} links to it" in stdout, stdout + err
    assert not os.path.lexists(out) and (release / "t" / "a.bin").read_bytes() == b"v1"
    verify_ok(release)


@pytest.mark.parametrize("task", ["build", "clean", "merge"])
def test_a_task_that_writes_refuses_a_kept_release_and_writes_nothing(task, tmp_path):
    out = tmp_path / "out"
    publish_noted(out, b"v1")
    release = out.rename(tmp_path / "out-v1")
    publish_noted(out, b"v2")
    argv = {"build": ["build", "--target", "onnx", "--out", str(release)], "clean": ["clean", "--out", str(release)],
            "merge": ["merge", "--parts", str(part(tmp_path / "part")), "--out", str(release)]}[task]
    before = tree(tmp_path)
    code, _, err = invoke(*argv)
    line = assert_one_line(code, err)
    assert "kept release" in line and f"{out}" in line, line
    # true for every task: predict and serve read a release too, and the fix fits clean as well as build
    assert "only reads it (verify, predict, serve)" in line and f"pass --out {out} to build or clean there" in line
    assert tree(tmp_path) == before


# ------------------------------------------------------------------ issue 35.9: names read from the ledger, bounded


@pytest.mark.parametrize("task", ["build", "clean", "verify"])
@pytest.mark.parametrize("kind", ["generation of 300 characters", "generation of 129 characters",
                                  "generation the tool would not name", "staging run of 129 characters",
                                  "generation with a slash", "generation .."])
def test_a_ledger_name_the_tool_does_not_make_is_refused_before_anything_changes(kind, task, tmp_path):
    out = tmp_path / "out"
    publish_files(out, {"a.bin": b"a"})
    publish_files(out, {"a.bin": b"b"})
    ledger = json.loads(ledger_path(out).read_text())
    name = {"generation of 300 characters": "2" * 300, "generation of 129 characters": "a" * 129,
            "generation the tool would not name": "victim", "staging run of 129 characters": "b" * 129,
            "generation with a slash": "20250101-000000-1-abcdef/..", "generation ..": ".."}[kind]
    if kind.startswith("staging"):
        ledger["staging"].append(name)
    else:
        ledger["generations"][name] = {"published": True}
    ledger_path(out).write_text(json.dumps(ledger))
    argv = {"build": ["build", "--target", "onnx", "--out", str(out)], "clean": ["clean", "--out", str(out)],
            "verify": ["verify", "--out", str(out)]}[task]
    before = outside_the_log(tree(tmp_path))
    code, _, err = invoke(*argv)
    line = assert_one_line(code, err)
    assert "ledger" in line and "nothing was removed" in line and "restore it" in line, line
    assert outside_the_log(tree(tmp_path)) == before and (out / "t" / "a.bin").read_bytes() == b"b"


def test_a_manifest_path_longer_than_a_file_name_may_be_is_one_line(tmp_path):
    out = part(tmp_path / "out")
    data = json.loads((out / "manifest.json").read_text())
    data["targets"]["t"]["files"][0]["path"] = "t/" + "x" * 300
    (out / "manifest.json").write_text(json.dumps(data))
    code, _, err = invoke("verify", "--out", str(out))
    assert "longer than" in assert_one_line(code, err)


# ------------------------------------------------------------------ issue 35.11: clean removes only what the tool wrote


def test_clean_keeps_user_files_in_the_cache_and_hidden_files_and_names_every_generation(tmp_path):
    from arrcoc_edge.publishing import folder_state

    out = tmp_path / "out"
    publish_files(out, {"a.bin": b"a"})
    state = folder_state.state_dir(out)
    ours = [state / ".cache" / "export" / ("0123456789abcdef01234567.pt2"), state / ".cache" / "report" / "t.fp32.npz",
            state / ".cache" / "report" / "tmpab_cd123.npz", state / ".cache" / "tensorrt" / "timing.cache",
            out / ".manifest.json.ab12cd34.tmp", out / ".report.html.zz99_x0a", state / ".ledger.json.a1b2c3d4.tmp"]
    mine = [state / ".cache" / "export" / "notes.txt", state / ".cache" / "report" / "data.npz",
            state / ".cache" / "pip" / "wheel.whl", state / ".cache" / "tensorrt" / "timing.cache.bak",
            out / ".mine.tmp", out / ".manifest.json.mine.tmp", state / "mine.txt"]
    unknown_gen = state / ".generations" / "20240101-000000-1-abcdef"
    for path in ours + mine + [unknown_gen / "keep.bin"]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    os.symlink("/etc/hostname", state / ".cache" / "export" / "fedcba9876543210fedcba98.pt2")  # named like ours
    mine.append(state / ".cache" / "export" / "fedcba9876543210fedcba98.pt2")
    hidden = [out.resolve() / p.name for p in mine if p.parent == out]  # where they were once OUT is gone
    code, stdout, err = invoke("clean", "--out", str(out))
    assert code == 0, stdout + err
    kept = [line for line in stdout.splitlines() if line.startswith("kept ")]
    named = [p.parent if p.parent.name == "pip" else p for p in mine if p.parent != out] + hidden + [unknown_gen]
    for path in named:  # a cache folder of a kind the tool does not write is named whole
        assert os.path.lexists(path), path
        assert [line for line in kept if line.startswith(f"kept {path} ")], (path, stdout)
    assert not [p for p in ours if os.path.lexists(p)], stdout
    assert len(kept) == len(mine) + 1, stdout  # each named once, nothing else


# ------------------------------------------------------------------ issue 35.8: verify names what it did not publish


def _plant(base: Path, what: str) -> None:
    import socket

    if what == "a script":
        (base / "run.sh").write_text("#!/bin/sh\nrm -rf ~\n")
        os.chmod(base / "run.sh", 0o755)
    elif what == "a link":
        os.symlink("/etc", base / "etc")
    elif what == "a FIFO":
        os.mkfifo(base / "pipe")
    elif what == "a socket":
        here = os.getcwd()
        os.chdir(base)  # a socket's path is limited to 108 bytes: bind it by its short name
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.bind("sock")
        finally:
            os.chdir(here)
    elif what == "a folder holding a model":
        (base / "models").mkdir()
        (base / "models" / "model.onnx").write_bytes(b"not ours")
    elif what == "a FIFO in the cache":
        (base / ".cache" / "export").mkdir(parents=True)
        os.mkfifo(base / ".cache" / "export" / "pipe")
    elif what == "a FIFO deep in a target":
        os.mkfifo(base / "t" / "sub" / "pipe")


@pytest.mark.parametrize("what,code,line", [
    ("a script", 0, "EXTRA run.sh"), ("a link", 3, "LINK etc -> /etc"), ("a FIFO", 3, "UNLISTED pipe (a FIFO"),
    ("a socket", 3, "UNLISTED sock (a socket"), ("a folder holding a model", 3, "UNLISTED models/ ("),
    ("a FIFO in the cache", 3, "UNLISTED .cache/export/pipe (a FIFO"),
    ("a FIFO deep in a target", 3, "UNLISTED t/sub/pipe (a FIFO")])
def test_verify_names_every_entry_it_did_not_publish(what, code, line, tmp_path):
    out = tmp_path / "out"
    publish_files(out, {"a.bin": b"a", "sub/b.bin": b"b"})
    _plant(out.resolve(), what)
    with no_hang():
        got, stdout, err = invoke("verify", "--out", str(out))
    assert got == code and any(s.startswith(line) for s in stdout.splitlines()), stdout + err
    last = stdout.strip().splitlines()[-1]
    assert last == (f"verify: 1 problem in {out}" if code else
                    f"verify: OK, 2 files of 1 target(s) match the manifest in {out}; 1 file there not published "
                    "by arrcoc-edge (EXTRA above, not checked)"), stdout


def test_verify_fails_on_a_target_folder_whose_manifest_entry_was_deleted(tmp_path):
    from test_escapes import entry_for, manifest_for

    out = tmp_path / "out"
    publish_files(out, {"a.bin": b"a"}, name="t")
    real = out.resolve()
    (real / "web").mkdir()
    for i in range(21):
        (real / "web" / f"f{i}.js").write_text(str(i))
    (real / "manifest.json").write_text(json.dumps(manifest_for({"t": entry_for("t", real / "t")})))
    code, stdout, err = invoke("verify", "--out", str(out))
    assert code == 3 and "UNLISTED web/ (a folder the manifest does not list: 21 files in it not checked)" in stdout, stdout
    assert stdout.strip().splitlines()[-1] == f"verify: 1 problem in {out}"
