"""arr-coc-0-1's query encoder at Qwen3-VL-2B's own width (D=2048): the text-encoder target's form
search on a seeded table of the true vocabulary size (tests/qwen_fixtures.py). Apart from
tests/test_qwen_query.py (D=64, which reads the session's shared reference-checkpoint build) so
that this build of its own, independent of that one, is scheduled by its own cost."""
from __future__ import annotations

import json

import pytest

from conftest import run_cli, write_reference_checkpoint
from qwen_fixtures import write_snapshot


@pytest.mark.slow
def test_reference_width_2048_from_a_sharded_snapshot(tmp_path):
    """Qwen3-VL-2B's width: the form is far smaller than the 622 MB table and keeps the top-K.
    About 60 s: a whole text-encoder build at D=2048 (the form designed and measured per tried size)."""
    snapshot = write_snapshot(tmp_path / "snap", 2048, sharded=True)
    ckpt = write_reference_checkpoint(tmp_path / "ref.pt", 2048)
    proc = run_cli("build", "--target", "text-encoder", "--checkpoint", str(ckpt), "--base-model", str(snapshot),
                   "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    variant = json.loads((tmp_path / "out" / "manifest.json").read_text())["targets"]["text-encoder"]["variants"]["fp16"]
    assert variant["info"]["form"]["bytes"] < 151_936 * 2048 * 2 / 4
    assert variant["parity"]["metrics"]["corpus_topk_overlap_mean"] >= 0.98
