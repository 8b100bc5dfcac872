"""Training data (pipeline/scenes.py) and the training run (pipeline/train.py)."""
from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline import scenes as sc
from pipeline import train as tr
from pipeline.checkpoint import load_checkpoint
from pipeline.errors import CheckpointError
from pipeline.model import ModelConfig, TextureArray, build_model

REPO = Path(__file__).resolve().parent.parent
TRAINED = REPO / "checkpoints" / "arrcoc-v0.1-trained.safetensors"
QUIET = dict(log=lambda message: None)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_scenes_are_deterministic_with_sound_ground_truth():
    a, b = sc.make_scene(sc.HELDOUT_SEED_BASE + 3), sc.make_scene(sc.HELDOUT_SEED_BASE + 3)
    np.testing.assert_array_equal(a.image, b.image)
    assert a.queries == b.queries and (a.masks == b.masks).all()
    assert a.image.shape == (3, 224, 224) and 0.0 <= a.image.min() and a.image.max() <= 1.0
    assert a.masks.shape == (len(a.queries), 196) and a.masks.any(axis=1).all()
    # the seed ranges of training and held-out scenes never meet
    assert sc.TRAIN_SEED_BASE + 100_000 < sc.HELDOUT_SEED_BASE


def test_every_query_names_one_item_and_place_queries_stay_in_their_quadrant():
    quadrant_of = {"top left": (0, 0), "top right": (0, 1), "bottom left": (1, 0), "bottom right": (1, 1)}
    for seed in range(sc.HELDOUT_SEED_BASE, sc.HELDOUT_SEED_BASE + 20):
        scene = sc.make_scene(seed)
        items = {m.tobytes() for m in scene.masks}
        assert 2 <= len(items) <= 4 and len(scene.queries) == 3 * len(items)
        for query, mask in zip(scene.queries, scene.masks):
            # a repeated phrase would have to name the same item
            same = [m for q, m in zip(scene.queries, scene.masks) if q == query]
            assert all((m == mask).all() for m in same), (seed, query)
            place = next((p for p in quadrant_of if p in query), None)
            if place:
                qy, qx = quadrant_of[place]
                grid = mask.reshape(14, 14)
                assert grid[qy * 7 : qy * 7 + 7, qx * 7 : qx * 7 + 7].sum() == grid.sum(), (seed, query)


def test_a_red_shape_query_points_at_red_pixels():
    for seed in range(sc.HELDOUT_SEED_BASE, sc.HELDOUT_SEED_BASE + 40):
        scene = sc.make_scene(seed)
        if "something red" in scene.queries:
            mask = scene.masks[scene.queries.index("something red")].reshape(14, 14)
            patches = scene.image.reshape(3, 14, 16, 14, 16).mean(axis=(2, 4))
            red = (patches[0] > 0.7) & (patches[1] < 0.3) & (patches[2] < 0.3)
            assert red[mask].mean() > 0.9 and not red[~mask].any()
            return
    pytest.fail("no 'something red' query in 40 held-out scenes")


def test_query_kinds():
    assert tr.query_kind("a photo of a cat") == "photo"
    assert tr.query_kind("the pink object") == "shape" and tr.query_kind("the square") == "shape"
    assert tr.query_kind("the thing at the bottom right") == "place"


def test_metric_definitions():
    relevance = torch.tensor([[0.9, 0.8, 0.1, 0.7, 0.0], [0.0, 0.1, 0.2, 0.3, 0.4]])
    masks = torch.tensor([[1.0, 0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0, 0.0]])
    got = tr.precision_at_k(relevance, masks, k=2)
    # top2: row 0 {0,1} -> 1 hit, row 1 {4,3} -> 0 hits
    assert got["precision_at_k"] == pytest.approx(0.25)  # (1/2 + 0/2) / 2
    assert got["recall_at_k"] == pytest.approx(0.25)  # hits / min(K, |gt|) = (1/2 + 0/2) / 2
    assert got["precision_ceiling"] == pytest.approx(1.0)  # |gt| >= K in both rows
    # R-precision: row 0 top2 {0,1} -> 1/2; row 1 top3 {4,3,2} -> 1/3
    assert got["r_precision"] == pytest.approx((0.5 + 1 / 3) / 2, abs=1e-4)
    perfect = tr.precision_at_k(masks, masks, k=4)
    assert perfect["recall_at_k"] == perfect["r_precision"] == 1.0
    assert perfect["precision_at_k"] == perfect["precision_ceiling"] == pytest.approx((2 + 3) / 8)


