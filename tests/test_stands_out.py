"""Whether what a query asks for is in the photo (arrcoc_edge/relevance/evidence.py: the evidence
output through a calibration) and what predict prints: the fast parts (no build). The Python
readers on a publish are in tests/test_confidence.py, the real runtime on real photos in
tests/test_predict.py."""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
COEF, BIAS = (8.0, -2.0, 1.0, 3.0), -6.0  # the test's own numbers, not a fitted calibration


def test_the_calibration_is_a_logistic_model_of_the_evidence():
    from arrcoc_edge.relevance.evidence import Calibration

    calibration = Calibration(COEF, BIAS)
    rows = np.array([[0.55, 0.50, 0.45, 0.57], [0.9, 0.6, 0.3, 0.95], [0, 0, 0, 0]], np.float32)
    want = [1 / (1 + math.exp(-(BIAS + float(np.dot(COEF, r.astype(np.float64)))))) for r in rows]
    np.testing.assert_allclose(calibration.confidence(rows), want, rtol=1e-12)
    assert Calibration.from_dict(calibration.to_dict()) == calibration
    with pytest.raises(ValueError):
        calibration.confidence(np.zeros(3))


@pytest.mark.parametrize("value, shown", [(0.873, "87%"), (0.5, "50%"), (0.004, "<1%"), (0.996, ">99%"),
                                          (0.0, "0%"), (1.0, "100%")])
def test_a_confidence_is_a_percentage_that_never_rounds_to_certainty(value, shown):
    from arrcoc_edge.relevance.evidence import percent

    assert percent(value) == shown


def test_the_verdict_says_stands_out_at_one_half_and_never_guesses():
    from arrcoc_edge.relevance.evidence import NO_CALIBRATION, STANDS_OUT, verdict

    assert STANDS_OUT == 0.5
    assert verdict(0.5) == "stands out: confidence 50%"
    assert verdict(0.49, " for 'something red'") == "nothing in this photo stands out for 'something red': confidence 49%"
    assert verdict(None) == f"confidence unknown: {NO_CALIBRATION}"


def test_the_page_uses_the_same_strongest_share_and_calibration_format():
    from arrcoc_edge.relevance import evidence, signature

    app = (REPO / "web" / "app.js").read_text()
    share = re.search(r"const STRONGEST_SHARE = 1 / (\d+);", app)
    assert share and abs(1 / int(share.group(1)) - signature.STRONGEST_SHARE) < 1e-12
    found = re.search(r"const CALIBRATION = \{ file: '([^']+)', format: '([^']+)', standsOut: ([\d.]+) \};", app)
    assert found, "web/app.js has no CALIBRATION constant"
    assert found.groups() == (evidence.CALIBRATION_FILE, evidence.CALIBRATION_FORMAT, str(evidence.STANDS_OUT))
    assert "THRESHOLD" not in app and "contrast(" not in app


def _record(relevance: np.ndarray, evidence=None, calibration=None):
    from arrcoc_edge.frontends.predict import Prediction

    topk = np.argsort(-relevance, kind="stable")[:64]
    return Prediction(14, 64, (768, 1024), "onnx (onnxruntime fp32)", relevance, topk,
                      np.array([0.001, 0.002, 0.997], np.float32), 0.4, evidence, calibration)


def test_the_summary_shows_the_strongest_cells_where_they_are_and_the_answer():
    from arrcoc_edge.frontends.predict import SHOWN_CELLS, describe
    from arrcoc_edge.relevance.evidence import Calibration

    blob = np.zeros((14, 14), np.float32)
    blob[2:5, 10:13] = 0.95  # one region in the top right, its strongest cell (2,11)
    blob[2, 11] = 1.0
    blob = blob.ravel()
    strong, weak = np.array([0.9, 0.6, 0.3, 0.95], np.float32), np.array([0.5, 0.5, 0.45, 0.52], np.float32)
    calibration = Calibration(COEF, BIAS)
    text = describe(_record(blob, strong, calibration), "something red")
    high = calibration.confidence(strong)
    assert f"stands out for 'something red': confidence {round(100 * float(high))}%" in text
    assert "nothing in this photo" not in text and "(2,11: 1.000) top right" in text
    assert text.count("\n  (") == SHOWN_CELLS  # the strongest few, not the 64
    assert "weights: information 0.001, perspectival 0.002, participatory 0.997" in text
    every = describe(_record(blob, strong, calibration), "something red", every_cell=True)
    assert "top-64 cells (row, col: relevance)" in every and every.count("(") - every.count("(height") >= 64

    flat = describe(_record(blob, weak, calibration), "something green")
    assert "nothing in this photo stands out for 'something green': confidence" in flat
    assert "the cells below are only the least unlikely" in flat
    unknown = describe(_record(blob, strong), "something red")
    assert "confidence unknown for 'something red': no calibration in this folder" in unknown
    assert "for this query embedding" in describe(_record(blob, weak, calibration))


@pytest.mark.parametrize("row,col,words", [(0, 0, "top left"), (0, 7, "top"), (7, 7, "centre"),
                                           (7, 13, "middle right"), (13, 0, "bottom left"), (13, 13, "bottom right")])
def test_a_cell_s_place_in_words(row, col, words):
    from arrcoc_edge.frontends.predict import where

    assert where(row, col, 14) == words


def test_a_query_mostly_outside_the_vocabulary_is_said_once():
    """The published encoder's tokenizer.json (all-MiniLM-L6-v2's, as the text-encoder target
    copies it): a Japanese query is mostly [UNK] and lone characters; English is not."""
    from tokenizers import Tokenizer

    from arrcoc_edge.frontends.queries import vocabulary_warning
    from arrcoc_edge.relevance.text_encoder import model_dir

    tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    line = vocabulary_warning(tokenizer, "左上にある赤い物はどこですか")
    assert line is not None and line.startswith("warning: ") and "\n" not in line and "English" in line
    for english in ("something red", "the top left", "où est le chat rouge?", "😀 red"):
        assert vocabulary_warning(tokenizer, english) is None, english


@pytest.mark.parametrize("target,needs", [("coreml", "macOS"), ("tensorrt", "NVIDIA GPU")])
def test_a_runtime_that_runs_only_elsewhere_says_what_it_needs(target, needs, tmp_path):
    """A folder whose manifest publishes CoreML or TensorRT (as a build on this host records them,
    unverified): the message names the host it needs, never a pip install."""
    from arrcoc_edge import targets as table
    from arrcoc_edge.errors import HostCapabilityError
    from arrcoc_edge.frontends.predict import choose_runtime

    manifest = {"targets": {target: {"status": "unverified", "reason": "no runtime on this host", "variants": {}}}}
    for requested, names in ((target, {}), (None, {}), (target, {"onnx": ("onnx", "fp32")})):
        with pytest.raises(HostCapabilityError) as caught:
            choose_runtime(requested, names, tmp_path, manifest, table.TARGETS)
        line = caught.value.one_line()
        assert needs in line and "pip install" not in line, line
