"""A typed query through the Android app's path, end to end on the golden photo (issue 38):
the app's tokenizer ids -> the query encoder .pte in ExecuTorch's runtime -> the relevance .pte,
against `invoke predict --query` on the same photo. For the shipped checkpoint (all-MiniLM-L6-v2) and
for a reference checkpoint built with --base-model (arr-coc-0-1's token-embedding mean). The shipped
checkpoint's case is in tests/test_android.py, beside the other readers of its android build.

The ids are the app tokenizer's through `invoke app-tokenize` once that task exists (issue 38 part 4);
until then Python's `tokenizers` on the shipped tokenizer.json stands in, with the special tokens and
truncation contract.json names (and they are checked to be pipeline/text_encoder's for MiniLM)."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import REPO, run_cli

QUERIES = ("where is the cat?", "the cat's eyes", "text and writing", "猫在哪里？", "Où est le chat ?",
           "a furry animal lying on the floor " * 60)  # the last one is past MiniLM's 256 ids


def app_tokenize_exists() -> bool:
    return re.search(r"^def app_tokenize\(", (REPO / "pipeline" / "frontends" / "commands.py").read_text(), re.M) is not None


def app_ids(typed: dict, folder: Path, texts: list[str], tmp: Path) -> list[list[int]]:
    """The ids the app gives each text: its own tokenizer through `invoke app-tokenize` when the task
    exists, else Python's `tokenizers` with the contract's special tokens and truncation."""
    tok = typed["tokenizer"]
    if app_tokenize_exists():
        lines = tmp / "queries.txt"
        lines.write_text("\n".join(texts), encoding="utf-8")
        proc = run_cli("app-tokenize", "--app", "android", "--tokenizer", str(folder / tok["file"]), "--text-file", str(lines))
        assert proc.returncode == 0, proc.stderr[-2000:]
        return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / tok["file"]))
    tokenizer.no_padding()
    if tok["max_length"] is not None:
        tokenizer.enable_truncation(tok["max_length"])
    else:
        tokenizer.no_truncation()
    return [tokenizer.encode(t, add_special_tokens=tok["add_special_tokens"]).ids for t in texts]


def through_the_app(app: Path, ids: list[int]) -> tuple[dict, float]:
    """ids -> encoder .pte -> relevance .pte (the contract's default artifact) on the sample photo,
    in ExecuTorch's runtime; returns the relevance outputs and the encoder call's milliseconds."""
    from executorch.runtime import Runtime
    from PIL import Image

    from arrcoc_edge.relevance.model import OUTPUT_NAMES

    data = json.loads((app / "contract.json").read_text())
    enc = data["typed_text"]["encoder"]
    shape = [len(ids) if d == "tokens" else d for d in enc["inputs"][0]["shape"]]
    encoder = Runtime.get().load_program(str(app / enc["file"])).load_method(enc["method"])
    start = time.perf_counter()
    query = encoder.execute([torch.tensor(ids, dtype=torch.long).reshape(shape)])[0].numpy().reshape(1, -1).copy()
    ms = (time.perf_counter() - start) * 1000.0
    relevance = data["artifacts"][data["app"]["default_artifact"]]
    model = Runtime.get().load_program(str(app / relevance["file"])).load_method("forward")
    photo = np.asarray(Image.open(app / data["app"]["sample_image"]).convert("RGB"))[None]
    outs = model.execute([torch.from_numpy(np.ascontiguousarray(photo)), torch.from_numpy(query)])
    return {name: out.numpy().copy() for name, out in zip(OUTPUT_NAMES, outs)}, ms


def check_typed_queries(out: Path, app: Path, tmp: Path) -> list[float]:
    """Each query's top-K through the app's path equals `invoke predict --query` with the same
    relevance .pte (--runtime executorch), on the sample photo (the golden whole photo)."""
    data = json.loads((app / "contract.json").read_text())
    typed = data["typed_text"]
    assert typed["supported"] is True, typed.get("why")
    assert typed["encoder"]["host_check"]["status"] == "verified"
    manifest = json.loads((out / "manifest.json").read_text())["targets"]["android"]
    assert manifest["variants"]["app-assets"]["info"]["typed_text"]["encoder"] == typed["encoder"]["file"]
    ids = app_ids(typed, app, list(QUERIES), tmp)
    # one `invoke predict` for every query (JSON lines, one per query): a process per query cost ~10 s each
    proc = run_cli("predict", "--image", str(app / data["app"]["sample_image"]), *(a for q in QUERIES for a in ("--query", q)),
                   "--runtime", "executorch", "--out", str(out), "--json", str(tmp / "p.jsonl"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    wanted = {row["query"]: row for row in map(json.loads, (tmp / "p.jsonl").read_text().splitlines())}
    assert sorted(wanted) == sorted(QUERIES)
    times = []
    for text, query_ids in zip(QUERIES, ids):
        got, ms = through_the_app(app, query_ids)
        times.append(ms)
        want = wanted[text]
        assert sorted(got["topk_indices"][0].tolist()) == sorted(want["topk_indices"]), text
        assert np.abs(got["relevance"][0] - np.asarray(want["relevance"])).max() < typed["encoder"]["gate"]["max"].get(
            "relevance_max_abs", 1e-2), text
    return times


@pytest.mark.slow
@pytest.mark.compiler
def test_reference_checkpoint_typed_query_selects_what_predict_selects(reference_typed_query_build, tmp_path):
    """Reads the session's reference-checkpoint build of both apps (conftest
    reference_typed_query_build, shared with tests/test_ios_typed_query.py, tests/test_web_qwen.py and
    tests/test_qwen_query.py; 4 min for its first user in a whole run, 7 min at load 4). Over 60 s itself too: the app tokenizer's compile and `invoke predict` on the six
    queries."""
    from arrcoc_edge.relevance import qwen_query as qq

    out, app = reference_typed_query_build.out, reference_typed_query_build.android_app
    typed = json.loads((app / "contract.json").read_text())["typed_text"]
    assert typed["tokenizer"]["kind"] == "bpe-bytelevel" and typed["encoder"]["kind"] == "qwen-token-mean"
    tokenizer = qq.load_tokenizer(app / typed["tokenizer"]["file"])
    assert app_ids(typed, app, list(QUERIES), tmp_path) == [qq.token_ids(tokenizer, q) for q in QUERIES]
    check_typed_queries(out, app, tmp_path)