def test_cached_training_path_equals_the_model_forward():
    model = build_model(ModelConfig(), seed=3)
    data = sc.make_scenes(6, sc.HELDOUT_SEED_BASE)
    feats = tr.features(TextureArray(model.cfg), data)
    scenes = torch.tensor([1, 4])
    pairs = tr.pairs_of(feats, scenes)
    relevance = tr.relevance_of(model, feats, scenes, pairs)
    with torch.no_grad():
        images = tr.as_photos(data.images[data.scene_of[pairs.numpy()]])
        expected = model(images, feats.queries[pairs])[0]
    torch.testing.assert_close(relevance.detach(), expected, atol=1e-5, rtol=0)


def test_same_seed_writes_the_same_bytes(tmp_path):
    tiny = dict(steps=3, train_scenes=6, heldout_scenes=3)
    tr.train(tmp_path / "a.safetensors", tr.Recipe(seed=7, **tiny), **QUIET)
    # the second run in a fresh process: safetensors orders its metadata differently per process
    code = ("import sys; from pathlib import Path; from pipeline import train as tr; "
            f"tr.train(Path(sys.argv[1]), tr.Recipe(seed=7, **{tiny!r}), log=lambda m: None)")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "b.safetensors")], cwd=REPO, check=True,
                   capture_output=True, timeout=300)
    tr.train(tmp_path / "c.safetensors", tr.Recipe(seed=8, **tiny), **QUIET)
    assert _sha256(tmp_path / "a.safetensors") == _sha256(tmp_path / "b.safetensors")
    assert _sha256(tmp_path / "a.safetensors") != _sha256(tmp_path / "c.safetensors")
    loaded = load_checkpoint(tmp_path / "a.safetensors")
    prov = loaded.provenance
    assert prov["trained"] is True and prov["seed"] == 7 and prov["recipe"]["steps"] == 3
    assert set(prov["data_sha256"]) == {"train", "heldout"} and set(tr.MODELS) <= set(prov["metrics"])
    # a trained checkpoint is refused as the "untrained" baseline
    with pytest.raises(CheckpointError):
        tr.load_untrained(tmp_path / "a.safetensors")


@pytest.mark.slow
def test_short_training_beats_the_query_blind_baseline_on_heldout_scenes(tmp_path):
    recipe = tr.Recipe(steps=300, seed=5, train_scenes=200, heldout_scenes=50)
    result = tr.train(tmp_path / "short.safetensors", recipe, **QUIET)
    m = result["provenance"]["metrics"]
    for baseline in ("query_blind", "untrained", "trained_const_query"):
        assert m["trained"]["r_precision"] > m[baseline]["r_precision"] + 0.15, (baseline, m)
        assert m["trained"]["precision_at_k"] > m[baseline]["precision_at_k"] + 0.02, (baseline, m)
    # the query-blind model learned something from the image (items vs background)
    assert m["query_blind"]["r_precision"] > m["untrained"]["r_precision"]


def test_shipped_trained_checkpoint_records_its_run():
    if not TRAINED.exists():
        pytest.skip(f"{TRAINED.name} not written yet (run `invoke train`)")
    loaded = load_checkpoint(TRAINED)
    prov, m = loaded.provenance, loaded.provenance["metrics"]
    assert prov["trained"] is True and loaded.config == ModelConfig()
    assert {"recipe", "seed", "data_sha256", "metrics"} <= set(prov)
    for baseline in ("query_blind", "untrained"):
        assert m["trained"]["r_precision"] > m[baseline]["r_precision"] + 0.15, m
