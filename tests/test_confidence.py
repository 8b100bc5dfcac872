"""The confidence as every Python reader gives it (the API, `invoke predict`'s JSON line and summary,
the folder/batch line): the model's `evidence` output through the published folder's
calibration.json, and an honest "no calibration in this folder" (confidence None) without one.

The publish here is made by hand around a small real ONNX graph with the contract's names
(tests/contract_publish.py: evidence = sigmoid(mean(query)) four times), so the expected confidence
is known in closed form; seconds, fast tier. The shipped model's own evidence in every target is
held to parity by the build (tests/test_gate.py, the targets' tests)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

import arrcoc_edge
from arrcoc_edge.errors import InputError
from arrcoc_edge.relevance.evidence import CALIBRATION_FILE, Calibration

from tests.contract_publish import DIM, contract_model, publish

COEF, BIAS = (8.0, -2.0, 1.0, 3.0), -6.0  # a calibration with known numbers: the test's own


def _query(level_logit: float) -> np.ndarray:
    """A query whose mean is `level_logit`: the contract graph's evidence is sigmoid of it."""
    return np.full(DIM, level_logit, np.float32)


def _expected(level_logit: float) -> float:
    level = float(np.float32(1 / (1 + math.exp(-level_logit))))
    return 1 / (1 + math.exp(-(BIAS + sum(COEF) * level)))


def _calibrated(folder):
    calibration = Calibration(COEF, BIAS, {"photos": "written by tests/test_confidence.py"})
    (folder / CALIBRATION_FILE).write_text(json.dumps(calibration.to_dict()))
    return folder


def test_the_api_reads_the_folder_s_calibration(tmp_path):
    out = _calibrated(publish(tmp_path / "out", contract_model()))
    photo = np.full((40, 56, 3), 90, np.uint8)
    with arrcoc_edge.load(out) as model:
        high, low = model.predict(photo, _query(1.0)), model.predict(photo, _query(-1.0))
    assert high.confidence == pytest.approx(_expected(1.0), abs=1e-6) and high.confidence > 0.5
    assert low.confidence == pytest.approx(_expected(-1.0), abs=1e-6) and low.confidence < 0.5
    assert high.stands_out is True and low.stands_out is False
    assert list(high.evidence) == ["top_mean", "mean", "min", "max"]
    assert high.evidence["max"] == pytest.approx(1 / (1 + math.exp(-1.0)), abs=1e-6)
    assert high.verdict == f"stands out: confidence {round(100 * _expected(1.0))}%"
    assert low.verdict == f"nothing in this photo stands out: confidence {round(100 * _expected(-1.0))}%"
    data = high.to_json()
    assert data["confidence"] == pytest.approx(_expected(1.0), abs=1e-6) and data["stands_out"] is True
    assert "contrast" not in data and set(data["evidence"]) == {"top_mean", "mean", "min", "max"}


def test_a_folder_without_calibration_gives_no_confidence(tmp_path):
    out = publish(tmp_path / "out", contract_model())
    with arrcoc_edge.load(out) as model:
        p = model.predict(np.full((40, 56, 3), 90, np.uint8), _query(1.0))
    assert p.evidence is not None  # the model's output is there; only its calibration is not
    assert p.confidence is None and p.stands_out is None
    assert p.verdict == "confidence unknown: no calibration in this folder"
    data = p.to_json()
    assert data["confidence"] is None and data["stands_out"] is None and "no calibration" in data["verdict"]


def test_a_model_published_before_the_evidence_output_gives_no_confidence(tmp_path):
    out = _calibrated(publish(tmp_path / "out", contract_model(evidence=False)))
    with arrcoc_edge.load(out) as model:
        p = model.predict(np.full((40, 56, 3), 90, np.uint8), _query(1.0))
    assert p.evidence is None and p.confidence is None and p.stands_out is None
    assert "no evidence output (published by an older build)" in p.verdict


@pytest.mark.parametrize("content, phrase", [
    ("{not json", "is not JSON"),
    (json.dumps({"format": "something else"}), "is not a calibration this version reads"),
    (json.dumps({**Calibration(COEF, BIAS).to_dict(), "coef": [1.0, "x", 2.0, 3.0]}), "finite coefficients"),
])
def test_a_calibration_file_that_is_not_one_is_one_typed_line(tmp_path, content, phrase):
    out = publish(tmp_path / "out", contract_model())
    (out / CALIBRATION_FILE).write_text(content)
    with pytest.raises(InputError) as err:
        arrcoc_edge.load(out)
    line = err.value.one_line()
    assert phrase in line and CALIBRATION_FILE in line and "rebuild" in line and "\n" not in line


