"""The conversion cache (targets/shared/conversion_cache.py): a conversion runs once per key, its
files and record come back the same on reuse, an unsound entry or an unusable cache folder is a note
and a fresh conversion, and the key moves with every input, tool version and source file."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from arrcoc_edge.stages import conversion_cache as cc
from arrcoc_edge.stages import private_cache


@pytest.fixture
def cache_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(cc.OFF_VARIABLE, raising=False)
    return tmp_path / "xdg" / "arrcoc-edge" / cc.CACHE_NAME


class Converter:
    """A conversion that writes a file and a folder and records what it made; counts its runs."""

    def __init__(self, payload: bytes = b"converted bytes"):
        self.runs, self.payload = 0, payload

    def __call__(self, folder: Path) -> dict:
        self.runs += 1
        (folder / "model.bin").write_bytes(self.payload)
        (folder / "pkg").mkdir()
        (folder / "pkg" / "weights").write_bytes(self.payload * 2)
        return {"delegation": {"ops": (1, 2)}, "bytes": len(self.payload)}


def run(convert, dest: Path, notes: list, inputs=None, **kw) -> dict:
    dest.mkdir(exist_ok=True)
    return cc.convert_cached("demo", inputs or {"program": "abc"}, ("numpy",), convert, dest, notes.append, **kw)


def test_a_second_conversion_with_the_same_inputs_reuses_the_files_and_record(cache_home, tmp_path):
    convert, notes = Converter(), []
    first = run(convert, tmp_path / "a", notes)
    second = run(convert, tmp_path / "b", notes)
    assert convert.runs == 1
    assert first == second == {"delegation": {"ops": [1, 2]}, "bytes": 15}  # as JSON gives it back, both times
    for dest in ("a", "b"):
        assert (tmp_path / dest / "model.bin").read_bytes() == b"converted bytes"
        assert (tmp_path / dest / "pkg" / "weights").read_bytes() == b"converted bytes" * 2
        assert sorted(p.name for p in (tmp_path / dest).iterdir()) == ["model.bin", "pkg"]  # no cache bookkeeping
        assert not (tmp_path / dest / "model.bin").is_symlink()
    assert any("reused" in n for n in notes) and not any("note:" in n for n in notes)
    assert [n.split(" in ")[0] for n in notes if "converted" in n] == ["demo: converted"]  # the first run, said once
    entries = [p for p in cache_home.iterdir() if not p.name.startswith(".")]  # less the keys' lock files
    assert len(entries) == 1 and entries[0].name.startswith("demo-")
    assert oct(entries[0].stat().st_mode & 0o777) == "0o700"


def test_a_copy_changed_after_the_build_does_not_reach_the_cache(cache_home, tmp_path):
    convert, notes = Converter(), []
    run(convert, tmp_path / "a", notes)
    (tmp_path / "a" / "model.bin").write_bytes(b"edited in the published folder")
    run(convert, tmp_path / "b", notes)
    assert (tmp_path / "b" / "model.bin").read_bytes() == b"converted bytes" and convert.runs == 1


@pytest.mark.parametrize("change", ["file", "extra", "record"])
def test_an_entry_changed_after_its_seal_is_a_note_and_a_fresh_conversion(cache_home, tmp_path, change):
    convert, notes = Converter(), []
    run(convert, tmp_path / "a", notes)
    entry = next(p for p in cache_home.iterdir() if p.name.startswith("demo-"))
    {"file": lambda: (entry / "model.bin").write_bytes(b"planted"),
     "extra": lambda: (entry / "planted.so").write_bytes(b"x"),
     "record": lambda: (entry / cc.INFO).write_text(json.dumps({"delegation": "forged"}))}[change]()
    record = run(convert, tmp_path / "b", notes)
    assert convert.runs == 2 and record["bytes"] == 15
    assert (tmp_path / "b" / "model.bin").read_bytes() == b"converted bytes"
    assert not (tmp_path / "b" / "planted.so").exists()
    problems = [n for n in notes if n.startswith("note:")]
    assert len(problems) == 1 and "not used" in problems[0] and "converting afresh" in problems[0]


def test_an_unusable_cache_folder_converts_outside_it_and_leaves_no_scratch(tmp_path, monkeypatch):
    (tmp_path / "xdg").mkdir()
    (tmp_path / "xdg" / "arrcoc-edge").symlink_to(tmp_path)  # a link on the way: not trusted
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    convert, notes = Converter(), []
    run(convert, tmp_path / "a", notes)
    run(convert, tmp_path / "b", notes)
    assert convert.runs == 2
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["model.bin", "pkg"]
    assert [n for n in notes if "note:" in n] and all("link" in n for n in notes if "note:" in n)
    assert not (tmp_path / cc.CACHE_NAME).exists()


def test_switched_off_it_converts_every_time_into_the_destination(cache_home, tmp_path, monkeypatch):
    monkeypatch.setenv(cc.OFF_VARIABLE, "off")
    convert, notes = Converter(), []
    run(convert, tmp_path / "a", notes)
    record = run(convert, tmp_path / "b", notes)
    assert convert.runs == 2 and record == {"delegation": {"ops": [1, 2]}, "bytes": 15}
    assert not cache_home.exists()


def test_the_key_moves_with_inputs_tools_and_every_source_file(tmp_path, monkeypatch):
    base = cc.conversion_key("demo", {"program": "abc"}, ("numpy",))
    assert base == cc.conversion_key("demo", {"program": "abc"}, ("numpy",))
    assert base != cc.conversion_key("demo", {"program": "abd"}, ("numpy",))
    assert base != cc.conversion_key("other", {"program": "abc"}, ("numpy",))
    assert base != cc.conversion_key("demo", {"program": "abc"}, ("numpy", "onnx"))
    monkeypatch.setattr(cc, "tool_versions", lambda *d: {"numpy": "0.0-other"})
    assert base != cc.conversion_key("demo", {"program": "abc"}, ("numpy",))
    monkeypatch.undo()
    # the code digest covers every .py file of the roots: a change anywhere is a new key
    root = tmp_path / "code"
    (root / "deep").mkdir(parents=True)
    (root / "deep" / "stage.py").write_text("A = 1\n")
    monkeypatch.setattr(cc, "CODE_ROOTS", {root: "arrcoc_edge"})
    cc.code_digest.cache_clear()
    before = cc.conversion_key("demo", {"program": "abc"}, ("numpy",))
    (root / "deep" / "stage.py").write_text("A = 2\n")
    cc.code_digest.cache_clear()
    try:
        changed = cc.conversion_key("demo", {"program": "abc"}, ("numpy",))
        assert changed != before
        # an installed package's bundled data (the checkout's web/ and mobile/) is not our code
        (root / "bundled" / "mobile").mkdir(parents=True)
        (root / "bundled" / "mobile" / "helper.py").write_text("print('not a module of ours')\n")
        cc.code_digest.cache_clear()
        assert cc.conversion_key("demo", {"program": "abc"}, ("numpy",)) == changed
    finally:
        monkeypatch.undo()
        cc.code_digest.cache_clear()


def test_each_kind_keeps_only_its_most_recently_used_entries(cache_home, tmp_path):
    notes = []
    for i in range(4):
        run(Converter(), tmp_path / f"d{i}", notes, inputs={"program": str(i)}, keep=2)
    assert len(list(cache_home.glob("demo-*"))) == 2
    runs = {}
    for i in (3, 2, 0):  # the newest two are reused; the oldest was forgotten
        again = Converter()
        run(again, tmp_path / f"again{i}", notes, inputs={"program": str(i)}, keep=2)
        runs[i] = again.runs
    assert runs == {3: 0, 2: 0, 0: 1}


def test_private_cache_reuse_or_make_runs_make_once_per_key(cache_home, tmp_path):
    made = []

    def make(folder: Path) -> None:
        made.append(folder)
        (folder / "out.txt").write_text("made")

    first, reused_first = private_cache.reuse_or_make("demo-cache", "k1", make, print, label="demo", action="making")
    second, reused_second = private_cache.reuse_or_make("demo-cache", "k1", make, print, label="demo", action="making")
    assert (reused_first, reused_second) == (False, True) and first == second and len(made) == 1
    assert (second / "out.txt").read_text() == "made"


def test_sentence_embeddings_come_back_bit_for_bit_and_are_computed_once(cache_home, monkeypatch):
    """The golden set's and the encoder gates' Python reference embeddings (sentences.cached_minilm_embed)
    equal text_encoder.embed's float32 bytes, from the cache as from the encoder; a new list of
    texts is a new entry."""
    from arrcoc_edge.relevance import text_encoder
    from arrcoc_edge.stages import sentences

    calls = []
    real = text_encoder.embed
    monkeypatch.setattr(text_encoder, "embed", lambda texts: calls.append(list(texts)) or real(texts))
    texts = ["something red", "猫はどこ?", "the lower half"]
    first, second = sentences.cached_minilm_embed(texts), sentences.cached_minilm_embed(texts)
    assert calls == [texts]
    expected = real(texts)
    assert first.dtype == second.dtype == np.float32 and first.tobytes() == second.tobytes() == expected.tobytes()
    # a batch's padding moves the last bits, so another list is another entry, not rows of this one
    assert sentences.cached_minilm_embed(texts[:2]).tobytes() == real(texts[:2]).tobytes() and len(calls) == 2
    assert len([p for p in cache_home.iterdir() if p.name.startswith("minilm-embeddings-")]) == 2


@pytest.mark.slow  # two real torch.onnx.export runs (~15 s): outside the 3-minute fast tier
def test_an_onnx_export_is_reused_per_program_and_form(cache_home, tmp_path, loaded, exported, monkeypatch):
    """onnx_common.export_onnx_cached exports once per (program, form): the second build's
    model.onnx is the first's bytes, and another form is another export."""
    from arrcoc_edge.targets.shared import onnx_common

    exports = []
    real = onnx_common.export_onnx
    monkeypatch.setattr(onnx_common, "export_onnx", lambda *a: exports.append(a[2].name) or real(*a))
    paths = [onnx_common.export_onnx_cached(exported.load, {"program": exported.cache_key}, loaded.config,
                                            tmp_path / name / "model.onnx", lambda m: None) for name in ("a", "b")]
    assert exports == ["model.onnx"] and paths[0].read_bytes() == paths[1].read_bytes()
    onnx_common.export_onnx_cached(exported.load, {"program": exported.cache_key, "form": "direct"}, loaded.config,
                                   tmp_path / "c" / "model.onnx", lambda m: None)
    assert exports == ["model.onnx", "model.onnx"]


