"""Whether anything stands out (arrcoc_edge/relevance/evidence.py) and what predict prints: the
fast parts (no build). The real runtime's answers on real photos are in tests/test_predict.py."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent


def test_contrast_is_the_same_before_and_after_the_per_photo_normalisation():
    """The model min-maxes its balanced map per photo; the contrast of the published relevance is
    the contrast of the map before that, exactly (an affine map keeps ratios of differences)."""
    from arrcoc_edge.relevance.evidence import contrast
    from arrcoc_edge.relevance.model import minmax_per_sample

    import torch

    rng = np.random.default_rng(0)
    for scale, offset in ((0.003, 0.5), (1.0, 0.0), (40.0, -7.0)):
        before = torch.from_numpy(rng.random((1, 196)) * scale + offset).float()
        after = minmax_per_sample(before)
        assert abs(contrast(before.numpy()) - contrast(after.numpy())) < 1e-5
    assert contrast(np.zeros(196, np.float32)) == 0.0  # a flat map singles nothing out


def test_a_single_region_stands_out_and_a_smooth_spread_does_not():
    from arrcoc_edge.relevance.evidence import THRESHOLD, contrast, stands_out

    blob = np.zeros((14, 14), np.float32)
    blob[2:5, 9:12] = 1.0  # one region, the rest at the bottom: what "something red" finds on a red disc
    ramp = np.linspace(0.0, 1.0, 196, dtype=np.float32)  # min-max stretched gradient: nothing particular
    assert stands_out(contrast(blob)) and contrast(blob) > THRESHOLD
    assert not stands_out(contrast(ramp))


def test_the_page_uses_the_same_share_and_threshold():
    from arrcoc_edge.relevance import evidence

    app = (REPO / "web" / "app.js").read_text()
    found = re.search(r"const STANDS_OUT = \{ share: 1 / (\d+), threshold: ([\d.]+) \};", app)
    assert found, "web/app.js has no STANDS_OUT constant"
    assert abs(1 / int(found.group(1)) - evidence.TOP_SHARE) < 1e-12
    assert float(found.group(2)) == evidence.THRESHOLD


def _record(relevance: np.ndarray):
    from arrcoc_edge.frontends.predict import Prediction

    topk = np.argsort(-relevance, kind="stable")[:64]
    return Prediction(14, 64, (768, 1024), "onnx (onnxruntime fp32)", relevance, topk,
                      np.array([0.001, 0.002, 0.997], np.float32), 0.4)


def test_the_summary_shows_the_strongest_cells_where_they_are_and_the_answer():
    from arrcoc_edge.frontends.predict import SHOWN_CELLS, describe

    blob = np.zeros((14, 14), np.float32)
    blob[2:5, 10:13] = 0.95  # one region in the top right, its strongest cell (2,11)
    blob[2, 11] = 1.0
    blob = blob.ravel()
    text = describe(_record(blob), "something red")
    assert "stands out for 'something red'" in text and "nothing in this photo" not in text
    assert "(2,11: 1.000) top right" in text
    assert text.count("\n  (") == SHOWN_CELLS  # the strongest few, not the 64
    assert "weights: information 0.001, perspectival 0.002, participatory 0.997" in text
    every = describe(_record(blob), "something red", every_cell=True)
    assert "top-64 cells (row, col: relevance)" in every and every.count("(") - every.count("(height") >= 64

    flat = describe(_record(np.linspace(0, 1, 196, dtype=np.float32)), "something green")
    assert "nothing in this photo stands out for 'something green'" in flat
    assert "for this query embedding" in describe(_record(np.linspace(0, 1, 196, dtype=np.float32)))


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
