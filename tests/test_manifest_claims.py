"""A manifest is a claim; the model file is the truth: load(), predict and `verify` hold the
manifest's checkpoint.model (grid, top_k, query_dim) and the variant's choice of model file to the
sha-checked model's own I/O, read by its runtime (onnxruntime's session metadata). A mismatch is one
typed line, never a 15 x 15 grid read from 196 outputs. The publish here is made by hand around a
small real ONNX graph with the contract's names and shapes (seconds, for the fast tier); the same
checks on a built publish are in test_hostile_manifest.py."""
from __future__ import annotations

import numpy as np
import pytest

import arrcoc_edge
from arrcoc_edge.errors import InputError

from tests.contract_publish import DIM, GRID, TOP_K, contract_model, publish


def test_a_true_manifest_loads_and_predicts(tmp_path):
    out = publish(tmp_path / "out", contract_model())
    with arrcoc_edge.load(out) as model:
        p = model.predict(np.full((64, 48, 3), 90, np.uint8), np.ones(DIM, np.float32) / np.sqrt(DIM))
    assert p.relevance.shape == (GRID, GRID) and p.k == TOP_K and len(p.top_k) == TOP_K


CLAIMS = {  # what the manifest says -> a phrase of the one line that refuses it
    "grid 15": ({"grid": 15}, "grid 15 (225 relevance values); the model's 'relevance' is [batch, 196]"),
    "grid 13": ({"grid": 13}, "grid 13 (169 relevance values)"),
    "top_k 10": ({"top_k": 10}, "top_k 10; the model's 'topk_indices' is [batch, 64]"),
    "top_k 100": ({"top_k": 100}, "top_k 100"),
    "query_dim 512": ({"query_dim": 512}, "query_dim 512; the model's 'query' is [batch, 384]"),
}


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_load_refuses_a_manifest_whose_model_settings_the_model_contradicts(tmp_path, name):
    claims, phrase = CLAIMS[name]
    out = publish(tmp_path / "out", contract_model(), **claims)
    with pytest.raises(InputError) as err:
        arrcoc_edge.load(out)
    line = err.value.one_line()
    assert "is not the model its manifest describes" in line and phrase in line, line
    assert "rebuild that folder" in line


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_verify_fails_on_a_manifest_whose_model_settings_the_model_contradicts(tmp_path, capsys, name):
    from arrcoc_edge.frontends.verify import _verify

    claims, phrase = CLAIMS[name]
    out = publish(tmp_path / "out", contract_model(), **claims)
    assert _verify(out) == 3
    printed = capsys.readouterr().out
    assert f"MISMATCH onnx/model.onnx in {out} is not the model its manifest describes" in printed
    assert phrase in printed and "verify: OK" not in printed


def test_a_variant_naming_another_listed_file_as_its_model_is_one_typed_line(tmp_path, cli):
    out = publish(tmp_path / "out", contract_model(), model_file="onnx/golden.bin")
    with pytest.raises(InputError, match=r"onnx/golden.bin in .* does not load as onnx's fp32 model \("):
        arrcoc_edge.load(out)
    proc = cli("verify", "--out", str(out))
    assert proc.returncode == 3 and "MISMATCH onnx/golden.bin" in proc.stdout, proc.stdout + proc.stderr
    np.save(tmp_path / "q.npy", np.ones(DIM, np.float32) / np.sqrt(DIM))
    photo = tmp_path / "photo.png"
    from PIL import Image

    Image.fromarray(np.full((32, 32, 3), 90, np.uint8)).save(photo)
    proc = cli("predict", "--out", str(out), "--image", str(photo), "--query-embedding", str(tmp_path / "q.npy"))
    assert proc.returncode == 2 and "internal error" not in proc.stderr, proc.stderr
    assert "does not load as onnx's fp32 model" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_runtime_that_declares_no_shapes_is_asked_by_one_call(tmp_path):
    """declared_io on a Runner without metadata (as ExecuTorch's and the Lite Interpreter's): the
    shapes of one real call are held to the same claims."""
    from arrcoc_edge.publishing.reading import model_claim_problems
    from arrcoc_edge.stages.target import Runner, declared_io
    from arrcoc_edge.targets.shared.onnx_common import ort_runner

    real = ort_runner(contract_model())
    bare = Runner(real.run, real.runtime)
    io = declared_io(bare, 15, DIM)
    assert io["relevance"] == [None, GRID * GRID] and io["topk_indices"] == [None, TOP_K]
    assert model_claim_problems(io, {"grid": 15, "top_k": TOP_K, "query_dim": DIM}) == [
        "the manifest says grid 15 (225 relevance values); the model's 'relevance' is [batch, 196]"]
    assert model_claim_problems(declared_io(bare, GRID, 512), {"grid": GRID, "top_k": TOP_K, "query_dim": 512})
