"""model.py computes what arr-coc-0-1 computes: held to the literal kornia oracle (pipeline/relevance/reference.py).

At batch 1 (where the reference's batch-wide min-max equals our per-sample one), on real photos,
at our settings (G=14, K=64) and the reference's (G=32, K=200), for the shipped checkpoint and a
reference-layout one of Qwen3-VL-2B width (D=2048). Then the chain artifact -> reference: the ONNX
model run in onnxruntime against the oracle directly.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from arrcoc_edge.relevance import reference
from arrcoc_edge.relevance.checkpoint import load_checkpoint
from arrcoc_edge.relevance.signature import OUTPUT_NAMES
from arrcoc_edge.stages.golden import HELDOUT_PHOTOS, WHOLE_HELDOUT, _split
from arrcoc_edge.stages.parity import LOSSLESS, topk_overlap

TEXTURE_TOL = 1e-5
RELEVANCE_TOL = 1e-4
EVIDENCE_TOL = 1e-5  # the participatory map's own statistics: no min-max to amplify a difference
SETTINGS = [(14, 64), (32, 200)]


def _photos(cfg, crops=None):
    """Held-out photos as the contract takes them, one uint8 [1,H,W,3] tensor each: the first
    `crops` 16G crops (all when None), then every whole photo (landscape, portrait, panorama,
    smaller than 16G, 12 MP); and their queries [N,D]."""
    split = _split(HELDOUT_PHOTOS, WHOLE_HELDOUT, cfg, query_offset=0)
    whole = split.whole
    picked = [i for i in range(len(split)) if i not in whole][:crops] + whole
    return [torch.from_numpy(split.images[i])[None] for i in picked], torch.from_numpy(split.queries[picked])


def _model_and_oracle(ckpt, images, queries, run=None):
    """Per-photo runs (batch 1) of model.py (or `run(photo, query)`: an artifact) and of the
    oracle, stacked."""
    run = run or (lambda img, q: [t.numpy() for t in ckpt.model(img, q)])
    ours, theirs = [], []
    with torch.no_grad():
        for img, q in zip(images, queries.split(1)):
            ours.append(run(img, q))
            theirs.append([t.numpy() for t in reference.forward(ckpt.model.state_dict(), ckpt.config, img, q)])
    stack = lambda runs: {n: np.concatenate([r[j] for r in runs]) for j, n in enumerate(OUTPUT_NAMES)}
    return stack(ours), stack(theirs)


def _assert_same_outputs(got, oracle, k):
    assert np.abs(got["relevance"] - oracle["relevance"]).max() <= RELEVANCE_TOL
    assert np.abs(got["weights"] - oracle["weights"]).max() <= 1e-5
    assert np.abs(got["evidence"] - oracle["evidence"]).max() <= EVIDENCE_TOL
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
        for i, img in enumerate(images):
            ours = ckpt.model.texture(img)
            theirs = reference.texture(reference.to_tensor(img), grid)
            assert (ours - theirs).abs().max().item() <= TEXTURE_TOL, f"photo {i} {tuple(img.shape)}"


@pytest.mark.parametrize("size", [(224, 224), (16, 16), (17, 301), (1000, 93)])
def test_texture_on_noise_and_extremes(loaded, size):
    """Random noise (every pixel an edge), saturated colours, and a dark photo below the sRGB linear
    threshold (LAB's branches switch there), at 16G, the smallest photo, and sizes that upsample one
    axis while downsampling the other."""
    # Not a flat photo: the reference min-max normalises LAB's a and b, which are ~0 on a flat
    # photo, so one float32 ulp of its own F.interpolate (which changes with torch's thread count:
    # 3.7e-9) moves them by 0.2-0.35: the reference disagrees with itself there, as measured.
    model = loaded.model
    gen = torch.Generator().manual_seed(0)
    h, w = size
    images = [
        torch.randint(0, 256, (1, h, w, 3), generator=gen, dtype=torch.uint8),
        torch.randint(0, 2, (1, h, w, 3), generator=gen, dtype=torch.uint8) * 255,
        torch.randint(0, 11, (1, h, w, 3), generator=gen, dtype=torch.uint8),  # <= 10/255: linear sRGB
    ]
    threads = torch.get_num_threads()
    try:
        # F.interpolate's rounding differs between one thread and several: both, whatever the
        # default (OMP_NUM_THREADS=1 would make it one)
        for n in {1, max(2, threads)}:
            torch.set_num_threads(n)
            with torch.no_grad():
                for img in images:
                    theirs = reference.texture(reference.to_tensor(img), 14)
                    assert (model.texture(img) - theirs).abs().max().item() <= TEXTURE_TOL, f"{n} threads"
    finally:
        torch.set_num_threads(threads)


def test_the_16g_fast_path_equals_the_general_resize(loaded, golden):
    """At exactly 16G x 16G the graph branches to a cheaper gather of the photo's own pixels: bit
    for bit what the general resize computes there (its second taps have weight 0)."""
    windows = loaded.model.texture.windows
    crop = torch.from_numpy(golden.heldout.inputs(0, 3)["image"])
    assert torch.equal(windows.at_input_size(crop), windows.resized(crop))
    assert torch.equal(windows.at_input_size_by_rows(crop), windows.resized(crop))  # ExecuTorch's 16G method
    assert torch.equal(windows(crop), windows.resized(crop))


@pytest.mark.parametrize("grid", [14, 32])
def test_the_row_reading_resize_equals_the_gather_bit_for_bit(grid):
    """ExecuTorch's form of the general resize (whole rows, then columns) reads the same bytes and
    blends them with the same float32 operations in the same order as the element gather: equal
    bit for bit at every size, up- and downsampling, odd sides, batch > 1, and at 16G."""
    from arrcoc_edge.relevance.model import PhotoWindows

    windows = PhotoWindows(grid)
    gen = torch.Generator().manual_seed(grid)
    for height, width, batch in ((16 * grid, 16 * grid, 2), (768, 1024, 1), (37, 1001, 3), (3024, 4032, 1),
                                 (16, 16, 1), (16 * grid + 1, 16 * grid - 1, 2)):
        photo = torch.randint(0, 256, (batch, height, width, 3), generator=gen, dtype=torch.uint8)
        assert torch.equal(windows.resized_by_rows(photo), windows.resized(photo)), (height, width, batch)


@pytest.mark.parametrize("grid, top_k", SETTINGS)
def test_forward_equals_the_reference_at_batch_1(checkpoint, grid, top_k):
    ckpt = load_checkpoint(checkpoint, grid=grid, top_k=top_k)
    images, queries = _photos(ckpt.config, crops=12 if grid == 32 else None)
    got, oracle = _model_and_oracle(ckpt, images, queries)
    _assert_same_outputs(got, oracle, top_k)


def test_from_photo_files_and_a_typed_sentence(loaded, tmp_path):
    """What a user holds: photo files of any size (PNG, JPEG, one with EXIF orientation) and a typed
    sentence. Both sides decode the same file the same way (load_photo: PIL, EXIF applied, RGB);
    the query is the sentence through the checkpoint's encoder (all-MiniLM-L6-v2, D=384)."""
    from PIL import Image

    from arrcoc_edge.relevance import text_encoder
    from arrcoc_edge.stages.golden import _photo, load_photo

    chelsea, flower = _photo("chelsea"), _photo("flower")
    Image.fromarray(chelsea).save(tmp_path / "cat.png")
    Image.fromarray(flower).save(tmp_path / "flower.jpg", quality=90)
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: the camera was held upright, stored sideways
    Image.fromarray(flower).save(tmp_path / "upright.jpg", quality=90, exif=exif)
    photos = [load_photo(tmp_path / n) for n in ("cat.png", "flower.jpg", "upright.jpg")]
    assert photos[0].shape == chelsea.shape and photos[2].shape == (flower.shape[1], flower.shape[0], 3)
    np.testing.assert_array_equal(photos[2], np.rot90(photos[1], k=-1))  # EXIF applied, nothing else
    query = torch.from_numpy(text_encoder.embed(["where is the cat?"]))
    images = [torch.from_numpy(p)[None] for p in photos]
    got, oracle = _model_and_oracle(loaded, images, query.expand(len(images), -1).contiguous())
    _assert_same_outputs(got, oracle, loaded.config.top_k)


@pytest.mark.parametrize("form", ["direct", "reduced"])
def test_both_participatory_forms_equal_the_reference(reference_checkpoint_path, form):
    """The reduced head (64-wide products per patch) and the direct one (D-wide projection) both
    compute the reference's score, at the reference's own scale (G=32, D=2048)."""
    ckpt = load_checkpoint(reference_checkpoint_path)
    ckpt.model.participatory_scorer.form = form
    images, queries = _photos(ckpt.config, crops=6)
    got, oracle = _model_and_oracle(ckpt, images, queries)
    _assert_same_outputs(got, oracle, ckpt.config.top_k)


def test_reduced_constants_follow_loaded_weights(loaded):
    """W2^T W2 and friends are recomputed whenever weights are loaded, never stale."""
    from arrcoc_edge.relevance.model import build_model

    fresh = build_model(loaded.config, seed=123)
    fresh.load_state_dict(loaded.model.state_dict())
    w2 = loaded.model.participatory_scorer.texture_proj[2].weight.flatten(1).double()
    torch.testing.assert_close(fresh.participatory_scorer.gram.double(), w2.t() @ w2, rtol=1e-6, atol=1e-5)


def test_reference_layout_defaults_to_the_reference_settings(reference_checkpoint_path):
    cfg = load_checkpoint(reference_checkpoint_path).config
    assert (cfg.grid, cfg.top_k, cfg.image_size, cfg.query_dim) == (32, 200, 512, 2048)


def test_a_batch_equals_single_runs_of_the_reference(loaded):
    """The one accepted difference: per-sample min-max. A batch of ours = each photo alone in the
    reference; the reference's own batch differs (its min-max spans the batch)."""
    images, queries = _photos(loaded.config, crops=4)
    crops, queries = torch.cat(images[:4]), queries[:4]
    with torch.no_grad():
        batch = [t.numpy() for t in loaded.model(crops, queries)]
        oracle_batch = reference.forward(loaded.model.state_dict(), loaded.config, crops, queries)[0].numpy()
    _, alone = _model_and_oracle(loaded, images[:4], queries)
    assert np.abs(batch[0] - alone["relevance"]).max() <= RELEVANCE_TOL
    assert np.abs(oracle_batch - alone["relevance"]).max() > 1e-3  # why the difference is accepted


def test_evidence_is_the_reference_participatory_maps_own_statistics(reference_checkpoint_path):
    """A reference-layout checkpoint (G=32, D=2048) gets the evidence output too: the oracle's
    statistics of its own participatory map, per photo, so a batch gives each photo's evidence
    alone (no batch-wide min-max touches it, unlike relevance)."""
    ckpt = load_checkpoint(reference_checkpoint_path)
    images, queries = _photos(ckpt.config, crops=3)
    crops = torch.cat(images[:3])
    with torch.no_grad():
        batch = ckpt.model(crops, queries[:3])[3].numpy()
        oracle_batch = reference.forward(ckpt.model.state_dict(), ckpt.config, crops, queries[:3])[3].numpy()
    _, alone = _model_and_oracle(ckpt, images[:3], queries[:3])
    assert batch.shape == (3, 4) and batch.dtype == np.float32
    assert np.abs(batch - alone["evidence"]).max() <= EVIDENCE_TOL
    assert np.abs(oracle_batch - alone["evidence"]).max() <= EVIDENCE_TOL
    top_mean, mean, low, high = batch.T
    assert np.all((low <= mean) & (mean <= top_mean) & (top_mean <= high)) and np.all((low >= 0) & (high <= 1))


def _onnx(ckpt, folder):
    import onnxruntime as ort

    from arrcoc_edge.stages.export import export_program
    from arrcoc_edge.targets.shared.onnx_common import export_onnx

    path = export_onnx(export_program(ckpt.model, ckpt.config), ckpt.config, folder / "model.onnx", lambda m: None)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda img, q: session.run(None, {"image": img.numpy(), "query": q.numpy()})


def _executorch(ckpt, folder):
    from arrcoc_edge.stages.export import export_form
    from arrcoc_edge.targets.executorch.runtime import pte_runner
    from arrcoc_edge.targets.executorch.target import lower

    info = lower(export_form(ckpt.model, fast_path=False), folder / "model.pte")
    runner = pte_runner(folder / "model.pte", info["max_batch"])
    return lambda img, q: list(runner.run({"image": img.numpy(), "query": q.numpy()}).values())


def _ptl(ckpt, folder):
    from arrcoc_edge.targets.ptl import ptl_runner, trace_to_ptl

    runner = ptl_runner(trace_to_ptl(ckpt.model, ckpt.config, folder / "model.ptl"))
    return lambda img, q: list(runner.run({"image": img.numpy(), "query": q.numpy()}).values())


def _published(target: str):
    """The session's published FP32 file of `target` for the shipped checkpoint, through the runner
    `invoke predict` uses (its 16G method too): the artifact users get, not a lowering of our own."""
    def make(out):
        import json

        from arrcoc_edge.targets import TARGETS

        entry = json.loads((out / "manifest.json").read_text())["targets"][target]
        runner = TARGETS[target].published_runner(out, entry, "fp32")
        return lambda img, q: list(runner.run({"image": img.numpy(), "query": q.numpy()}).values())

    return make


# Per artifact: how the reference-layout checkpoint's is made here, and the shared build whose
# published file stands for the shipped checkpoint's (None: made here too; the onnx export is cheap).
ARTIFACTS = {"onnx": (_onnx, None), "ptl": (_ptl, "executorch,ptl"), "executorch-fp32": (_executorch, "executorch,ptl")}


@pytest.mark.slow
@pytest.mark.parametrize("artifact", list(ARTIFACTS))
@pytest.mark.parametrize("which", ["shipped", "reference-layout"])
def test_lossless_artifacts_equal_the_reference(artifact, which, checkpoint_path, reference_checkpoint_path, tmp_path,
                                                shared_build):
    """The whole chain, artifact -> reference, in each artifact's real runtime at batch 1, on 16G
    crops and every whole photo: ours at G=14/K=64 (D=384), the reference's at G=32/K=200 (D=2048).
    The shipped checkpoint's .pte and .ptl are the published ones (test_executorch_ptl.py's build).
    (The browser, CoreML and TensorRT checks live with their targets' tests.)"""
    ckpt = load_checkpoint(checkpoint_path if which == "shipped" else reference_checkpoint_path)
    images, queries = _photos(ckpt.config, crops=4)
    make, build = ARTIFACTS[artifact]
    if which == "shipped" and build:
        run = _published(artifact.split("-")[0])(shared_build(build).out)
    else:
        run = make(ckpt, tmp_path)
    got, oracle = _model_and_oracle(ckpt, images, queries, run=run)
    _assert_same_outputs(got, oracle, ckpt.config.top_k)
