"""A typed query through the iOS app's path for a reference checkpoint built with --base-model (issue 38):
the app's Swift tokenizer (`invoke app-tokenize --app ios`) -> ArrcocCore's TokenMeanEncoder on the
shipped table file, run by `swift test` as the build runs it (targets/ios_app.py) -> the app's CoreML
relevance package in the NumPy MIL evaluator (no CoreML runtime here), against `invoke predict --query`
on the same photo (onnxruntime). The shipped checkpoint's CoreML MiniLM encoder: tests/test_ios.py."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli

QUERIES = ("where is the cat?", "the cat's eyes", "text and writing", "猫在哪里？", "Où est le chat ?",
           "a furry animal lying on the floor " * 60)


def swift_embeddings(app: Path, ids: list[list[int]], tmp: Path) -> list[list[float]]:
    """TokenMeanEncoder's embeddings of `ids`: the app bundle with typed_checks.json holding these ids
    (and table_query's numbers, which CoreTests hold Swift to), compiled and tested as the build does."""
    from arrcoc_edge.targets.ios import app as ios_app
    from arrcoc_edge.targets.ios import encoder as ios_encoder

    bundle, report = tmp / "bundle", tmp / "report"
    shutil.copytree(app, bundle, ignore=shutil.ignore_patterns("*.mlpackage"))
    encoder = json.loads((app / "contract.json").read_text())["typed_text"]["encoder"]
    checks = ios_encoder.write_swift_checks(bundle, ios_encoder.read_table(bundle / encoder["file"]), ids)
    # the copy's contract records the new typed_checks.json: the app takes a bundle file only as recorded
    from arrcoc_edge.relevance.digest import sha256_file
    from arrcoc_edge.targets.shared import mobile_contract

    contract = json.loads((bundle / "contract.json").read_text())
    contract["files"][checks.name] = {"bytes": checks.stat().st_size, "sha256": sha256_file(checks)}
    mobile_contract.write_contract(bundle / "contract.json", contract)
    record = ios_app.build_and_test(bundle, keep_report=report)
    if record["status"] != "passed":
        pytest.fail(f"iOS core not compiled/tested ({record['status']}): {record['reason']}", pytrace=False)
    return json.loads((report / "typed_text.json").read_text())


def test_token_mean_table_file_reads_back_and_computes_the_form():
    """The table file holds the form's arrays bit for bit, and table_query (the Swift arithmetic) is
    the form's own query (float32 numpy) within float32 rounding."""
    import tempfile

    from arrcoc_edge.targets.ios.encoder import read_table, table_query, write_table
    from arrcoc_edge.targets.text_encoder.qwen import TokenMeanForm

    rng = np.random.default_rng(3)
    basis, _ = np.linalg.qr(rng.standard_normal((24, 9)))
    tail = rng.standard_normal(24)
    tail -= basis @ (basis.T @ tail)
    form = TokenMeanForm(basis.T.astype(np.float32), rng.standard_normal((50, 9)).astype(np.float16),
                         rng.uniform(0, 1, 50).astype(np.float32), (tail / np.linalg.norm(tail)).astype(np.float32), 9)
    with tempfile.TemporaryDirectory() as tmp:
        arrays = read_table(write_table(form, Path(tmp) / "t.tokenmean"))
    for name in ("basis", "coords", "energy", "tail"):
        assert np.array_equal(arrays[name], getattr(form, name)) and arrays[name].dtype == getattr(form, name).dtype
    for ids in ([4], [4, 4, 7], list(range(50)), [49, 0, 49, 13, 0]):
        want = form.query(ids)
        assert np.abs(table_query(arrays, ids) - want).max() <= 1e-6 * np.abs(want).max(), ids


def test_mil_evaluator_ops_bert_needs_match_torch():
    import torch

    from arrcoc_edge.targets.coreml.mil import OPS

    x = np.random.default_rng(5).standard_normal((2, 5, 16)).astype(np.float32)
    gamma, beta = np.linspace(0.5, 1.5, 16, dtype=np.float32), np.linspace(-1, 1, 16, dtype=np.float32)
    (ln,) = OPS["layer_norm"]({"x": x, "axes": np.array([-1]), "gamma": gamma, "beta": beta, "epsilon": np.float32(1e-12)})
    ref = torch.nn.functional.layer_norm(torch.from_numpy(x), (16,), torch.from_numpy(gamma), torch.from_numpy(beta), 1e-12)
    assert np.abs(ln - ref.numpy()).max() < 1e-5
    for mode, approximate in (("EXACT", "none"), ("TANH_APPROXIMATION", "tanh")):
        (g,) = OPS["gelu"]({"x": x, "mode": mode})
        assert np.abs(g - torch.nn.functional.gelu(torch.from_numpy(x), approximate=approximate).numpy()).max() < 1e-6, mode
    assert OPS["range_1d"]({"start": np.int32(0), "end": np.int32(7), "step": np.int32(2)})[0].tolist() == [0, 2, 4, 6]


@pytest.mark.slow
@pytest.mark.compiler
def test_reference_checkpoint_typed_query_selects_what_predict_selects(reference_typed_query_build, tmp_path):
    """Reads the session's reference-checkpoint build of both apps (conftest
    reference_typed_query_build, shared with tests/test_app_typed_query.py, tests/test_web_qwen.py and
    tests/test_qwen_query.py; 4 min for its first user in a whole run, 7 min at load 4). Over 60 s itself too (4.5 min at load 4): the Swift token-mean encoder run and six
    `invoke predict` runs, one per query."""
    from PIL import Image

    from arrcoc_edge.relevance import qwen_query as qq
    from arrcoc_edge.stages.parity import topk_overlap
    from arrcoc_edge.targets.coreml.target import mil_runner

    out, app = reference_typed_query_build.out, reference_typed_query_build.ios_app
    data = json.loads((app / "contract.json").read_text())
    typed = data["typed_text"]
    assert typed["supported"] is True, typed.get("why")
    enc = typed["encoder"]
    assert (enc["kind"], typed["tokenizer"]["kind"], enc["host_check"]["status"]) == ("qwen-token-mean", "bpe-bytelevel", "verified")
    metrics = enc["host_check"]["metrics"]
    assert metrics["text_embedding_rel_err_max"] <= enc["gate"]["max"]["text_embedding_rel_err_max"]
    record = json.loads((out / "manifest.json").read_text())["targets"]["ios"]["variants"]["app-bundle"]["info"]["app_build"]
    assert "TypedQueryTests.testTokenMeanEncoderGivesPythonsEmbeddings" in record["tests"]["names"]

    lines = tmp_path / "queries.txt"
    lines.write_text("\n".join(QUERIES), encoding="utf-8")
    proc = run_cli("app-tokenize", "--app", "ios", "--tokenizer", str(app / typed["tokenizer"]["file"]),
                   "--text-file", str(lines))
    assert proc.returncode == 0, proc.stderr[-2000:]
    ids = [json.loads(line) for line in proc.stdout.splitlines()]
    tokenizer = qq.load_tokenizer(app / typed["tokenizer"]["file"])
    assert ids == [qq.token_ids(tokenizer, q) for q in QUERIES]

    queries = swift_embeddings(app, ids, tmp_path)
    package = data["artifacts"]["fp32"]  # the app's relevance model, fp32 package, in the MIL evaluator
    runner = mil_runner(app / package["file"])
    photo = np.asarray(Image.open(app / data["app"]["sample_image"]).convert("RGB"))[None]
    # one `invoke predict` for every query (JSON lines, one per query), not a process per query
    proc = run_cli("predict", "--image", str(app / data["app"]["sample_image"]), *(a for q in QUERIES for a in ("--query", q)),
                   "--runtime", "onnx", "--out", str(out), "--json", str(tmp_path / "p.jsonl"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    wanted = {row["query"]: row for row in map(json.loads, (tmp_path / "p.jsonl").read_text().splitlines())}
    assert sorted(wanted) == sorted(QUERIES)
    for text, query in zip(QUERIES, queries):
        got = runner.run({"image": photo, "query": np.asarray([query], np.float32)})
        want = wanted[text]
        overlap = topk_overlap(np.asarray([want["relevance"]], np.float32), np.asarray([want["topk_indices"]]),
                               np.asarray(got["topk_indices"], np.int64), package["gate"]["tie_tolerance"])[0]
        assert overlap.min() == 1.0, (text, overlap)