def test_predict_prints_and_writes_the_confidence(tmp_path, cli):
    out = _calibrated(publish(tmp_path / "out", contract_model()))
    photo = tmp_path / "grey.png"
    from PIL import Image

    Image.fromarray(np.full((40, 56, 3), 90, np.uint8)).save(photo)
    np.save(tmp_path / "q.npy", _query(1.0))
    proc = cli("predict", "--out", str(out), "--image", str(photo), "--query-embedding", str(tmp_path / "q.npy"),
               "--json", str(tmp_path / "p.json"))
    assert proc.returncode == 0, proc.stderr
    shown = f"{round(100 * _expected(1.0))}%"
    assert f"stands out for this query embedding: confidence {shown}" in proc.stdout
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["confidence"] == pytest.approx(_expected(1.0), abs=1e-6) and data["stands_out"] is True

    (out / CALIBRATION_FILE).unlink()  # the same folder as an older build published it
    proc = cli("predict", "--out", str(out), "--image", str(photo), "--image", str(photo), "--query-embedding",
               str(tmp_path / "q.npy"), "--json", str(tmp_path / "many.jsonl"))
    assert proc.returncode == 0, proc.stderr
    assert "confidence unknown: no calibration in this folder" in proc.stdout
    rows = [json.loads(x) for x in (tmp_path / "many.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["confidence"] is None and r["stands_out"] is None for r in rows)


def test_serve_hands_the_page_the_publish_s_calibration(tmp_path):
    """`invoke serve` serves web/ of a publish: the page's calibration.json is the one beside
    manifest.json, `null` when the publish has none (a 404 would be a console error in the page),
    never a link out of the publish nor any other file of it."""
    import os
    import urllib.error
    import urllib.request

    from arrcoc_edge.serve import serving

    (tmp_path / "web").mkdir()
    (tmp_path / "web" / "index.html").write_text("page")
    (tmp_path / "manifest.json").write_text("{}")
    with serving(tmp_path / "web") as url:
        assert json.loads(urllib.request.urlopen(url + CALIBRATION_FILE).read()) is None
        (tmp_path / CALIBRATION_FILE).write_text(json.dumps(Calibration(COEF, BIAS).to_dict()))
        assert Calibration.from_dict(json.loads(urllib.request.urlopen(url + CALIBRATION_FILE).read())).bias == BIAS
        for name, target in (("manifest.json", None), (CALIBRATION_FILE, tmp_path / "secret")):
            if target is not None:
                target.write_text("secret")
                (tmp_path / CALIBRATION_FILE).unlink()
                os.symlink(target, tmp_path / CALIBRATION_FILE)
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(url + name)
            assert refused.value.code == 404


# ------------------------------------------------------------------ every target's parity (slow: the session's shared builds)

SHARED = {"onnx,ptl": ("onnx", "ptl"), "executorch,ptl": ("executorch",),
          "onnx,onnx-int8,text-encoder,tensorrt,web": ("onnx-int8", "text-encoder", "web"),
          "android,ios": ("coreml", "android", "ios")}


@pytest.mark.slow
@pytest.mark.parametrize("targets", list(SHARED))
def test_every_target_holds_the_evidence_output_to_its_gate(shared_build, targets):
    """Each variant with parity numbers records the evidence's in the manifest and its gate limits
    it: every graph every target publishes has the output, run in its real runtime (CoreML: the
    NumPy MIL evaluator's reference check; the app targets: their artifacts' own numbers)."""
    manifest = json.loads((shared_build(targets).out / "manifest.json").read_text())
    for name in SHARED[targets]:
        measured = {v: e["parity"] for v, e in manifest["targets"][name]["variants"].items()
                    if "topk_overlap_min" in (e.get("parity") or {}).get("metrics", {})}
        assert measured, f"{name} measured no variant's parity"
        for variant, parity in measured.items():
            metrics, limit = parity["metrics"], parity["gate"]["max"].get("evidence_max_abs")
            assert {"evidence_max_abs", "evidence_mean_abs"} <= set(metrics), (name, variant)
            assert limit is not None and metrics["evidence_max_abs"] <= limit, (name, variant, metrics["evidence_max_abs"])