# ---- a cache only saves time: whatever goes wrong in it is a note and a fresh conversion


def entry_of(cache_home: Path, kind: str = "demo") -> Path:
    return next(p for p in cache_home.iterdir() if p.name.startswith(f"{kind}-"))


@pytest.mark.parametrize("nested", ['{"a":' * 100000 + "1" + "}" * 100000, "[" * 200000 + "]" * 200000])
def test_a_seal_nested_too_deeply_is_a_note_a_fresh_conversion_and_a_discarded_entry(cache_home, tmp_path, nested):
    convert, notes = Converter(), []
    run(convert, tmp_path / "a", notes)
    (entry_of(cache_home) / private_cache.MANIFEST).write_text(nested)
    assert run(convert, tmp_path / "b", notes)["bytes"] == 15 and convert.runs == 2
    assert (tmp_path / "b" / "model.bin").read_bytes() == b"converted bytes"
    problems = [n for n in notes if n.startswith("note:")]
    assert len(problems) == 1 and "unreadable (RecursionError)" in problems[0], problems
    run(convert, tmp_path / "c", notes)  # the bad entry was replaced by a sound one
    said = [n for n in notes if not n.startswith("demo: converted in")]  # each fresh conversion says so too
    assert convert.runs == 2 and len(said) == 2 and "reused" in said[-1]


