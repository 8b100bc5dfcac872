"""`invoke merge`: published folders built in separate processes and folders join into one publish.

Two real parts (onnx in one, onnx-int8 with its onnx in the other) are built by the CLI and
packed by scripts/pack_part.sh as the CI workflow uploads them. The
refusal and conflict cases start from copies of those parts: one built for real from another
checkpoint, the others with one edited manifest field or file (what a part from another model
or a non-reproducible build would carry), so each case stays seconds, not another build.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, run_cli
from test_build import generations, snapshot

pytestmark = pytest.mark.slow


def tree(out: Path) -> dict[str, str]:
    """Everything under out, hidden files and links included, byte for byte (links by target)."""
    found = {".": "-> " + os.readlink(out)} if out.is_symlink() else {}  # which generation is published
    for folder, dirs, names in os.walk(out):
        for name in [*names, *[d for d in dirs if Path(folder, d).is_symlink()]]:
            p = Path(folder, name)
            rel = p.relative_to(out).as_posix()
            found[rel] = "-> " + os.readlink(p) if p.is_symlink() else hashlib.sha256(p.read_bytes()).hexdigest()
    return dict(sorted(found.items()))


def build(out: Path, target: str, *extra: str) -> Path:
    proc = run_cli("build", "--target", target, "--out", str(out), *extra)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


def merge(out: Path, *parts: Path, env: dict | None = None):
    return run_cli("merge", "--parts", ",".join(map(str, parts)), "--out", str(out), env=env)


def load(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


@pytest.fixture(scope="module")
def parts(shared_build) -> tuple[Path, Path]:
    """The session's `--target onnx` and `--target onnx-int8` builds (conftest shared_build, also
    read by test_build.py and test_onnx_int8.py); merge only reads its parts."""
    return shared_build("onnx").out, shared_build("onnx-int8").out


@pytest.fixture(scope="module")
def packed(parts, tmp_path_factory) -> tuple[Path, Path]:
    """The parts as CI jobs upload them: plain files, no symlinks."""
    root = tmp_path_factory.mktemp("packed")
    return copy_part(parts[0], root / "linux"), copy_part(parts[1], root / "macos")


@pytest.fixture(scope="module")
def merged(packed, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("merged") / "out"
    proc = merge(out, *packed)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


def copy_part(src: Path, dest: Path, edit=None) -> Path:
    """What a CI job uploads: scripts/pack_part.sh (the workflow's own packing step)."""
    proc = subprocess.run(["bash", str(REPO / "scripts" / "pack_part.sh"), str(src), str(dest)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert not [p for p in dest.rglob("*") if p.is_symlink()]
    if edit:
        data = load(dest)
        edit(data, dest)
        (dest / "manifest.json").write_text(json.dumps(data))
    return dest


def test_merge_keeps_each_target_with_its_host_and_parity(packed, merged):
    a, b = packed
    m = load(merged)
    assert set(m["targets"]) == {"onnx", "onnx-int8"}
    assert m["checkpoint"]["sha256"] == load(a)["checkpoint"]["sha256"] == load(b)["checkpoint"]["sha256"]
    for name, part in (("onnx", a), ("onnx-int8", b)):
        entry, source = m["targets"][name], load(part)["targets"][name]
        assert entry["status"] == "published" and entry["merge"]["from_part"] == str(part)
        for key in ("files", "parity", "size", "variants", "provenance"):
            assert entry[key] == source[key], key
        host = entry["merge"]["built_and_verified_on"]
        assert host["os"] and host["machine"] and host["python"] and "onnxruntime" in host["runtimes"]
        assert entry["merge"]["exported_program_sha256_by_part"] == {
            str(a): load(a)["exported_program"]["sha256"], str(b): load(b)["exported_program"]["sha256"]}
    # onnx is in both parts with identical bytes: kept once, the other part recorded
    assert m["targets"]["onnx"]["merge"]["other_parts"][0]["same_files"] is True
    shas = {p["exported_program_sha256"] for p in m["merge"]["parts"]}
    assert m["merge"]["exported_program_reproducible"] is (len(shas) == 1)
    for f in m["targets"]["onnx-int8"]["files"]:
        assert (merged / f["path"]).read_bytes() == (b / f["path"]).read_bytes()


def test_verify_passes_on_the_merged_folder_and_report_is_regenerated(merged):
    proc = run_cli("verify", "--out", str(merged))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "onnx-int8    published: 6 files checked" in proc.stdout
    page = (merged / "report.html").read_text()
    assert "Merged " in page and "from 2 parts" in page and "Built and verified on Linux" in page
    assert page.count("data:image/png;base64,") >= 4  # sizes + three held-out photos with maps
    assert merged.is_symlink() and not (merged / "manifest.json").is_symlink() and not (merged / "onnx").is_symlink()


def test_parts_from_another_checkpoint_are_refused_and_nothing_is_written(parts, merged, tmp_path):
    other = build(tmp_path / "other", "onnx", "--checkpoint", str(REPO / "checkpoints" / "arrcoc-v0.1-default.safetensors"))
    before = tree(merged)
    proc = merge(merged, parts[0], other)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("merge error: ") and "-> fix:" in proc.stderr
    assert "checkpoint" in proc.stderr
    assert tree(merged) == before
    fresh = tmp_path / "never-made"
    assert merge(fresh, parts[0], other).returncode == 2 and not fresh.exists()


def test_parts_with_other_model_settings_are_refused(parts, merged, tmp_path):
    def other_grid(data, dest):
        data["checkpoint"]["model"] = {**data["checkpoint"]["model"], "grid": 32, "top_k": 200}

    before = tree(merged)
    proc = merge(merged, parts[0], copy_part(parts[1], tmp_path / "g32", other_grid))
    assert proc.returncode == 2 and "G=32 K=200" in proc.stderr and "--grid" in proc.stderr
    assert tree(merged) == before


def test_two_published_entries_with_different_files_conflict(parts, merged, tmp_path):
    def rebuilt_onnx(data, dest):  # what a non-reproducible converter gives: other bytes, also verified
        model = dest / "onnx" / "model.onnx"
        model.write_bytes(model.read_bytes() + b"\0")
        f = next(f for f in data["targets"]["onnx"]["files"] if f["path"] == "onnx/model.onnx")
        f["bytes"], f["sha256"] = model.stat().st_size, hashlib.sha256(model.read_bytes()).hexdigest()

    before = tree(merged)
    proc = merge(merged, parts[0], copy_part(parts[1], tmp_path / "c", rebuilt_onnx))
    assert proc.returncode == 2
    assert proc.stderr.startswith("merge error: target onnx is published in") and "different files" in proc.stderr
    assert tree(merged) == before


def test_published_beats_unverified_and_bad_bytes_are_refused(parts, tmp_path):
    from arrcoc_edge.building.merge import choose, read_parts, stage
    from arrcoc_edge.errors import MergeError

    def unverified(data, dest):
        data["targets"]["onnx"]["status"] = "unverified"

    weak = copy_part(parts[1], tmp_path / "weak", unverified)
    chosen = choose(read_parts([weak, parts[0]]))
    assert chosen["onnx"][0].label == str(parts[0]) and chosen["onnx-int8"][0].label == str(weak)
    model = weak / "onnx-int8" / "model.int8.onnx"
    size = model.stat().st_size
    model.write_bytes(b"tampered".ljust(size, b"\0"))  # same size, other bytes: the sha256 refuses it
    (tmp_path / "run").mkdir()
    with pytest.raises(MergeError, match="differs from"):
        stage(chosen, tmp_path / "run")
    model.write_bytes(b"tampered")  # another size: refused before a byte is copied
    shutil.rmtree(tmp_path / "run")
    (tmp_path / "run").mkdir()
    with pytest.raises(MergeError, match="has 8 bytes"):
        stage(chosen, tmp_path / "run")


@pytest.mark.parametrize("point,state", [(5, "old"), (6, "new")])
def test_interrupted_merge_leaves_the_output_as_it_was(parts, merged, tmp_path, point, state):
    out = tmp_path / "out"
    shutil.copytree(parts[0], out, symlinks=True)  # a published onnx-only folder
    before = snapshot(out)
    proc = merge(out, *parts, env={"ARRCOC_TEST_KILL_AT": str(point)})
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert run_cli("verify", "--out", str(out)).returncode == 0
    if state == "old":
        assert snapshot(out) == before
    else:
        assert set(load(out)["targets"]) == {"onnx", "onnx-int8"}
    proc = merge(out, *parts)  # the next merge tidies what the killed one left
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(generations(out)) == 1
    assert run_cli("verify", "--out", str(out)).returncode == 0


# ------------------------------------------------------------------ limits before reading (issue 35, finding 7)


def _sparse(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)  # no blocks on disk: free to make, hours to read or hash
    return path


def _oversized_part(kind: str, tmp_path: Path) -> Path:
    from test_escapes import part

    def edit(data, root):
        data["targets"]["t"]["variants"] = {"v": {"status": "verified", "files": ["t/model.bin"]}}
        if kind == "saved-outputs":  # 64 GB: on 43f3c5d read whole into memory (MemoryError)
            _sparse(root / ".cache" / "report" / "t.v.npz", 64 << 30)
        elif kind == "exported-program":  # 3 GB: on 43f3c5d copied into OUT's cache, then refused
            _sparse(root / ".cache" / "export" / "p.pt2", 3 << 30)
            data["exported_program"] = {"path": ".cache/export/p.pt2", "sha256": "0" * 64}
        elif kind == "recorded-checkpoint":  # 2 TB: on 43f3c5d still being hashed after minutes
            data["checkpoint"]["path"] = str(_sparse(tmp_path / "ckpt" / "big.safetensors", 2 << 40))
        elif kind == "recorded-checkpoint-path-length":  # on 43f3c5d: internal error (OSError)
            data["checkpoint"]["path"] = "/" + "a" * 5000

    return part(tmp_path / "part", edit=edit)


@pytest.mark.parametrize("kind", ["saved-outputs", "exported-program", "recorded-checkpoint",
                                  "recorded-checkpoint-path-length"])
def test_what_a_part_names_is_size_checked_before_it_is_read(kind, tmp_path):
    """One line (exit 2) in seconds, nothing copied or published: the size (or a path's length)
    is checked before a byte is read, hashed or copied. The timeout fails the test on 43f3c5d
    instead of hanging (it hashes a 2 TB file)."""
    from one_line import one_line

    a = _oversized_part(kind, tmp_path)
    out = tmp_path / "out"
    proc = run_cli("merge", "--parts", str(a), "--out", str(out), timeout=120)
    line = one_line(proc)
    assert ("characters" if kind.endswith("length") else "bytes, more than the") in line, line
    assert not os.path.lexists(out)  # never published
    copied = [p for p in tmp_path.glob(".out.arrcoc-edge/**/*") if p.is_file() and p.stat().st_size > 1 << 20]
    assert not copied, copied
