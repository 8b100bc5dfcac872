"""End to end: build the ONNX target through the CLI, then attack the build in every way a user can.

Every failure must end with one line naming the fix, a non-zero exit, and the previously published
artifacts and manifest byte-for-byte unchanged.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, run_cli

pytestmark = pytest.mark.slow
def snapshot(out: Path) -> dict[str, str]:
    """relative path -> sha256 of everything a build publishes, as readers see it: the public
    paths (DIR/manifest.json, DIR/<target>/..., DIR being the link to the published generation),
    not the hidden .cache beside them nor the state folder beside DIR."""
    files = {}
    for folder, dirs, names in os.walk(out, followlinks=True):
        if Path(folder) == out:  # build.log: the last builds' third-party output, never published
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            names = [n for n in names if not n.startswith(".") and n != "build.log"]
        for name in names:
            p = Path(folder, name)
            if not p.exists():
                continue  # a link made for a target a killed build was adding: no content, tidied next time
            files[p.relative_to(out).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return dict(sorted(files.items()))


def staging_left(out: Path) -> list[Path]:
    from arrcoc_edge.publishing.folder_state import STAGING, state_dir

    staging = state_dir(out) / STAGING
    return list(staging.glob("*")) if staging.exists() else []


def generations(out: Path) -> list[Path]:
    from arrcoc_edge.publishing.folder_state import GENERATIONS, state_dir

    return sorted((state_dir(out) / GENERATIONS).iterdir())


@pytest.fixture(scope="module")
def published(onnx_build) -> Path:
    """The session's one `invoke build --target onnx` (conftest onnx_build): read-only."""
    return onnx_build.out


@pytest.fixture
def previous(published, tmp_path) -> Path:
    """A private copy of a published output folder, to attack: its files copied by following the
    link (a plain folder holding a publish), which the next build or publish takes over."""
    out = tmp_path / "out"
    shutil.copytree(published, out, symlinks=True)
    return out


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def test_manifest_records_the_verified_artifact(published):
    m = manifest(published)
    assert len(m["checkpoint"]["sha256"]) == 64
    assert (published / m["exported_program"]["path"]).is_file()
    assert m["toolchain"]["torch"].startswith("2.13.0") and "onnxruntime" in m["toolchain"]
    onnx = m["targets"]["onnx"]
    assert onnx["status"] == "published"
    for f in onnx["files"]:
        data = (published / f["path"]).read_bytes()
        assert len(data) == f["bytes"] and hashlib.sha256(data).hexdigest() == f["sha256"]
    names = {Path(f["path"]).name for f in onnx["files"]}
    assert {"model.onnx", "golden.json", "golden.bin"} <= names
    parity = onnx["parity"]
    assert parity["passed"] and parity["measured"] and parity["runtime"].startswith("onnxruntime")
    metrics, gate = parity["metrics"], parity["gate"]
    assert metrics["relevance_max_abs"] <= gate["max"]["relevance_max_abs"] <= 1e-3
    assert metrics["weights_max_abs"] <= 1e-4 and metrics["topk_overlap_min"] == 1.0
    assert onnx["size"]["bytes"] <= onnx["size"]["budget"]
    assert onnx["provenance"]["checkpoint_sha256"] == m["checkpoint"]["sha256"]
    assert onnx["provenance"]["exported_program_sha256"] == m["exported_program"]["sha256"]


