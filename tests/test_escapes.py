"""Nothing lost, nothing escapes (issue 25): every failure class of the adversarial pass.

1. relative and linked --out (the CI workflow's own commands, as written);
2. hostile merge parts: paths out of the part, links, huge files, FIFOs, --out overlapping a part;
3. files the tool did not write (beside and inside the output folder; `clean` of any folder);
4. links planted inside a published folder (verify, serve);
5. verify while a publish switches;
6. Ctrl-C in every task;
7. bad input found late (wrong types, deep manifests, unreadable parts, bench on broken files);
8. empty option values.

Most cases publish small hand-made folders through the real functions (seconds); one real `onnx`
build feeds the CI commands and bench.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli_errors import invoke, one_line_error

SHA = "0" * 64
FAST = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def entry_for(name: str, folder: Path) -> dict:
    files = [{"path": f"{name}/{p.relative_to(folder).as_posix()}", "bytes": p.stat().st_size,
              "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in sorted(folder.rglob("*")) if p.is_file()]
    return {"status": "published", "files": files, "provenance": {"checkpoint_sha256": SHA}}


def manifest_for(targets: dict[str, dict], **extra) -> dict:
    return {"checkpoint": {"sha256": SHA, "path": "/nonexistent/ckpt.safetensors",
                           "model": {"grid": 14, "top_k": 64, "query_dim": 384, "input_size": 224}},
            "targets": targets, **extra}


def publish_files(out: Path, files: dict[str, bytes], name: str = "t", note: str = "") -> dict:
    """Publish target `name` holding `files` into `out` through publish.publish; returns the manifest."""
    from arrcoc_edge.publishing import locking, publish, reading, takeover

    takeover.prepare_out_dir(out)
    with locking.build_lock(out, log=lambda m: None):
        publish.recover(out, reading.read_manifest(out), log=lambda m: None)
        run = locking.new_staging(out)
        folder = run / name
        for rel, data in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(data)
        data = manifest_for({name: entry_for(name, folder)}, note=note)
        publish.publish(out, {name: folder}, data, log=lambda m: None)
    return data


def part(root: Path, files: dict[str, bytes] | None = None, edit=None) -> Path:
    """A plain part folder (as CI uploads it): manifest.json and t/..., optionally edited."""
    root.mkdir(parents=True)
    folder = root / "t"
    for rel, data in (files or {"model.bin": b"model bytes"}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    data = manifest_for({"t": entry_for("t", folder)})
    if edit:
        edit(data, root)
    (root / "manifest.json").write_text(json.dumps(data))
    return root


def tree(path: Path) -> dict[str, str]:
    found = {}
    for folder, dirs, names in os.walk(path):
        for n in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            p = os.path.join(folder, n)
            found[os.path.relpath(p, path)] = ("-> " + os.readlink(p)) if os.path.islink(p) else (
                hashlib.sha256(open(p, "rb").read()).hexdigest() if os.path.isfile(p) else "special")
    return found


def cli_merge(parts: list[Path], out: str) -> tuple[int, str]:
    from arrcoc_edge.frontends import cli

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.merge(",".join(map(str, parts)), out)
    return code, err.getvalue()


def assert_one_line(code: int, err: str, want: int = 2) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == want and len(lines) == 1 and " -> fix: " in lines[0] and "Traceback" not in err, (code, err)
    return lines[0]


# ------------------------------------------------------------------ 1. relative and linked --out

SPELLINGS = st.sampled_from(["rel", "./rel", "rel/", "sub/../rel", "link-to-parent/rel", "ABS", "link-to-out",
                             "link-to-parent/./rel/", "link-to-link-to-out"])


def generation_folders(root: Path) -> list[str]:
    """Every generation folder under root, wherever the layout keeps them (links not followed)."""
    return [os.path.join(folder, d) for folder, dirs, _ in os.walk(root) if os.path.basename(folder) == ".generations"
            for d in dirs]


@FAST
@given(spelling=SPELLINGS, again=SPELLINGS)
def test_any_spelling_of_the_output_folder_publishes_and_keeps_it(spelling, again, tmp_path_factory, monkeypatch):
    """Two publishes through any spelling of one folder (relative, '..', trailing slash, a link
    in a parent, a link to the output folder itself): both are published, verify passes after
    each, and exactly one generation stays (the previous one is not deleted early nor kept)."""
    from arrcoc_edge.frontends import cli

    root = tmp_path_factory.mktemp("spell")
    (root / "real" / "sub").mkdir(parents=True)
    os.symlink("real", root / "link-to-parent")
    os.symlink("rel", root / "real" / "link-to-out")
    os.symlink("link-to-out", root / "real" / "link-to-link-to-out")
    monkeypatch.chdir(root / "real")

    def spelled(s):
        return str(root / "real" / "rel") if s == "ABS" else s.replace("link-to-parent", str(root / "link-to-parent"))

    for i, s in enumerate((spelling, again)):
        publish_files(_edge(spelled(s)), {"a.bin": b"publish %d" % i})
        assert cli.verify(spelled(s)) == 0
        assert (root / "real" / "rel" / "t" / "a.bin").read_bytes() == b"publish %d" % i
        assert len(generation_folders(root)) == 1, generation_folders(root)


def _edge(value: str) -> Path:
    """The output folder as the CLI resolves --out (where the CLI has no such step: as given)."""
    from arrcoc_edge.frontends import options

    return options.out_folder(value, Path("unused")) if hasattr(options, "out_folder") else Path(value)


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory):
    """The workflow's own shell steps, run as written in a scratch checkout folder: the linux job's
    build (--target onnx instead of all: the other targets take minutes and change nothing here),
    its pack step, then the merge job's Merge, Verify and Pack steps, verbatim."""
    import yaml

    work = tmp_path_factory.mktemp("ci")
    (work / ".venv" / "bin").mkdir(parents=True)
    wrapper = work / ".venv" / "bin" / "invoke"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m invoke -r {REPO} "$@"\n')
    wrapper.chmod(0o755)
    shutil.copytree(REPO / "scripts", work / "scripts")
    jobs = yaml.safe_load((REPO / ".github" / "workflows" / "edge-export.yml").read_text())["jobs"]
    steps = {s.get("name"): s["run"] for job in ("linux", "merge") for s in jobs[job]["steps"] if "run" in s and "name" in s}
    build = steps["Build every CPU target"]
    assert "--out artifacts" in build
    script = [build.replace("--target all", "--target onnx"), steps["Pack the published folder as real files"],
              "mkdir -p parts && cp -r part parts/part-linux",  # actions/download-artifact, pattern part-*
              steps["Merge"], steps["Verify"], steps["Pack the merged folder as real files"]]
    assert "--out merged" in steps["Merge"] and "--out merged" in steps["Verify"]
    results = []
    for command in script:
        proc = subprocess.run(["bash", "-e", "-c", command], cwd=work, capture_output=True, text=True, timeout=900)
        results.append((command, proc))
        assert proc.returncode == 0, (command, proc.stdout[-2000:], proc.stderr[-2000:])
    return work, results


