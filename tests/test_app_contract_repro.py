"""Issue 43 (7): android/contract.json is identical between builds of one checkpoint: the encoder's
wall-clock timing (encode_ms) is not part of it."""
from __future__ import annotations

import json

from pipeline.stages.parity import Gate
from targets.app_encoder import AppEncoder, typed_text_entry


def test_typed_text_entry_same_for_two_timings(tmp_path):
    pte, tok = tmp_path / "query_encoder.pte", tmp_path / "tokenizer.json"
    pte.write_bytes(b"encoder bytes")
    tok.write_text("{}")
    entries = []
    for ms in (3.1, 4.7):  # two builds: same files and parity numbers, another wall clock
        metrics = {"cosine_min": 0.999, "topk_overlap_min": 1.0, "size_bytes": pte.stat().st_size, "encode_ms": ms}
        encoder = AppEncoder("minilm", "int8", [pte, tok], 10**6, Gate({"size_bytes": 10**6}), metrics)
        entries.append(json.dumps(typed_text_entry(encoder, 384, "executorch"), sort_keys=True))
    assert entries[0] == entries[1]
    assert "encode_ms" not in entries[0] and '"cosine_min": 0.999' in entries[0]