def test_published_onnx_runs_dynamic_batch_in_onnxruntime(published, golden):
    import onnxruntime as ort

    session = ort.InferenceSession(str(published / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].type == "tensor(uint8)"
    for n in (1, 5):
        rel, topk, w, evidence = session.run(None, golden.heldout.inputs(0, n))
        assert rel.shape == (n, 196) and topk.shape == (n, 64) and topk.dtype == np.int64 and evidence.shape == (n, 4)
        np.testing.assert_allclose(rel, golden.heldout.expected["relevance"][:n], atol=1e-3)
        np.testing.assert_allclose(evidence, golden.heldout.expected["evidence"][:n], atol=1e-4)
    for i in golden.heldout.whole:  # whole photos, each at its own size, through one graph
        rel = session.run(None, golden.heldout.inputs(i, i + 1))[0]
        np.testing.assert_allclose(rel, golden.heldout.expected["relevance"][i : i + 1], atol=1e-3)


def test_golden_bundle_reads_back(published, golden):
    """Each sample is one batch-1 run: two 16G crops and a whole non-square photo as decoded."""
    meta = json.loads((published / "onnx" / "golden.json").read_text())
    blob = (published / "onnx" / "golden.bin").read_bytes()
    shapes = []
    for sample in meta["samples"]:
        arrays = {name: np.frombuffer(blob[a["offset"] : a["offset"] + a["bytes"]], dtype=a["dtype"]).reshape(a["shape"])
                  for name, a in sample["arrays"].items()}
        assert arrays["image"].dtype == np.uint8 and arrays["image"].shape[0] == 1 and arrays["image"].shape[3] == 3
        i = golden.heldout.names.index(sample["name"])
        np.testing.assert_array_equal(arrays["image"][0], golden.heldout.images[i])
        np.testing.assert_array_equal(arrays["relevance"], golden.heldout.expected["relevance"][i : i + 1])
        shapes.append(arrays["image"].shape[1:3])
    assert shapes[0] == (224, 224) and shapes[-1][0] != shapes[-1][1]
    assert meta["gate"]["max"]["relevance_max_abs"] <= 1e-3


def test_verify_task_checks_hashes(previous):
    assert run_cli("verify", "--out", str(previous)).returncode == 0
    model = previous / "onnx" / "model.onnx"
    model.write_bytes(model.read_bytes()[:-1] + b"\0")
    proc = run_cli("verify", "--out", str(previous))
    assert proc.returncode != 0 and "MISMATCH onnx/model.onnx" in proc.stdout


def test_repeat_build_is_a_cache_hit_and_byte_identical(previous, published):
    proc = run_cli("build", "--target", "onnx", "--out", str(previous))
    assert proc.returncode == 0, proc.stderr
    assert "cache hit" in proc.stdout
    assert snapshot(previous)["onnx/model.onnx"] == snapshot(published)["onnx/model.onnx"]


def test_fresh_export_gives_identical_bytes(published, tmp_path):
    """Two builds of one checkpoint (the second with an empty cache, the conversion cache off: a
    real second torch.export) publish identical files."""
    proc = run_cli("build", "--target", "onnx", "--out", str(tmp_path), env={"ARRCOC_CONVERSION_CACHE": "off"})
    assert proc.returncode == 0, proc.stderr
    assert "fresh export" in proc.stdout
    fresh, first = snapshot(tmp_path), snapshot(published)
    onnx = sorted(p for p in first if p.startswith("onnx/"))
    assert onnx == sorted(p for p in fresh if p.startswith("onnx/")) and "onnx/model.onnx" in onnx
    assert [fresh[p] for p in onnx] == [first[p] for p in onnx]


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch /tmp/arrcoc-pwned-by-test",))


def _bad_checkpoint(kind: str, tmp_path: Path, checkpoint_path: Path) -> Path:
    raw = checkpoint_path.read_bytes()
    path = tmp_path / {"evil": "evil.pt", "notdict": "x.pt"}.get(kind, "bad.safetensors")
    if kind == "missing":
        return path
    if kind == "evil":
        path.write_bytes(pickle.dumps({"k": _RunsCode()}, protocol=2))
    elif kind == "notdict":
        import torch

        torch.save("just a string", path)
    elif kind == "truncated":
        path.write_bytes(raw[: len(raw) // 3])
    elif kind == "empty":
        path.write_bytes(b"")
    return path


@pytest.mark.parametrize("kind", ["missing", "empty", "truncated", "notdict", "evil"])
def test_bad_checkpoint_leaves_published_artifacts_untouched(kind, previous, tmp_path, checkpoint_path):
    before = snapshot(previous)
    Path("/tmp/arrcoc-pwned-by-test").unlink(missing_ok=True)
    ckpt = _bad_checkpoint(kind, tmp_path, checkpoint_path)
    proc = run_cli("build", "--target", "onnx", "--checkpoint", str(ckpt), "--out", str(previous))
    assert proc.returncode != 0
    errors = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(errors) == 1 and "-> fix:" in errors[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert snapshot(previous) == before
    assert not Path("/tmp/arrcoc-pwned-by-test").exists()


def test_unwritable_output_folder(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    proc = run_cli("build", "--target", "onnx", "--out", str(blocker / "out"))
    assert proc.returncode != 0
    assert proc.stderr.startswith("output error: cannot write to output folder") and "--out" in proc.stderr


def test_unknown_target_lists_the_known_ones(tmp_path):
    proc = run_cli("build", "--target", "tflite", "--out", str(tmp_path))
    assert proc.returncode != 0
    assert "unknown target 'tflite'" in proc.stderr and "onnx" in proc.stderr and "all" in proc.stderr


def test_sigterm_mid_stage_publishes_nothing(previous):
    before = snapshot(previous)
    proc = subprocess.Popen(
        [sys.executable, "-m", "invoke", "build", "--target", "onnx", "--out", str(previous)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    for line in proc.stdout:  # wait until the ONNX stage is under way
        if line.startswith("[onnx] building"):
            break
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "-> fix:" in err
    assert snapshot(previous) == before
    assert staging_left(previous) == []


def test_two_builds_at_once_queue_on_the_lock(previous):
    before = manifest(previous)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "invoke", "build", "--target", "onnx", "--out", str(previous)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sum("another build is publishing" in o for o, _ in outs) == 1
    after = manifest(previous)
    assert after["targets"]["onnx"]["files"] == before["targets"]["onnx"]["files"]
    assert run_cli("verify", "--out", str(previous)).returncode == 0
    assert staging_left(previous) == []