@pytest.mark.slow
def test_ci_workflow_commands_with_relative_out_publish_and_verify(ci_run):
    work, results = ci_run
    for name in ("artifacts", "merged"):
        assert (work / name).is_symlink() and (work / name / "manifest.json").is_file()
        proc = run_cli("-r", str(REPO), "verify", "--out", str(work / name))
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "onnx" in json.loads((work / "merged" / "manifest.json").read_text())["targets"]
    packed = work / "merged-files"
    assert (packed / "onnx" / "model.onnx").is_file() and not [p for p in packed.rglob("*") if p.is_symlink()]


@pytest.mark.slow
def test_a_published_target_folder_copies_with_plain_tools(ci_run, tmp_path):
    """cp -r, find and tar see the files of OUT/<target>, not a link (rsync is not installed here)."""
    work, _ = ci_run
    subprocess.run(["cp", "-r", "artifacts/onnx", str(tmp_path)], cwd=work, check=True)
    assert (tmp_path / "onnx" / "model.onnx").is_file() and not (tmp_path / "onnx").is_symlink()
    found = subprocess.run(["find", "artifacts/onnx", "-type", "f"], cwd=work, capture_output=True, text=True).stdout
    assert "artifacts/onnx/model.onnx" in found
    subprocess.run(["tar", "czf", str(tmp_path / "o.tgz"), "-C", "artifacts", "onnx"], cwd=work, check=True)
    listing = subprocess.run(["tar", "tzvf", str(tmp_path / "o.tgz")], capture_output=True, text=True).stdout
    assert "onnx/model.onnx" in listing and not listing.startswith("l")


