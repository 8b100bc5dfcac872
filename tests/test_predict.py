"""`invoke predict`: a whole photo file and a query through a published artifact, as a user runs it."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import run_cli


@pytest.fixture(scope="module")
def out(checkpoint_path, tmp_path_factory):
    from pipeline.build import run_build
    from targets import TARGETS

    folder = tmp_path_factory.mktemp("predict") / "out"
    result = run_build([TARGETS["onnx"], TARGETS["ptl"]], TARGETS, checkpoint_path, folder, log=lambda m: None)
    assert result.ok
    return folder


@pytest.fixture(scope="module")
def photo(tmp_path_factory):
    """A whole landscape JPEG as a phone would store it: 451 x 300, not 16G, not square."""
    from pipeline.golden import _photo

    path = tmp_path_factory.mktemp("photos") / "cat.jpg"
    Image.fromarray(_photo("chelsea")).save(path, quality=92)
    return path


def _one_line(proc) -> str:
    assert proc.returncode == 2, proc.stdout[-1500:] + proc.stderr[-1500:]
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "-> fix:" in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_text_query_on_a_whole_photo_matches_the_model(out, photo, loaded, tmp_path):
    from pipeline import text_encoder
    from pipeline.golden import load_photo

    proc = run_cli("predict", "--image", str(photo), "--query", "where is the cat?", "--out", str(out),
                   "--json", str(tmp_path / "p.json"), "--heatmap", str(tmp_path / "p.png"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "photo 451 x 300 px" in proc.stdout and "information" in proc.stdout and "top-64 cells" in proc.stdout
    data = json.loads((tmp_path / "p.json").read_text())
    assert set(data) == {"grid", "top_k", "image_size", "runtime", "relevance", "topk_indices", "weights"}
    assert data["image_size"] == [300, 451] and data["grid"] == 14 and data["top_k"] == 64
    assert len(data["relevance"]) == 196 and len(data["topk_indices"]) == 64 and len(data["weights"]) == 3
    # the same photo file and sentence through eager model.py: the artifact did the reference's resize
    image = torch.from_numpy(load_photo(photo))[None]
    query = torch.from_numpy(text_encoder.embed(["where is the cat?"]))
    with torch.no_grad():
        rel, topk, weights = loaded.model(image, query)
    assert np.abs(np.array(data["relevance"]) - rel[0].numpy()).max() <= 1e-4
    assert set(data["topk_indices"]) == set(topk[0].tolist())
    np.testing.assert_allclose(data["weights"], weights[0].numpy(), atol=1e-5)
    with Image.open(tmp_path / "p.png") as heat:
        assert heat.size == (451, 300)


def test_embedding_query_and_each_runtime_agree(out, photo, golden, tmp_path):
    np.save(tmp_path / "q.npy", golden.heldout.queries[0])
    results = {}
    for runtime in ("onnx", "ptl"):
        proc = run_cli("predict", "--image", str(photo), "--query-embedding", str(tmp_path / "q.npy"),
                       "--out", str(out), "--runtime", runtime, "--json", str(tmp_path / f"{runtime}.json"))
        assert proc.returncode == 0, proc.stderr[-2000:]
        results[runtime] = json.loads((tmp_path / f"{runtime}.json").read_text())
        assert results[runtime]["runtime"].startswith(runtime)
    assert np.abs(np.array(results["onnx"]["relevance"]) - np.array(results["ptl"]["relevance"])).max() <= 1e-4
    assert set(results["onnx"]["topk_indices"]) == set(results["ptl"]["topk_indices"])


@pytest.mark.parametrize("case", ["wrong width", "float64", "unknown runtime", "not an image", "too small",
                                  "both queries", "nothing published"])
def test_bad_input_is_one_line_and_exit_2(case, out, photo, tmp_path):
    args = ["--image", str(photo), "--query", "a cat", "--out", str(out)]
    if case == "wrong width":
        np.save(tmp_path / "q.npy", np.ones(383, np.float32))
        args = ["--image", str(photo), "--query-embedding", str(tmp_path / "q.npy"), "--out", str(out)]
    elif case == "float64":
        np.save(tmp_path / "q.npy", np.ones(384, np.float64))
        args = ["--image", str(photo), "--query-embedding", str(tmp_path / "q.npy"), "--out", str(out)]
    elif case == "unknown runtime":
        args += ["--runtime", "coreml"]
    elif case == "not an image":
        (tmp_path / "notes.jpg").write_text("not a picture")
        args[1] = str(tmp_path / "notes.jpg")
    elif case == "too small":
        Image.new("RGB", (12, 40)).save(tmp_path / "tiny.png")
        args[1] = str(tmp_path / "tiny.png")
    elif case == "both queries":
        np.save(tmp_path / "q.npy", np.ones(384, np.float32))
        args += ["--query-embedding", str(tmp_path / "q.npy")]
    elif case == "nothing published":
        args[-1] = str(tmp_path / "empty")
    line = _one_line(run_cli("predict", *args))
    expected = {"wrong width": "[384]", "float64": "float32", "unknown runtime": "onnx, onnx:fp32",
                "not an image": "cannot be decoded", "too small": "12x40", "both queries": "exactly one",
                "nothing published": "nothing is published"}[case]
    assert expected in line


def test_a_changed_published_file_is_refused(out, photo, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(out, copy, symlinks=True)
    target = (copy / "onnx" / "model.onnx").resolve()
    assert copy.resolve() in target.parents  # the copy's own file, not the original's
    target.unlink()  # break any hard link to the original generation first
    target.write_bytes(b"\0" * 64)
    line = _one_line(run_cli("predict", "--image", str(photo), "--query", "a cat", "--out", str(copy),
                             "--runtime", "onnx"))
    assert "differs from the manifest" in line and "invoke verify" in line


def test_a_reader_that_goes_away_is_a_quiet_stop(out, photo):
    """`invoke predict ... | head -1`: the pipe closes before the cells are printed."""
    import os
    import subprocess
    import sys

    from conftest import REPO

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "invoke", "predict", "--image", str(photo), "--query", "the cat",
                               "--out", str(out)], cwd=REPO, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write_end)
    assert proc.returncode == 141 and proc.stderr.strip() == "", proc.stderr
