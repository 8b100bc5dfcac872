"""model.py computes what arr-coc-0-1 computes: held to the literal kornia oracle (pipeline/reference.py).

At batch 1 (where the reference's batch-wide min-max equals our per-sample one), on real photos,
at our settings (G=14, K=64) and the reference's (G=32, K=200), for the shipped checkpoint and a
reference-layout one of Qwen3-VL-2B width (D=2048). Then the chain artifact -> reference: the ONNX
model run in onnxruntime against the oracle directly.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline import reference
from pipeline.checkpoint import load_checkpoint
from pipeline.golden import HELDOUT_PHOTOS, _split
from pipeline.parity import LOSSLESS, topk_overlap

TEXTURE_TOL = 1e-5
RELEVANCE_TOL = 1e-4
SETTINGS = [(14, 64), (32, 200)]


def _photos(cfg, count=None):
    split = _split(HELDOUT_PHOTOS, cfg, query_offset=0)
    n = count or len(split)
    return torch.from_numpy(split.images[:n]), torch.from_numpy(split.queries[:n])


def _model_and_oracle(ckpt, images, queries):
    """Per-image runs (batch 1) of model.py and of the oracle, stacked."""
    ours, theirs = [], []
    with torch.no_grad():
        for i in range(len(images)):
            img, q = images[i : i + 1], queries[i : i + 1]
            ours.append([t.numpy() for t in ckpt.model(img, q)])
            theirs.append([t.numpy() for t in reference.forward(ckpt.model.state_dict(), ckpt.config, img, q)])
    stack = lambda runs: {n: np.concatenate([r[j] for r in runs]) for j, n in enumerate(("relevance", "topk_indices", "weights"))}
    return stack(ours), stack(theirs)


def _assert_same_outputs(got, oracle, k):
    assert np.abs(got["relevance"] - oracle["relevance"]).max() <= RELEVANCE_TOL
    assert np.abs(got["weights"] - oracle["weights"]).max() <= 1e-5
    overlap, strict = topk_overlap(oracle["relevance"], oracle["topk_indices"], got["topk_indices"], LOSSLESS.tie_tolerance)
    assert overlap.min() == 1.0, f"top-{k} differs from the reference: overlap {overlap}"


@pytest.fixture(scope="module", params=["shipped", "reference-layout"])
def checkpoint(request, checkpoint_path, reference_checkpoint_path):
    return checkpoint_path if request.param == "shipped" else reference_checkpoint_path


@pytest.mark.parametrize("grid, top_k", SETTINGS)
def test_texture_equals_the_reference_texture(loaded, grid, top_k):
    cfg = loaded.config.with_settings(grid=grid, top_k=top_k)
    images, _ = _photos(cfg)
    ckpt = load_checkpoint(loaded.path, grid=grid, top_k=top_k)
    with torch.no_grad():
        for i in range(len(images)):
            ours = ckpt.model.texture(images[i : i + 1])
            theirs = reference.texture(images[i : i + 1], grid)
            assert (ours - theirs).abs().max().item() <= TEXTURE_TOL, f"photo {i}"


def test_texture_on_noise_and_extremes(loaded):
    """Random noise (every pixel an edge) and saturated colours, where LAB's branches switch."""
    gen = torch.Generator().manual_seed(0)
    images = torch.cat([
        torch.rand(1, 3, 224, 224, generator=gen),
        torch.randint(0, 2, (1, 3, 224, 224), generator=gen).float(),
        torch.full((1, 3, 224, 224), 0.04),  # below the sRGB linear threshold
    ])
    with torch.no_grad():
        for i in range(len(images)):
            ours = loaded.model.texture(images[i : i + 1])
            assert (ours - reference.texture(images[i : i + 1], 14)).abs().max().item() <= TEXTURE_TOL


@pytest.mark.parametrize("grid, top_k", SETTINGS)
def test_forward_equals_the_reference_at_batch_1(checkpoint, grid, top_k):
    ckpt = load_checkpoint(checkpoint, grid=grid, top_k=top_k)
    images, queries = _photos(ckpt.config, count=12 if grid == 32 else None)
    got, oracle = _model_and_oracle(ckpt, images, queries)
    _assert_same_outputs(got, oracle, top_k)


@pytest.mark.parametrize("form", ["direct", "reduced"])
def test_both_participatory_forms_equal_the_reference(reference_checkpoint_path, form):
    """The reduced head (64-wide products per patch) and the direct one (D-wide projection) both
    compute the reference's score, at the reference's own scale (G=32, D=2048)."""
    ckpt = load_checkpoint(reference_checkpoint_path)
    ckpt.model.participatory_scorer.form = form
    images, queries = _photos(ckpt.config, count=6)
    got, oracle = _model_and_oracle(ckpt, images, queries)
    _assert_same_outputs(got, oracle, ckpt.config.top_k)


def test_reduced_constants_follow_loaded_weights(loaded):
    """W2^T W2 and friends are recomputed whenever weights are loaded, never stale."""
    from pipeline.model import build_model

    fresh = build_model(loaded.config, seed=123)
    fresh.load_state_dict(loaded.model.state_dict())
    w2 = loaded.model.participatory_scorer.texture_proj[2].weight.flatten(1).double()
    torch.testing.assert_close(fresh.participatory_scorer.gram.double(), w2.t() @ w2, rtol=1e-6, atol=1e-5)


def test_reference_layout_defaults_to_the_reference_settings(reference_checkpoint_path):
    cfg = load_checkpoint(reference_checkpoint_path).config
    assert (cfg.grid, cfg.top_k, cfg.image_size, cfg.query_dim) == (32, 200, 512, 2048)


def test_a_batch_equals_single_runs_of_the_reference(loaded):
    """The one accepted difference: per-sample min-max. A batch of ours = each image alone in the
    reference; the reference's own batch differs (its min-max spans the batch)."""
    images, queries = _photos(loaded.config, count=4)
    with torch.no_grad():
        batch = [t.numpy() for t in loaded.model(images, queries)]
        oracle_batch = reference.forward(loaded.model.state_dict(), loaded.config, images, queries)[0].numpy()
    _, alone = _model_and_oracle(loaded, images, queries)
    assert np.abs(batch[0] - alone["relevance"]).max() <= RELEVANCE_TOL
    assert np.abs(oracle_batch - alone["relevance"]).max() > 1e-3  # why the difference is accepted


@pytest.mark.slow
@pytest.mark.parametrize("which", ["shipped", "reference-layout"])
def test_onnx_artifact_equals_the_reference(which, checkpoint_path, reference_checkpoint_path, tmp_path):
    """The whole chain, artifact -> reference, in onnxruntime at batch 1."""
    import onnxruntime as ort

    from pipeline.export import export_program
    from targets.onnx_common import export_onnx

    ckpt = load_checkpoint(checkpoint_path if which == "shipped" else reference_checkpoint_path)
    path = export_onnx(export_program(ckpt.model, ckpt.config), ckpt.config, tmp_path / "model.onnx", lambda m: None)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    images, queries = _photos(ckpt.config, count=8)
    runs = [session.run(None, {"image": images[i : i + 1].numpy(), "query": queries[i : i + 1].numpy()}) for i in range(len(images))]
    got = {n: np.concatenate([r[j] for r in runs]) for j, n in enumerate(("relevance", "topk_indices", "weights"))}
    _, oracle = _model_and_oracle(ckpt, images, queries)
    _assert_same_outputs(got, oracle, ckpt.config.top_k)