# ------------------------------------------------------------------ 2. hostile merge parts


def test_a_program_path_out_of_the_part_is_refused_and_nothing_is_written_outside(tmp_path):
    def escape(data, root):
        (root.parent / "victim.pt2").write_bytes(b"x")
        data["exported_program"] = {"path": "../victim.pt2", "sha256": hashlib.sha256(b"x").hexdigest()}

    a = part(tmp_path / "parts" / "a", edit=escape)
    (tmp_path / "o").mkdir()
    code, err = cli_merge([a], str(tmp_path / "o" / "out"))
    assert "exported_program.path" in assert_one_line(code, err)
    assert sorted(os.listdir(tmp_path / "o")) in ([], [".out.arrcoc-edge"])  # nothing beside out


@pytest.mark.parametrize("kind", ["file-link-out", "folder-link-out", "link-inside", "fifo", "folder"])
def test_a_listed_file_that_is_not_a_regular_file_of_the_part_is_refused(kind, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model.bin").write_bytes(b"model bytes")  # same bytes: only the sha256 would have guarded
    a = part(tmp_path / "a")
    model = a / "t" / "model.bin"
    if kind == "file-link-out":
        model.unlink()
        os.symlink(outside / "model.bin", model)
    elif kind == "folder-link-out":
        shutil.rmtree(a / "t")
        os.symlink(outside, a / "t")
    elif kind == "link-inside":
        os.rename(model, a / "other.bin")
        os.symlink("../other.bin", model)
    elif kind == "fifo":
        model.unlink()
        os.mkfifo(model)
    else:
        model.unlink()
        model.mkdir()
    out = tmp_path / "out"
    code, err = cli_merge([a], str(out))
    line = assert_one_line(code, err)
    assert "model.bin" in line and "merge error" in line
    assert not (out / "t").exists()


def test_a_huge_file_is_refused_by_its_size_before_a_byte_is_copied(tmp_path):
    a = part(tmp_path / "a")
    with open(a / "t" / "model.bin", "r+b") as f:
        f.truncate(4 << 30)  # 4 GiB, sparse: copying it would take many seconds and 4 GiB of disk
    started = time.monotonic()
    code, err = cli_merge([a], str(tmp_path / "out"))
    assert "bytes" in assert_one_line(code, err) and time.monotonic() - started < 20


@pytest.mark.parametrize("where", ["manifest", "part-folder"])
def test_a_fifo_manifest_is_refused_without_hanging(where, tmp_path):
    a = part(tmp_path / "a")
    (a / "manifest.json").unlink()
    os.mkfifo(a / "manifest.json")
    argv = ["merge", "--parts", str(a), "--out", str(tmp_path / "out")] if where == "manifest" else \
        ["verify", "--out", str(a)]
    proc = run_cli(*argv, timeout=120)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.parametrize("where", ["same", "inside", "link-to-part", "state", "holds-part"])
def test_out_overlapping_a_part_is_refused_and_the_part_is_unchanged(where, tmp_path):
    a = tmp_path / "a"
    if where == "state":
        publish_files(a, {"model.bin": b"model bytes"})  # a published folder (the tool's link)
    else:
        part(a)  # a plain part, as CI uploads it
    b = part(tmp_path / "b")
    os.symlink("a", tmp_path / "alias")
    out = {"same": a, "inside": a / "t" / "x", "link-to-part": tmp_path / "alias",
           "state": tmp_path / ".a.arrcoc-edge" / "x", "holds-part": tmp_path}[where]
    before = tree(tmp_path)
    code, err = cli_merge([a, b], str(out))
    assert_one_line(code, err)
    assert tree(tmp_path) == before


WRONG = {("checkpoint", "model"): 5, ("toolchain",): [], ("host_info",): "x", ("exported_program",): "x",
         ("exported_program", "path"): 7, ("targets", "t", "status"): 3, ("targets", "t", "provenance"): "x",
         ("targets", "t", "provenance", "upstream"): [1], ("targets", "t", "variants"): [],
         ("targets", "t", "variants", "bad/name"): {}, ("checkpoint", "sha256"): 12}


@FAST
@given(field=st.sampled_from(sorted(WRONG)),
       value=st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2), st.booleans()))
