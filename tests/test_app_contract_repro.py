"""Issue 43 (7): android/contract.json is identical between builds of one checkpoint: the encoder's
wall-clock timing (encode_ms) is not part of it."""
from __future__ import annotations

import json

from arrcoc_edge.stages.parity import Gate
from arrcoc_edge.targets.app_encoder import AppEncoder, typed_text_entry


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


def test_contract_files_name_every_bundle_file_and_a_mixed_bundle_is_refused(tmp_path):
    """contract.json's `files`: every file of the bundle but contract.json (an .mlpackage's files
    one by one) with bytes and sha256; a file of another build (a copy killed half way) is found."""
    import pytest

    from arrcoc_edge.errors import ExportError
    from arrcoc_edge.targets.shared import mobile_contract

    (tmp_path / "golden.json").write_text('{"samples": []}')
    (tmp_path / "golden.bin").write_bytes(b"\0" * 64)
    (tmp_path / "model.fp16.mlpackage" / "Data").mkdir(parents=True)
    (tmp_path / "model.fp16.mlpackage" / "Data" / "weight.bin").write_bytes(b"w" * 10)
    (tmp_path / "contract.json").write_text("{}")
    files = mobile_contract.bundle_files(tmp_path)
    assert sorted(files) == ["golden.bin", "golden.json", "model.fp16.mlpackage/Data/weight.bin"]
    assert files["golden.bin"]["bytes"] == 64 and len(files["golden.bin"]["sha256"]) == 64
    data = {"files": files}
    assert "all 3" in mobile_contract.check_bundle_files(data, tmp_path)[0]
    (tmp_path / "golden.bin").write_bytes(b"\1" * 64)  # same size, another build's content
    with pytest.raises(ExportError, match="golden.bin differs"):
        mobile_contract.check_bundle_files(data, tmp_path)
    (tmp_path / "golden.bin").unlink()
    with pytest.raises(ExportError, match="golden.bin missing"):
        mobile_contract.check_bundle_files(data, tmp_path)