def test_a_file_of_another_size_is_refused_by_its_size_before_a_byte_is_hashed(cache_home, tmp_path):
    """A sealed file replaced by a 4 GB sparse one: hashing it would take seconds; its size alone refuses it."""
    import time

    convert, notes = Converter(), []
    run(convert, tmp_path / "a", notes)
    big = entry_of(cache_home) / "model.bin"
    big.unlink()
    with open(big, "wb") as f:
        f.truncate(4 << 30)
    start = time.monotonic()
    run(convert, tmp_path / "b", notes)
    assert time.monotonic() - start < 2.0 and convert.runs == 2
    assert any(f"model.bin is {4 << 30} bytes, sealed as 15" in n for n in notes), notes
    assert (tmp_path / "b" / "model.bin").read_bytes() == b"converted bytes"


def test_a_conversion_never_writes_into_the_cache(cache_home, tmp_path):
    """A converter that cannot write its file may abort the process (torch's zip writer does): so it
    writes beside the destination, and the cache gets a copy afterwards."""
    seen = []

    def convert(folder: Path) -> dict:
        seen.append(folder.resolve())
        (folder / "model.bin").write_bytes(b"bytes")
        return {}

    run(convert, tmp_path / "a", [])
    assert seen and not seen[0].is_relative_to(cache_home.resolve().parent.parent)
    assert seen[0].parent == (tmp_path / "a").resolve()
    assert (tmp_path / "a" / "model.bin").read_bytes() == b"bytes" and sorted(os.listdir(tmp_path / "a")) == ["model.bin"]