def test_a_part_field_of_the_wrong_type_is_one_line_not_an_internal_error(field, value, tmp_path_factory):
    root = tmp_path_factory.mktemp("wrong")

    def edit(data, _):
        node = data
        for key in field[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[field[-1]] = WRONG[field] if value is None else value

    a = part(root / "a", edit=edit)
    code, err = cli_merge([a], str(root / "out"))
    assert code in (0, 2), err
    if code == 2:
        assert_one_line(code, err)


@pytest.mark.parametrize("task", ["merge", "verify"])
def test_a_deeply_nested_manifest_is_one_line(task, tmp_path):
    a = part(tmp_path / "a")
    (a / "manifest.json").write_text('{"targets": {"t": ' + "[" * 100_000 + "]" * 100_000 + "}}")
    if task == "merge":
        code, err = cli_merge([a], str(tmp_path / "out"))
    else:
        code, _, err = invoke("verify", "--out", str(a))
    assert "manifest" in assert_one_line(code, err)


def test_an_unreadable_part_file_is_one_line(tmp_path, monkeypatch):
    """Root reads everything, so 'unreadable' is made by the open itself failing with EACCES."""
    a = part(tmp_path / "a")
    real_open = os.open

    def denied(path, flags, *args, **kwargs):
        if str(path) == "model.bin" or str(path).endswith("t/model.bin"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", denied)
    code, err = cli_merge([a], str(tmp_path / "out"))
    assert "Permission denied" in assert_one_line(code, err)


# ------------------------------------------------------------------ 3. files the tool did not write

PLANTED = [".trash-web-123456", ".link-onnx-abcdef", ".current-abcdef", ".manifest.json.old-1", "build.log",
           ".cache", ".staging", "notes.txt", ".generations", ".lock"]


@FAST
@given(names=st.lists(st.sampled_from(PLANTED), min_size=1, max_size=4, unique=True))
def test_files_the_tool_did_not_write_survive_builds_and_clean(names, tmp_path_factory):
    """User files beside the output folder and inside it, named like the tool's own leftovers:
    two publishes and a clean later, every one still holds its bytes (inside OUT: kept and
    named where the old publish was)."""
    from arrcoc_edge.frontends import cli

    root = tmp_path_factory.mktemp("planted")
    out = root / "out"
    publish_files(out, {"a.bin": b"1"})
    for name in names:
        (root / name).write_text(f"beside {name}")
        (out / name).write_text(f"inside {name}") if not (out / name).exists() else None
    os.symlink("out/t", root / "mine-into-out")
    publish_files(out, {"a.bin": b"2"})
    with contextlib.redirect_stdout(io.StringIO()) as said:
        assert cli.clean(str(out)) == 0
    for name in names:
        assert (root / name).read_text() == f"beside {name}"
        copies = [p for p in root.rglob(name) if p.is_file() and p.read_text() == f"inside {name}"]
        assert copies and f"kept {copies[0]}" in said.getvalue(), (name, said.getvalue())
    assert os.path.islink(root / "mine-into-out")
    assert not out.exists()


@pytest.mark.parametrize("kind", ["home-like", "plain-copy", "empty", "missing"])
def test_clean_of_a_folder_that_was_never_an_output_folder_removes_nothing(kind, tmp_path):
    folder = tmp_path / "home"
    if kind != "missing":
        folder.mkdir()
    if kind == "home-like":
        for rel in (".cache/pip/x", ".staging/y", "build.log", ".generations/z", ".lock", "manifest.json"):
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(rel)
    if kind == "plain-copy":
        part(folder / "copy")
        folder = folder / "copy"
    before = tree(tmp_path)
    code, out, err = invoke("clean", "--out", str(folder))
    assert code == 0 and "nothing to clean" in out and "nothing was removed" in out, out + err
    assert tree(tmp_path) == before


# ------------------------------------------------------------------ 4. links inside a published folder


@pytest.mark.parametrize("plant", ["dir-link-out", "file-link-out", "dangling-link", "nested-dir-link", "fifo",
                                   "empty-dir", "unlisted-file"])
def test_verify_reports_links_and_unlisted_entries(plant, tmp_path):
    out = part(tmp_path / "out", {"a.bin": b"a", "sub/b.bin": b"b"})  # a plain published folder
    t = out / "t"
    {"dir-link-out": lambda: os.symlink("/etc", t / "etcdir"),
     "file-link-out": lambda: os.symlink("/etc/hostname", t / "host"),
     "dangling-link": lambda: os.symlink("/nonexistent", t / "gone"),
     "nested-dir-link": lambda: os.symlink("/etc", t / "sub" / "etc"),
     "fifo": lambda: os.mkfifo(t / "pipe"),
     "empty-dir": lambda: (t / "empty").mkdir(),
     "unlisted-file": lambda: (t / "sub" / "x.txt").write_text("x")}[plant]()
    code, stdout, err = invoke("verify", "--out", str(out))
    assert code == 3 and re.search(r"^(LINK|UNLISTED) t/", stdout, re.M), stdout + err


@pytest.mark.parametrize("request_path,planted", [
    ("/etcdir/passwd", ("etcdir", "/etc")), ("/host", ("host", "/etc/hostname")),
    ("/sub/", ("sub/index.html", "/etc/hostname")), ("/%65tcdir/passwd", ("etcdir", "/etc"))])
def test_serve_does_not_follow_links_out_of_its_folder(request_path, planted, tmp_path):
    from arrcoc_edge.serve import serving

    site = tmp_path / "site"
    (site / "sub").mkdir(parents=True)
    (site / "index.html").write_text("<!doctype html>")
    (site / "inner.txt").write_text("inside")
    os.symlink("inner.txt", site / "alias.txt")  # a link that stays inside is served
    os.symlink(planted[1], site / planted[0])
    with serving(site) as url:
        with urllib.request.urlopen(url + "alias.txt", timeout=10) as r:
            assert r.read() == b"inside"
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(url + request_path.lstrip("/"), timeout=10)
        assert info.value.code == 404


# ------------------------------------------------------------------ 5. verify during a publish


def test_verify_reads_one_generation_while_a_publish_switches(tmp_path, monkeypatch):
    """A publish lands right after verify read the manifest (the moment the false MISMATCH came
    from): verify still reads one whole generation and passes."""
    from arrcoc_edge.frontends import cli
    from arrcoc_edge.publishing import reading

    out = tmp_path / "out"
    publish_files(out, {"a.bin": b"old bytes"})
    loads, fired = json.loads, []

    class Hook:
        def __getattr__(self, name):
            return getattr(json, name)

        @staticmethod
        def loads(text, *args, **kwargs):
            data = loads(text, *args, **kwargs)
            if not fired and isinstance(data, dict) and "targets" in data:
                fired.append(1)
                publish_files(out, {"a.bin": b"new bytes, other size"})
            return data

    monkeypatch.setattr(reading, "json", Hook())
    with contextlib.redirect_stdout(io.StringIO()) as said:
        assert cli.verify(str(out)) == 0, said.getvalue()
    assert fired and "MISMATCH" not in said.getvalue()


# ------------------------------------------------------------------ 6. Ctrl-C in every task


def _interrupt(argv: list[str], wait_for: str | None, delay: float, tmp_path: Path):
    """Start the task, wait until its body runs (arrcoc_edge.frontends.cli.READY_ENV: not a guess at how long
    Python and Invoke take to start, which under load was over a second), then `delay` more."""
    from arrcoc_edge.frontends.cli import READY_ENV

    ready = tmp_path / "task-ready"
    proc = subprocess.Popen([sys.executable, "-m", "invoke", *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", READY_ENV: str(ready)})
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert proc.poll() is None, "the task ended before its body started"
        assert time.monotonic() < deadline, "the task's body never started"
        time.sleep(0.01)
    if wait_for:
        seen = ""
        while wait_for not in seen:
            line = proc.stdout.readline()
            assert line, "the task ended before it was interrupted"
            seen += line
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    return proc.returncode, stderr


@pytest.mark.parametrize("task,argv,wait_for,delay", [
    ("build", ["build", "--target", "onnx", "--out", "{tmp}/b"], None, 0.0),  # the build's first instant
    ("build", ["build", "--target", "onnx", "--out", "{tmp}/b"], None, 0.5),
    ("build", ["build", "--target", "onnx", "--out", "{tmp}/b"], None, 3.0),
    ("merge", ["merge", "--parts", "{part}", "--out", "{tmp}/m"], None, 0.5),
    ("train", ["train", "--steps", "5", "--out", "{tmp}/c.safetensors"], None, 1.0),
    ("bench", ["bench", "--out", "{part}", "--runs", "1"], None, 1.0),
    ("serve", ["serve", "--out", "{site}", "--port", "0"], "serving", 0.2),
])
def test_ctrl_c_is_exit_130_and_one_line_in_every_task(task, argv, wait_for, delay, tmp_path):
    def shipped_checkpoint(data, _):  # merge draws the report from it, bench builds its golden set:
        from conftest import DEFAULT_CHECKPOINT  # seconds of work to interrupt

        sha = hashlib.sha256(DEFAULT_CHECKPOINT.read_bytes()).hexdigest()
        data["checkpoint"]["sha256"] = data["targets"]["t"]["provenance"]["checkpoint_sha256"] = sha
        data["checkpoint"]["path"] = str(DEFAULT_CHECKPOINT)

    a = part(tmp_path / "part", edit=shipped_checkpoint)
    (tmp_path / "site" / "web").mkdir(parents=True)
    (tmp_path / "site" / "web" / "index.html").write_text("<!doctype html>")
    argv = [x.format(tmp=tmp_path, part=a, site=tmp_path / "site") for x in argv]
    if task == "serve":
        argv[argv.index("--port") + 1] = str(_free_port())
    code, err = _interrupt(argv, wait_for, delay, tmp_path)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 130 and len(lines) == 1 and lines[0].startswith("interrupted: ") and "Traceback" not in err, (code, err)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("task", ["verify", "clean", "bench", "merge", "train", "build", "predict"])
def test_keyboard_interrupt_inside_any_task_body_is_130_and_one_line(task, tmp_path, monkeypatch, capsys):
    """The same promise where the interrupt lands deep inside a task (made deterministic)."""
    from arrcoc_edge.frontends import cli
    from arrcoc_edge.publishing import cleaning, locking, reading, takeover

    out = tmp_path / "out"
    publish_files(out, {"a.bin": b"a"})
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"not decoded: the interrupt comes first")

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(reading, "read_manifest", boom)
    monkeypatch.setattr(locking, "build_lock", boom)
    monkeypatch.setattr(cleaning, "build_lock", boom)  # clean takes the lock by its own name
    monkeypatch.setattr(takeover, "prepare_out_dir", boom)
    import arrcoc_edge.training.train

    monkeypatch.setattr(arrcoc_edge.training.train, "main", boom)
    call = {"verify": lambda: cli.verify(str(out)), "clean": lambda: cli.clean(str(out)),
            "bench": lambda: cli.bench(str(out), "1"), "merge": lambda: cli.merge(str(out), str(tmp_path / "m")),
            "train": lambda: cli.train(str(tmp_path / "c.safetensors"), "1", None),
            "build": lambda: cli.build("onnx", None, str(tmp_path / "b"), False),
            "predict": lambda: cli.predict(str(photo), "a cat", None, str(out), None, None, None)}[task]
    try:
        code = call()
    except KeyboardInterrupt:
        code = "escaped the task (Invoke then exits 1 without a message)"
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 130 and len(lines) == 1 and lines[0].startswith("interrupted: "), err


# ------------------------------------------------------------------ 7. bad input found late


@pytest.fixture(scope="module")
def built(onnx_build, tmp_path_factory) -> Path:
    """A copy of the session's `invoke build --target onnx` (conftest onnx_build): a test here
    benches it, and bench writes bench.json into the folder it reads."""
    return onnx_build.copy(tmp_path_factory.mktemp("built") / "out")


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["deleted", "corrupted", "truncated", "replaced-by-link"])
def test_bench_on_a_damaged_publish_says_run_verify(damage, built, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(built, out)  # a plain copy; bench reads it as it is
    model = out / "onnx" / "model.onnx"
    if damage == "deleted":
        model.unlink()
    elif damage == "corrupted":
        data = bytearray(model.read_bytes())
        data[100] ^= 0xFF
        model.write_bytes(bytes(data))
    elif damage == "truncated":
        model.write_bytes(model.read_bytes()[:1000])
    else:
        shutil.move(model, tmp_path / "elsewhere.onnx")
        os.symlink(tmp_path / "elsewhere.onnx", model)
    code, _, err = invoke("bench", "--out", str(out), "--runs", "1")
    line = one_line_error(code, err)
    assert "onnx/model.onnx" in line and "invoke verify" in line
    assert not (out / "bench.json").exists()


@pytest.mark.slow
def test_bench_without_a_runtime_installed_names_the_install(built, monkeypatch):
    from arrcoc_edge import targets
    monkeypatch.setattr(targets.TARGETS["onnx"], "missing_modules", lambda: ["onnxruntime"])
    code, _, err = invoke("bench", "--out", str(built), "--runs", "1")
    line = one_line_error(code, err, kind="missing dependency")
    assert "onnxruntime" in line and "pip install" in line


# ------------------------------------------------------------------ 8. empty values


@pytest.mark.parametrize("argv", [
    ["build", "--target", "onnx", "--out="], ["build", "--target", "onnx", "--checkpoint="],
    ["build", "--target", "onnx-int8", "--calibration="], ["merge", "--parts", "x", "--out="],
    ["merge", "--parts", "x", "--checkpoint="], ["verify", "--out="], ["bench", "--out="], ["serve", "--out="],
    ["clean", "--out="], ["train", "--out="], ["build", "--target", "onnx", "--out=  "]])
def test_an_empty_value_is_an_error_not_the_default(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").mkdir()
    code, out, err = invoke(*argv)
    line = one_line_error(code, err)
    assert "is empty" in line


def test_an_output_folder_of_the_previous_layout_moves_across_and_keeps_what_it_does_not_know(tmp_path):
    """OUT of the previous layout (public links through OUT/.current): the next publish moves its
    current generation, caches and bench.json across, OUT becomes the link, and a file of yours
    in the old folder is kept and named; the old layout's own links, lock and log are removed."""
    from arrcoc_edge.frontends import cli
    from arrcoc_edge.publishing import folder_state, locking, publish, reading, takeover

    out = tmp_path / "out"
    gen = out / ".generations" / "20250101-000000-1-abcdef"
    (gen / "t").mkdir(parents=True)
    (gen / "t" / "a.bin").write_bytes(b"old")
    (gen / "manifest.json").write_text(json.dumps(manifest_for({"t": entry_for("t", gen / "t")})))
    os.symlink(".generations/20250101-000000-1-abcdef", out / ".current")
    for name in ("manifest.json", "t"):
        os.symlink(f".current/{name}", out / name)
    (out / ".cache" / "export").mkdir(parents=True)
    (out / ".cache" / "export" / "k.pt2").write_bytes(b"program")
    (out / "bench.json").write_text("{}")
    (out / "build.log").write_text("log")
    (out / ".lock").write_text("1")
    (out / "mine.txt").write_text("a file of yours")
    assert cli.verify(str(out)) == 0  # verify reads the previous layout's current generation
    notes = []
    takeover.prepare_out_dir(out)
    with locking.build_lock(out, log=notes.append):
        publish.recover(out, reading.read_manifest(out), log=notes.append)
    assert out.is_symlink() and (out / "t" / "a.bin").read_bytes() == b"old" and (out / "bench.json").exists()
    assert (folder_state.state_dir(out) / ".cache" / "export" / "k.pt2").read_bytes() == b"program"
    kept = [p for p in tmp_path.rglob("mine.txt")]
    assert len(kept) == 1 and kept[0].read_text() == "a file of yours" and any(str(kept[0].parent) in n for n in notes)
    publish_files(out, {"a.bin": b"new"})
    assert cli.verify(str(out)) == 0 and (out / "t" / "a.bin").read_bytes() == b"new"


def test_an_interrupt_inside_an_extension_import_is_still_130(capsys):
    """Ctrl-C during a C extension's module init surfaces as ImportError("initialization failed")
    chained to the KeyboardInterrupt (seen in merge under load): still exit 130 and one line."""
    from arrcoc_edge.frontends import cli

    def body():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise ImportError("initialization failed")

    assert cli.guarded(body, False, "merge") == 130
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("interrupted: ")
    assert cli.guarded(lambda: (_ for _ in ()).throw(ImportError("plain")), False, "merge") == 1
