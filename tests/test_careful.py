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
import sys
from pathlib import Path

import numpy as np
import pytest

from test_cli_errors import invoke
from test_build import previous, published  # noqa: F401  (fixtures: a real onnx build, copied per test)
from test_escapes import assert_one_line, part, publish_files, tree


def ledger_path(out: Path) -> Path:
    from pipeline import publish

    return publish.state_dir(out) / publish.LEDGER


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
    from pipeline import cli

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
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs at the next bytecode boundary, still inside __del__
            pass


def _publish_with_swallowed_interrupt(out: Path, where: str):
    """A publish like a build's, with a Ctrl-C swallowed `where`: while the report is written
    (write_extras), or in the body before publishing starts (between stages)."""
    from pipeline import publish
    from test_escapes import entry_for, manifest_for

    def body():
        with publish.build_lock(out, log=lambda m: None):
            publish.recover(out, publish.read_manifest(out), log=lambda m: None)
            run = publish.new_staging(out)
            (run / "t").mkdir()
            (run / "t" / "a.bin").write_bytes(b"new")
            data = manifest_for({"t": entry_for("t", run / "t")}, note="new")
            if where == "between stages":
                SwallowedInterrupt()  # made and dropped: __del__ runs here
                publish.check_interrupted()  # what run_build does at each stage boundary
            extras = (lambda gen: SwallowedInterrupt()) if where == "while writing the report" else None
            publish.publish(out, {"t": run / "t"}, data, write_extras=extras, log=lambda m: None)
        return 0

    return body


@pytest.mark.parametrize("where", ["while writing the report", "between stages"])
def test_a_ctrl_c_swallowed_by_a_callback_stops_the_build_before_it_publishes(where, tmp_path, capsys, monkeypatch):
    from pipeline import cli, publish

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
    publish.reset_interrupts()
    publish_files(out, {"a.bin": b"next"})  # the next build tidies the half-made generation
    assert (out / "t" / "a.bin").read_bytes() == b"next"
    assert len(os.listdir(publish.state_dir(out) / publish.GENERATIONS)) == 1


def test_a_ctrl_c_swallowed_after_a_task_finished_is_still_exit_130(capsys, monkeypatch):
    from pipeline import cli

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
    from pipeline import publish

    path = tmp_path / "heat.png"
    if earlier is not None:
        path.write_bytes(earlier)

    def write(f):
        f.write(b"half of a new file")
        f.flush()
        os.kill(os.getpid(), signal.SIGINT)  # Python's own handler: KeyboardInterrupt right here
        for _ in range(1000):
            pass
        f.write(b"never written")

    with pytest.raises(KeyboardInterrupt):
        publish.write_atomic(path, write)
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
    import targets as table

    from pipeline.build import StageResult
    from pipeline.cli import next_step

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
    from pipeline.overlay import heat_colour

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
    from pipeline.overlay import LEGEND_HEIGHT, heatmap

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
        from targets.onnx import OnnxTarget

        class Swallowing(OnnxTarget):
            def build(self, ctx):
                variants = super().build(ctx)
                SwallowedInterrupt()
                return variants

        return Swallowing()


@pytest.mark.slow
def test_a_real_build_whose_ctrl_c_was_swallowed_publishes_nothing_and_exits_130(previous, checkpoint_path,
                                                                                   monkeypatch, capsys):
    import targets as table

    from pipeline import cli
    from test_build import snapshot, staging_left

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
    from pipeline.console import build_console

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