FULL_CACHE = """
import json, os, sys
from pathlib import Path
from arrcoc_edge.stages import conversion_cache as cc
notes, dest = [], Path(sys.argv[1])
def convert(folder):
    (folder / "model.bin").write_bytes(b"m" * (1 << 20)); return {"made": 1}
record = cc.convert_cached("demo", {"program": "full"}, ("numpy",), convert, dest, notes.append)
print(json.dumps({"record": record, "notes": notes, "bytes": (dest / "model.bin").stat().st_size,
                  "left": sorted(os.listdir(dest))}))
"""


def test_a_full_cache_file_system_is_a_note_and_the_conversion_is_used(tmp_path):
    """The cache on a 300 KB tmpfs (its own mount namespace), the destination with room: the
    conversion's 1 MB file is used, the cache's refusal is one note."""
    import shutil
    import subprocess
    import sys

    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed to give the test a full file system")
    cache, dest = tmp_path / "tiny", tmp_path / "dest"
    cache.mkdir(mode=0o700)
    dest.mkdir()
    script = tmp_path / "full.py"
    script.write_text(FULL_CACHE)
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    env.pop(cc.OFF_VARIABLE, None)
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o size=300k,mode=700 tmpfs "{cache}" && '
                           f'exec "{sys.executable}" "{script}" "{dest}"'], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.splitlines()[-1])
    assert found["record"] == {"made": 1} and found["bytes"] == 1 << 20 and found["left"] == ["model.bin"]
    notes = [n for n in found["notes"] if " converted in " not in n]  # the conversion itself says it ran
    assert len(notes) == 1 and "not stored (No space left on device)" in notes[0], found["notes"]


STRESS = """
import random, sys, tempfile
from pathlib import Path
from arrcoc_edge.stages import conversion_cache as cc
random.seed(int(sys.argv[1])); errors, wrong = [], 0
for _ in range(int(sys.argv[2])):
    v = random.randrange(5)
    def convert(folder, v=v):
        (folder / "blob.bin").write_bytes(bytes([v]) * (1 << 20)); return {"v": v}
    with tempfile.TemporaryDirectory(dir=sys.argv[3]) as d:
        try:
            record = cc.convert_cached("stress", {"v": str(v)}, ("numpy",), convert, Path(d), lambda m: None, keep=2)
            wrong += record != {"v": v} or (Path(d) / "blob.bin").read_bytes() != bytes([v]) * (1 << 20)
        except Exception as exc:
            errors.append(type(exc).__name__)
print(wrong, len(errors), sorted(set(errors)))
"""


