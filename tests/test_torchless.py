"""Inference without torch (issue 42): `arrcoc_edge.load` + `predict(photo, "a sentence")` on the onnx
and onnx-int8 runtimes encodes the sentence with the folder's published query encoder
(text-encoder/ ONNX + tokenizer.json) through onnxruntime and `tokenizers`, and its numbers equal
the sentence-transformers route within the text-encoder gate. Plus the API faults found on the way.
"""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO, photo_file

pytestmark = pytest.mark.slow  # builds onnx, onnx-int8 and text-encoder once (published_with_encoder)

HEAVY = ("torch", "sentence_transformers", "transformers")


def run_child(code: str) -> dict:
    """`code` in a fresh interpreter (the worktree first on sys.path); its last stdout line is JSON."""
    prelude = f"import sys, json; sys.path.insert(0, {str(REPO)!r})\n"
    proc = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("runtime", ["onnx", "onnx-int8"])
def test_a_sentence_is_answered_without_importing_torch(published_with_encoder, tmp_path, runtime):
    photo = photo_file(tmp_path)
    found = run_child(f"""
import arrcoc_edge
model = arrcoc_edge.load({str(published_with_encoder)!r}, {runtime!r})
p = model.predict({str(photo)!r}, "something red")
q = model.predict({str(photo)!r}, "where is the astronaut?")
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
print(json.dumps({{"heavy": heavy, "top": p.top_k[0], "other": q.top_k[0], "runtime": p.runtime}}))
""")
    assert found["heavy"] == [], found["heavy"]
    assert found["runtime"].startswith(runtime)


def test_import_pipeline_imports_no_torch():
    found = run_child(f"""
import arrcoc_edge, arrcoc_edge.frontends.api, arrcoc_edge.frontends.commands, arrcoc_edge.targets
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})))
""")
    assert found == []


def test_sentences_equal_the_sentence_transformers_route_within_the_gate(published_with_encoder, tmp_path):
    """Cosine to sentence-transformers >= the text-encoder's FP32 gate on its own sentences, and the
    relevance model's outputs from the two vectors within the LOSSLESS gate."""
    import arrcoc_edge
    from arrcoc_edge.relevance.text_encoder import embed
    from arrcoc_edge.stages.parity import LOSSLESS
    from arrcoc_edge.targets.text_encoder.target import FP32_COSINE_MIN, SENTENCES

    sentences = [s for s in SENTENCES if s.strip()]
    photo = photo_file(tmp_path)
    with arrcoc_edge.load(published_with_encoder, "onnx") as model:
        ours = np.stack([model.query_vector(s) for s in sentences])
        reference = embed(sentences)
        cosine = (ours * reference).sum(axis=1)
        assert cosine.min() >= FP32_COSINE_MIN, (cosine.min(), sentences[int(cosine.argmin())])
        for text, vector in zip(sentences[:8], reference[:8]):
            a, b = model.predict(photo, text), model.predict(photo, vector)
            assert np.abs(a.relevance - b.relevance).max() <= LOSSLESS.maxima["relevance_max_abs"]
            assert max(abs(a.weights[k] - b.weights[k]) for k in a.weights) <= LOSSLESS.maxima["weights_max_abs"]
            assert set(a.top_k) == set(b.top_k)


def test_query_vector_is_what_predict_takes_and_close_frees(published_with_encoder, tmp_path):
    import arrcoc_edge
    photo = photo_file(tmp_path)
    model = arrcoc_edge.load(published_with_encoder, "onnx")
    vector = model.query_vector("something red")
    assert vector.shape == (model.query_dim,) and vector.dtype == np.float32
    p = model.predict(photo, vector)
    assert p.top_k == model.predict(photo, "something red").top_k
    assert p.k == len(p.top_k) == p.to_json()["top_k"] == model.top_k  # K, as the JSON names it
    model.close()
    with pytest.raises(arrcoc_edge.InputError, match="closed"):
        model.predict(photo, vector)
    with pytest.raises(arrcoc_edge.InputError, match="closed"):
        model.query_vector("a new sentence")


