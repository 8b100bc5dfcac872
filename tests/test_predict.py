"""`invoke predict`: a whole photo file and a query through a published artifact, as a user runs it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_cli
from one_line import one_line
from PIL import Image


@pytest.fixture(scope="module")
def out(shared_build):
    """The session's `invoke build --target onnx,ptl` (conftest shared_build): predict only reads it."""
    return shared_build("onnx,ptl").out


@pytest.fixture(scope="module")
def photo(tmp_path_factory):
    """A whole landscape JPEG as a phone would store it: 451 x 300, not 16G, not square."""
    from arrcoc_edge.stages.golden import _photo

    path = tmp_path_factory.mktemp("photos") / "cat.jpg"
    Image.fromarray(_photo("chelsea")).save(path, quality=92)
    return path



def test_text_query_on_a_whole_photo_matches_the_model(out, photo, loaded, tmp_path):
    from arrcoc_edge.relevance import text_encoder
    from arrcoc_edge.stages.golden import load_photo

    proc = run_cli("predict", "--image", str(photo), "--query", "where is the cat?", "--out", str(out),
                   "--json", str(tmp_path / "p.json"), "--heatmap", str(tmp_path / "p.png"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "photo 300 x 451 px (height x width)" in proc.stdout and "information" in proc.stdout and "top-64 cells" in proc.stdout
    data = json.loads((tmp_path / "p.json").read_text())
    assert set(data) == {"grid", "top_k", "image_size", "runtime", "relevance", "topk_indices", "weights",
                         "evidence", "confidence", "stands_out", "verdict"}
    published = out / "calibration.json"  # every build publishes its checkpoint's calibration
    if published.exists():
        from arrcoc_edge.relevance.evidence import Calibration

        want = float(Calibration.read(published).confidence(np.asarray(list(data["evidence"].values()), np.float32)))
        assert data["confidence"] == pytest.approx(want, abs=1e-9)
    else:
        assert data["confidence"] is None and "no calibration in this folder" in data["verdict"]
    assert data["image_size"] == [300, 451] and data["grid"] == 14 and data["top_k"] == 64
    assert len(data["relevance"]) == 196 and len(data["topk_indices"]) == 64 and len(data["weights"]) == 3
    # the same photo file and sentence through eager model.py: the artifact did the reference's resize
    image = torch.from_numpy(load_photo(photo))[None]
    query = torch.from_numpy(text_encoder.embed(["where is the cat?"]))
    with torch.no_grad():
        rel, topk, weights, evidence = loaded.model(image, query)
    assert np.abs(np.array(data["relevance"]) - rel[0].numpy()).max() <= 1e-4
    assert set(data["topk_indices"]) == set(topk[0].tolist())
    np.testing.assert_allclose(data["weights"], weights[0].numpy(), atol=1e-5)
    np.testing.assert_allclose(list(data["evidence"].values()), evidence[0].numpy(), atol=1e-5)
    with Image.open(tmp_path / "p.png") as heat:  # scaled up to 512 px on the long side, a legend below
        assert heat.size == (512, 341 + 44)
    assert "median of 5 warm calls" in proc.stdout


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
    line = one_line(run_cli("predict", *args))
    expected = {"wrong width": "[384]", "float64": "float32", "unknown runtime": "onnx, onnx:fp32",
                "not an image": "cannot be decoded", "too small": "12x40", "both queries": "exactly one",
                "nothing published": "does not exist"}[case]
    assert expected in line


def test_a_changed_published_file_is_refused(out, photo, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(out, copy, symlinks=True)
    target = (copy / "onnx" / "model.onnx").resolve()
    assert copy.resolve() in target.parents  # the copy's own file, not the original's
    target.unlink()  # break any hard link to the original generation first
    target.write_bytes(b"\0" * 64)
    line = one_line(run_cli("predict", "--image", str(photo), "--query", "a cat", "--out", str(copy),
                             "--runtime", "onnx"))
    assert "differs from the manifest" in line and "invoke verify" in line


def _closed_stdout(*args):
    """`invoke predict ARGS | head -0`: stdout's reader is gone before the first line."""
    import os
    import subprocess
    import sys

    from conftest import REPO

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "invoke", "predict", *args], cwd=REPO, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write_end)


def test_a_reader_that_goes_away_is_a_quiet_stop_and_the_files_are_written(out, photo, tmp_path):
    """`invoke predict ... --json F --heatmap H | head -1`: the pipe closes before the summary is
    printed; the JSON and the heatmap are written whole all the same."""
    proc = _closed_stdout("--image", str(photo), "--query", "the top left", "--out", str(out),
                          "--json", str(tmp_path / "p.json"), "--heatmap", str(tmp_path / "p.png"))
    assert proc.returncode == 141 and proc.stderr.strip() == "", proc.stderr
    assert len(json.loads((tmp_path / "p.json").read_text())["relevance"]) == 196
    with Image.open(tmp_path / "p.png") as heat:
        heat.load()


def test_a_folder_whose_reader_goes_away_still_writes_every_file(out, photo, tmp_path):
    import shutil

    folder = tmp_path / "photos"
    folder.mkdir()
    for i in range(12):
        shutil.copy(photo, folder / f"p{i:02d}.jpg")
    proc = _closed_stdout("--image", str(folder), "--query", "the top left", "--out", str(out),
                          "--json", str(tmp_path / "all.jsonl"), "--heatmap", str(tmp_path / "heat"))
    assert proc.returncode == 141 and proc.stderr.strip() == "", proc.stderr
    assert len((tmp_path / "all.jsonl").read_text().splitlines()) == 12
    assert len(list((tmp_path / "heat").glob("*.heatmap.png"))) == 12


@pytest.fixture(scope="module")
def colour_photos(tmp_path_factory):
    """A red disc on a grey, slightly noisy table, and the same table with nothing on it (PNG)."""
    from PIL import ImageDraw

    folder = tmp_path_factory.mktemp("colours")
    rng = np.random.default_rng(0)
    table = np.clip(128 + rng.normal(0, 7, (480, 640, 3)), 0, 255).astype(np.uint8)
    Image.fromarray(table).save(folder / "plain.png")
    disc = Image.fromarray(table)
    ImageDraw.Draw(disc).ellipse((380, 60, 540, 220), fill=(220, 30, 30))
    disc.save(folder / "red-disc.png")
    return folder


def test_the_evidence_ranks_a_colour_that_is_there_above_one_that_is_not(out, colour_photos):
    """Through the published runtime (onnxruntime), as a Python caller sees it: the normalised map
    cannot tell a red disc from a bare table (its top cell is 1 on both), the evidence output can."""
    import arrcoc_edge

    with arrcoc_edge.load(out, "onnx") as model:
        red = model.predict(colour_photos / "red-disc.png", "something red")
        others = [model.predict(colour_photos / "red-disc.png", "something green"),
                  model.predict(colour_photos / "red-disc.png", "something blue"),
                  model.predict(colour_photos / "plain.png", "something red")]
    for nothing in others:
        assert nothing.evidence["top_mean"] < red.evidence["top_mean"] and nothing.evidence["max"] < red.evidence["max"]
    assert red.relevance.max() == pytest.approx(1.0) and others[2].relevance.max() == pytest.approx(1.0)  # the map cannot tell
    for p in (red, *others):  # the confidence is the folder's calibration of that evidence, or none
        assert (p.confidence is None) is not (out / "calibration.json").exists()


def test_predict_reads_the_folder_s_calibration(shared_build, colour_photos, tmp_path):
    """A copy of the publish with a calibration.json of the test's own coefficients: the JSON's
    confidence is that calibration of the JSON's own evidence, and the summary says the verdict;
    without the file, no number."""
    from arrcoc_edge.relevance.evidence import CALIBRATION_FILE, Calibration, percent

    out = shared_build("onnx,ptl").copy(tmp_path / "copy")
    calibration = Calibration((20.0, 0.0, 0.0, 10.0), -16.0, {"purpose": "tests/test_predict.py"})
    (out / CALIBRATION_FILE).write_text(json.dumps(calibration.to_dict()))
    for name in ("red-disc", "plain"):
        proc = run_cli("predict", "--image", str(colour_photos / f"{name}.png"), "--query", "something red", "--out",
                       str(out), "--json", str(tmp_path / f"{name}.json"))
        assert proc.returncode == 0, proc.stderr[-2000:]
        data = json.loads((tmp_path / f"{name}.json").read_text())
        want = float(calibration.confidence(np.asarray(list(data["evidence"].values()), np.float32)))
        assert data["confidence"] == pytest.approx(want, abs=1e-9) and data["stands_out"] is (want >= 0.5)
        said = "stands out" if want >= 0.5 else "nothing in this photo stands out"
        assert f"{said} for 'something red': confidence {percent(want)}" in proc.stdout
    (out / CALIBRATION_FILE).unlink()
    proc = run_cli("predict", "--image", str(colour_photos / "plain.png"), "--query", "something red", "--out", str(out))
    assert "confidence unknown for 'something red': no calibration in this folder" in proc.stdout


def test_predict_lists_the_strongest_few(out, colour_photos, tmp_path):
    proc = run_cli("predict", "--image", str(colour_photos / "plain.png"), "--query", "something red", "--out", str(out),
                   "--json", str(tmp_path / "p.json"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "confidence" in proc.stdout.splitlines()[2]  # the verdict line, with a number or why there is none
    assert "strongest 5 of the top-64 cells" in proc.stdout and "top-64 cells (row, col: relevance)" not in proc.stdout
    assert len([line for line in proc.stdout.splitlines() if line.startswith("  (")]) == 5
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["stands_out"] is (None if data["confidence"] is None else data["confidence"] >= 0.5)
    every = run_cli("predict", "--image", str(colour_photos / "red-disc.png"), "--query", "something red", "--out",
                    str(out), "--all")
    assert every.returncode == 0 and "top-64 cells (row, col: relevance), most relevant first:" in every.stdout
    assert sum(line.count("(") for line in every.stdout.splitlines() if line.startswith("  (")) == 64


def test_a_query_outside_the_encoder_s_vocabulary_is_one_warning_line(out, colour_photos):
    proc = run_cli("predict", "--image", str(colour_photos / "red-disc.png"), "--query", "左上にある赤い物はどこですか",
                   "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(warnings) == 1 and warnings[0].startswith("warning: ") and "English vocabulary" in warnings[0]
    english = run_cli("predict", "--image", str(colour_photos / "red-disc.png"), "--query", "something red", "--out", str(out))
    assert english.stderr.strip() == ""


def test_ctrl_c_in_a_folder_predict_with_heatmaps_changes_nothing(out, photo, tmp_path):
    """Ctrl-C while a folder's heatmaps are being written: the heatmaps this run wrote are removed
    (and the folder it made), no JSON, the line says nothing was changed, and the rerun works."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    from conftest import REPO

    folder = tmp_path / "photos"
    folder.mkdir()
    shutil.copy(photo, folder / "p0000.jpg")
    for i in range(1, 200):
        os.link(folder / "p0000.jpg", folder / f"p{i:04d}.jpg")
    args = [sys.executable, "-m", "invoke", "predict", "--image", str(folder), "--query", "the top left", "--out",
            str(out), "--json", str(tmp_path / "all.jsonl"), "--heatmap", str(tmp_path / "heat")]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    # heatmaps are saved into the run's hidden staging folder inside heat/ and linked at the end
    while time.monotonic() < deadline and len(list((tmp_path / "heat").glob(".*/*.png"))) < 5 and proc.poll() is None:
        time.sleep(0.1)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 130 and "nothing was changed" in err, err
    assert not (tmp_path / "heat").exists() and not (tmp_path / "all.jsonl").exists()
    again = run_cli("predict", "--image", str(folder), "--query", "the top left", "--out", str(out),
                    "--heatmap", str(tmp_path / "heat"), timeout=900)
    assert again.returncode == 0, again.stderr[-2000:]
    assert len(list((tmp_path / "heat").glob("*.heatmap.png"))) == 200


# ------------------------------------------------------------------ issue 29: predict's inputs and outputs


def _in_process(*argv):
    from test_cli_errors import invoke

    return invoke("predict", *argv)


def _refused(code, stdout, err) -> str:
    """One line, exit 2, and the model never ran (its description is the first thing printed)."""
    from test_cli_errors import one_line_error

    line = one_line_error(code, err)
    assert "photo " not in stdout and "weights:" not in stdout, stdout
    return line


@pytest.fixture
def own_photo(photo, tmp_path):
    """A copy of the photo per test: a regression that overwrites it spoils nothing else."""
    import shutil

    return Path(shutil.copy(photo, tmp_path / "cat.jpg"))


OVER_INPUT = ["heatmap = photo", "heatmap = ./photo", "heatmap = link to photo", "heatmap = hard link to photo",
              "json = photo", "json = query embedding", "json = OUT/manifest.json", "heatmap = OUT/onnx/heat.png",
              "json = the state beside OUT", "json = heatmap", "json = OUT through a link to it"]


@pytest.mark.parametrize("case", OVER_INPUT)
def test_predict_never_writes_over_an_input_or_into_an_output_folder(case, out, own_photo, tmp_path, monkeypatch):
    import os

    from test_escapes import tree

    from arrcoc_edge.publishing.folder_state import state_dir

    np.save(tmp_path / "q.npy", np.ones(384, np.float32) / 20)
    option, _, where = case.partition(" = ")
    value = {"photo": str(own_photo), "./photo": "./cat.jpg", "query embedding": str(tmp_path / "q.npy"),
             "OUT/manifest.json": str(out / "manifest.json"), "OUT/onnx/heat.png": str(out / "onnx" / "heat.png"),
             "the state beside OUT": str(state_dir(out) / "p.json"), "heatmap": str(tmp_path / "same.png"),
             "OUT through a link to it": str(tmp_path / "link-to-out" / "p.json")}.get(where)
    if where == "link to photo":
        os.symlink(own_photo, value := str(tmp_path / "link.jpg"))
    elif where == "hard link to photo":
        os.link(own_photo, value := str(tmp_path / "hard.jpg"))
    elif where == "OUT through a link to it":
        os.symlink(out, tmp_path / "link-to-out")
    monkeypatch.chdir(tmp_path)
    photo_bytes, published = own_photo.read_bytes(), tree(out.resolve())
    query = ["--query-embedding", str(tmp_path / "q.npy")] if where == "query embedding" else ["--query", "a cat"]
    extra = ["--heatmap", value] if where == "heatmap" else []
    line = _refused(*_in_process("--image", str(own_photo), *query, "--out", str(out), f"--{option}", value, *extra))
    assert own_photo.read_bytes() == photo_bytes and tree(out.resolve()) == published
    assert ".generations" not in line  # the folder as the user named it, never the state path
    assert {"photo": "input file", "./photo": "input file", "link to photo": "input file",
            "hard link to photo": "input file", "query embedding": "input file", "heatmap": "one file"}.get(
        where, "is inside the output folder ") in line, line


@pytest.mark.parametrize("case", ["json in a missing folder", "heatmap in a missing folder", "json on /dev/full",
                                  "heatmap on /dev/full", "heatmap .xyz", "heatmap without extension",
                                  "heatmap .json", "json is a folder", "heatmap in a read-only folder"])
def test_predict_outputs_are_checked_before_the_model_runs(case, out, own_photo, tmp_path):
    import os

    option = case.split()[0]
    value = {"json in a missing folder": tmp_path / "missing" / "p.json",
             "heatmap in a missing folder": tmp_path / "missing" / "sub" / "p.png", "json on /dev/full": "/dev/full",
             "heatmap on /dev/full": "/dev/full", "heatmap .xyz": tmp_path / "p.xyz",
             "heatmap without extension": tmp_path / "heat", "heatmap .json": tmp_path / "p.json",
             "json is a folder": tmp_path, "heatmap in a read-only folder": tmp_path / "ro" / "p.png"}[case]
    if case == "heatmap in a read-only folder":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders")
        (tmp_path / "ro").mkdir(mode=0o555)
    line = _refused(*_in_process("--image", str(own_photo), "--query", "a cat", "--out", str(out),
                                 f"--{option}", str(value)))
    want = {"missing": "does not exist", "/dev/full": "is a device", ".xyz": "not an image format",
            "without": "not an image format", ".json": "not an image format", "folder": "is a folder",
            "read-only": "cannot write"}
    assert next(v for k, v in want.items() if k in case) in line, line
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("case", ["query not UTF-8", "query lone surrogate", "empty .npy", "empty .npz",
                                  ".npz of one array", "3e38", "-3e38", "1e5", "no --image", "empty --image"])
def test_predict_inputs_are_one_line(case, out, own_photo, tmp_path):
    args = ["--image", str(own_photo), "--out", str(out)]
    q = tmp_path / "q.npy"
    if case == "query not UTF-8":
        args += ["--query", b"\xff\xfe".decode("utf-8", "surrogateescape")]  # what $'\xff\xfe' arrives as
    elif case == "query lone surrogate":
        args += ["--query", "cat \ud800"]
    elif case == "empty .npy":
        q.write_bytes(b"")
    elif case == "empty .npz":
        np.savez(q.with_suffix(".npz"))
        q = q.with_suffix(".npz")
    elif case == ".npz of one array":
        np.savez(q.with_suffix(".npz"), q=np.ones(384, np.float32))
        q = q.with_suffix(".npz")
    elif case in ("3e38", "-3e38", "1e5"):
        np.save(q, np.full(384, float(case), np.float32))
    elif case == "no --image":
        args = ["--query", "a cat", "--out", str(out)]
    elif case == "empty --image":
        args = ["--image", "", "--query", "a cat", "--out", str(out)]
    if "query" not in case and "image" not in case:
        args += ["--query-embedding", str(q)]
    line = _refused(*_in_process(*args))
    want = {"query not UTF-8": "not UTF-8", "query lone surrogate": "not UTF-8", "empty .npy": "not a readable",
            "empty .npz": "archive", ".npz of one array": "archive", "3e38": "order 1", "-3e38": "order 1",
            "1e5": "order 1", "no --image": "--image is required", "empty --image": "--image is empty"}[case]
    assert want in line, line


def test_non_finite_outputs_are_refused():
    from arrcoc_edge.errors import InputError
    from arrcoc_edge.frontends.predict import Prediction, check_finite

    for bad in (np.nan, np.inf, -np.inf):
        relevance = np.zeros(196, np.float32)
        relevance[3] = bad
        p = Prediction(14, 64, (30, 30), "onnx", relevance, np.arange(64), np.full(3, 1 / 3, np.float32), 1.0)
        with pytest.raises(InputError, match="NaN or infinite"):
            check_finite(p)
        p.relevance, p.weights = np.zeros(196, np.float32), np.array([bad, 0.5, 0.5], np.float32)
        with pytest.raises(InputError, match="NaN or infinite"):
            check_finite(p)


@pytest.mark.parametrize("requested,want", [("web", "but has no runtime in Python (static browser demo"),
                                            ("coreml", "'coreml' needs macOS (CoreML runtime): it has no runtime in this process"),
                                            ("tensorrt", "is not published in"), ("ptl:int8", "not a verified variant")])
def test_a_runtime_that_cannot_run_here_is_named_truly_with_the_user_s_folder(requested, want, tmp_path):
    from arrcoc_edge import targets as table
    from arrcoc_edge.errors import ArrcocError
    from arrcoc_edge.frontends.predict import choose_runtime

    manifest = {"targets": {"web": {"status": "published"}, "coreml": {"status": "unverified"},
                            "onnx": {"status": "published"}, "ptl": {"status": "published"}}}
    manifest["targets"]["coreml"]["status"] = "published"
    names = {"onnx": ("onnx", "fp32"), "ptl": ("ptl", "fp32")}
    generation = tmp_path / ".out.arrcoc-edge" / ".generations" / "g1"
    with pytest.raises(ArrcocError) as caught:
        choose_runtime(requested, names, generation, manifest, table.TARGETS, shown=tmp_path / "out")
    line = caught.value.one_line()
    assert want in line and str(tmp_path / "out") in line and ".generations" not in line, line
    assert "pip install" not in line


def test_predict_prints_no_third_party_lines(out, photo):
    """The lite interpreter's UserWarning (targets/ptl.py) no longer reaches the terminal."""
    proc = run_cli("predict", "--image", str(photo), "--query", "a cat", "--out", str(out), "--runtime", "ptl")
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr[-2000:]
    assert "Warning" not in proc.stdout and proc.stdout.startswith("photo 300 x 451 px")


def test_a_write_that_fails_leaves_the_previous_heatmap_and_says_so(out, photo, tmp_path):
    """A file-size limit (as a full device would) stops the heatmap mid-write: the previous file
    stays whole, no temporary file is left, and the line says what happened (exit 2, not 1)."""
    import resource
    import subprocess
    import sys

    from conftest import REPO

    heat = tmp_path / "heat.png"
    heat.write_bytes(b"the previous heatmap")

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (16_000, 16_000))  # the JSON fits, the PNG does not

    proc = subprocess.run([sys.executable, "-m", "invoke", "predict", "--image", str(photo), "--query", "a cat",
                           "--out", str(out), "--json", str(tmp_path / "p.json"), "--heatmap", str(heat)],
                          cwd=REPO, capture_output=True, text=True, timeout=300, preexec_fn=limit,
                          restore_signals=False)  # SIGXFSZ stays ignored: the write fails with EFBIG
    line = one_line(proc)
    assert "cannot write" in line and str(heat) in line and "left as it was" in line
    assert heat.read_bytes() == b"the previous heatmap" and sorted(p.name for p in tmp_path.iterdir()) == ["heat.png", "p.json"]
    assert json.loads((tmp_path / "p.json").read_text())["grid"] == 14


# ------------------------------------------------------------------ --runtime TARGET is the declared primary (issue 35, 5)


@pytest.fixture(scope="module")
def int8_out(shared_build):
    """The session's `invoke build --target onnx-int8` (conftest shared_build, also read by
    test_onnx_int8.py and test_merge.py)."""
    return shared_build("onnx-int8").out


def test_runtime_onnx_int8_runs_its_int8_model_not_the_first_variant_by_name(int8_out, photo, golden, tmp_path):
    """`--runtime onnx-int8` runs the variant the manifest declares primary (the INT8 model), not
    `fp32-ort`, which sorts first among its variants (on 43f3c5d it ran fp32-ort under the label)."""
    entry = json.loads((int8_out / "manifest.json").read_text())["targets"]["onnx-int8"]
    primary = entry["primary_variant"]
    assert primary != "fp32-ort" and sorted(entry["variants"])[0] == "fp32-ort"
    assert entry["variants"][primary]["info"]["quantized_node_count"] > 0  # a quantised model
    np.save(tmp_path / "q.npy", golden.heldout.queries[0])
    results = {}
    for runtime in ("onnx-int8", f"onnx-int8:{primary}", "onnx-int8:fp32-ort"):
        proc = run_cli("predict", "--image", str(photo), "--query-embedding", str(tmp_path / "q.npy"),
                       "--out", str(int8_out), "--runtime", runtime, "--json", str(tmp_path / "r.json"))
        assert proc.returncode == 0, proc.stderr[-2000:]
        results[runtime] = np.array(json.loads((tmp_path / "r.json").read_text())["relevance"])
    assert np.array_equal(results["onnx-int8"], results[f"onnx-int8:{primary}"])
    assert not np.array_equal(results["onnx-int8"], results["onnx-int8:fp32-ort"])


def test_a_manifest_without_primary_variant_still_names_the_primary(int8_out):
    """Manifests written before `primary_variant`: the primary is the variant whose parity the
    entry carries as its own; with nothing to tell, the bare name is not offered at all."""
    from arrcoc_edge.frontends.predict import runnable
    from arrcoc_edge.targets import TARGETS

    data = json.loads((int8_out / "manifest.json").read_text())
    primary = data["targets"]["onnx-int8"].pop("primary_variant")
    assert runnable(data, TARGETS)["onnx-int8"] == ("onnx-int8", primary)
    data["targets"]["onnx-int8"]["parity"] = None
    names = runnable(data, TARGETS)
    assert "onnx-int8" not in names and f"onnx-int8:{primary}" in names and "onnx-int8:fp32-ort" in names


@pytest.mark.parametrize("text", ["\u200b\u200b", "\ufeff", " \u200d\u2060 ", "\u200e\t\x07"])
def test_a_query_of_only_invisible_characters_is_one_line_before_anything_loads(text, tmp_path):
    """Zero-width spaces, joiners, a BOM or direction marks alone: the tokenizer drops them all, so
    the model would be asked about nothing; the command says so in one line, exit 2."""
    from arrcoc_edge.errors import InputError
    from arrcoc_edge.frontends.queries import check_query_text

    with pytest.raises(InputError, match="no visible characters"):
        check_query_text(text)
    line = one_line(run_cli("predict", "--image", str(tmp_path / "none.jpg"), "--query", text, "--out", str(tmp_path / "o")))
    assert "--query has no visible characters" in line


@pytest.mark.parametrize("text", ["a\u200bb", "赤いもの", "\u200bsomething red"])
def test_a_query_with_visible_characters_among_invisible_ones_is_taken(text):
    from arrcoc_edge.frontends.queries import check_query_text

    check_query_text(text)