def test_processes_sharing_one_cache_with_more_keys_than_it_keeps_never_fail_nor_get_wrong_bytes(tmp_path):
    """Four processes, five keys, two kept: entries are made, reused and removed under each other."""
    import subprocess
    import sys

    cache = tmp_path / "xdg"
    cache.mkdir(mode=0o700)
    script = tmp_path / "stress.py"
    script.write_text(STRESS)
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    env.pop(cc.OFF_VARIABLE, None)
    procs = [subprocess.Popen([sys.executable, str(script), str(seed), "40", str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for seed in range(4)]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-1000:] for _, err in results]
    assert [out.split()[:2] for out, _ in results] == [["0", "0"]] * 4, [out for out, _ in results]


def test_the_key_names_every_library_a_converter_calls_into():
    """The ONNX export's bytes are shaped by onnxscript's constant folding, which is onnx-ir's code,
    and torch.export's by sympy: what the named tools require is in the key, transitively."""
    from importlib.metadata import version

    from arrcoc_edge.targets.shared.onnx_common import ONNX_TOOLS

    tools = cc.tool_versions(*ONNX_TOOLS)
    assert tools["onnx-ir"] == version("onnx-ir") and tools["sympy"] == version("sympy")
    assert cc.tool_versions("onnx_ir") == cc.tool_versions("onnx-ir")  # one distribution, however spelt


def test_installers_are_not_in_the_key():
    """torch requires setuptools, and a venv made by `python -m venv` holds an older one than the
    checkout's .venv: with it in the key, the package installed there converted everything again."""
    tools = cc.tool_versions("torch")
    assert "torch" in tools and "sympy" in tools and not cc.INSTALLERS.intersection(tools)


def test_an_export_onto_a_full_disk_is_one_line_not_an_abort(tmp_path):
    """torch.export.save straight onto a disk that fills up aborts the process (SIGABRT from its zip
    writer's destructor: a 300 KB tmpfs did); save_program writes the bytes itself, so the same
    refusal is an ExportError naming the folder. The disk fills here at 100 KB: this process's file
    size limit (RLIMIT_FSIZE, SIGXFSZ ignored), set for the one call."""
    import resource
    import signal

    import torch

    from arrcoc_edge.errors import ExportError
    from arrcoc_edge.stages.export import save_program

    program = torch.export.export(torch.nn.Linear(300, 300), (torch.zeros(2, 300),))  # 360 KB of weights
    limits, handler = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100 << 10, limits[1]))
    try:
        with pytest.raises(ExportError, match=r"cannot write the exported program .*x\.pt2 \(File too large\)"):
            save_program(program, tmp_path / "x.pt2")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)


def test_a_program_saved_through_memory_loads_back(tmp_path):
    import torch

    from arrcoc_edge.stages.export import save_program

    model = torch.nn.Linear(3, 2)
    save_program(torch.export.export(model, (torch.ones(2, 3),)), tmp_path / "p.pt2")
    back = torch.export.load(tmp_path / "p.pt2").module()
    x = torch.arange(6.0).reshape(2, 3)
    assert torch.equal(back(x), model(x))


def test_discarding_an_entry_another_build_replaced_meanwhile_is_not_a_failure(tmp_path, monkeypatch):
    """The stress test's rare race, made certain: lstat sees a file (or nothing), and by the time it
    is unlinked another build has renamed its fresh entry folder to that name (EISDIR)."""
    entry = tmp_path / "stress-key"
    entry.write_bytes(b"old")
    real_lstat = os.lstat

    def lstat_then_replace(path, *args, **kwargs):
        result = real_lstat(path, *args, **kwargs)
        if Path(path) == entry and entry.is_file():
            entry.unlink()
            entry.mkdir()  # the other build's rename lands here
            (entry / "blob.bin").write_bytes(b"new")
        return result

    monkeypatch.setattr(private_cache.os, "lstat", lstat_then_replace)
    private_cache.discard(entry)  # no IsADirectoryError
    assert (entry / "blob.bin").read_bytes() == b"new"  # the other build's entry is left alone
    monkeypatch.undo()
    private_cache.discard(tmp_path / "gone")  # nothing there: nothing to do
    link = tmp_path / "link"
    link.symlink_to(entry)
    private_cache.discard(link)  # the link itself, never what it points to
    assert not os.path.lexists(link) and (entry / "blob.bin").exists()