def test_predict_many_takes_a_folder_and_keeps_order(published_with_encoder, tmp_path):
    import arrcoc_edge
    folder = tmp_path / "photos"
    folder.mkdir()
    photos = [photo_file(folder, f"p{i:02d}.jpg", (320 + 16 * (i % 3), 240), seed=i) for i in range(11)]
    (folder / "broken.jpg").write_bytes(b"not a jpeg")
    skipped = []
    with arrcoc_edge.load(published_with_encoder, "onnx") as model:
        many = list(model.predict_many(str(folder), "something red", batch_size=4,
                                       on_error=lambda photo, exc: skipped.append(photo)))
        one_by_one = [model.predict(p, "something red") for p in photos]
    assert [p.source.name for p in many] == [p.name for p in photos]
    assert [p.top_k for p in many] == [p.top_k for p in one_by_one]
    assert [getattr(p, "name", p) for p in skipped] == ["broken.jpg"]


def test_api_errors_name_no_cli_flag_and_a_missing_folder_says_so(published_with_encoder, tmp_path):
    import arrcoc_edge
    with pytest.raises(arrcoc_edge.InputError) as missing:
        arrcoc_edge.load(tmp_path / "nowhere")
    assert "does not exist" in missing.value.problem
    with arrcoc_edge.load(published_with_encoder, "onnx") as model:
        with pytest.raises(arrcoc_edge.InputError) as empty:
            model.predict(photo_file(tmp_path), "   ")
        with pytest.raises(arrcoc_edge.InputError) as folder:
            list(model.predict_many(tmp_path / "no-such-folder", "x"))
    assert "--" not in empty.value.one_line() and "query" in empty.value.problem
    assert "does not exist" in folder.value.problem


def test_a_runtime_that_is_not_installed_names_the_install_line(published_with_encoder, monkeypatch):
    import arrcoc_edge
    from arrcoc_edge import targets
    monkeypatch.setattr(type(targets.TARGETS["onnx-int8"]), "runtime_modules", ("no_such_runtime_module",))
    with pytest.raises(arrcoc_edge.InputError) as info:
        arrcoc_edge.load(published_with_encoder, "onnx-int8")
    # a checkout: the .venv line (an installed package gets `pip install 'arrcoc-edge[...]'`, tests/test_wheel.py)
    assert ".venv/bin/pip install -e '.[int8]'" in info.value.fix, info.value.one_line()


def test_the_published_encoder_runs_the_bytes_it_checked(published_with_encoder, tmp_path, monkeypatch):
    """Issue 43 (finding 3's gap on the file a sentence goes through): the encoder's .onnx and
    tokenizer.json are swapped right after their sha256 check; the sentence is still encoded by the
    checked bytes (before, onnxruntime reopened the path and read the swapped file)."""
    import os
    import shutil
    from pathlib import Path

    import arrcoc_edge
    from arrcoc_edge.publishing import reading

    folder = tmp_path / "out"
    shutil.copytree(published_with_encoder, folder, symlinks=True)
    with arrcoc_edge.load(folder, "onnx") as model:
        verified = model.query_vector("something red")

    real, swapped = reading.check_variant_files, []

    def check_then_swap(out, entry, variant):
        found = real(out, entry, variant)
        for rel in entry["variants"][variant]["files"]:
            if rel.startswith("text-encoder/"):
                target = Path(out) / rel
                fresh = target.with_name(target.name + ".swap")
                fresh.write_bytes(b"not the checked file")
                os.replace(fresh, target)
                swapped.append(Path(rel).name)
        return found

    monkeypatch.setattr(reading, "check_variant_files", check_then_swap)
    with arrcoc_edge.load(folder, "onnx") as model:
        again = model.query_vector("something red")
    assert "tokenizer.json" in swapped and any(name.endswith(".onnx") for name in swapped), swapped
    assert np.array_equal(again, verified)


def test_sentences_true_loads_the_encoder_beside_the_model_with_the_same_answer(published_with_encoder, tmp_path):
    """load(..., sentences=True) (what `arrcoc-edge predict --query` calls): the encoder loads on a
    thread while the model does; the answer is the lazy route's, and close() right after load waits
    for that thread and frees both."""
    import arrcoc_edge
    photo = photo_file(tmp_path)
    with arrcoc_edge.load(published_with_encoder, "onnx") as model:
        lazy = model.predict(photo, "something red")
    with arrcoc_edge.load(published_with_encoder, "onnx", sentences=True) as model:
        ahead = model.predict(photo, "something red")
    assert ahead.top_k == lazy.top_k and np.array_equal(ahead.relevance, lazy.relevance)
    model = arrcoc_edge.load(published_with_encoder, "onnx", sentences=True)
    model.close()
    with pytest.raises(arrcoc_edge.InputError, match="closed"):
        model.predict(photo, "something red")
